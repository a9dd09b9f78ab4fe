// GEMM pricing by shape fitted to measured GEMMs (thunky-calibrate exec
// --backend cuda): times made by known machines, the figures found again.
#include "sim/gemm_fit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/engine.h"

namespace thunky::sim {
namespace {

// The GEMMs thunky-calibrate exec measures on a GPU, timed as `gpu` prices them.
std::vector<GemmRow> shapes_timed_on(const Machine& gpu, DType t) {
  std::vector<GemmRow> rows;
  for (const auto& [m, n, k] : gemm_calibration_shapes()) {
    GemmRow r{t, m, n, k, 0};
    r.seconds = gemm_row_seconds(gpu, r);
    rows.push_back(r);
  }
  return rows;
}

TEST(GemmFit, FindsTheTileAndPeakOfMeasuredGemms) {
  // GEMMs timed on a GPU that prices them as h200-8gpu does (132 SMs,
  // 128x256x64 tiles, K overhead 128, bf16 at 0.84 of 989 TFLOP/s) and as
  // an Ampere part might (108 SMs, 256x128x32 tiles, K overhead 64, 250
  // TFLOP/s f16, 19.5 f32): the fit finds each one's figures, and meets
  // the times to 0.1%.
  Machine h200 = load_machine("h200-8gpu", std::string(THUNKY_SOURCE_DIR) + "/models").value();
  Machine ampere = h200;
  ampere.sm_count = 108;
  ampere.gemm_tile_m = 256, ampere.gemm_tile_n = 128, ampere.gemm_tile_k = 32, ampere.gemm_k_overhead = 64;
  ampere.peak_flops = {{"f16", 2.5e14}, {"f32", 1.95e13}};
  ampere.gemm_efficiency = 1;
  ampere.hbm_bandwidth = 2.0e12;
  struct Case {
    const Machine& gpu;
    std::vector<DType> dtypes;
    int64_t tile[3], k_overhead;
  } cases[] = {{h200, {DType::bf16}, {128, 256, 64}, 128}, {ampere, {DType::f16, DType::f32}, {256, 128, 32}, 64}};
  for (const Case& c : cases) {
    std::vector<GemmRow> rows;
    for (DType t : c.dtypes)
      for (const GemmRow& r : shapes_timed_on(c.gpu, t)) rows.push_back(r);
    const GemmFit fit = fit_gemm_shapes(rows, c.gpu.sm_count, c.gpu.hbm_bandwidth, c.gpu.launch_overhead_s);
    EXPECT_EQ(fit.tile_m, c.tile[0]) << c.gpu.sm_count;
    EXPECT_EQ(fit.tile_n, c.tile[1]) << c.gpu.sm_count;
    EXPECT_EQ(fit.tile_k, c.tile[2]) << c.gpu.sm_count;
    EXPECT_EQ(fit.k_overhead, c.k_overhead) << c.gpu.sm_count;
    for (DType t : c.dtypes) {
      const std::string name(dtype_name(t));
      // The fitted peak is what GEMMs reach within tiles: peak x efficiency.
      EXPECT_NEAR(fit.peak_flops.at(name), c.gpu.peak(t) * c.gpu.gemm_efficiency, 0.002 * c.gpu.peak(t)) << name;
    }
    EXPECT_LT(fit.mean_abs_error, 0.001);
  }
}

TEST(GemmFit, OnNoisyTimesKeepsTheShapeAndSaysHowClose) {
  // The h200 GEMMs of the test above, each measured 3% fast or slow in
  // turn: the fit keeps the tile and the peak within 5%, and its error
  // says 3%.
  Machine h200 = load_machine("h200-8gpu", std::string(THUNKY_SOURCE_DIR) + "/models").value();
  std::vector<GemmRow> rows = shapes_timed_on(h200, DType::bf16);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].seconds *= i % 2 ? 1.03 : 0.97;
  const GemmFit fit = fit_gemm_shapes(rows, 132, h200.hbm_bandwidth, h200.launch_overhead_s);
  EXPECT_EQ(fit.tile_m, 128);
  EXPECT_EQ(fit.tile_n, 256);
  EXPECT_NEAR(fit.mean_abs_error, 0.03, 0.005);
  EXPECT_NEAR(fit.peak_flops.at("bf16"), 0.84 * 9.89e14, 0.05 * 0.84 * 9.89e14);
}

TEST(GemmFit, TheTileComesFromTheTensorCoreGemms) {
  // bf16 GEMMs timed as h200-8gpu prices them, f32 ones as a GPU whose f32
  // kernels take 128x128x32 tiles with no K overhead at 60 TFLOP/s: the
  // tile and K overhead are bf16's (128x256x64, 128).
  Machine h200 = load_machine("h200-8gpu", std::string(THUNKY_SOURCE_DIR) + "/models").value();
  Machine f32_kernels = h200;
  f32_kernels.gemm_tile_m = 128, f32_kernels.gemm_tile_n = 128, f32_kernels.gemm_tile_k = 32, f32_kernels.gemm_k_overhead = 0;
  f32_kernels.peak_flops["f32"] = 6e13;
  f32_kernels.gemm_efficiency = 1;
  std::vector<GemmRow> rows = shapes_timed_on(h200, DType::bf16);
  for (const GemmRow& r : shapes_timed_on(f32_kernels, DType::f32)) rows.push_back(r);
  const GemmFit fit = fit_gemm_shapes(rows, 132, h200.hbm_bandwidth, h200.launch_overhead_s);
  EXPECT_EQ(fit.tile_m, 128);
  EXPECT_EQ(fit.tile_n, 256);
  EXPECT_EQ(fit.tile_k, 64);
  EXPECT_EQ(fit.k_overhead, 128);
  EXPECT_NEAR(fit.peak_flops.at("bf16"), 0.84 * 9.89e14, 0.002 * 9.89e14);
  Machine fitted = h200;
  fitted.gemm_efficiency = 1;
  fitted.peak_flops["bf16"] = fit.peak_flops.at("bf16");
  fitted.peak_flops["f32"] = fit.peak_flops.at("f32");
  // One tile cannot price both kinds exactly: f32's peak is the one whose
  // prices meet its rows with the least mean relative error (2% either way
  // is worse), and a small f32 GEMM cut into bf16's tiles comes out slow.
  auto f32_error = [&](double scale) {
    Machine m = fitted;
    m.peak_flops["f32"] *= scale;
    double sum = 0;
    const auto f32_rows = shapes_timed_on(f32_kernels, DType::f32);
    for (const GemmRow& r : f32_rows) sum += std::abs(gemm_row_seconds(m, r) / r.seconds - 1);
    return sum / static_cast<double>(f32_rows.size());
  };
  EXPECT_LT(f32_error(1.0), f32_error(0.98));
  EXPECT_LT(f32_error(1.0), f32_error(1.02));
  // 640x640x8192 in f32's own 64x64 half tiles: 100 tiles in one wave of
  // 132, 2 x 132 x 4096 x 8192 / 0.75 flops at 60 TFLOP/s, plus 3 us of
  // launch = 199.8 us. Priced with bf16's 64x128 half tiles (50, one
  // wave) and K 8192 + 128: 2 x 132 x 8192 x 8320 / 0.75 flops at the
  // fitted f32 peak (about 73 TFLOP/s), plus 3 us: about 331 us, 66% slow.
  GemmRow small{DType::f32, 640, 640, 8192, 0};
  EXPECT_NEAR(gemm_row_seconds(f32_kernels, small), 2.0 * 132 * 4096 * 8192 / 0.75 / 6e13 + 3e-6, 1e-9);
  EXPECT_NEAR(gemm_row_seconds(fitted, small), 2.0 * 132 * 8192 * 8320 / 0.75 / fit.peak_flops.at("f32") + 3e-6, 1e-9);
}

}  // namespace
}  // namespace thunky::sim
