// Strict reading of JSON documents: every error names its JSON pointer and
// unknown keys are errors. Shared by the schedule and machine-model loaders.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace thunky {

namespace json_reader {
using json = nlohmann::ordered_json;

inline std::string child(const std::string& ptr, std::string_view key) {
  std::string out;
  out.reserve(ptr.size() + 1 + key.size());
  out += ptr;
  out += '/';
  if (key.find_first_of("~/") == std::string_view::npos) return out += key;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}
inline std::string child(const std::string& ptr, size_t i) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, i).ptr;
  std::string out;
  out.reserve(ptr.size() + 1 + static_cast<size_t>(end - digits));
  out += ptr;
  out += '/';
  out.append(digits, end);
  return out;
}

[[noreturn]] inline void fail(const std::string& ptr, const std::string& msg) { throw ThunkyError(ptr, msg); }

inline std::string type_name(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// A JSON object being read: remembers which keys were consumed so that
// unknown keys are reported instead of silently ignored.
class Obj {
 public:
  // The pointer is borrowed from an lvalue (which must outlive the Obj, as
  // a caller's own pointer does) and owned when it is a temporary.
  Obj(const json& j, const std::string& ptr) : j_(j), ptr_(&ptr) { check(); }
  Obj(const json& j, std::string&& ptr) : j_(j), owned_(std::move(ptr)), ptr_(&owned_) { check(); }
  Obj(const json& j, const char* ptr) : Obj(j, std::string(ptr)) {}
  Obj(const Obj&) = delete;
  Obj& operator=(const Obj&) = delete;
  const std::string& ptr() const { return *ptr_; }
  bool has(std::string_view k) const { return j_.contains(std::string(k)); }
  const json* get(std::string_view k) {
    size_t i = 0;
    for (auto it = j_.begin(); it != j_.end(); ++it, ++i) {
      if (it.key() == k) {
        mark(i);
        return &*it;
      }
    }
    return nullptr;
  }
  const json& need(std::string_view k) {
    auto* v = get(k);
    if (!v) fail(*ptr_, "missing required field '" + std::string(k) + "'");
    return *v;
  }
  std::string at(std::string_view k) const { return child(*ptr_, k); }
  // The string itself, in the document (valid as long as the document).
  const std::string& str_ref(std::string_view k) {
    const json& v = need(k);
    if (!v.is_string()) fail(at(k), "expected a string, got " + type_name(v));
    return v.get_ref<const std::string&>();
  }
  std::string str(std::string_view k) { return str_ref(k); }
  std::string str_or(std::string_view k, std::string def) {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_string()) fail(at(k), "expected a string, got " + type_name(*v));
    return v->get<std::string>();
  }
  double num_or(std::string_view k, double def) {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_number()) fail(at(k), "expected a number, got " + type_name(*v));
    return v->get<double>();
  }
  bool bool_or(std::string_view k, bool def) {
    const json* v = get(k);
    if (!v) return def;
    if (!v->is_boolean()) fail(at(k), "expected true or false, got " + type_name(*v));
    return v->get<bool>();
  }
  // Every key must have been asked for: keys are unique, so counting the
  // found ones suffices, and only a failure looks for the culprit.
  void done() const {
    if (found_ >= j_.size()) return;
    size_t i = 0;
    for (auto it = j_.begin(); it != j_.end(); ++it, ++i)
      if (!marked(i)) fail(child(*ptr_, it.key()), "unknown key '" + it.key() + "'");
  }

 private:
  void check() const {
    if (!j_.is_object()) fail(*ptr_, "expected an object, got " + type_name(j_));
  }
  // Which members (by position) have been asked for: a bit mask for the
  // first 64, a list beyond (objects that large are rare).
  void mark(size_t i) {
    if (marked(i)) return;
    if (i < 64) low_ |= uint64_t{1} << i;
    else high_.push_back(i);
    ++found_;
  }
  bool marked(size_t i) const {
    if (i < 64) return (low_ >> i) & 1;
    return std::find(high_.begin(), high_.end(), i) != high_.end();
  }
  const json& j_;
  std::string owned_;
  const std::string* ptr_;
  uint64_t low_ = 0;
  std::vector<size_t> high_;
  size_t found_ = 0;
};

inline int64_t as_int(const json& j, const std::string& ptr) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  fail(ptr, "expected an integer, got " + (j.is_number() ? j.dump() : type_name(j)));
}

}  // namespace json_reader

}  // namespace thunky
