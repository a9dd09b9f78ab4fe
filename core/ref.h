// Refs: a buffer name followed by NumPy-style indexing of leading dimensions,
// `a`, `a[3]`, `a[2:6]`, `a[1, 0:4]`, `a[1][0:4]`, `a[ds(start, size)]`, and
// reshapes of the (contiguous) view, `a[2:6].reshape(2, 2)`, and bitcasts
// of it to another element type, `a.bitcast(u32)`, as upstream's
// `ref.reshape(...)` and `ref.bitcast(dtype)`.
#pragma once

#include <climits>
#include <cstdint>
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/expr.h"

namespace thunky {

// One step of an index expression compiled to postfix form: push a
// literal or an axis name's value, or apply an integer operator to the
// top of the stack.
struct IndexStep {
  enum class Op : uint8_t { lit, name, add, sub, mul, floor_div, mod, neg, min, max, end };
  Op op = Op::end;
  int64_t value = 0;  // lit: the value; name: index into RefSyntax::names
};

// The deepest stack compiled code may use (deeper trees stay trees).
constexpr int kIndexStackDepth = 32;

// Runs one compiled expression up to its end step; `name(i)` gives the
// value of name i (an optional). False where the tree must give the
// error: an unknown name, an overflow, a division by zero.
template <class Name>
bool run_index_code(const IndexStep* at, const Name& name, int64_t& out) {
  using O = IndexStep::Op;
  int64_t st[kIndexStackDepth];
  int sp = 0;
  for (;; ++at) {
    switch (at->op) {
      case O::lit: st[sp++] = at->value; break;
      case O::name: {
        const std::optional<int64_t> v = name(at->value);
        if (!v) return false;
        st[sp++] = *v;
        break;
      }
      case O::neg:
        if (st[sp - 1] == INT64_MIN) return false;
        st[sp - 1] = -st[sp - 1];
        break;
      case O::end: out = st[0]; return true;
      default: {
        const int64_t a = st[sp - 2], b = st[--sp];
        int64_t& r = st[sp - 1];
        switch (at->op) {
          case O::add: if (__builtin_add_overflow(a, b, &r)) return false; break;
          case O::sub: if (__builtin_sub_overflow(a, b, &r)) return false; break;
          case O::mul: if (__builtin_mul_overflow(a, b, &r)) return false; break;
          case O::floor_div:
          case O::mod:
            if (b == 0 || (a == INT64_MIN && b == -1)) return false;
            r = at->op == O::floor_div ? floor_div(a, b) : floor_mod(a, b);
            break;
          case O::min: r = std::min(a, b); break;
          case O::max: r = std::max(a, b); break;
          default: return false;
        }
      }
    }
  }
}

struct IndexItem {
  // reshape: the view takes the shape `dims` (`.reshape(2, -1)`); bitcast:
  // its bytes are read as elements of `to` (`.bitcast(u32)`). Each is alone
  // in its group; the others index one dimension each.
  enum class Kind { index, slice, ds, reshape, bitcast };
  Kind kind = Kind::index;
  ExprPtr a;     // index, slice start, ds start
  ExprPtr b;     // slice stop, ds size
  ExprPtr step;  // slice step (must evaluate to 1)
  // Where a, b and step start in RefSyntax::code (-1: absent, or not
  // compiled, when the tree holds more than the integer operators), and
  // whether a and b are negations (a negative literal counts from the end).
  int32_t code_a = -1, code_b = -1, code_step = -1;
  bool a_negated = false, b_negated = false;
  std::vector<int64_t> dims;  // reshape: the new shape; one -1 is inferred
  DType to = DType::f32;       // bitcast: the new element type
};

// One `[...]` group, a `.reshape(...)` or a `.bitcast(...)`; a ref is a chain of them
// applied one after another.
using IndexGroup = std::vector<IndexItem>;

struct RefSyntax {
  std::string buffer;
  std::vector<IndexGroup> groups;
  // Whether a mesh axis name sizes the view (a slice bound, a ds size) or
  // places it at all; classify() sets both once `groups` is final (parse_ref
  // does), so the validator and the simulator ask in O(1).
  bool sized_by_rank = false, moves_with_rank = false;
  // The index expressions compiled (by classify()) into one array, so that
  // resolving the view per rank reads a few adjacent cache lines instead
  // of a tree of separately allocated nodes.
  std::vector<IndexStep> code;
  std::vector<std::string> names;
  void classify();
  std::string text() const;  // canonical text
};

// Parses a ref string; throws ThunkyError with an empty pointer.
RefSyntax parse_ref(std::string_view text);

// A view's shape: up to 6 dimensions held inline (no allocation when a view
// is resolved or copied, which validation and the simulator do per command
// and rank), more on the heap. Reads like a std::vector<int64_t>.
class Shape {
 public:
  Shape() = default;
  Shape(const std::vector<int64_t>& v) { assign(v.data(), v.size()); }  // NOLINT: a shape is a shape
  Shape(std::initializer_list<int64_t> v) { assign(v.begin(), v.size()); }
  // Copies take the inline dimensions whole (a fixed 48 bytes, no call).
  Shape(const Shape& o) { copy_from(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) copy_from(o);
    return *this;
  }
  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_.empty() ? inline_ : heap_.data(); }
  const int64_t* data() const { return heap_.empty() ? inline_ : heap_.data(); }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t back() const { return data()[size_ - 1]; }
  int64_t front() const { return data()[0]; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  // Shrinks (or grows with zeros) to n dimensions.
  void resize(size_t n) {
    if (heap_.empty() && n <= kInline) {
      for (size_t i = size_; i < n; ++i) inline_[i] = 0;
      size_ = n;
      return;
    }
    std::vector<int64_t> v(begin(), end());
    v.resize(n, 0);
    assign(v.data(), v.size());
  }
  void push_back(int64_t d) {
    std::vector<int64_t> v(begin(), end());
    v.push_back(d);
    assign(v.data(), v.size());
  }
  friend bool operator==(const Shape& a, const Shape& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  static constexpr size_t kInline = 6;
  void copy_from(const Shape& o) {
    if (o.heap_.empty()) {
      if (!heap_.empty()) std::vector<int64_t>().swap(heap_);
      std::copy(o.inline_, o.inline_ + kInline, inline_);
    } else {
      heap_ = o.heap_;
    }
    size_ = o.size_;
  }
  void assign(const int64_t* p, size_t n) {
    if (n <= kInline) {
      if (!heap_.empty()) std::vector<int64_t>().swap(heap_);
      std::copy(p, p + n, inline_);
    } else {
      heap_.assign(p, p + n);
    }
    size_ = n;
  }
  int64_t inline_[kInline] = {};
  std::vector<int64_t> heap_;
  size_t size_ = 0;
};

// A contiguous element range of one buffer with its view shape.
struct View {
  int buffer = -1;
  int64_t offset = 0;  // in elements of `dtype`
  Shape shape;
  DType dtype = DType::f32;  // the buffer's, or the last .bitcast's
  int64_t byte_offset() const { return offset * static_cast<int64_t>(dtype_size(dtype)); }
  int64_t bytes() const { return count() * static_cast<int64_t>(dtype_size(dtype)); }
  int64_t count() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// Resolves `ref`'s indexing on a buffer of `shape` and `dtype`; `lookup`
// gives axis indices. Throws ThunkyError for out-of-bounds or
// non-contiguous views and for bitcasts that do not divide.
View resolve_view(int buffer, const std::vector<int64_t>& shape, DType dtype, const RefSyntax& ref, const NameLookup& lookup);
// The element type `ref` reads as: its last .bitcast's, else `buffer`'s.
DType ref_dtype(const RefSyntax& ref, DType buffer);

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace thunky
