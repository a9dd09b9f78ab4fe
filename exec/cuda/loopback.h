// Collectives of the cuda backend. Both placements issue a collective from
// the issuing rank's host thread, asynchronously on its stream:
//  - shared-device (every rank on one GPU): a loopback communicator on the
//    in-process rendezvous. Each member enqueues on its stream a staging
//    copy of its source (once its previous collective's readers are done
//    with the staging buffer); the last rank to arrive enqueues, on every
//    member's stream, a wait for every member's staging, the device
//    copies (or a reduction kernel) that build its dst, and a wait for
//    every member's completion: the same semantics as NCCL's, through
//    device memory;
//  - one GPU per rank: NCCL. One communicator of every rank is made with
//    ncclCommInitRank from a unique id that an IdExchange passes around
//    (between the ranks' threads in one process; through the launch's
//    Processes, MPI or the TCP store, across processes); each distinct set
//    of members that a collective uses is split from it with
//    ncclCommSplit, in one global order on every rank.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/communicator.h"
#include "exec/cuda/device.h"
#include "exec/processes.h"

namespace thunky::cuda {

// `turn` is held around every CUDA call the communicator makes: while the
// backend captures a graph, the ranks' threads take turns (CUDA does not
// synchronise a graph's objects), and a thread lets go of its turn only
// while it waits in a collective.
std::unique_ptr<Communicator> make_loopback_communicator(Monitor& monitor, int ranks, KernelCache& kernels, int sms, std::mutex& turn);

// Passes an NCCL unique id from the first member of a communicator to the
// others. Every member's thread calls it, in the same order of member sets.
class IdExchange {
 public:
  virtual ~IdExchange() = default;
  // `bytes` is the id (filled by the member at position 0, read by the others).
  virtual void exchange(const std::vector<int>& members, int position, std::vector<char>& bytes) = 0;
};
// Every member in this process: the id is handed over in memory.
std::unique_ptr<IdExchange> make_inprocess_id_exchange();
// Members in several processes (this one runs `block` of `ranks` ranks):
// the first member of each process trades the id with the other processes
// through `procs` (within `timeout_s`, 0 for no limit), then hands it to
// the process's other members in memory.
std::unique_ptr<IdExchange> make_process_id_exchange(Processes& procs, int64_t ranks, double timeout_s);

// NCCL available in this build.
bool have_nccl();
// An NCCL transport for one GPU per rank. `timeout_s` > 0 bounds every
// wait for a collective (ncclCommGetAsyncError polled); past it the
// communicators are aborted and a CollectiveTimeout is thrown.
class NcclTransport : public Communicator {
 public:
  virtual ~NcclTransport() = default;
  // Creates, on the calling rank's thread, every communicator `rank`
  // belongs to, in the same global order on every rank.
  virtual void connect(int rank, int device, const std::vector<std::vector<int>>& member_sets) = 0;
  // Waits for `stream` within the timeout.
  virtual void wait(int rank, cudaStream_t stream, const std::string& what) = 0;
  virtual void abort_all() = 0;
};
std::unique_ptr<NcclTransport> make_nccl_transport(int ranks, IdExchange& ids, double timeout_s);

struct CollectiveTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace thunky::cuda
