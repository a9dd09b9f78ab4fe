#include "core/op_rules.h"

#include <cmath>
#include <set>

#include "core/broadcast.h"
#include "core/validate.h"

namespace thunky {

namespace {

const std::set<std::string>& map_functions() {
  static const std::set<std::string> f = {"where", "sin", "cos", "tan", "exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "erf", "erfc", "erf_inv",
                                          "abs", "neg", "floor", "ceil", "round", "min", "max", "f64", "f32", "f16",
                                          "bf16", "f8e4m3", "f8e5m2", "s64", "s32", "s16", "s8", "u32", "u8", "bool"};
  return f;
}

void check_map_names(const Program& p, const Map& m, const std::string& pointer, const Expr& e) {
  if (e.kind == Expr::Kind::name) {
    for (const auto& [k, r] : m.in)
      if (k == e.text) return;
    if (p.mesh.axis(e.text)) return;
    throw ThunkyError(pointer + "/expr", "unknown name '" + e.text + "' in map expression (inputs are the keys of 'in'; mesh axis names give this rank's index)");
  }
  if (e.kind == Expr::Kind::call) {
    if (!map_functions().count(e.text)) throw ThunkyError(pointer + "/expr", "unknown function '" + e.text + "' in map expression");
    size_t want = e.text == "where" ? 3 : (e.text == "min" || e.text == "max") ? 2 : 1;
    if (e.args.size() != want)
      throw ThunkyError(pointer + "/expr", e.text + "() takes " + std::to_string(want) + " argument" + (want > 1 ? "s" : "") + ", got " + std::to_string(e.args.size()));
  }
  for (const auto& a : e.args) check_map_names(p, m, pointer, *a);
}

}  // namespace

std::string view_str(const Program& p, const View& v) {
  return std::string(dtype_name(v.dtype)) + shape_str(v.shape);
}

View writable_view(const Program& p, const Ref& r, const RankCtx& ctx) {
  const Buffer& b = p.buffers[r.buffer];
  if (b.role == Role::input)
    throw ThunkyError(std::string(r.pointer), "writes buffer '" + b.name + "', which has role input (read-only); declare it inout to mutate it");
  return resolve(p, r, ctx);
}

View scalar_view(const Program& p, const Ref& r, const RankCtx& ctx, DType want, const char* what) {
  View v = resolve(p, r, ctx);
  if (v.count() != 1 || v.dtype != want)
    throw ThunkyError(std::string(r.pointer), std::string(what) + " must be a " + std::string(dtype_name(want)) + " scalar, got " + view_str(p, v));
  return v;
}

void check_memset(const Program& p, const Command& c, const View& d) {
  const DType t = d.dtype;
  const Memset& x = c.as<Memset>();
  if (x.bits && dtype_size(t) != 4)
    throw ThunkyError(c.pointer + "/bits", "a 32-bit pattern sets 4-byte elements, but dst " + view_str(p, d) + " has " + std::to_string(dtype_size(t)) + "-byte ones");
  if (!x.bits && !std::isfinite(x.value) && !is_float(t))
    throw ThunkyError(c.pointer + "/value", "NaN and infinities need a floating-point dst, got " + view_str(p, d));
}

void check_copy(const Program& p, const Command& c, const View& s, const View& d) {
  const int64_t sb = s.bytes(), db = d.bytes();
  if (sb != db)
    throw ThunkyError(c.pointer + "/dst", "copy needs equal byte sizes: src " + view_str(p, s) + " is " + std::to_string(sb) + " bytes, dst " + view_str(p, d) + " is " + std::to_string(db) + " bytes");
}

void check_transpose(const Program& p, const Command& c, const View& s, const View& d) {
  const std::vector<int64_t>& perm = c.as<Transpose>().perm;
  const size_t r = s.shape.size();
  if (perm.size() != r || r > 8)
    throw ThunkyError(c.pointer + "/perm", "transpose of " + view_str(p, s) + " needs a perm of its " + std::to_string(r) + " dimensions (at most 8), not " + std::to_string(perm.size()));
  std::vector<bool> seen(r, false);
  std::vector<int64_t> shape(r);
  for (size_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(r) || seen[static_cast<size_t>(perm[i])])
      throw ThunkyError(c.pointer + "/perm/" + std::to_string(i), "perm must list each of src's dimensions 0.." + std::to_string(r - 1) + " once");
    seen[static_cast<size_t>(perm[i])] = true;
    shape[i] = s.shape[static_cast<size_t>(perm[i])];
  }
  if (s.dtype != d.dtype)
    throw ThunkyError(c.pointer + "/dst", "transpose keeps the dtype: src is " + view_str(p, s) + ", dst " + view_str(p, d));
  if (shape != d.shape)
    throw ThunkyError(c.pointer + "/dst", "transpose of " + view_str(p, s) + " by perm gives shape " + shape_str(shape) + ", dst is " + view_str(p, d));
  // One buffer, one dtype: element ranges [offset, offset + count) compare directly.
  if (s.buffer == d.buffer && s.offset < d.offset + d.count() && d.offset < s.offset + s.count() && s.count() > 1)
    throw ThunkyError(c.pointer + "/dst", "transpose: src and dst overlap in buffer '" + p.buffers[s.buffer].name + "'; they must be disjoint");
}

