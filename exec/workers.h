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
#include <thread>
#include <vector>

namespace thunky {

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

  // How many threads exist (each ran at least one job).
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> all_;
  std::vector<Worker*> idle_;
};

}  // namespace thunky
