// Threads kept from one iteration to the next. A backend that runs every
// rank and stream as a thread hands each one a job here instead of
// creating a thread per iteration: a new thread faults in its stack, its
// thread-local storage and its allocator's heap a page at a time, and its
// exit gives them back while other ranks are still running. Both costs
// fell inside the measured timeline.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace thunky {

// The stack of each worker thread. A rank's or a stream's thread runs
// control flow (blocks nested at most 64 deep, calls 32 deep, a few
// hundred bytes of frames a level) and collectives' copies; the host
// kernels, whose GEMM keeps blocking buffers on the stack, run on the core
// pool's threads (exec/cores.h) instead. 512 KiB holds it with room to
// spare; the C library's default (the process's stack limit, often 8 MiB)
// would make a 2,048-rank run reserve 16 GiB of address space for stacks.
constexpr size_t kWorkerStackBytes = size_t{512} << 10;

// "" when `threads` more threads, each on a kWorkerStackBytes stack, and
// `bytes` more of memory fit under this process's limits: its address
// space (ulimit -v, RLIMIT_AS, against what it maps already) and, when not
// root, its processes (ulimit -u, RLIMIT_NPROC); else the rest of one line
// ("needs about ... (ulimit -v)") saying which limit and by how much, for
// an error before anything starts. Where the
// allocator is mimalloc, each thread's heap reserves 32 MiB more.
std::string thread_limits_exceeded(int64_t threads, double bytes);

// Under an address-space limit (ulimit -v), caps the C library's malloc
// arenas, each of which reserves 64 MiB, to an eighth of the limit: with a
// thread per rank, busy threads would otherwise open an arena each up to 8
// per core, and 16 arenas took a 2 GB process past its limit under load.
// Nothing changes without a limit, or where mimalloc is the allocator.
void share_heaps_under_address_limit();

class Workers {
 public:
  class Worker;

  Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  // Joins every thread; every job started must have been waited for.
  ~Workers();

  // Runs `job` on an idle thread, or on a new one when none is idle. The
  // job must not throw. The thread stays busy until wait() is called on
  // the handle, so one job's handle never waits for another's.
  Worker* start(std::function<void()> job);
  // Returns once the worker's job has finished, and makes it idle again.
  void wait(Worker* worker);
  // Whether the worker's job finishes within `seconds`; if it does, as wait().
  bool wait_for(Worker* worker, double seconds);

  // Makes threads until there are `threads` in all, so that a run can
  // start them all before any job runs; throws std::system_error (with the
  // threads made so far kept) when one cannot be made.
  void reserve(size_t threads);

  // How many threads exist.
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> all_;
  std::vector<Worker*> idle_;
};

}  // namespace thunky
