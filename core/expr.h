// The expression language shared by ref indices (integer expressions over
// mesh axis names) and `map` bodies (elementwise arithmetic over inputs).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace thunky {

// A non-owning reference to a callable `std::optional<int64_t>(std::string_view)`:
// index evaluation runs per command and rank, so it avoids std::function.
class NameLookup {
 public:
  template <typename F>
  NameLookup(const F& f)  // NOLINT: implicit by design
      : ctx_(&f), fn_([](const void* c, std::string_view n) -> std::optional<int64_t> { return (*static_cast<const F*>(c))(n); }) {}
  std::optional<int64_t> operator()(std::string_view n) const { return fn_(ctx_, n); }

 private:
  const void* ctx_;
  std::optional<int64_t> (*fn_)(const void*, std::string_view);
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

// An expression node's operands: up to three inline (every operator and
// the map functions take at most three, so a node is one allocation),
// more on the heap. Reads like a std::vector<ExprPtr>.
class ExprArgs {
 public:
  size_t size() const { return heap_.empty() ? n_ : heap_.size(); }
  bool empty() const { return size() == 0; }
  const ExprPtr& operator[](size_t i) const { return begin()[i]; }
  const ExprPtr* begin() const { return heap_.empty() ? inline_ : heap_.data(); }
  const ExprPtr* end() const { return begin() + size(); }
  void push_back(ExprPtr e) {
    if (heap_.empty() && n_ < kInline) {
      inline_[n_++] = std::move(e);
      return;
    }
    if (heap_.empty()) {
      for (size_t i = 0; i < n_; ++i) heap_.push_back(std::move(inline_[i]));
      n_ = 0;
    }
    heap_.push_back(std::move(e));
  }

 private:
  static constexpr size_t kInline = 3;
  ExprPtr inline_[kInline];
  std::vector<ExprPtr> heap_;
  size_t n_ = 0;
};

struct Expr {
  enum class Kind { int_lit, float_lit, bool_lit, name, unary, binary, call };
  // The integer index operators, decoded from `text` once by the parser
  // so that evaluating an index compares no text.
  enum class IntOp : uint8_t { none, add, sub, mul, floor_div, mod, neg, min, max };
  Kind kind;
  IntOp int_op = IntOp::none;
  std::string text;  // name, operator or function name
  int64_t ival = 0;
  double fval = 0;
  ExprArgs args;
  int height = 1;  // levels of the tree from here down (at most kMaxExprHeight)
};

// How deep an expression's tree may be: the parser refuses deeper ones
// (a chain "x + 1 + 1 + ..." of 256 operators is 257 levels), so every
// consumer may walk a tree without exhausting its stack.
constexpr int kMaxExprHeight = 256;

// Parses `src`; throws ThunkyError (pointer left empty, the caller fills it).
ExprPtr parse_expr(std::string_view src);
// Parses one expression starting at `pos`, stopping before an unmatched
// ',', ']' or ')' at depth 0; advances pos. Used by the ref parser.
ExprPtr parse_expr_prefix(std::string_view src, size_t& pos);

std::string to_string(const Expr& e);

// Integer evaluation (ref indices): + - * // % unary -, min, max; names are
// looked up with `lookup`. Throws ThunkyError on unknown names, division
// by zero or a non-integer construct.
int64_t eval_int(const Expr& e, const NameLookup& lookup);

// Python semantics for integer floor division and modulo (b != 0); the
// quotient of INT64_MIN by -1 wraps to INT64_MIN, as two's complement does.
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

}  // namespace thunky
