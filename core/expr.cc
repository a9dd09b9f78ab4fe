#include "core/expr.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/recent_table.h"
#include "core/status.h"

namespace thunky {

namespace {

// Literals and names recur across a schedule's expressions (`x`, `8`):
// the leaves parsed last on this thread are kept by text and shared,
// nodes being immutable. A leaf's kind follows from its text, so the text
// alone is the key.
thread_local RecentTable<ExprPtr, 256> t_leaves;
constexpr size_t kLeafText = 16;  // longer leaves are rarely repeated

class Parser {
 public:
  Parser(std::string_view s, size_t pos) : s_(s), pos_(pos) {}

  ExprPtr parse() { return parse_or(); }
  size_t pos() const { return pos_; }
  void skip_ws() {
    while (pos_ < s_.size() && space(s_[pos_])) ++pos_;
  }
  // The next character after blanks, or '\0' at the end: operators are
  // tested against it before any text is compared.
  char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }
  [[noreturn]] void fail(const std::string& what) {
    // A long expression is quoted around the offset, so the error stays one readable line.
    std::string quoted(s_);
    if (quoted.size() > 80) {
      const size_t from = pos_ > 40 ? std::min(pos_ - 40, quoted.size() - 80) : 0;
      quoted = (from > 0 ? "..." : "") + quoted.substr(from, 80) + (from + 80 < quoted.size() ? "..." : "");
    }
    throw ThunkyError("", "in expression '" + quoted + "' at offset " + std::to_string(pos_) + ": " + what);
  }

