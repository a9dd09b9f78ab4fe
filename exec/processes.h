// Many processes: thunky-exec launched by mpirun or srun, one process per
// GPU (or per node, with a block of ranks each). A process learns its
// place from the launcher, runs a contiguous block of the mesh's ranks, and
// moves the data of collectives whose members live in other processes
// through MPI (docs/processes.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace thunky {

// Where this process stands in a launch: its index among `count`
// processes, its index among those of its node, and the variables that
// said so ("OMPI_COMM_WORLD_RANK/SIZE"); count 1 and from "" when no
// launcher set any.
struct ProcessPlace {
  int index = 0, count = 1, local = 0;
  std::string from;
};

// The place the launcher's variables give: Open MPI's, PMI's, Slurm's,
// then torchrun's RANK/WORLD_SIZE/LOCAL_RANK. `env` reads one variable
// (getenv by default; tests pass their own). Throws ThunkyError for a
// value that is not a number or an index outside its count.
ProcessPlace place_from_environment(const std::function<const char*(const char*)>& env = {});

// The block of ranks process `index` of `count` runs: [first, first + n).
struct RankBlock {
  int64_t first = 0, n = 0;
  bool holds(int64_t rank) const { return rank >= first && rank < first + n; }
};
RankBlock rank_block(int64_t ranks, int index, int count);
// The process that runs `rank`.
inline int process_of(int64_t rank, int64_t ranks, int count) { return static_cast<int>(rank / (ranks / count)); }

// A stop asked while a process waits for the others: the run was aborted
// here, or another process reported a failure.
struct ProcessStop {
  std::string reason;
  int exit_code = 1;
};

// The processes of one launch and the messages between them. One object
// per process, made once (start_processes) and shared by every thread.
class Processes {
 public:
  virtual ~Processes() = default;
  // How long gather, max and barrier wait for the others (0: no limit).
  double timeout_s = 0;
  virtual const ProcessPlace& place() const = 0;
  // Sends `mine` to each of `peers` (process indices, not this one) and
  // returns theirs, by peer, in the order of `peers`. `key` names the
  // exchange (a collective's launch): every peer passes the same one, and
  // every message begins with it (8 bytes, put there by the caller: no
  // copy of a large message is made to frame it), which exchange checks.
  // Waits at most `timeout_s` (0: no limit); while waiting calls `poll`,
  // which may throw to stop. Throws ProcessTimeout naming the peers not
  // heard from, or a ProcessFailure another process sent.
  virtual std::vector<std::vector<uint8_t>> exchange(uint64_t key, const std::vector<uint8_t>& mine, const std::vector<int>& peers, double timeout_s,
                                                     const std::function<void()>& poll) = 0;
  // Every process's `mine`, on process 0 (empty elsewhere).
  virtual std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine) = 0;
  // The largest of every process's value, on every process.
  virtual double max(double mine) = 0;
  virtual void barrier() = 0;
  // Tells every other process that this one failed (`reason`, exit code),
  // so that their waits stop at once instead of at the timeout.
  virtual void fail(const std::string& reason, int exit_code) = 0;
  // The failure another process sent, if one has.
  virtual std::optional<ProcessStop> failure() = 0;
};

// A peer not heard from within the timeout, or a failure another process
// sent: the run stops (exit 3 and 1 respectively).
struct ProcessTimeout : std::runtime_error {
  std::vector<int> missing;
  ProcessTimeout(const std::string& what, std::vector<int> m) : std::runtime_error(what), missing(std::move(m)) {}
};
struct ProcessFailure : std::runtime_error {
  int exit_code;
  ProcessFailure(const std::string& what, int code) : std::runtime_error(what), exit_code(code) {}
};

// This process's place in the launch and, for more than one process, the
// connection to the others: MPI (MPI_Init_thread here) under mpirun and
// srun, the TCP store under torchrun's variables. Null for a single
// process. Throws ThunkyError where the launch has several processes and
// this build has no MPI, or MPI or the store cannot start.
std::unique_ptr<Processes> start_processes();
// The two ways, for start_processes: MPI (refused in a build without it),
// and the store that process 0 serves at MASTER_ADDR:MASTER_PORT (or
// THUNKY_STORE_PORT; the port after MASTER_PORT where torchrun's agent
// holds it). `env` reads one variable.
std::unique_ptr<Processes> start_mpi_processes(const ProcessPlace& place);
std::unique_ptr<Processes> start_store_processes(const ProcessPlace& place, const std::function<const char*(const char*)>& env);

// Whether every process passed the same `value` (a schedule's
// fingerprint): through max(), so within the processes' timeout.
bool same_on_every_process(Processes& procs, uint64_t value);

// A fingerprint of `bytes` (FNV-1a, 64 bits).
uint64_t fingerprint(std::string_view bytes);

// Whether this build can run across processes (built with MPI).
bool processes_supported();

// An exchange's key: a collective launch's members and its sequence
// number among the launches of those members, hashed (FNV-1a).
uint64_t launch_key(const std::vector<int>& members, int64_t seq);

}  // namespace thunky
