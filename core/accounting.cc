#include "core/accounting.h"

namespace thunky {

namespace {
int64_t count(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}
int64_t expr_ops(const Expr& e) {
  int64_t n = (e.kind == Expr::Kind::unary || e.kind == Expr::Kind::binary || e.kind == Expr::Kind::call) ? 1 : 0;
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
  auto elem = [&](const Ref& r) { return static_cast<int64_t>(dtype_size(p.buffers[r.buffer].dtype)); };
  auto B = [&](const Ref& r) { return count(S(r)) * elem(r); };
  switch (c.op) {
    case Op::memzero:
    case Op::memset: w.bytes = B(*c.dst); break;
    case Op::copy:
    case Op::transpose: w.bytes = B(*c.src) + B(*c.dst); break;  // priced as a copy
    case Op::gemm: {
      const std::span<const int64_t> a = S(*c.a);
      const size_t r = a.size();
      const int64_t k = c.transpose_a ? a[r - 2] : a[r - 1];
      const int64_t a_bytes = count(a) * elem(*c.a);
      const int64_t c_count = count(S(*c.c));
      w.flops = 2.0 * static_cast<double>(c_count) * static_cast<double>(k);
      w.bytes = a_bytes + B(*c.b) + c_count * elem(*c.c) * (c.beta != 0 ? 2 : 1);
      const std::span<const int64_t> cs = S(*c.c);
      w.gemm_m = cs[cs.size() - 2];
      w.gemm_n = cs[cs.size() - 1];
      w.gemm_k = k;
      w.gemm_batch = cs.size() == 3 ? cs[0] : 1;
      break;
    }
    case Op::map: {
      const int64_t out = count(S(*c.out));
      w.bytes = out * elem(*c.out);
      for (const auto& [k, r] : c.in) w.bytes += B(r);
      w.flops = static_cast<double>(out) * static_cast<double>(expr_ops(*c.expr));
      break;
    }
    case Op::reduce: {
      const int64_t in = count(S(*c.src));
      w.bytes = in * elem(*c.src) + B(*c.out);
      w.flops = static_cast<double>(in);
      break;
    }
    case Op::kernel:
    case Op::ptx_kernel:
    case Op::custom_call:
      for (const auto& r : c.refs) w.bytes += B(r);
      for (const auto& r : c.refs2) w.bytes += B(r);
      if (c.op == Op::custom_call && !c.refs.empty()) {
        const std::span<const int64_t> a = S(c.refs[0]);
        const double n = static_cast<double>(a.back());
        w.flops = n * n * n / 3.0 * static_cast<double>(count(a)) / (n * n > 0 ? n * n : 1);
      }
      break;
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
    case Op::collective_permute:
      // The payload: the larger of src and dst (the gathered or unreduced array).
      w.bytes = std::max(B(collective_of(c).src), B(collective_of(c).dst));
      break;
    case Op::collective_group:  // its members are priced one by one
    case Op::async_start:
    case Op::async_done:
    case Op::cond:
    case Op::switch_:
    case Op::while_:
    case Op::call: break;
  }
  if (c.cost) {
    if (c.cost->bytes) w.bytes = static_cast<int64_t>(*c.cost->bytes);
    if (c.cost->flops) w.flops = *c.cost->flops;
  }
  return w;
}

}  // namespace thunky