 private:
  // The C locale's classes, without a call into the C library.
  static bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
  static bool digit(char c) { return c >= '0' && c <= '9'; }
  static bool alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
  static bool alnum(char c) { return alpha(c) || digit(c); }
  static Expr::IntOp int_op(Expr::Kind k, std::string_view text) {
    using I = Expr::IntOp;
    if (k == Expr::Kind::unary) return text == "-" ? I::neg : I::none;
    if (k == Expr::Kind::call) return text == "min" ? I::min : text == "max" ? I::max : I::none;
    if (k != Expr::Kind::binary) return I::none;
    if (text == "+") return I::add;
    if (text == "-") return I::sub;
    if (text == "*") return I::mul;
    if (text == "//") return I::floor_div;
    if (text == "%") return I::mod;
    return I::none;
  }
  static ExprPtr make(Expr::Kind k, std::string_view text, ExprArgs args = {}) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->int_op = int_op(k, text);
    e->text = text;
    e->args = std::move(args);
    for (const auto& a : e->args) e->height = std::max(e->height, a->height + 1);
    return e;
  }
  // An operator node, its operands moved in (no reference counts touched).
  static ExprPtr make(Expr::Kind k, std::string_view text, ExprPtr a, ExprPtr b = nullptr) {
    ExprArgs args;
    args.push_back(std::move(a));
    if (b) args.push_back(std::move(b));
    return make(k, text, std::move(args));
  }
  bool eat_word(std::string_view w) {
    if (peek() != w[0] || s_.substr(pos_, w.size()) != w) return false;
    size_t end = pos_ + w.size();
    if (end < s_.size() && (alnum(s_[end]) || s_[end] == '_')) return false;
    pos_ = end;
    return true;
  }
  bool eat(std::string_view op) {
    if (peek() != op[0] || s_.substr(pos_, op.size()) != op) return false;
    pos_ += op.size();
    return true;
  }
  // Binary operators by precedence, loosest first: or, and, comparisons
  // (one per expression, no chains), + -, * / // %. `not` binds looser
  // than a comparison and tighter than `and`.
  enum Level { kOr = 1, kAnd, kCmp, kArith, kTerm, kUnary };
  struct BinOp {
    int level = 0;  // 0: none here
    std::string_view text;
  };
  // The binary operator at the cursor, not consumed (words only whole).
  BinOp peek_binary() {
    const char c = peek();
    const std::string_view rest = s_.substr(pos_);
    auto word = [&](std::string_view w, int level) {
      if (rest.substr(0, w.size()) != w) return BinOp{};
      if (rest.size() > w.size() && (alnum(rest[w.size()]) || rest[w.size()] == '_')) return BinOp{};
      return BinOp{level, w};
    };
    switch (c) {
      case 'o': return word("or", kOr);
      case 'a': return word("and", kAnd);
      case '<':
      case '>': return {kCmp, rest.substr(0, rest.size() > 1 && rest[1] == '=' ? 2 : 1)};
      case '=':
      case '!': return rest.size() > 1 && rest[1] == '=' ? BinOp{kCmp, rest.substr(0, 2)} : BinOp{};
      case '+':
      case '-': return {kArith, rest.substr(0, 1)};
      case '*': return rest.size() > 1 && rest[1] == '*' ? BinOp{} : BinOp{kTerm, rest.substr(0, 1)};
      case '/': return {kTerm, rest.substr(0, rest.size() > 1 && rest[1] == '/' ? 2 : 1)};
      case '%': return {kTerm, rest.substr(0, 1)};
      default: return {};
    }
  }
  // An expression of operators at `min_level` or tighter, left to right.
  ExprPtr parse_level(int min_level) {
    if (min_level >= kUnary) return parse_unary();
    ExprPtr l;
    bool compared = false;  // only and / or may follow a comparison or a `not`
    if (min_level <= kCmp && eat_word("not")) {
      if (++depth_ > 64) fail("expression nested too deeply");
      l = make(Expr::Kind::unary, "not", parse_level(kCmp));
      --depth_;
      compared = true;
    } else {
      l = parse_unary();
    }
    for (;;) {
      const BinOp op = peek_binary();
      if (op.level < min_level || op.level == 0 || (op.level == kCmp && compared)) return l;
      pos_ += op.text.size();
      compared = compared || op.level <= kCmp;  // a later comparison was refused inside the operand
      l = make(Expr::Kind::binary, op.text, std::move(l), parse_level(op.level + 1));
      if (l->height > kMaxExprHeight) fail("expression more than " + std::to_string(kMaxExprHeight) + " operations deep");
    }
  }
  ExprPtr parse_or() { return parse_level(kOr); }
  ExprPtr parse_unary() {
    if (++depth_ > 64) fail("expression nested too deeply");
    ExprPtr r;
    if (eat("-")) r = make(Expr::Kind::unary, "-", parse_unary());
    else if (eat("+")) r = parse_unary();
    else r = parse_power();
    --depth_;
    return r;
  }
  ExprPtr parse_power() {
    auto base = parse_atom();
    if (eat("**")) return make(Expr::Kind::binary, "**", std::move(base), parse_unary());
    // After a complete `**` chain, multiplication continues in parse_term.
    return base;
  }
  ExprPtr parse_atom() {
    skip_ws();
    if (pos_ >= s_.size()) fail("expected a value");
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (++depth_ > 64) fail("expression nested too deeply");
      auto e = parse_or();
      --depth_;
      if (!eat(")")) fail("expected ')'");
      return e;
    }
    if (digit(c) || c == '.') return parse_number();
    if (alpha(c) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() && (alnum(s_[pos_]) || s_[pos_] == '_')) ++pos_;
      std::string name(s_.substr(start, pos_ - start));
      if (name == "True" || name == "False") {
        auto e = make(Expr::Kind::bool_lit, name);
        const_cast<Expr&>(*e).ival = name == "True";
        return e;
      }
      if (eat("(")) {
        ExprArgs args;
        if (!eat(")")) {
          for (;;) {
            if (++depth_ > 64) fail("expression nested too deeply");
            args.push_back(parse_or());
            --depth_;
            if (eat(")")) break;
            if (!eat(",")) fail("expected ',' or ')' in call to " + name);
          }
        }
        return make(Expr::Kind::call, name, std::move(args));
      }
      auto leaf = [&] { return make(Expr::Kind::name, name); };
      return name.size() > kLeafText ? leaf() : t_leaves.get(name, leaf);
    }
    fail(std::string("unexpected character '") + c + "'");
  }
  ExprPtr parse_number() {
    size_t start = pos_;
    bool is_float = false;
    while (pos_ < s_.size() && digit(s_[pos_])) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_float = true;
      ++pos_;
      while (pos_ < s_.size() && digit(s_[pos_])) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t save = pos_;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ < s_.size() && digit(s_[pos_])) {
        is_float = true;
        while (pos_ < s_.size() && digit(s_[pos_])) ++pos_;
      } else {
        pos_ = save;
      }
    }
    const std::string_view text = s_.substr(start, pos_ - start);
    if (text == ".") fail("expected a number");
    auto leaf = [&] { return make_number(text, is_float); };
    return text.size() > kLeafText ? leaf() : t_leaves.get(text, leaf);
  }
  ExprPtr make_number(std::string_view text, bool is_float) {
    auto e = std::make_shared<Expr>();
    e->text = text;
    if (is_float) {
      e->kind = Expr::Kind::float_lit;
      e->fval = std::strtod(e->text.c_str(), nullptr);
    } else {
      e->kind = Expr::Kind::int_lit;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), e->ival);
      if (ec != std::errc()) fail("integer literal out of range: " + std::string(text));
      e->fval = static_cast<double>(e->ival);
    }
    return e;
  }

  std::string_view s_;
  size_t pos_;
  int depth_ = 0;
};

}  // namespace

