#include "core/ref.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>

#include "core/status.h"

namespace thunky {

namespace {
[[noreturn]] void fail(std::string_view text, const std::string& what) {
  throw ThunkyError("", "bad ref '" + std::string(text) + "': " + what);
}
void skip_ws(std::string_view s, size_t& p) {
  while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
}
bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$'; }

ExprPtr parse_item_expr(std::string_view text, size_t& p) {
  try {
    return parse_expr_prefix(text, p);
  } catch (const ThunkyError& e) {
    fail(text, e.what());
  }
}

IndexItem parse_item(std::string_view text, size_t& p) {
  IndexItem item;
  skip_ws(text, p);
  if (text.substr(p, 3) == "ds(") {
    p += 3;
    item.kind = IndexItem::Kind::ds;
    item.a = parse_item_expr(text, p);
    if (p >= text.size() || text[p] != ',') fail(text, "ds() takes (start, size)");
    ++p;
    item.b = parse_item_expr(text, p);
    if (p >= text.size() || text[p] != ')') fail(text, "expected ')' after ds(start, size)");
    ++p;
    skip_ws(text, p);
    return item;
  }
  auto at = [&](char c) {
    skip_ws(text, p);
    return p < text.size() && text[p] == c;
  };
  if (!at(':')) item.a = parse_item_expr(text, p);
  if (!at(':')) return item;  // plain index
  item.kind = IndexItem::Kind::slice;
  ++p;
  if (!at(':') && !at(',') && !at(']')) item.b = parse_item_expr(text, p);
  if (at(':')) {
    ++p;
    if (!at(',') && !at(']')) item.step = parse_item_expr(text, p);
  }
  return item;
}
}  // namespace

// `.reshape(d0, d1, ...)` at p: integer literals, at most one -1.
IndexItem parse_reshape(std::string_view text, size_t& p) {
  p += 8;
  skip_ws(text, p);
  if (p >= text.size() || text[p] != '(') fail(text, "expected '(' after .reshape");
  ++p;
  IndexItem it;
  it.kind = IndexItem::Kind::reshape;
  int inferred = 0;
  for (;;) {
    skip_ws(text, p);
    if (it.dims.empty() && p < text.size() && text[p] == ')') {  // .reshape(): a scalar
      ++p;
      break;
    }
    const bool negative = p < text.size() && text[p] == '-';
    if (negative) ++p;
    int64_t d = 0;
    auto [end, ec] = std::from_chars(text.data() + p, text.data() + text.size(), d);
    if (ec != std::errc() || end == text.data() + p) fail(text, "expected a dimension (an integer literal) in .reshape(...)");
    p = static_cast<size_t>(end - text.data());
    if (negative && d != 1) fail(text, "a .reshape dimension is a size, or -1 for the one inferred");
    if (negative) ++inferred;
    if (inferred > 1) fail(text, "at most one .reshape dimension may be -1");
    if (it.dims.size() >= 64) fail(text, "a .reshape of more than 64 dimensions");
    it.dims.push_back(negative ? -1 : d);
    skip_ws(text, p);
    if (p < text.size() && text[p] == ',') { ++p; continue; }
    if (p < text.size() && text[p] == ')') { ++p; break; }
    fail(text, "expected ',' or ')' in .reshape(...)");
  }
  return it;
}

// `.bitcast(dtype)` at p: one dtype name.
IndexItem parse_bitcast(std::string_view text, size_t& p) {
  p += 8;
  skip_ws(text, p);
  if (p >= text.size() || text[p] != '(') fail(text, "expected '(' after .bitcast");
  ++p;
  skip_ws(text, p);
  const size_t start = p;
  while (p < text.size() && is_ident(text[p]) && text[p] != '.') ++p;
  const std::optional<DType> to = parse_dtype(text.substr(start, p - start));
  if (!to) fail(text, "expected a dtype (f32, bf16, u32, ...) in .bitcast(...)");
  skip_ws(text, p);
  if (p >= text.size() || text[p] != ')') fail(text, "expected ')' after the dtype of .bitcast(...)");
  ++p;
  IndexItem it;
  it.kind = IndexItem::Kind::bitcast;
  it.to = *to;
  return it;
}

RefSyntax parse_ref(std::string_view text) {
  RefSyntax r;
  size_t p = 0;
  skip_ws(text, p);
  size_t start = p;
  while (p < text.size() && is_ident(text[p])) ++p;
  // Names may hold dots: `w.q.reshape(2, 2)` is buffer `w.q` reshaped.
  const std::string_view name = text.substr(start, p - start);
  if ((name.ends_with(".reshape") || name.ends_with(".bitcast")) && p < text.size() && text[p] == '(') p -= 8;
  if (p == start) fail(text, "expected a buffer name");
  r.buffer = std::string(text.substr(start, p - start));
  for (;;) {
    skip_ws(text, p);
    if (p >= text.size()) break;
    if (text.substr(p, 8) == ".reshape") {
      r.groups.push_back({parse_reshape(text, p)});
      continue;
    }
    if (text.substr(p, 8) == ".bitcast") {
      r.groups.push_back({parse_bitcast(text, p)});
      continue;
    }
    if (text[p] != '[') fail(text, "expected '[', '.reshape(', '.bitcast(' or the end");
    ++p;
    IndexGroup g;
    skip_ws(text, p);
    if (p < text.size() && text[p] == ']') fail(text, "empty index");
    for (;;) {
      g.push_back(parse_item(text, p));
      skip_ws(text, p);
      if (p < text.size() && text[p] == ',') { ++p; continue; }
      if (p < text.size() && text[p] == ']') { ++p; break; }
      fail(text, "expected ',' or ']'");
    }
    r.groups.push_back(std::move(g));
  }
  r.classify();
  return r;
}

namespace {
bool mentions_names(const Expr* e) {
  if (!e) return false;
  if (e->kind == Expr::Kind::name) return true;
  for (const auto& a : e->args)
    if (mentions_names(a.get())) return true;
  return false;
}

// Appends e's postfix code; false when e holds anything but literals,
// names and the integer operators, or needs more than `room` stack slots.
bool compile_int(const Expr& e, std::vector<IndexStep>& code, std::vector<std::string>& names, int room) {
  using O = IndexStep::Op;
  if (room <= 0) return false;
  switch (e.kind) {
    case Expr::Kind::int_lit: code.push_back({O::lit, e.ival}); return true;
    case Expr::Kind::name: {
      auto it = std::find(names.begin(), names.end(), e.text);
      if (it == names.end()) it = names.insert(names.end(), e.text);
      code.push_back({O::name, it - names.begin()});
      return true;
    }
    case Expr::Kind::unary:
      if (e.int_op != Expr::IntOp::neg || !compile_int(*e.args[0], code, names, room)) return false;
      code.push_back({O::neg, 0});
      return true;
    case Expr::Kind::binary:
    case Expr::Kind::call: {
      O op;
      switch (e.int_op) {
        case Expr::IntOp::add: op = O::add; break;
        case Expr::IntOp::sub: op = O::sub; break;
        case Expr::IntOp::mul: op = O::mul; break;
        case Expr::IntOp::floor_div: op = O::floor_div; break;
        case Expr::IntOp::mod: op = O::mod; break;
        case Expr::IntOp::min: op = O::min; break;
        case Expr::IntOp::max: op = O::max; break;
        default: return false;
      }
      if (e.args.size() != 2) return false;
      if (!compile_int(*e.args[0], code, names, room) || !compile_int(*e.args[1], code, names, room - 1)) return false;
      code.push_back({op, 0});
      return true;
    }
    default: return false;
  }
}

}  // namespace

void RefSyntax::classify() {
  sized_by_rank = moves_with_rank = false;
  // Compiled into a scratch array first, so that `code` is allocated once
  // at its final size.
  static thread_local std::vector<IndexStep> scratch;
  scratch.clear();
  names.clear();
  auto compile = [&](const ExprPtr& e) -> int32_t {
    if (!e) return -1;
    const size_t start = scratch.size();
    if (!compile_int(*e, scratch, names, kIndexStackDepth)) {
      scratch.resize(start);
      return -1;
    }
    scratch.push_back({IndexStep::Op::end, 0});
    return static_cast<int32_t>(start);
  };
  for (auto& g : groups)
    for (auto& it : g) {
      const bool na = mentions_names(it.a.get()), nb = mentions_names(it.b.get()), ns = mentions_names(it.step.get());
      if (it.kind == IndexItem::Kind::slice && (na || nb)) sized_by_rank = true;
      if (it.kind == IndexItem::Kind::ds && nb) sized_by_rank = true;
      if (na || nb || ns) moves_with_rank = true;
      it.code_a = compile(it.a);
      it.code_b = compile(it.b);
      it.code_step = compile(it.step);
      it.a_negated = it.a && it.a->kind == Expr::Kind::unary;
      it.b_negated = it.b && it.b->kind == Expr::Kind::unary;
    }
  code.assign(scratch.begin(), scratch.end());
}

std::string RefSyntax::text() const {
  std::string s = buffer;
  for (const auto& g : groups) {
    if (!g.empty() && g[0].kind == IndexItem::Kind::reshape) {
      s += ".reshape(";
      for (size_t i = 0; i < g[0].dims.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(g[0].dims[i]);
      }
      s += ')';
      continue;
    }
    if (!g.empty() && g[0].kind == IndexItem::Kind::bitcast) {
      s += ".bitcast(";
      s += dtype_name(g[0].to);
      s += ')';
      continue;
    }
    s += "[";
    for (size_t i = 0; i < g.size(); ++i) {
      if (i) s += ", ";
      const auto& it = g[i];
      if (it.kind == IndexItem::Kind::index) s += to_string(*it.a);
      else if (it.kind == IndexItem::Kind::ds) {
        // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) of "literal" + std::string.
        s += "ds(";
        s += to_string(*it.a);
        s += ", ";
        s += to_string(*it.b);
        s += ')';
      }
      else {
        if (it.a) s += to_string(*it.a);
        s += ":";
        if (it.b) s += to_string(*it.b);
        if (it.step) {
          s += ':';
          s += to_string(*it.step);
        }
      }
    }
    s += "]";
  }
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// The view under another shape of as many elements (a contiguous range
// reads the same under any shape); one -1 takes what the others leave.
void reshape_view(View& v, const std::vector<int64_t>& dims) {
  const int64_t n = v.count();
  int64_t known = 1;  // the product of the given sizes, saturated past n
  size_t inferred = dims.size();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) inferred = i;
    else if (__builtin_mul_overflow(known, dims[i], &known) || known > n) known = dims[i] == 0 ? 0 : n + 1;
  }
  auto refuse = [&](const std::string& why) {
    throw ThunkyError("", ".reshape" + shape_str(dims) + " of a view of shape " + shape_str(v.shape) + ": " + why);
  };
  std::vector<int64_t> shape = dims;
  if (inferred < dims.size()) {
    if (known == 0 || known > n || n % known != 0)
      refuse(std::to_string(n) + " elements do not divide into dimensions of " + std::to_string(known));
    shape[inferred] = n / known;
  } else if (known != n) {
    refuse("it holds " + std::to_string(n) + " elements, the new shape another number");
  }
  v.shape = shape;
}

