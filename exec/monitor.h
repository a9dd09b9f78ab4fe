// Blocking waits of the CPU backend's stream threads, with deadlock
// detection: when every live thread waits, nothing can progress, and the
// run is aborted with the list of what each thread waits for.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace thunky {

struct Aborted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Monitor {
 public:
  std::mutex& mutex() { return mu_; }
  // Registers a running thread / its end.
  void thread_started();
  // `last_words` runs under the lock just before the thread stops counting
  // (to publish a flag that a joiner waits for).
  void thread_finished(const std::function<void()>& last_words = {});
  // Waits under `lock` (on mutex()) until pred() holds. `what` says who waits
  // for what ("rank 1 computation:0 waits for token t at /program/4").
  // Throws Aborted if the run is aborted meanwhile.
  void wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred, const std::string& what);
  // The same, with `what` said when a deadlock is found (its state then,
  // not at the start of the wait) and the JSON pointer of the command
  // waited in, which a deadlock's message leads with.
  void wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred, const std::function<std::string()>& what, const std::string& pointer);
  // Wakes the waiters whose condition now holds; call it under mutex(),
  // after changing what they wait for. Each waiter sleeps on a condition
  // variable of its own, so a change wakes only the threads it releases
  // (one shared one woke every waiting stream thread of every rank, and on
  // a host with fewer cores than threads those wake-ups delayed the one
  // that could run by about 100 us).
  void notify_all();
  // Aborts the run (first reason wins); wakes every waiter.
  // The first abort wins; `pointer` is the JSON pointer of the command it
  // concerns, when one does.
  void abort(std::unique_lock<std::mutex>& lock, const std::string& reason, bool deadlock, const std::string& pointer = "");
  bool aborted() const { return aborted_; }
  bool deadlocked() const { return deadlock_; }
  const std::string& reason() const { return reason_; }
  const std::string& pointer() const { return pointer_; }

 private:
  void check_deadlock(std::unique_lock<std::mutex>& lock);
  void wake_all();
  std::mutex mu_;
  int running_ = 0;
  int waiting_ = 0;
  struct Waiter {
    std::function<std::string()> what;
    std::string pointer;
    const std::function<bool()>* pred;
    std::condition_variable* cv;
  };
  std::multimap<int, Waiter> waiters_;
  int next_waiter_ = 0;
  bool aborted_ = false;
  bool deadlock_ = false;
  std::string pointer_;
  std::string reason_;
};

}  // namespace thunky
