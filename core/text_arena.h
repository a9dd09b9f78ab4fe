// Texts that live as long as the program that holds them, such as the JSON
// pointer of every ref: written one after another into large blocks and
// freed all at once, instead of one heap string each.
#pragma once

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace thunky {

class TextArena {
 public:
  // A copy of `base` + "/" + `key` (escaped as a JSON pointer token, "~" as
  // "~0" and "/" as "~1") + "/" + `index` when one is given.
  std::string_view pointer(std::string_view base, std::string_view key, std::optional<size_t> index = std::nullopt) {
    size_t escapes = 0;
    for (char c : key) escapes += c == '~' || c == '/';
    char digits[24];
    size_t ndigits = 0;
    if (index) ndigits = static_cast<size_t>(std::to_chars(digits, digits + sizeof digits, *index).ptr - digits);
    const size_t n = base.size() + 1 + key.size() + escapes + (index ? 1 + ndigits : 0);
    char* out = reserve(n);
    char* p = out;
    p = std::copy(base.begin(), base.end(), p);
    *p++ = '/';
    if (escapes == 0) {
      p = std::copy(key.begin(), key.end(), p);
    } else {
      for (char c : key) {
        if (c == '~' || c == '/') {
          *p++ = '~';
          *p++ = c == '~' ? '0' : '1';
        } else {
          *p++ = c;
        }
      }
    }
    if (index) {
      *p++ = '/';
      p = std::copy(digits, digits + ndigits, p);
    }
    return std::string_view(out, n);
  }

 private:
  static constexpr size_t kBlock = 64 * 1024;
  char* reserve(size_t n) {
    if (n > left_) {
      const size_t size = std::max(kBlock, n);
      blocks_.push_back(std::unique_ptr<char[]>(new char[size]));
      next_ = blocks_.back().get();
      left_ = size;
    }
    char* out = next_;
    next_ += n;
    left_ -= n;
    return out;
  }
  std::vector<std::unique_ptr<char[]>> blocks_;
  char* next_ = nullptr;
  size_t left_ = 0;
};

}  // namespace thunky
