// The cpu backend's cores as a device resource, as a GPU's SMs are. A
// stream's thread issues a compute command (or a collective's copies) to
// the pool and waits; one of `cores` worker threads runs it from start to
// end, taken first come first served. So the OS is never handed more
// runnable commands than there are cores, and none is time-sliced against
// another rank's: the discipline the simulator's host model
// (chip.host_cores) describes. The workers run a little below the
// streams' threads (nice 5) and yield before each job, so a stream's
// thread that wakes to issue its next command, record an event or meet a
// collective runs at once, as a GPU's front end does beside its busy SMs,
// instead of waiting milliseconds for a time slice.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace thunky {

class CorePool {
 public:
  using Clock = std::chrono::steady_clock;
  explicit CorePool(int cores);
  ~CorePool();
  CorePool(const CorePool&) = delete;
  CorePool& operator=(const CorePool&) = delete;
  int cores() const { return static_cast<int>(workers_.size()); }

  // When a command ran on its core.
  struct Span {
    Clock::time_point start, end;
  };
  // Runs `work` on a core, after the commands issued before it have got
  // one; returns when it has run. An exception it throws is rethrown here.
  // `urgent` work (a collective's copies) goes before every command still
  // waiting that is not, as communication streams outrank compute on a
  // GPU (XLA creates them at high priority).
  // `queued`, when given, runs on the caller's thread once the work is in
  // the queue, before the wait.
  Span run(const std::function<void()>& work, bool urgent = false, const std::function<void()>& queued = {});

 private:
  struct Job {
    const std::function<void()>* work = nullptr;
    bool urgent = false;
    bool done = false;
    std::exception_ptr error;
    Span span;
    std::condition_variable finished;
  };
  void work_loop();

  std::mutex mu_;
  std::condition_variable ready_;
  // A job gets a core when it is issued, if one is free (granted_, which
  // the workers run), else waits (urgent ones first, each kind in the
  // order issued) until a core is released: as the simulator's host model
  // grants them, whenever a worker thread gets to run.
  int free_;
  std::deque<Job*> granted_, waiting_;
  size_t urgent_ = 0;  // urgent jobs at waiting_'s front
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// The cores this process may run on: its affinity mask, bounded by a
// cgroup's CPU quota (cpu.max, or cfs_quota_us / cfs_period_us) rounded
// up; at least 1.
int default_host_cores();

// The bytes a run may hold on this host: 3/4 of its physical memory
// (64 GiB when that cannot be read). Past it a tool refuses before it
// allocates, rather than meet the kernel's out-of-memory killer.
int64_t host_memory_limit();

}  // namespace thunky