void check_gemm(const Program& p, const Command& c, const View& a, const View& b, const View& cv) {
  const Gemm& g = c.as<Gemm>();
  auto fail = [&](const std::string& why) {
    throw ThunkyError(c.pointer, "gemm " + why + ": a is " + view_str(p, a) + (g.transpose_a ? " (transposed)" : "") + ", b is " + view_str(p, b) + (g.transpose_b ? " (transposed)" : "") + ", c is " + view_str(p, cv));
  };
  const DType ta = a.dtype, tb = b.dtype, tc = cv.dtype;
  if (ta != tb) fail("needs a and b of one dtype");
  if (ta == DType::s8) {  // as cuBLASLt's 32-bit integer compute: s8 x s8 into s32
    if (tc != DType::s32) fail("of s8 operands writes an s32 c (32-bit integer accumulation)");
    for (double v : {g.alpha, g.beta})
      if (v != std::floor(v) || std::fabs(v) >= 2147483648.0) fail("of s8 operands takes integer alpha and beta (32-bit)");
  } else if (!is_float(ta) || !is_float(tc)) {
    fail("works on floating-point dtypes, or s8 operands into an s32 c");
  }
  auto rank_ok = [](const View& v) { return v.shape.size() == 2 || v.shape.size() == 3; };
  if (!rank_ok(a) || !rank_ok(b) || !rank_ok(cv)) fail("takes 2-D matrices or 3-D batches");
  auto mat = [](const View& v, bool t) {
    size_t r = v.shape.size();
    int64_t rows = v.shape[r - 2], cols = v.shape[r - 1];
    return t ? std::pair{cols, rows} : std::pair{rows, cols};
  };
  auto [m, k] = mat(a, g.transpose_a);
  auto [k2, n] = mat(b, g.transpose_b);
  auto [m2, n2] = mat(cv, false);
  if (k != k2) fail("contraction dimensions differ (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
  if (m != m2 || n != n2) fail("needs c of shape [" + std::to_string(m) + ", " + std::to_string(n) + "]");
  int64_t batch = cv.shape.size() == 3 ? cv.shape[0] : 1;
  if ((a.shape.size() == 3 && a.shape[0] != batch) || (b.shape.size() == 3 && b.shape[0] != batch) ||
      (cv.shape.size() == 2 && (a.shape.size() == 3 || b.shape.size() == 3)))
    fail("needs equal batch sizes (a 2-D operand is broadcast over c's batch)");
}

void check_reduce(const Program& p, const Command& c, const View& in, const View& out) {
  const Reduce& x = c.as<Reduce>();
  std::set<int64_t> axes;
  int64_t kept = 1;
  for (size_t i = 0; i < x.axes.size(); ++i) {
    int64_t ax = x.axes[i];
    if (ax < 0) ax += static_cast<int64_t>(in.shape.size());
    if (ax < 0 || ax >= static_cast<int64_t>(in.shape.size()))
      throw ThunkyError(c.pointer + "/axes/" + std::to_string(i), "axis " + std::to_string(x.axes[i]) + " is out of range for input " + view_str(p, in));
    if (!axes.insert(ax).second) throw ThunkyError(c.pointer + "/axes/" + std::to_string(i), "axis listed twice");
  }
  if (!reduction_takes_integers(x.fn) && (!is_float(in.dtype) || !is_float(out.dtype)))
    throw ThunkyError(c.pointer + "/fn", "reduce with mean needs float in and out: in is " + view_str(p, in) + ", out " + view_str(p, out) + " (use sum, and divide)");
  if (x.arg) {
    const char* fn = x.fn == Reduction::max ? "argmax" : "argmin";
    if (axes.size() != 1) throw ThunkyError(c.pointer + "/axes", std::string(fn) + " reduces exactly one axis, not " + std::to_string(axes.size()));
    const DType t = out.dtype;
    if (t != DType::s32 && t != DType::s64)
      throw ThunkyError(c.pointer + "/out", std::string(fn) + " writes indices: out must be s32 or s64, not " + view_str(p, out));
    if (in.shape[static_cast<size_t>(*axes.begin())] == 0)
      throw ThunkyError(c.pointer + "/axes", std::string(fn) + " over an axis of 0 elements has no index to give");
    if (t == DType::s32 && in.shape[static_cast<size_t>(*axes.begin())] > (int64_t{1} << 31))
      throw ThunkyError(c.pointer + "/out", std::string(fn) + " over an axis of " + std::to_string(in.shape[static_cast<size_t>(*axes.begin())]) + " elements needs s64 indices");
  }
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (!axes.count(static_cast<int64_t>(d))) kept *= in.shape[d];
  if (out.count() != kept)
    throw ThunkyError(c.pointer + "/out", "reduce of " + view_str(p, in) + " over the listed axes leaves " + std::to_string(kept) + " elements, out " + view_str(p, out) + " has " + std::to_string(out.count()));
}

void check_map(const Program& p, const Map& m, const std::string& pointer, const RankCtx& ctx, bool names) {
  if (names) check_map_names(p, m, pointer, *m.expr);
  View out = writable_view(p, m.out, ctx);
  for (const auto& [k, r] : m.in) {
    View v = resolve(p, r, ctx);
    const bool broadcast = v.count() != out.count() && v.count() != 1;
    if (broadcast && out.shape.size() > 8)
      throw ThunkyError(std::string(r.pointer), "map input '" + k + "' broadcasts to out " + view_str(p, out) + ", which has more than 8 dimensions, the most a broadcast takes");
    if (broadcast && !broadcast_strides(v.shape, out.shape))
      throw ThunkyError(std::string(r.pointer), "map input '" + k + "' is " + view_str(p, v) + "; inputs must be scalars, have out's " + std::to_string(out.count()) +
                                                    " elements, or broadcast to out's shape by numpy's rules (out is " + view_str(p, out) + ")");
  }
}

void check_collective(const Program& p, const Command& c, const View& src, const View& dst, const Participants& part) {
  const int64_t n = part.size;
  if (src.dtype != dst.dtype)
    throw ThunkyError(c.pointer + "/dst", std::string(op_name(c.op())) + " needs src and dst of one dtype: src is " + view_str(p, src) + ", dst is " + view_str(p, dst));
  const int64_t sc = src.count(), dc = dst.count();
  auto mismatch = [&](const std::string& rule) {
    throw ThunkyError(c.pointer + "/dst", std::string(op_name(c.op())) + " over " + std::to_string(n) + " ranks needs " + rule + ": src is " + view_str(p, src) + " (" + std::to_string(sc) + " elements), dst is " + view_str(p, dst) + " (" + std::to_string(dc) + " elements)");
  };
  if ((c.op() == Op::all_reduce || c.op() == Op::reduce_scatter) && !reduction_takes_integers(reduction_of(c)) && !is_float(src.dtype))
    throw ThunkyError(c.pointer + "/reduction", std::string(op_name(c.op())) + " with mean needs a float dtype: src is " + view_str(p, src) + " (use sum, and divide)");
  if (c.op() == Op::all_gather && dc != n * sc) mismatch("dst to hold n x src elements");
  if (c.op() == Op::reduce_scatter && sc != n * dc) mismatch("src to hold n x dst elements");
  if ((c.op() == Op::all_reduce || c.op() == Op::collective_permute) && sc != dc) mismatch("src and dst of equal element counts");
  if (c.op() == Op::all_to_all) {
    if (sc != dc) mismatch("src and dst of equal element counts");
    if (sc % n != 0) mismatch("an element count divisible by the number of ranks");
  }
  if (src.buffer == dst.buffer) {
    const int64_t s0 = src.offset, s1 = src.offset + sc, d0 = dst.offset, d1 = dst.offset + dc;
    bool overlap = s0 < d1 && d0 < s1;
    bool identical = s0 == d0 && s1 == d1;
    bool ok = !overlap;
    if ((c.op() == Op::all_reduce || c.op() == Op::collective_permute) && identical) ok = true;
    if (c.op() == Op::all_gather && s0 == d0 + part.position * sc && s1 == s0 + sc) ok = true;
    if (c.op() == Op::reduce_scatter && d0 == s0 + part.position * dc && d1 == d0 + dc) ok = true;
    if (!ok)
      throw ThunkyError(c.pointer + "/dst", std::string(op_name(c.op())) + ": src and dst overlap in buffer '" + p.buffers[src.buffer].name + "' (elements [" + std::to_string(s0) + ", " + std::to_string(s1) + ") and [" + std::to_string(d0) + ", " + std::to_string(d1) + ")); they must be disjoint or in place as the op allows");
  }
  if (const CollectivePermute* permute = c.get_if<CollectivePermute>(); permute && permute->pairs) {
    std::set<int64_t> sources, targets;
    for (size_t i = 0; i < permute->pairs->size(); ++i) {
      auto [s, t] = (*permute->pairs)[i];
      std::string ptr = c.pointer + "/pairs/" + std::to_string(i);
      if (s < 0 || s >= n || t < 0 || t >= n)
        throw ThunkyError(ptr, "pair [" + std::to_string(s) + ", " + std::to_string(t) + "] names an index outside the " + std::to_string(n) + " ranks of the collective");
      if (!sources.insert(s).second) throw ThunkyError(ptr, "source " + std::to_string(s) + " sends more than once");
      if (!targets.insert(t).second) throw ThunkyError(ptr, "target " + std::to_string(t) + " receives more than once");
    }
  }
}

void check_collective_group(const Command& g) {
  const Block& body = g.as<CollectiveGroup>().body;
  for (const auto& c : body)
    if (!is_collective(c.op()))
      throw ThunkyError(c.pointer + "/op", "a collective_group may hold only collectives, not '" + std::string(op_name(c.op())) + "'");
  if (body.empty()) throw ThunkyError(g.pointer + "/body", "a collective_group needs at least one collective");
}


void check_custom_call(const Program& p, const Command& c, const RankCtx& ctx) {
  const CustomCall& x = c.as<CustomCall>();
  const CustomCallSpec& spec = *x.spec;
  if (spec.target != "cholesky" && spec.target != "cusolver_potrf_ffi")
    throw ThunkyError(c.pointer + "/target", "unknown custom_call target '" + spec.target + "' (registered: cholesky, cusolver_potrf_ffi)");
  for (auto it = spec.backend_config.begin(); it != spec.backend_config.end(); ++it) {
    if (it.key() != "lower") throw ThunkyError(c.pointer + "/backend_config/" + it.key(), "unknown key '" + it.key() + "' for cholesky (expected 'lower')");
    if (!it.value().is_boolean()) throw ThunkyError(c.pointer + "/backend_config/lower", "expected true or false");
  }
  if (!spec.backend_config.contains("lower"))
    throw ThunkyError(c.pointer + "/backend_config", "cholesky needs backend_config.lower (true or false, in cuSOLVER's column-major sense)");
  if (x.operands.size() != 1) throw ThunkyError(c.pointer + "/operands", "cholesky takes one operand [a]");
  if (x.results.size() != 2) throw ThunkyError(c.pointer + "/results", "cholesky has two results [a, info]");
  View a = resolve(p, x.operands[0], ctx), r = resolve(p, x.results[0], ctx), info = resolve(p, x.results[1], ctx);
  DType t = a.dtype;
  if (a.shape.size() < 2 || a.shape[a.shape.size() - 1] != a.shape[a.shape.size() - 2] || (t != DType::f32 && t != DType::f64))
    throw ThunkyError(std::string(x.operands[0].pointer), "cholesky needs a square f32 or f64 matrix (or a batch of them), got " + view_str(p, a));
  if (r.shape != a.shape || r.dtype != t)
    throw ThunkyError(std::string(x.results[0].pointer), "result 0 must have the operand's shape and dtype " + view_str(p, a) + ", got " + view_str(p, r));
  int64_t batch = a.count() / (a.shape.back() * a.shape.back());
  if (info.dtype != DType::s32 || info.count() != batch)
    throw ThunkyError(std::string(x.results[1].pointer), "info must be s32 with one element per matrix (" + std::to_string(batch) + "), got " + view_str(p, info));
}

}  // namespace thunky
