// The cuda backend: the leaf commands.
#include "exec/cuda/cuda_backend.h"

#include "core/broadcast.h"
#include "core/op_rules.h"

#include <algorithm>

namespace thunky::cuda {

void CudaBackend::compute(RankState& s, const Command& c, const StreamId& cur) {
  StreamState& ss = s.streams.at(cur);
  cudaStream_t st = ss.stream;
  auto R = [&](const Ref& r) { return resolve(*p_, r, s.ctx); };
  std::visit(Overload{
      [&](const Memzero& x) {
        const View d = R(x.dst);
        if (bytes(d)) THUNKY_CUDA_CHECK(cudaMemsetAsync(ptr(s, d), 0, bytes(d), st));
      },
      [&](const Memset& x) {
        const View d = R(x.dst);
        fill(s, d, x.bits ? *x.bits : fill_pattern(d.dtype, x.value), st);
      },
      [&](const Copy& x) {
        const View a = R(x.src), d = R(x.dst);
        const size_t n = bytes(d);
        if (!n || ptr(s, a) == ptr(s, d)) return;
        if (overlap(ptr(s, a), n, ptr(s, d), n)) {  // as memmove
          uint8_t* tmp = ss.temp.get(n, "a staged copy", s.device);
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp, ptr(s, a), n, cudaMemcpyDeviceToDevice, st));
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, d), tmp, n, cudaMemcpyDeviceToDevice, st));
        } else {
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, d), ptr(s, a), n, cudaMemcpyDeviceToDevice, st));
        }
      },
      [&](const thunky::Gemm&) { gemm(s, c, ss); },
      [&](const Map& x) { map(s, c, x, ss); },
      [&](const Reduce& x) {
        const View in = R(x.in), out = R(x.out);
        if (!out.count()) return;
        std::vector<bool> reduced(in.shape.size(), false);
        for (auto a : x.axes) reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(in.shape.size()) : a)] = true;
        const uint8_t* src = ptr(s, in);
        if (overlap(src, bytes(in), ptr(s, out), bytes(out))) {
          uint8_t* tmp = ss.temp.get(bytes(in), "a staged reduce input", s.device);
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes(in), cudaMemcpyDeviceToDevice, st));
          src = tmp;
        }
        launch(s.kernels.at(&c), out.count(), reduce_params(src, ptr(s, out), out.count(), in.shape, reduced), st, sms(s));
      },
      [&](const Kernel&) { stand_in(s, c, st); },
      [&](const PtxKernel& x) {
        const PtxLaunch& l = *x.launch;
        std::vector<void*> values;
        for (const auto& r : x.args) values.push_back(ptr(s, R(r)));
        std::vector<void*> args;
        for (auto& v : values) args.push_back(&v);
        auto dim = [](const std::vector<int64_t>& d) {
          return dim3(static_cast<unsigned>(d.size() > 0 ? d[0] : 1), static_cast<unsigned>(d.size() > 1 ? d[1] : 1), static_cast<unsigned>(d.size() > 2 ? d[2] : 1));
        };
        THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(s.kernels.at(&c)), dim(l.grid), dim(l.block), args.data(), static_cast<size_t>(l.shmem_bytes), st));
      },
      [&](const CustomCall&) { cholesky(s, c, ss); },
      [&](const Transpose& x) {
        const View in = R(x.src), out = R(x.dst);
        if (!out.count()) return;
        launch(s.kernels.at(&c), out.count(), transpose_params(ptr(s, in), ptr(s, out), in.shape, x.perm), st, sms(s));
      },
      [](const NotCompute auto&) {},  // issued by issue_block
  }, c.spec);
}

void CudaBackend::fill(RankState& s, const View& d, uint64_t pattern, cudaStream_t st) {
  const size_t n = bytes(d);
  if (!n) return;
  const size_t es = dtype_size(d.dtype);
  bool uniform = true;  // every byte of the pattern alike: one memset
  for (size_t i = 1; i < es; ++i) uniform &= ((pattern >> (8 * i)) & 0xff) == (pattern & 0xff);
  if (uniform) {
    THUNKY_CUDA_CHECK(cudaMemsetAsync(ptr(s, d), static_cast<int>(pattern & 0xff), n, st));
    return;
  }
  launch(kernels_->get(support_, "thunky_fill"), d.count(), pack_params({ptr_bits(ptr(s, d)), static_cast<uint64_t>(d.count()), es, pattern}), st, sms(s));
}

