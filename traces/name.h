// Names that repeat across millions of report records (op kinds, stream
// names, algorithms, user names, tokens), kept once per process: a record
// holds a pointer to its name's one copy, 8 bytes instead of a string.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

namespace thunky {

class Name {
 public:
  Name() = default;
  Name(std::string_view text);  // NOLINT: implicit, as a string would be
  Name(const char* text) : Name(std::string_view(text)) {}              // NOLINT
  Name(const std::string& text) : Name(std::string_view(text)) {}       // NOLINT

  const std::string& str() const { return *text_; }
  operator const std::string&() const { return *text_; }  // NOLINT
  operator std::string_view() const { return *text_; }    // NOLINT
  bool empty() const { return text_->empty(); }
  size_t size() const { return text_->size(); }
  const char* c_str() const { return text_->c_str(); }

  // Equal names are one copy.
  friend bool operator==(const Name& a, const Name& b) { return a.text_ == b.text_; }
  friend bool operator==(const Name& a, std::string_view b) { return *a.text_ == b; }
  friend bool operator==(const Name& a, const char* b) { return *a.text_ == b; }
  friend bool operator==(const Name& a, const std::string& b) { return *a.text_ == b; }
  friend bool operator<(const Name& a, const Name& b) { return *a.text_ < *b.text_; }
  friend std::string operator+(const std::string& a, const Name& b) { return a + *b.text_; }
  friend std::string operator+(const Name& a, const std::string& b) { return *a.text_ + b; }
  friend std::string operator+(const char* a, const Name& b) { return a + *b.text_; }
  friend std::string operator+(const Name& a, const char* b) { return *a.text_ + b; }
  friend std::ostream& operator<<(std::ostream& os, const Name& n) { return os << *n.text_; }

 private:
  static const std::string* empty_text();
  const std::string* text_ = empty_text();
};

}  // namespace thunky

template <>
struct std::hash<thunky::Name> {
  size_t operator()(const thunky::Name& n) const { return std::hash<const void*>{}(n.c_str()); }
};
