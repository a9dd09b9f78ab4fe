// Diagnostics and the error type the library returns instead of exiting.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace thunky {

// What kind of failure: bad input or a missing device (exit 2), a schedule
// that is wrong as a program, a race or a deadlock (exit 1), or a
// collective that did not finish within the executor's timeout (exit 3).
enum class ErrorKind { input, schedule, timeout };

struct Diagnostic {
  ErrorKind kind = ErrorKind::input;
  std::string file;     // the schedule file, may be empty for in-memory input
  std::string pointer;  // JSON pointer, "" for the whole document
  std::string message;
  std::string str() const {
    std::string s = file.empty() ? std::string("<schedule>") : file;
    s += ":";
    s += pointer.empty() ? "/" : pointer;
    s += ": ";
    s += message;
    return s;
  }
};

// Thrown inside the library's parsing layers and caught at its API edge,
// where it becomes a returned Diagnostic list. Never escapes to main().
class ThunkyError : public std::runtime_error {
 public:
  ThunkyError(std::string pointer, std::string message, ErrorKind kind = ErrorKind::input)
      : std::runtime_error(message), pointer_(std::move(pointer)), kind_(kind) {}
  const std::string& pointer() const { return pointer_; }
  ErrorKind kind() const { return kind_; }

 private:
  std::string pointer_;
  ErrorKind kind_;
};

// A value or the diagnostics that explain why there is none.
template <typename T>
class Expected {
 public:
  Expected(T value) : value_(std::move(value)), ok_(true) {}
  Expected(std::vector<Diagnostic> errors) : errors_(std::move(errors)) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T& operator*() { return value_; }
  T* operator->() { return &value_; }
  const std::vector<Diagnostic>& errors() const { return errors_; }
  // Exit code for a failed result: 3 for a timed-out collective, 2 for
  // bad input, 1 for a wrong schedule.
  int exit_code() const {
    if (ok_) return 0;
    for (const auto& e : errors_)
      if (e.kind == ErrorKind::timeout) return 3;
    for (const auto& e : errors_)
      if (e.kind == ErrorKind::input) return 2;
    return 1;
  }

 private:
  T value_{};
  std::vector<Diagnostic> errors_;
  bool ok_ = false;
};

}  // namespace thunky
