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

CorePool::CorePool(int cores) {
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

CorePool::Span CorePool::run(const std::function<void()>& work, bool urgent) {
  Job job;
  job.work = &work;
  job.urgent = urgent;
  std::unique_lock<std::mutex> l(mu_);
  if (urgent) queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(urgent_++), &job);
  else queue_.push_back(&job);
  ready_.notify_one();
  job.finished.wait(l, [&] { return job.done; });
  if (job.error) std::rethrow_exception(job.error);
  return job.span;
}

void CorePool::work_loop() {
  // The lowest priority: any thread that wakes preempts a worker.
  sched_param none{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    ready_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    Job* job = queue_.front();
    queue_.pop_front();
    if (job->urgent) --urgent_;
    l.unlock();
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

int default_host_cores() {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = std::max(1, CPU_COUNT(&set));
  if (const double quota = cgroup_quota(); quota > 0) cores = std::min(cores, std::max(1, static_cast<int>(std::ceil(quota))));
  return cores;
}

}  // namespace thunky
