#include "exec/cores.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

namespace thunky {

CorePool::CorePool(int cores) : free_(cores) {
  for (int i = 0; i < cores; ++i) workers_.emplace_back([this] { work_loop(); });
}

CorePool::~CorePool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  ready_.notify_all();
  for (auto& w : workers_) w.join();
}

CorePool::Span CorePool::run(const std::function<void()>& work, bool urgent, const std::function<void()>& queued) {
  Job job;
  job.work = &work;
  job.urgent = urgent;
  std::unique_lock<std::mutex> l(mu_);
  if (free_ > 0) {  // a core is free: it is this job's now, however soon a worker wakes to run it
    --free_;
    granted_.push_back(&job);
    ready_.notify_one();
  } else if (urgent) {
    waiting_.insert(waiting_.begin() + static_cast<std::ptrdiff_t>(urgent_++), &job);
  } else {
    waiting_.push_back(&job);
  }
  if (queued) {
    l.unlock();
    queued();
    l.lock();
  }
  job.finished.wait(l, [&] { return job.done; });
  if (job.error) std::rethrow_exception(job.error);
  return job.span;
}

void CorePool::work_loop() {
  // A little below the streams' threads (nice 5: a third of their weight),
  // so that one of them that wakes runs ahead of a worker. Not SCHED_IDLE:
  // that starved the workers whenever anything else ran on the host (a
  // test beside them took 0.5 s for a 50 ms command).
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 5);
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    ready_.wait(l, [&] { return stop_ || !granted_.empty(); });
    if (granted_.empty()) return;  // stopping
    Job* job = granted_.front();
    granted_.pop_front();
    l.unlock();
    // A stream's thread that is ready to run on this core goes first (it
    // issues a command or waits, in microseconds): woken together, as at
    // an iteration's start, the scheduler may otherwise leave it queued
    // behind this job for the job's whole length.
    sched_yield();
    job->span.start = Clock::now();
    try {
      (*job->work)();
    } catch (...) {
      job->error = std::current_exception();
    }
    job->span.end = Clock::now();
    l.lock();
    job->done = true;
    job->finished.notify_one();
    // The core goes to the first job waiting for one (urgent ones first),
    // and this worker runs it next.
    if (waiting_.empty()) {
      ++free_;
    } else {
      Job* next = waiting_.front();
      waiting_.pop_front();
      if (next->urgent) --urgent_;
      granted_.push_back(next);
    }
  }
}

namespace {

// A cgroup's CPU quota in cores, or 0 when there is none.
double cgroup_quota() {
  {
    std::ifstream v2("/sys/fs/cgroup/cpu.max");  // "max 100000" or "200000 100000"
    std::string quota;
    double period = 0;
    if (v2 >> quota >> period && quota != "max" && period > 0) {
      try {
        return std::stod(quota) / period;
      } catch (...) {
      }
    }
  }
  std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (q >> quota && p >> period && quota > 0 && period > 0) return quota / period;
  return 0;
}

}  // namespace

int64_t host_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{64} << 30;
  return static_cast<int64_t>(static_cast<double>(pages) * static_cast<double>(page) * 0.75);
}

int default_host_cores() {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = std::max(1, CPU_COUNT(&set));
  if (const double quota = cgroup_quota(); quota > 0) cores = std::min(cores, std::max(1, static_cast<int>(std::ceil(quota))));
  return cores;
}

}  // namespace thunky
