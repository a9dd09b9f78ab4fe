#include "core/accounting.h"

namespace thunky {

namespace {
int64_t view_bytes(const Program& p, const View& v) {
  return v.count() * static_cast<int64_t>(dtype_size(p.buffers[v.buffer].dtype));
}
int64_t expr_ops(const Expr& e) {
  int64_t n = (e.kind == Expr::Kind::unary || e.kind == Expr::Kind::binary || e.kind == Expr::Kind::call) ? 1 : 0;
  for (const auto& a : e.args) n += expr_ops(*a);
  return n;
}
}  // namespace

Work command_work(const Program& p, const Command& c, const RankCtx& ctx) {
  Work w;
  auto B = [&](const Ref& r) { return view_bytes(p, resolve(p, r, ctx)); };
  switch (c.op) {
    case Op::memzero:
    case Op::memset: w.bytes = B(*c.dst); break;
    case Op::copy: w.bytes = B(*c.src) + B(*c.dst); break;
    case Op::gemm: {
      View a = resolve(p, *c.a, ctx), cv = resolve(p, *c.c, ctx);
      const size_t r = a.shape.size();
      const int64_t k = c.transpose_a ? a.shape[r - 2] : a.shape[r - 1];
      w.flops = 2.0 * static_cast<double>(cv.count()) * static_cast<double>(k);
      w.bytes = view_bytes(p, a) + B(*c.b) + view_bytes(p, cv) * (c.beta != 0 ? 2 : 1);
      break;
    }
    case Op::map: {
      View out = resolve(p, *c.out, ctx);
      w.bytes = view_bytes(p, out);
      for (const auto& [k, r] : c.in) w.bytes += B(r);
      w.flops = static_cast<double>(out.count()) * static_cast<double>(expr_ops(*c.expr));
      break;
    }
    case Op::reduce: {
      View in = resolve(p, *c.src, ctx);
      w.bytes = view_bytes(p, in) + B(*c.out);
      w.flops = static_cast<double>(in.count());
      break;
    }
    case Op::kernel:
    case Op::ptx_kernel:
    case Op::custom_call:
      for (const auto& r : c.refs) w.bytes += B(r);
      for (const auto& r : c.refs2) w.bytes += B(r);
      if (c.op == Op::custom_call && !c.refs.empty()) {
        View a = resolve(p, c.refs[0], ctx);
        const double n = static_cast<double>(a.shape.back());
        w.flops = n * n * n / 3.0 * static_cast<double>(a.count()) / (n * n > 0 ? n * n : 1);
      }
      break;
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
    case Op::collective_permute:
      // The payload: the larger of src and dst (the gathered or unreduced array).
      w.bytes = std::max(B(*c.src), B(*c.dst));
      break;
    default: break;
  }
  if (c.cost) {
    if (c.cost->bytes) w.bytes = static_cast<int64_t>(*c.cost->bytes);
    if (c.cost->flops) w.flops = *c.cost->flops;
  }
  return w;
}

}  // namespace thunky
