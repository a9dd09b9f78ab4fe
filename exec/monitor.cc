#include "exec/monitor.h"

namespace thunky {

void Monitor::thread_started() {
  std::lock_guard<std::mutex> l(mu_);
  ++running_;
}

void Monitor::thread_finished(const std::function<void()>& last_words) {
  std::unique_lock<std::mutex> l(mu_);
  if (last_words) last_words();
  --running_;
  check_deadlock(l);
  notify_all();
}

void Monitor::notify_all() {
  for (const auto& [k, w] : waiters_)
    if ((*w.pred)()) w.cv->notify_one();
}

void Monitor::wake_all() {
  for (const auto& [k, w] : waiters_) w.cv->notify_one();
}

void Monitor::check_deadlock(std::unique_lock<std::mutex>& lock) {
  if (aborted_ || running_ == 0 || waiting_ < running_) return;
  // A waiter whose condition already holds has been woken and will run.
  for (const auto& [k, w] : waiters_)
    if ((*w.pred)()) return;
  std::string r = "deadlock: nothing can progress;";
  std::string pointer;
  int shown = 0;
  for (const auto& [k, w] : waiters_) {
    if (pointer.empty()) pointer = w.pointer;  // the first waiter's command that has one
    if (shown++ == 16) {
      r += " ...";
      break;
    }
    r += ' ';
    r += w.what();
    r += ';';
  }
  r.pop_back();
  abort(lock, r, true, pointer);
}

void Monitor::wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred, const std::string& what) {
  wait(lock, pred, [&what] { return what; }, "");
}

void Monitor::wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred, const std::function<std::string()>& what, const std::string& pointer) {
  if (aborted_) throw Aborted(reason_);
  if (pred()) return;
  const int key = next_waiter_++;
  std::condition_variable cv;
  auto it = waiters_.emplace(key, Waiter{what, pointer, &pred, &cv});
  ++waiting_;
  check_deadlock(lock);
  while (!aborted_ && !pred()) cv.wait(lock);
  --waiting_;
  waiters_.erase(it);
  if (aborted_ && !pred()) throw Aborted(reason_);
}

void Monitor::abort(std::unique_lock<std::mutex>&, const std::string& reason, bool deadlock, const std::string& pointer) {
  if (!aborted_) {
    aborted_ = true;
    deadlock_ = deadlock;
    reason_ = reason;
    pointer_ = pointer;
  }
  wake_all();
}

}  // namespace thunky
