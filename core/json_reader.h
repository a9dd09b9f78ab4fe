// Strict reading of JSON documents: every error names its JSON pointer and
// unknown or repeated keys are errors. Shared by the schedule and
// machine-model loaders. Documents are parsed with simdjson into one flat
// tape (no node per value), and read through the Value view below.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "core/status.h"

namespace thunky {

namespace json_reader {
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

// One value of a parsed Document, valid while the Document lives.
class Value {
 public:
  explicit Value(simdjson::dom::element e) : e_(e) {}
  bool is_null() const { return e_.is_null(); }
  bool is_boolean() const { return e_.is_bool(); }
  bool is_number() const { return e_.is_number(); }
  bool is_number_integer() const { return e_.is_int64() || e_.is_uint64(); }
  bool is_string() const { return e_.is_string(); }
  bool is_array() const { return e_.is_array(); }
  bool is_object() const { return e_.is_object(); }
  // These expect the type they name (asked for with is_...); another
  // type reads as 0, false or "".
  double number() const { return get_or(e_.get_double(), 0.0); }
  bool boolean() const { return get_or(e_.get_bool(), false); }
  std::string_view str() const { return get_or(e_.get_string(), std::string_view()); }
  // The array or object itself; only for a value that is one.
  simdjson::dom::array array() const { return get_or(e_.get_array(), simdjson::dom::array()); }
  simdjson::dom::object object() const { return get_or(e_.get_object(), simdjson::dom::object()); }
  // Elements of an array or members of an object; 0 for anything else.
  size_t size() const {
    if (e_.is_array()) return array().size();
    if (e_.is_object()) return object().size();
    return 0;
  }
  bool empty() const { return size() == 0; }
  // Calls f(index, element) for each element of an array, in order (none
  // for another value).
  template <class F>
  void each_element(F&& f) const {
    if (!e_.is_array()) return;
    size_t i = 0;
    for (simdjson::dom::element e : array()) f(i++, Value(e));
  }
  std::string dump() const { return simdjson::minify(e_); }
  nlohmann::ordered_json to_nlohmann() const { return nlohmann::ordered_json::parse(dump()); }
  simdjson::dom::element raw() const { return e_; }