// The view's bytes read as elements of `to`, as NumPy's `view(dtype)`: the
// last axis scales by the ratio of the sizes; a wider type needs a last
// axis, and a first element, that divide into whole new elements.
void bitcast_view(View& v, DType to) {
  const int64_t from_size = static_cast<int64_t>(dtype_size(v.dtype)), to_size = static_cast<int64_t>(dtype_size(to));
  auto refuse = [&](const std::string& why) {
    std::string m = ".bitcast(";
    m += dtype_name(to);
    m += ") of the ";
    m += dtype_name(v.dtype);
    m += " view ";
    m += shape_str(v.shape);
    m += ": ";
    m += why;
    throw ThunkyError("", m);
  };
  if (from_size != to_size) {
    if (v.shape.empty()) refuse("a scalar view changes its element size only with a last axis to scale (reshape it first)");
    if (to_size < from_size) {
      const int64_t ratio = from_size / to_size;
      v.shape[v.shape.size() - 1] *= ratio;
      v.offset *= ratio;
    } else {
      const int64_t ratio = to_size / from_size;
      if (v.shape.back() % ratio != 0)
        refuse("its last axis of " + std::to_string(v.shape.back()) + " does not divide into elements of " + std::to_string(to_size) + " bytes");
      if (v.offset % ratio != 0) refuse("it starts " + std::to_string(v.byte_offset()) + " bytes into its buffer, not on a whole " + std::to_string(to_size) + "-byte element");
      v.shape[v.shape.size() - 1] /= ratio;
      v.offset /= ratio;
    }
  }
  v.dtype = to;
}

}  // namespace