void CudaBackend::map(RankState& s, const Command& c, const Map& m, StreamState& ss) {
  const View out = resolve(*p_, m.out, s.ctx);
  if (!out.count()) return;
  uint8_t* o = ptr(s, out);
  const size_t ob = bytes(out);
  std::vector<const void*> ins;
  // Each input that overlaps out other than element for element is read
  // before any write, as on the cpu backend: staged aside, one slot per
  // input (two inputs may start at one address with different sizes). An
  // input that broadcasts to out's shape is staged expanded to it.
  struct Staged {
    size_t bytes = 0;
    std::optional<std::vector<int64_t>> broadcast;  // strides into the input
    size_t element = 0;
  };
  std::vector<Staged> staged_as;
  size_t staged = 0;
  for (const auto& [name, r] : m.in) {
    const View v = resolve(*p_, r, s.ctx);
    const uint8_t* p = ptr(s, v);
    Staged st;
    if (v.count() != out.count() && v.count() != 1) {
      st.broadcast = broadcast_strides(v.shape, out.shape);
      st.element = dtype_size(v.dtype);
      st.bytes = static_cast<size_t>(out.count()) * st.element;
    } else {
      const bool same = p == o && v.count() == out.count() && v.dtype == out.dtype;
      if (overlap(p, bytes(v), o, ob) && !same) st.bytes = bytes(v);
    }
    staged += (st.bytes + 255) & ~size_t{255};
    staged_as.push_back(std::move(st));
    ins.push_back(p);
  }
  if (staged) {
    uint8_t* tmp = ss.temp.get(staged, "staged map inputs", s.device);
    size_t off = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      const Staged& st = staged_as[i];
      if (!st.bytes) continue;
      if (st.broadcast)
        launch(kernels_->get(transpose_kernel(st.element)), out.count(), strided_copy_params(ins[i], tmp + off, out.shape, *st.broadcast), ss.stream, sms(s));
      else
        THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp + off, ins[i], st.bytes, cudaMemcpyDeviceToDevice, ss.stream));
      ins[i] = tmp + off;
      off += (st.bytes + 255) & ~size_t{255};
    }
  }
  launch(s.kernels.at(&c), out.count(), map_params(ins, o, out.count(), s.axis_values), ss.stream, sms(s));
}