 private:
  template <class T, class Result>
  static T get_or(Result&& r, T fallback) {
    T v = fallback;
    return std::forward<Result>(r).get(v) == simdjson::SUCCESS ? v : fallback;
  }
  simdjson::dom::element e_;
};

inline std::string type_name(Value j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// A number that is finite: JSON has no NaN, but a literal past the double
// range (1e999) parses as an infinity, which no figure of thunky's may be.
inline double finite_number(Value j, const std::string& ptr) {
  if (!j.is_number()) fail(ptr, "expected a number, got " + type_name(j));
  const double d = j.number();
  if (!std::isfinite(d)) fail(ptr, "expected a finite number, got " + j.dump() + " (past the range of a double)");
  return d;
}


// A parsed document; its Values borrow its memory. Malformed text throws a
// ThunkyError for the whole document ("malformed JSON: ...").
class Document {
 public:
  // `padded`: the caller's buffer holds SIMDJSON_PADDING readable bytes
  // past the text (a std::string with that much spare capacity does), so
  // the parser needs no padded copy of it.
  // Arrays and objects may nest kMaxDepth deep in all (deeper documents
  // would cost deep recursion later); the parser refuses more.
  static constexpr size_t kMaxDepth = 256;
  explicit Document(std::string_view text, bool padded = false) {
    if (text.size() > parser_.max_capacity()) fail("", "the document is larger than the parser's 4 GiB limit");
    // simdjson's depth counts one level more than the containers.
    if (parser_.allocate(text.size(), kMaxDepth + 1)) fail("", "cannot allocate the JSON parser");
    if (auto err = parser_.parse(text.data(), text.size(), !padded).get(root_)) {
      if (err == simdjson::DEPTH_ERROR) fail("", "JSON nested more than " + std::to_string(kMaxDepth) + " levels deep");
      fail("", "malformed JSON: " + malformed(text, err));
    }
  }
  explicit Document(const std::string& text) : Document(std::string_view(text), text.capacity() - text.size() >= simdjson::SIMDJSON_PADDING) {}
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;
  Value root() const { return Value(root_); }

 private:
  // The message of a stricter reader where it has one (it gives the line
  // and column), else simdjson's own.
  static std::string malformed(std::string_view text, simdjson::error_code err) {
    try {
      const auto parsed = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      std::string what = e.what();
      auto pos = what.find("parse error");
      return pos == std::string::npos ? what : what.substr(pos);
    }
    return simdjson::error_message(err);
  }
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
};

// A JSON object being read: remembers which keys were consumed so that
// unknown keys are reported instead of silently ignored, and reports a key
// given twice.
class Obj {
 public:
  // The pointer is borrowed from an lvalue (which must outlive the Obj, as
  // a caller's own pointer does) and owned when it is a temporary.
  Obj(Value j, const std::string& ptr) : j_(j), ptr_(&ptr) { check(); }
  Obj(Value j, std::string&& ptr) : j_(j), owned_(std::move(ptr)), ptr_(&owned_) { check(); }
  Obj(Value j, const char* ptr) : Obj(j, std::string(ptr)) {}
  Obj(const Obj&) = delete;
  Obj& operator=(const Obj&) = delete;
  const std::string& ptr() const { return *ptr_; }
  bool has(std::string_view k) const {
    if (!(keys_ >> key_bit(k) & 1)) return false;
    for (size_t i = 0; i < n_; ++i)
      if (same_key(fields_[i].key, k)) return true;
    return false;
  }
  std::optional<Value> get(std::string_view k) {
    if (!(keys_ >> key_bit(k) & 1)) return std::nullopt;  // most optional keys are absent
    for (size_t i = 0; i < n_; ++i) {
      if (same_key(fields_[i].key, k)) {
        mark(i);
        return Value(fields_[i].value);
      }
    }
    return std::nullopt;
  }
  Value need(std::string_view k) {
    auto v = get(k);
    if (!v) fail(*ptr_, "missing required field '" + std::string(k) + "'");
    return *v;
  }
  std::string at(std::string_view k) const { return child(*ptr_, k); }
  // The string itself, in the document (valid as long as the document).
  std::string_view str_ref(std::string_view k) {
    Value v = need(k);
    if (!v.is_string()) fail(at(k), "expected a string, got " + type_name(v));
    return v.str();
  }
  std::string str(std::string_view k) { return std::string(str_ref(k)); }
  std::string str_or(std::string_view k, std::string def) {
    auto v = get(k);
    if (!v) return def;
    if (!v->is_string()) fail(at(k), "expected a string, got " + type_name(*v));
    return std::string(v->str());
  }
  double num_or(std::string_view k, double def) {
    auto v = get(k);
    if (!v) return def;
    return finite_number(*v, at(k));
  }
  bool bool_or(std::string_view k, bool def) {
    auto v = get(k);
    if (!v) return def;
    if (!v->is_boolean()) fail(at(k), "expected true or false, got " + type_name(*v));
    return v->boolean();
  }
  // Calls f(key, value, pointer) for every member in document order, all
  // of them consumed; a key given twice is an error. A callback that takes
  // (key, value) alone is spared building the pointer.
  template <class F>
  void each(F&& f) {
    const size_t n = n_;
    std::unordered_set<std::string_view> seen;
    if (n > kScan) seen.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const Field field = fields_[i];
      if (n > kScan ? !seen.insert(field.key).second : repeated(i, field.key)) duplicate(field.key);
      if constexpr (std::is_invocable_v<F&, std::string_view, Value>) f(field.key, Value(field.value));
      else f(field.key, Value(field.value), child(*ptr_, field.key));
    }
    found_ = n;  // all consumed, without a mark each
  }
  // Every key must have been asked for. A key given twice is found once,
  // so the second one is left unmarked and reported here too.
  void done() const {
    if (found_ >= n_) return;
    for (size_t i = 0; i < n_; ++i) {
      const std::string_view key = fields_[i].key;
      if (!marked(i)) {
        if (repeated(i, key)) duplicate(key);
        fail(child(*ptr_, key), "unknown key '" + std::string(key) + "'");
      }
    }
  }

 private:
  static constexpr size_t kScan = 16;  // up to this many members, look back instead of hashing
  simdjson::dom::object object() const { return j_.object(); }
  // Also takes the members down once: every lookup then compares keys
  // held at hand instead of walking the document's tape again.
  void check() {
    if (!j_.is_object()) fail(*ptr_, "expected an object, got " + type_name(j_));
    for (auto field : object()) {
      keys_ |= uint64_t{1} << key_bit(field.key);
      if (n_ < kInline) new (&small()[n_]) Field{field.key, field.value};
      else {
        if (n_ == kInline) large_.assign(small(), small() + kInline);
        large_.push_back({field.key, field.value});
      }
      ++n_;
    }
    fields_ = n_ <= kInline ? small() : large_.data();
  }
  // One of 64 bits for a key, from its length and first letters: a key
  // whose bit no member has is absent without a comparison.
  static unsigned key_bit(std::string_view k) {
    const unsigned a = k.empty() ? 0 : static_cast<unsigned char>(k[0]), b = k.size() > 1 ? static_cast<unsigned char>(k[1]) : 0;
    return (static_cast<unsigned>(k.size()) * 7 + a + b * 3) & 63;
  }
  uint64_t keys_ = 0;  // the members' key bits
  // Keys mostly differ in length or first letter: those are tested
  // before the bytes are compared.
  static bool same_key(std::string_view a, std::string_view b) {
    return a.size() == b.size() && (a.empty() || (a[0] == b[0] && std::memcmp(a.data(), b.data(), a.size()) == 0));
  }
  struct Field {
    std::string_view key;
    simdjson::dom::element value;
  };
  static constexpr size_t kInline = 16;
  // Left uninitialized until a member is taken down (an Obj is made per
  // command, and zeroing sixteen members each time showed in profiles).
  static_assert(std::is_trivially_destructible_v<Field>);
  alignas(Field) unsigned char small_[kInline * sizeof(Field)];
  Field* small() { return reinterpret_cast<Field*>(small_); }
  std::vector<Field> large_;
  const Field* fields_ = nullptr;
  size_t n_ = 0;
  // Whether a member before position i has this key.
  bool repeated(size_t i, std::string_view key) const {
    for (size_t k = 0; k < i; ++k)
      if (fields_[k].key == key) return true;
    return false;
  }
  [[noreturn]] void duplicate(std::string_view key) const {
    fail(child(*ptr_, key), "key '" + std::string(key) + "' is given twice");
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
  Value j_;
  std::string owned_;
  const std::string* ptr_;
  uint64_t low_ = 0;
  std::vector<size_t> high_;
  size_t found_ = 0;
};

inline double non_negative(Value j, const std::string& ptr) {
  if (!j.is_number() || j.number() < 0) fail(ptr, "expected a non-negative number");
  return finite_number(j, ptr);
}

inline int64_t as_int(Value j, const std::string& ptr) {
  auto e = j.raw();
  int64_t i;
  if (e.get_int64().get(i) == simdjson::SUCCESS) return i;
  if (e.is_uint64()) fail(ptr, "integer " + j.dump() + " is out of range");
  if (e.is_double()) {
    double d = j.number();
    if (d >= -9.2e18 && d <= 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  fail(ptr, "expected an integer, got " + (j.is_number() ? j.dump() : type_name(j)));
}

}  // namespace json_reader

}  // namespace thunky
