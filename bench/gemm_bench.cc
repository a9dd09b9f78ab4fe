// The CPU backend's GEMM against Eigen called directly on the same shapes.
// Target: within 1.2x (no hidden copies or conversions on f32).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <vector>

#include "exec/cpu/kernels.h"

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void BM_EigenDirect(benchmark::State& state) {
  const int64_t n = state.range(0);
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["flop/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_ThunkyGemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  auto t = [&](RowMat& m) { return thunky::cpu::Tensor{reinterpret_cast<uint8_t*>(m.data()), thunky::DType::f32, {n, n}}; };
  for (auto _ : state) {
    thunky::cpu::gemm(t(a), t(b), t(c), false, false, 1.0, 0.0);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["flop/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_ThunkyGemmBf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<uint16_t> a(n * n, 0x3f80), b(n * n, 0x3f80), c(n * n);
  auto t = [&](std::vector<uint16_t>& m) { return thunky::cpu::Tensor{reinterpret_cast<uint8_t*>(m.data()), thunky::DType::bf16, {n, n}}; };
  for (auto _ : state) {
    thunky::cpu::gemm(t(a), t(b), t(c), false, false, 1.0, 0.0);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["flop/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_EigenDirect)->Arg(64)->Arg(256)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ThunkyGemm)->Arg(64)->Arg(256)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ThunkyGemmBf16)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
