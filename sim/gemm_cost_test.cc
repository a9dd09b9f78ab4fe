// GEMMs priced by shape: tile and wave quantisation on the GPU models.
#include <gtest/gtest.h>

#include "core/accounting.h"
#include "sim/engine.h"
#include "sim/gemm_fit.h"
#include "tests/test_util.h"

namespace thunky::sim {
namespace {

// Seconds of one bf16 GEMM [m, k] x [k, n] on `machine`, as thunky-sim prices it.
double gemm_seconds(const std::string& machine, int64_t m, int64_t n, int64_t k) {
  const std::string s = R"({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [)" + std::to_string(m) + ", " + std::to_string(k) + R"(], "dtype": "bf16", "role": "input", "init": {"kind": "zeros"}},
      "b": {"shape": [)" + std::to_string(k) + ", " + std::to_string(n) + R"(], "dtype": "bf16", "role": "input", "init": {"kind": "zeros"}},
      "c": {"shape": [)" + std::to_string(m) + ", " + std::to_string(n) + R"(], "dtype": "bf16", "role": "output"}},
    "program": [{"op": "gemm", "a": "a", "b": "b", "c": "c"}]})";
  Program p = testing::load_ok(s);
  const Machine mach = load_machine(machine, std::string(THUNKY_SOURCE_DIR) + "/models").value();
  return compute_seconds(p, mach, p.program[0], command_work(p, p.program[0], rank_ctx(p.mesh, 0)));
}

TEST(GemmByShape, LargeSquareRunsAtTheMeasuredRate) {
  // 8192^3 on h200-8gpu: 64 x 32 = 2048 tiles of 128x256 in 16 waves of 132
  // (2112 tile slots), K = 8192 + 128: 2 x 2112 x 32768 x 8320 = 1.1515e12
  // flops at 0.84 x 989 TFLOP/s = 1.386 ms, plus 3 us of launch: 791 TFLOP/s
  // of real work (measured on an H200: 788).
  const double t = gemm_seconds("h200-8gpu", 8192, 8192, 8192);
  EXPECT_NEAR(t, 2.0 * 2112 * 32768 * 8320 / (0.84 * 9.89e14) + 3e-6, 1e-9);
  EXPECT_NEAR(2.0 * 8192.0 * 8192 * 8192 / t / 1e12, 788, 0.02 * 788);
}

TEST(GemmByShape, SmallAndSkinnyProblemsRunBelowPeak) {
  // 1024^3: 8 x 4 = 32 tiles of 128x256 fill a quarter of 132 SMs (1 wave);
  // 128x128 tiles (64, 1 wave, 0.9 rate) and 64x128 (128, 1 wave, 0.75)
  // cost 2 x 132 x 16384 x 1152 / 0.9 = 5.54e9 and 2 x 132 x 8192 x 1152 / 0.75
  // = 3.32e9 flops: the smallest tile wins, 2.147e9 / 3.32e9 = 65% of the
  // rate within tiles.
  const double t = gemm_seconds("h100-8gpu", 1024, 1024, 1024);
  EXPECT_NEAR(t, 2.0 * 132 * 8192 * 1152 / 0.75 / (0.84 * 9.89e14) + 3e-6, 1e-9);
  const double big = 2.0 * 8192.0 * 8192 * 8192 / gemm_seconds("h100-8gpu", 8192, 8192, 8192);
  const double small = 2.0 * 1024.0 * 1024 * 1024 / t;
  EXPECT_LT(small, 0.6 * big);  // well below the large GEMM's rate
  // Skinny (128 x 8192 x 8192): bound by reading B (128 MiB) from HBM:
  // (2 MiB + 128 MiB + 2 MiB) / 3.35e12 + 3 us.
  const double skinny = gemm_seconds("h100-8gpu", 128, 8192, 8192);
  EXPECT_NEAR(skinny, (128.0 * 8192 * 2 + 8192.0 * 8192 * 2 + 128.0 * 8192 * 2) / 3.35e12 + 3e-6, 1e-9);
}

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

TEST(GemmByShape, CalibrationFindsTheTileAndPeakOfMeasuredGemms) {
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

TEST(GemmByShape, CalibrationOnNoisyTimesKeepsTheShapeAndSaysHowClose) {
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

TEST(GemmByShape, ModelsWithoutSmCountKeepTheEfficiencyFormula) {
  // tpu-v5e gives no sm_count: flops / (peak x gemm_efficiency).
  const Machine m = load_machine("tpu-v5e", std::string(THUNKY_SOURCE_DIR) + "/models").value();
  EXPECT_EQ(m.sm_count, 0);
}

}  // namespace
}  // namespace thunky::sim
