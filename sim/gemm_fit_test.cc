// GEMM pricing by shape fitted to measured GEMMs (thunky-calibrate exec
// --backend cuda): times made by known machines, the figures found again.
#include "sim/gemm_fit.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace thunky::sim