void CudaBackend::gemm(RankState& s, const Command& c, StreamState& ss) {
  const thunky::Gemm& x = c.as<thunky::Gemm>();
  const View av = resolve(*p_, x.a, s.ctx), bv = resolve(*p_, x.b, s.ctx), cv = resolve(*p_, x.c, s.ctx);
  auto rc = [](const View& v) { return std::pair{v.shape[v.shape.size() - 2], v.shape[v.shape.size() - 1]}; };
  auto [ar, ac] = rc(av);
  auto [br, bc] = rc(bv);
  auto [cr, cc] = rc(cv);
  GemmShape g{cv.dtype, av.dtype, cv.shape.size() == 3 ? cv.shape[0] : 1, cr, cc, x.transpose_a ? ar : ac, x.transpose_a, x.transpose_b,
              ar, ac, br, bc, av.shape.size() == 3, bv.shape.size() == 3};
  if (!cv.count()) return;
  if (g.k == 0) {  // no products: beta · c, as the cpu backend
    scale_by_beta(s, c, cv, ss.stream);
    return;
  }
  const DType acc = gemm_accumulator(av.dtype);
  const bool direct = gemm_direct(av, bv, cv);
  if (!direct) g.dtype = g.in = acc;
  // Operands (widened where needed) and where the product goes: a
  // temporary when c overlaps a or b, or when c is narrowed afterwards.
  size_t off = 0;
  auto carve = [&](size_t n) {
    const size_t at = off;
    off += (n + 255) & ~size_t{255};
    return at;
  };
  const size_t ie = dtype_size(g.in), oe = dtype_size(g.dtype);  // operand and product element sizes
  const bool aliased = overlap(ptr(s, cv), bytes(cv), ptr(s, av), bytes(av)) || overlap(ptr(s, cv), bytes(cv), ptr(s, bv), bytes(bv));
  const size_t a_at = direct ? 0 : carve(av.count() * ie), b_at = direct ? 0 : carve(bv.count() * ie);
  const bool c_temp = aliased || !direct;
  const size_t c_at = c_temp ? carve(cv.count() * oe) : 0;
  uint8_t* tmp = off ? ss.temp.get(off, "GEMM temporaries", s.device) : nullptr;
  const uint8_t* pa = ptr(s, av);
  const uint8_t* pb = ptr(s, bv);
  uint8_t* pc = c_temp ? tmp + c_at : ptr(s, cv);
  if (!direct) {
    convert(s, ptr(s, av), av.dtype, tmp + a_at, acc, av.count(), ss.stream);
    convert(s, ptr(s, bv), bv.dtype, tmp + b_at, acc, bv.count(), ss.stream);
    pa = tmp + a_at;
    pb = tmp + b_at;
  }
  if (c_temp && x.beta != 0) {
    if (direct) THUNKY_CUDA_CHECK(cudaMemcpyAsync(pc, ptr(s, cv), bytes(cv), cudaMemcpyDeviceToDevice, ss.stream));
    else convert(s, ptr(s, cv), cv.dtype, pc, acc, cv.count(), ss.stream);
  }
  void* work = ss.workspace.get(Gemm::kWorkspace, "the cuBLASLt workspace", s.device);
  g.align = g.batch > 1 ? common_alignment({pa, pb, pc, pa + ar * ac * ie, pb + br * bc * ie, pc + cr * cc * oe}) : common_alignment({pa, pb, pc});
  if (g.batch > 1 && !(g.a_batched && g.b_batched)) {
    // A 2-D operand broadcast over the batch: one product per matrix.
    GemmShape one = g;
    one.batch = 1;
    one.align = g.align;
    for (int64_t i = 0; i < g.batch; ++i)
      gemms_.at(s.device)->run(one, pa + (g.a_batched ? i * ar * ac * ie : 0), pb + (g.b_batched ? i * br * bc * ie : 0), pc + i * cr * cc * oe, x.alpha,
                               x.beta, work, Gemm::kWorkspace, ss.stream);
  } else {
    gemms_.at(s.device)->run(g, pa, pb, pc, x.alpha, x.beta, work, Gemm::kWorkspace, ss.stream);
  }
  if (c_temp) {
    if (direct) THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, cv), pc, bytes(cv), cudaMemcpyDeviceToDevice, ss.stream));
    else convert(s, pc, acc, ptr(s, cv), cv.dtype, cv.count(), ss.stream);
  }
}

// A GEMM with K = 0 adds no products: c = beta · c (0 when beta is 0), in
// the accumulation type and rounded once, as the cpu backend computes it.
void CudaBackend::scale_by_beta(RankState& s, const Command& c, const View& cv, cudaStream_t st) {
  const thunky::Gemm& x = c.as<thunky::Gemm>();
  if (x.beta == 0) {
    THUNKY_CUDA_CHECK(cudaMemsetAsync(ptr(s, cv), 0, bytes(cv), st));
    return;
  }
  const DType acc = gemm_accumulator(resolve(*p_, x.a, s.ctx).dtype);
  launch(kernels_->get(beta_source(cv.dtype, acc, x.beta)), cv.count(), map_params({ptr(s, cv)}, ptr(s, cv), cv.count(), {}), st, sms(s));
}

void CudaBackend::convert(RankState& s, const void* from, DType ft, void* to, DType tt, int64_t n, cudaStream_t st) {
  if (ft == tt) {
    if (from != to) THUNKY_CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(n) * dtype_size(ft), cudaMemcpyDeviceToDevice, st));
    return;
  }
  launch(kernels_->get(convert_source(ft, tt)), n, map_params({from}, to, n, {}), st, sms(s));
}

