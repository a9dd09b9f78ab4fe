#include "exec/workers.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <system_error>

// Defined when mimalloc is the process's allocator (tools/allocator.cc).
extern "C" int mi_version(void) __attribute__((weak));

namespace thunky {

// One thread and the job it runs: it sleeps until handed a job or told to
// quit, runs the job, and says it has finished.
class Workers::Worker {
 public:
  // Throws std::system_error when the thread cannot be made (a process
  // or address-space limit); nothing is left running then.
  Worker() {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kWorkerStackBytes);
    const int err = pthread_create(&thread_, &attr, [](void* self) -> void* {
      static_cast<Worker*>(self)->loop();
      return nullptr;
    }, this);
    pthread_attr_destroy(&attr);
    if (err) throw std::system_error(err, std::generic_category(), "cannot start a thread");
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    pthread_join(thread_, nullptr);
  }

  void hand(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = std::move(job);
      finished_ = false;
    }
    cv_.notify_all();
  }

  void wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return finished_; });
  }
  bool wait_for(double seconds) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::duration<double>(seconds), [&] { return finished_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return quit_ || job_; });
      if (!job_) return;
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      l.unlock();
      job();
      job = nullptr;  // what the job holds is released before wait() returns
      l.lock();
      finished_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool finished_ = true, quit_ = false;
  pthread_t thread_{};  // started last, once the rest is built
};

std::string thread_limits_exceeded(int64_t threads, double bytes) {
  constexpr double kMiB = 1 << 20;
  rlimit lim{};
  if (getrlimit(RLIMIT_NPROC, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && geteuid() != 0 && static_cast<double>(threads) > static_cast<double>(lim.rlim_cur))
    return "needs " + std::to_string(threads) + " threads, more than this process's limit of " + std::to_string(lim.rlim_cur) + " (ulimit -u)";
  if (getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return "";
  // What the process maps now: the first field of /proc/self/statm, in pages.
  double mapped = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long pages = 0;
    if (std::fscanf(f, "%lu", &pages) == 1) mapped = static_cast<double>(pages) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    std::fclose(f);
  }
  const double heap = mi_version != nullptr ? 32 * kMiB : 0;
  const double per_thread = static_cast<double>(kWorkerStackBytes) + 2 * 4096.0 + heap;
  const double need = static_cast<double>(threads) * per_thread + bytes;
  const double left = static_cast<double>(lim.rlim_cur) - mapped;
  if (need <= left) return "";
  auto mib = [&](double b) { return std::to_string(static_cast<int64_t>(b / kMiB + 0.5)) + " MiB"; };
  char each[32];
  std::snprintf(each, sizeof each, "%.1f MiB", per_thread / kMiB);
  return "needs about " + mib(need) + " of address space (" + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " x " + each + " of stack" +
         (heap > 0 ? " and heap" : "") + ", and " + mib(bytes) + " of buffers), more than the " + mib(left > 0 ? left : 0) +
         " left under this process's limit of " + mib(static_cast<double>(lim.rlim_cur)) + " (ulimit -v)";
}

void share_heaps_under_address_limit() {
  rlimit lim{};
  if (mi_version != nullptr || getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  constexpr double kArenaBytes = 64.0 * (1 << 20);
  const int arenas = static_cast<int>(std::max(1.0, static_cast<double>(lim.rlim_cur) / 8 / kArenaBytes));
  mallopt(M_ARENA_MAX, arenas);
}

Workers::Workers() = default;
Workers::~Workers() = default;

void Workers::reserve(size_t threads) {
  std::lock_guard<std::mutex> l(mu_);
  while (all_.size() < threads) {
    all_.push_back(std::make_unique<Worker>());
    idle_.push_back(all_.back().get());
  }
}

Workers::Worker* Workers::start(std::function<void()> job) {
  Worker* worker = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (idle_.empty()) {
      all_.push_back(std::make_unique<Worker>());
      worker = all_.back().get();
    } else {
      worker = idle_.back();
      idle_.pop_back();
    }
  }
  worker->hand(std::move(job));
  return worker;
}

void Workers::wait(Worker* worker) {
  worker->wait();
  std::lock_guard<std::mutex> l(mu_);
  idle_.push_back(worker);
}

bool Workers::wait_for(Worker* worker, double seconds) {
  if (!worker->wait_for(seconds)) return false;
  std::lock_guard<std::mutex> l(mu_);
  idle_.push_back(worker);
  return true;
}

size_t Workers::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return all_.size();
}

}  // namespace thunky