DType ref_dtype(const RefSyntax& ref, DType buffer) {
  for (auto g = ref.groups.rbegin(); g != ref.groups.rend(); ++g)
    if (!g->empty() && (*g)[0].kind == IndexItem::Kind::bitcast) return (*g)[0].to;
  return buffer;
}

View resolve_view(int buffer, const std::vector<int64_t>& shape, DType dtype, const RefSyntax& ref, const NameLookup& lookup) {
  View v;
  v.buffer = buffer;
  v.shape = shape;
  v.dtype = dtype;
  const std::vector<IndexGroup>& groups = ref.groups;
  // The compiled code where there is one; the tree says what went wrong.
  auto eval_at = [&](int32_t code, const ExprPtr& e) {
    int64_t r;
    auto name = [&](int64_t i) { return lookup(ref.names[static_cast<size_t>(i)]); };
    if (code >= 0 && run_index_code(ref.code.data() + code, name, r)) return r;
    return eval_int(*e, lookup);
  };
  for (const auto& g : groups) {
    if (!g.empty() && g[0].kind == IndexItem::Kind::reshape) {
      reshape_view(v, g[0].dims);
      continue;
    }
    if (!g.empty() && g[0].kind == IndexItem::Kind::bitcast) {
      bitcast_view(v, g[0].to);
      continue;
    }
    if (g.size() > v.shape.size())
      throw ThunkyError("", "too many indices (" + std::to_string(g.size()) + ") for a view of shape " + shape_str(v.shape));
    // Strides of the current view (row-major, contiguous by construction);
    // on the stack for views of up to 16 dimensions.
    int64_t small[16];
    std::vector<int64_t> large;
    int64_t* stride = small;
    if (v.shape.size() > 16) {
      large.resize(v.shape.size());
      stride = large.data();
    }
    if (!v.shape.empty()) stride[v.shape.size() - 1] = 1;
    for (int i = static_cast<int>(v.shape.size()) - 2; i >= 0; --i) stride[i] = stride[i + 1] * v.shape[i + 1];
    // The new shape is written over the old one: dimension d goes to
    // position kept <= d, after d has been read.
    size_t kept = 0;
    bool sliced = false;  // a kept dimension has been emitted: later ones must be whole
    for (size_t d = 0; d < g.size(); ++d) {
      const auto& it = g[d];
      const int64_t n = v.shape[d];
      int64_t start = 0, len = n;
      bool keep = true;
      if (it.kind == IndexItem::Kind::index) {
        int64_t i = eval_at(it.code_a, it.a);
        if (i < 0 && it.a_negated) i += n;  // negative literal: from the end
        if (i < 0 || i >= n)
          throw ThunkyError("", "index " + std::to_string(i) + " out of bounds for dimension " + std::to_string(d) + " of size " + std::to_string(n));
        start = i;
        len = 1;
        keep = false;
      } else if (it.kind == IndexItem::Kind::ds) {
        start = eval_at(it.code_a, it.a);
        len = eval_at(it.code_b, it.b);
        if (len < 0 || start < 0 || start > n || len > n - start)
          throw ThunkyError("", "ds(" + std::to_string(start) + ", " + std::to_string(len) + ") out of bounds for dimension " + std::to_string(d) + " of size " + std::to_string(n));
      } else {
        if (it.step) {
          int64_t st = eval_at(it.code_step, it.step);
          if (st != 1) throw ThunkyError("", "non-unit stride " + std::to_string(st) + ": a ref must be one contiguous byte range");
        }
        int64_t lo = it.a ? eval_at(it.code_a, it.a) : 0;
        int64_t hi = it.b ? eval_at(it.code_b, it.b) : n;
        if (it.a && lo < 0 && it.a_negated) lo += n;
        if (it.b && hi < 0 && it.b_negated) hi += n;
        if (lo < 0 || hi > n || lo > hi)
          throw ThunkyError("", "slice " + std::to_string(lo) + ":" + std::to_string(hi) + " out of bounds for dimension " + std::to_string(d) + " of size " + std::to_string(n));
        start = lo;
        len = hi - lo;
      }
      if (sliced && (start != 0 || len != n))
        throw ThunkyError("", "dimension " + std::to_string(d) + " is indexed after an earlier dimension was sliced: a ref must be one contiguous byte range (only the leading not-yet-fixed dimension may be sliced)");
      v.offset += start * stride[d];
      if (keep) {
        v.shape[kept++] = len;
        sliced = true;
      }
    }
    for (size_t d = g.size(); d < v.shape.size(); ++d) v.shape[kept++] = v.shape[d];
    v.shape.resize(kept);
  }
  return v;
}

}  // namespace thunky