// cuSOLVER potrf on each matrix of the batch, in place on the result
// (the operand copied there first); `lower` in cuSOLVER's column-major
// sense, as the format defines it. info gets cuSOLVER's devInfo.
void CudaBackend::cholesky(RankState& s, const Command& c, StreamState& ss) {
  const CustomCall& x = c.as<CustomCall>();
  const bool lower = x.spec->backend_config.at("lower").get<bool>();
  const View a = resolve(*p_, x.operands[0], s.ctx), r = resolve(*p_, x.results[0], s.ctx), info = resolve(*p_, x.results[1], s.ctx);
  const int n = static_cast<int>(a.shape.back());
  if (n == 0) return;
  const int64_t batch = a.count() / (int64_t{n} * n);
  if (ptr(s, a) != ptr(s, r)) THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, r), ptr(s, a), bytes(a), cudaMemcpyDeviceToDevice, ss.stream));
  THUNKY_CUSOLVER_CHECK(cusolverDnSetStream(s.solver, ss.stream));
  const cublasFillMode_t uplo = lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
  const bool f64 = a.dtype == DType::f64;
  int lwork = 0;
  if (f64) THUNKY_CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(s.solver, uplo, n, reinterpret_cast<double*>(ptr(s, r)), n, &lwork));
  else THUNKY_CUSOLVER_CHECK(cusolverDnSpotrf_bufferSize(s.solver, uplo, n, reinterpret_cast<float*>(ptr(s, r)), n, &lwork));
  const size_t es = f64 ? 8 : 4;
  uint8_t* work = ss.solver_work.get(static_cast<size_t>(std::max(lwork, 1)) * es, "the cuSOLVER workspace", s.device);
  for (int64_t k = 0; k < batch; ++k) {
    uint8_t* m = ptr(s, r) + k * n * n * es;
    int* dev_info = reinterpret_cast<int*>(ptr(s, info)) + k;
    if (f64) THUNKY_CUSOLVER_CHECK(cusolverDnDpotrf(s.solver, uplo, n, reinterpret_cast<double*>(m), n, reinterpret_cast<double*>(work), lwork, dev_info));
    else THUNKY_CUSOLVER_CHECK(cusolverDnSpotrf(s.solver, uplo, n, reinterpret_cast<float*>(m), n, reinterpret_cast<float*>(work), lwork, dev_info));
  }
}

// The `kernel` stand-in: its reads and writes touched, then the stream
// held for cost.seconds (a `cost` in flops or bytes needs a machine
// model, which the executor does not price: only the traffic runs).
void CudaBackend::stand_in(RankState& s, const Command& c, cudaStream_t st) {
  auto params = [](const void* src, int64_t sb, void* dst, int64_t db) {
    return pack_params({ptr_bits(src), static_cast<uint64_t>(sb), ptr_bits(dst), static_cast<uint64_t>(db)});
  };
  cudaKernel_t touch = kernels_->get(support_, "thunky_touch");
  for (const auto& r : c.as<Kernel>().reads) {
    const View v = resolve(*p_, r, s.ctx);
    if (bytes(v)) launch(touch, static_cast<int64_t>(bytes(v)), params(ptr(s, v), static_cast<int64_t>(bytes(v)), nullptr, 0), st, sms(s));
  }
  for (const auto& r : c.as<Kernel>().writes) {
    const View v = resolve(*p_, r, s.ctx);
    if (bytes(v)) launch(touch, static_cast<int64_t>(bytes(v)), params(nullptr, 0, ptr(s, v), static_cast<int64_t>(bytes(v))), st, sms(s));
  }
  if (c.cost && c.cost->seconds && *c.cost->seconds > 0) {
    std::vector<uint8_t> b = pack_params({static_cast<uint64_t>(std::min(*c.cost->seconds, 3600.0) * 1e9)});
    void* args[] = {b.data()};
    THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernels_->get(support_, "thunky_spin")), dim3(static_cast<unsigned>(sms(s))), dim3(32), args, 0, st));
  }
}

}  // namespace thunky::cuda
