#include "core/accounting.h"

#include <string_view>

namespace thunky {

namespace {
int64_t count(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}
// The flops of one element of a map: an operator or a cheap function is
// one; a transcendental function, and `**`, is kTranscendentalFlops, the
// ratio of an H100 or A100 SM's FP32 lanes to its special-function units
// (128 to 16 a clock), which evaluate them.
constexpr int64_t kTranscendentalFlops = 8;
bool transcendental(const Expr& e) {
  static constexpr std::string_view kNames[] = {"sin", "cos", "tan", "exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "erf", "erfc", "erf_inv"};
  if (e.kind == Expr::Kind::binary) return e.text == "**";
  if (e.kind != Expr::Kind::call) return false;
  for (auto n : kNames)
    if (e.text == n) return true;
  return false;
}
int64_t expr_ops(const Expr& e) {
  int64_t n = (e.kind == Expr::Kind::unary || e.kind == Expr::Kind::binary || e.kind == Expr::Kind::call) ? 1 : 0;
  if (transcendental(e)) n = kTranscendentalFlops;
  for (const auto& a : e.args) n += expr_ops(*a);
  return n;
}
}  // namespace

std::span<const int64_t> ShapeCache::view_shape(const Program& p, const Ref& r, const RankCtx& ctx) {
  // Only shapes that hold on every rank are kept.
  const std::pair<const void*, int> key{r.syntax.get(), r.buffer};
  if (auto it = shapes_.find(key); it != shapes_.end()) return it->second;
  const View v = resolve(p, r, ctx);
  if (size_depends_on_rank(r)) {
    scratch_ = v.shape;
    return {scratch_.begin(), scratch_.end()};
  }
  return shapes_.try_emplace(key, v.shape.begin(), v.shape.end()).first->second;
}

Work command_work(const Program& p, const Command& c, const RankCtx& ctx, ShapeCache* cache, bool* sized_by_rank) {
  Work w;
  Shape resolved;
  if (sized_by_rank) *sized_by_rank = false;
  // The view's shape; a reference stays valid until the next call.
  auto S = [&](const Ref& r) -> std::span<const int64_t> {
    if (sized_by_rank && size_depends_on_rank(r)) *sized_by_rank = true;
    if (cache) return cache->shape(p, r, ctx);
    resolved = resolve(p, r, ctx).shape;
    return std::span<const int64_t>(resolved.begin(), resolved.end());
  };
  auto elem = [&](const Ref& r) { return static_cast<int64_t>(dtype_size(ref_dtype(p, r))); };
  auto B = [&](const Ref& r) { return count(S(r)) * elem(r); };
  auto sum_bytes = [&](const std::vector<Ref>& refs) {
    for (const auto& r : refs) w.bytes += B(r);
  };
  std::visit(Overload{
      [&](const Memzero& x) { w.bytes = B(x.dst); },
      [&](const Memset& x) { w.bytes = B(x.dst); },
      [&](const Copy& x) { w.bytes = B(x.src) + B(x.dst); },
      [&](const Transpose& x) { w.bytes = B(x.src) + B(x.dst); },  // priced as a copy
      [&](const Gemm& g) {
        const std::span<const int64_t> a = S(g.a);
        const size_t r = a.size();
        const int64_t k = g.transpose_a ? a[r - 2] : a[r - 1];
        const int64_t a_bytes = count(a) * elem(g.a);
        const int64_t c_count = count(S(g.c));
        w.flops = 2.0 * static_cast<double>(c_count) * static_cast<double>(k);
        w.bytes = a_bytes + B(g.b) + c_count * elem(g.c) * (g.beta != 0 ? 2 : 1);
        const std::span<const int64_t> cs = S(g.c);
        w.gemm_m = cs[cs.size() - 2];
        w.gemm_n = cs[cs.size() - 1];
        w.gemm_k = k;
        w.gemm_batch = cs.size() == 3 ? cs[0] : 1;
      },
      [&](const Map& m) {
        const int64_t out = count(S(m.out));
        w.bytes = out * elem(m.out);
        for (const auto& [k, r] : m.in) w.bytes += B(r);
        w.flops = static_cast<double>(out) * static_cast<double>(expr_ops(*m.expr));
      },
      [&](const Reduce& x) {
        const int64_t in = count(S(x.in));
        w.bytes = in * elem(x.in) + B(x.out);
        w.flops = static_cast<double>(in);
      },
      [&](const Kernel& x) {
        sum_bytes(x.reads);
        sum_bytes(x.writes);
      },
      [&](const PtxKernel& x) { sum_bytes(x.args); },
      [&](const CustomCall& x) {
        sum_bytes(x.operands);
        sum_bytes(x.results);
        if (!x.operands.empty()) {  // Cholesky: n^3 / 3 per matrix
          const std::span<const int64_t> a = S(x.operands[0]);
          const double n = static_cast<double>(a.back());
          w.flops = n * n * n / 3.0 * static_cast<double>(count(a)) / (n * n > 0 ? n * n : 1);
        }
      },
      // The payload: the larger of src and dst (the gathered or unreduced array).
      [&](const CollectiveSpec auto& x) { w.bytes = std::max(B(x.src), B(x.dst)); },
      // A group's members are priced one by one; the rest is structure.
      [](const OfFamily<OpFamily::group, OpFamily::stream, OpFamily::control, OpFamily::call> auto&) {},
  }, c.spec);
  if (c.cost) {
    if (c.cost->bytes) w.bytes = static_cast<int64_t>(*c.cost->bytes);
    if (c.cost->flops) w.flops = *c.cost->flops;
  }
  return w;
}

}  // namespace thunky
