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
  std::vector<ExprPtr> args;
};

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

// Python semantics for integer floor division and modulo.
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

}  // namespace thunky
