// Collectives behind one interface. Every transport that runs its ranks as
// threads of one process shares one rendezvous (RendezvousCommunicator):
// the participants meet, their signatures are compared, and the last to
// arrive moves the data for all of them: host copies for the cpu backend,
// device copies and kernels for the cuda backend's shared-device placement.
#pragma once

#include <chrono>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/validate.h"
#include "exec/cores.h"
#include "exec/monitor.h"
#include "exec/processes.h"

namespace thunky {

// One collective as issued by one rank.
struct CollectiveCall {
  Op op = Op::all_reduce;
  Reduction reduction = Reduction::sum;
  DType dtype = DType::f32;
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t src_count = 0, dst_count = 0;
  std::vector<int> ranks;  // participants, in collective order
  int position = 0;        // this rank's index among them
  std::vector<std::pair<int64_t, int64_t>> pairs;  // collective_permute, by position
  std::string id;          // command id, for messages
  std::string pointer;     // the command's JSON pointer in the schedule file
  std::string signature;   // what must match across ranks (collective_signature)
  void* stream = nullptr;  // device transports: the stream it is issued on
};

// The call `c` makes on `rank` (ctx), its views at the addresses
// `address` gives (host or device memory): participants, counts, pairs and
// signature as every transport needs them.
CollectiveCall collective_call(const Program& p, const Command& c, const RankCtx& ctx, const std::function<uint8_t*(const View&)>& address);

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Runs the collectives `rank` issues as one launch (a collective_group or
  // a single collective) with the ranks `members` (launch_members); blocks
  // until every member has joined and the data has moved. Returns when the
  // data began to move: every member had arrived (and, with cores, one was
  // free); the caller's wait is from its call until then. Throws Aborted
  // when the run is aborted (deadlock, mismatch) while waiting.
  virtual std::chrono::steady_clock::time_point run(int rank, std::vector<CollectiveCall>& group, const std::vector<int>& members,
                                                    const std::string& waiter) = 0;
  // Why a run across processes stopped, where it did: 3 when another
  // process was not heard from within the timeout, the exit code another
  // process failed with, else 0.
  virtual int stop_exit_code() const { return 0; }
};

// The ranks of other processes, for a communicator whose process runs only
// `block` of the mesh's `ranks`: a launch with members elsewhere exchanges
// their sources through `processes`, waiting at most `timeout_s`.
struct CrossProcess {
  Processes* processes = nullptr;
  int64_t ranks = 0;
  RankBlock block;
  double timeout_s = 0;
};

// The rendezvous of in-process transports. run() stages the caller's
// sources (stage()), waits for every member of the launch, compares their
// signatures (a mismatch aborts the run as a deadlock naming both ranks)
// and then, on the last thread to arrive, calls move() once with every
// member's calls by rank; every member returns after that. With `cores`
// (the cpu backend's), the collective is one command on one core, as a
// compute command is, ahead of the compute waiting for one (CorePool's
// urgent work): the last member to arrive takes a core, stages
// every member's sources and moves the data, outside the monitor's lock;
// the members waiting for it hold none. (The members are all waiting
// meanwhile, so their sources cannot change before they are staged.)
class RendezvousCommunicator : public Communicator {
 public:
  explicit RendezvousCommunicator(Monitor& m, CorePool* cores = nullptr) : monitor_(m), cores_(cores) {}
  std::chrono::steady_clock::time_point run(int rank, std::vector<CollectiveCall>& group, const std::vector<int>& members,
                                            const std::string& waiter) final;
  int stop_exit_code() const final { return stop_exit_code_; }

 protected:
  // Calls of one launch, by rank; entry i of every rank is the same collective.
  using Launch = std::map<int, std::vector<CollectiveCall>*>;
  // Before the rendezvous, on the caller's thread, outside the lock (with
  // cores: for every member, on the last to arrive, before move()): what
  // must be read before any member's dst changes (in-place collectives).
  virtual void stage(int rank, std::vector<CollectiveCall>& group) {}
  // On the last thread to arrive: under the monitor's lock, or without
  // cores, holding a core instead.
  virtual void move(const Launch& launch) = 0;
  // Whether `rank` runs in this process (every rank, in one process).
  virtual bool is_local(int rank) const { return true; }
  // A launch with members in other processes, after this process's
  // members have met and staged their sources, outside every lock and
  // core: brings the others' sources for move(). `key` and `seq` name the
  // launch in every process. Throws ProcessTimeout, ProcessFailure, or
  // Aborted when the run is aborted meanwhile.
  virtual void join_remote(const Launch& launch, const std::vector<int>& key, int64_t seq) {}
  Monitor& monitor() { return monitor_; }

 private:
  struct Rendezvous {
    size_t expected = 0;
    Launch calls;
    bool done = false;
    size_t left = 0;
    std::chrono::steady_clock::time_point moved;  // when the data began to move
  };
  void complete(std::unique_lock<std::mutex>& lock, const std::vector<int>& key, int64_t seq, bool remote, Rendezvous& rv);
  Monitor& monitor_;
  int stop_exit_code_ = 0;
  CorePool* cores_;
  std::map<std::pair<int, std::vector<int>>, int64_t> seq_;
  std::map<std::pair<std::vector<int>, int64_t>, Rendezvous> pending_;
};

// Host buffers for the in-process collectives' staged sources, kept from
// one collective (and iteration) to the next: a new buffer is faulted in a
// page at a time (2.4 us a page on a VM), which took most of a large
// collective's time.
class StagingPool {
 public:
  // A buffer of `bytes` (its contents undefined): the smallest kept one
  // that holds them, else a new one.
  std::vector<uint8_t> take(size_t bytes);
  // Keeps `buffer` for a later take().
  void give(std::vector<uint8_t> buffer);

 private:
  std::mutex mu_;
  std::vector<std::vector<uint8_t>> kept_;
};

// Exact in-process collectives for ranks that share one address space,
// staging through `staging` (which outlives the communicator).
// With `cross`, only the ranks of its block run here, and launches with
// members elsewhere go through its processes.
std::unique_ptr<Communicator> make_inprocess_communicator(Monitor& monitor, StagingPool& staging, CorePool* cores = nullptr,
                                                          const CrossProcess* cross = nullptr);

// The element-level semantics of each collective, shared by every
// transport: given every participant's staged src, produce `dst` of the
// participant at `position`.
void collective_result(const CollectiveCall& mine, const std::vector<const uint8_t*>& staged_src, uint8_t* dst);

}  // namespace thunky
