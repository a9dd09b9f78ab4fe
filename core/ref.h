// Refs: a buffer name followed by NumPy-style indexing of leading dimensions,
// `a`, `a[3]`, `a[2:6]`, `a[1, 0:4]`, `a[1][0:4]`, `a[ds(start, size)]`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/expr.h"

namespace thunky {

struct IndexItem {
  enum class Kind { index, slice, ds };
  Kind kind = Kind::index;
  ExprPtr a;     // index, slice start, ds start
  ExprPtr b;     // slice stop, ds size
  ExprPtr step;  // slice step (must evaluate to 1)
};

// One `[...]` group; a ref is a chain of groups applied one after another.
using IndexGroup = std::vector<IndexItem>;

struct RefSyntax {
  std::string buffer;
  std::vector<IndexGroup> groups;
  std::string text() const;  // canonical text
};

// Parses a ref string; throws ThunkyError with an empty pointer.
RefSyntax parse_ref(std::string_view text);

// A contiguous element range of one buffer with its view shape.
struct View {
  int buffer = -1;
  int64_t offset = 0;  // in elements
  std::vector<int64_t> shape;
  int64_t count() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// Resolves `groups` on a buffer of `shape`; `lookup` gives axis indices.
// Throws ThunkyError for out-of-bounds or non-contiguous views.
View resolve_view(int buffer, const std::vector<int64_t>& shape, const std::vector<IndexGroup>& groups,
                  const NameLookup& lookup);

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace thunky
