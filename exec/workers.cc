#include "exec/workers.h"

namespace thunky {

// One thread and the job it runs: it sleeps until handed a job or told to
// quit, runs the job, and says it has finished.
class Workers::Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
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
  std::thread thread_;  // last: it starts once the rest is built
};

Workers::Workers() = default;
Workers::~Workers() = default;

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

size_t Workers::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return all_.size();
}

}  // namespace thunky