ExprPtr parse_expr(std::string_view src) {
  Parser p(src, 0);
  auto e = p.parse();
  if (!p.at_end()) p.fail("unexpected trailing text");
  return e;
}

ExprPtr parse_expr_prefix(std::string_view src, size_t& pos) {
  Parser p(src, pos);
  auto e = p.parse();
  p.skip_ws();
  pos = p.pos();
  return e;
}

std::string to_string(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::int_lit:
    case Expr::Kind::float_lit:
    case Expr::Kind::bool_lit:
    case Expr::Kind::name: return e.text;
    case Expr::Kind::unary: return e.text == "not" ? "(not " + to_string(*e.args[0]) + ")" : "(-" + to_string(*e.args[0]) + ")";
    case Expr::Kind::binary:
      return "(" + to_string(*e.args[0]) + " " + e.text + " " + to_string(*e.args[1]) + ")";
    case Expr::Kind::call: {
      std::string s = e.text + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + to_string(*e.args[i]);
      return s + ")";
    }
  }
  return "";
}

int64_t floor_div(int64_t a, int64_t b) {
  // The one quotient that overflows: it wraps, as two's complement does.
  if (b == -1) return static_cast<int64_t>(0ull - static_cast<uint64_t>(a));
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

int64_t eval_int(const Expr& e, const NameLookup& lookup) {
  if (e.kind == Expr::Kind::int_lit) return e.ival;
  auto overflow = [&] { throw ThunkyError("", "integer overflow in '" + to_string(e) + "'"); };
  switch (e.kind) {
    case Expr::Kind::int_lit: return e.ival;
    case Expr::Kind::name: {
      auto v = lookup(e.text);
      if (!v) throw ThunkyError("", "unknown name '" + e.text + "' in index expression (expected a mesh axis name)");
      return *v;
    }
    case Expr::Kind::unary:
      if (e.int_op == Expr::IntOp::neg) {
        int64_t v = eval_int(*e.args[0], lookup);
        if (v == INT64_MIN) overflow();
        return -v;
      }
      break;
    case Expr::Kind::binary: {
      int64_t a = eval_int(*e.args[0], lookup), b = eval_int(*e.args[1], lookup);
      int64_t r = 0;
      switch (e.int_op) {
        case Expr::IntOp::add: if (__builtin_add_overflow(a, b, &r)) overflow(); return r;
        case Expr::IntOp::sub: if (__builtin_sub_overflow(a, b, &r)) overflow(); return r;
        case Expr::IntOp::mul: if (__builtin_mul_overflow(a, b, &r)) overflow(); return r;
        case Expr::IntOp::floor_div:
        case Expr::IntOp::mod:
          if (b == 0) throw ThunkyError("", "division by zero in '" + to_string(e) + "'");
          if (a == INT64_MIN && b == -1) overflow();
          return e.int_op == Expr::IntOp::floor_div ? floor_div(a, b) : floor_mod(a, b);
        default: break;
      }
      break;
    }
    case Expr::Kind::call:
      if ((e.int_op == Expr::IntOp::min || e.int_op == Expr::IntOp::max) && e.args.size() == 2) {
        int64_t a = eval_int(*e.args[0], lookup), b = eval_int(*e.args[1], lookup);
        return e.int_op == Expr::IntOp::min ? std::min(a, b) : std::max(a, b);
      }
      break;
    default: break;
  }
  throw ThunkyError("", "'" + to_string(e) + "' is not an integer index expression (allowed: literals, axis names, + - * // %, min, max)");
}

}  // namespace thunky

