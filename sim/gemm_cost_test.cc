// GEMMs priced by shape: tile and wave quantisation on the GPU models.
#include <gtest/gtest.h>

#include "core/accounting.h"
#include "sim/engine.h"
#include "tests/test_util.h"

namespace thunky::sim {
namespace {

// Seconds of the one command of schedule `s` on `machine`, as thunky-sim prices it.
double command_seconds(const std::string& machine, const std::string& s) {
  Program p = testing::load_ok(s);
  const Machine mach = load_machine(machine, std::string(THUNKY_SOURCE_DIR) + "/models").value();
  return compute_seconds(p, mach, p.program[0], command_work(p, p.program[0], rank_ctx(p.mesh, 0)));
}

// Seconds of one GEMM [m, k] x [k, n] of `dtype` (bf16 unless said) on `machine`.
double gemm_seconds(const std::string& machine, int64_t m, int64_t n, int64_t k, const std::string& dtype = "bf16") {
  const std::string t = R"(, "dtype": ")" + dtype + R"(")";
  return command_seconds(machine, R"({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [)" + std::to_string(m) + ", " + std::to_string(k) + "]" + t + R"(, "role": "input", "init": {"kind": "zeros"}},
      "b": {"shape": [)" + std::to_string(k) + ", " + std::to_string(n) + "]" + t + R"(, "role": "input", "init": {"kind": "zeros"}},
      "c": {"shape": [)" + std::to_string(m) + ", " + std::to_string(n) + "]" + t + R"(, "role": "output"}},
    "program": [{"op": "gemm", "a": "a", "b": "b", "c": "c"}]})");
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

TEST(GemmByShape, AGemvCostsItsBytesAtHbmBandwidth) {
  // x [1, 8192] times W [8192, 8192], f32, on h100-8gpu: W alone is 256 MiB,
  // which take 268435456 / 3.35e12 = 80.1 us to read. Thin tiles (8 x 256:
  // 32 of them) with K split in 4 for the idle SMs do 2 x 132 x 2048 x
  // (2048 + 128) = 1.18e9 flops of tile work, 21 us at 0.84 x 67 TFLOP/s:
  // the bytes bound it, plus 3 us of launch. (Whole 64 x 128 tiles priced it
  // at 430 us, 5x its bytes.)
  const double bytes = (8192.0 + 8192.0 * 8192 + 8192.0) * 4;
  const double t = gemm_seconds("h100-8gpu", 1, 8192, 8192, "f32");
  EXPECT_NEAR(t, bytes / 3.35e12 + 3e-6, 1e-9);
  EXPECT_NEAR(t, 268435456.0 / 3.35e12, 0.1 * 268435456.0 / 3.35e12);
  // The same held as W^T x ([8192, 8192] x [8192, 1]): thin tiles along N.
  EXPECT_NEAR(gemm_seconds("h100-8gpu", 8192, 1, 8192, "f32"), bytes / 3.35e12 + 3e-6, 1e-9);
  // A side of 65 is no longer skinny: its tiles are whole again, and cost more than its bytes.
  EXPECT_GT(gemm_seconds("h100-8gpu", 65, 8192, 8192, "f32"), 1.5 * ((65.0 * 8192 * 2 + 8192.0 * 8192) * 4 / 3.35e12 + 3e-6));
}

TEST(MapCost, AMapIsPricedByRooflineWithTranscendentalsCountingEight) {
  // tanh applied 30 times over 2^20 f32 elements on h100-8gpu: 30 x 8 = 240
  // flops an element, 2.52e8 in all, 3.76 us at 67 TFLOP/s (f32); its 8 MiB
  // (read and write) take 2.50 us at 3.35 TB/s: the flops bound it.
  std::string expr = "x";
  for (int i = 0; i < 30; ++i) expr = "tanh(" + expr + ")";
  const std::string s = R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [1048576], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
      "y": {"shape": [1048576], "dtype": "f32", "role": "output"}},
    "program": [{"op": "map", "out": "y", "expr": ")" + expr + R"(", "in": {"x": "x"}}]})";
  EXPECT_NEAR(command_seconds("h100-8gpu", s), 1048576.0 * 240 / 6.7e13 + 3e-6, 1e-12);
  // One add an element is bound by its bytes: 8 MiB / 3.35e12 + 3 us.
  const std::string add = R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [1048576], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
      "y": {"shape": [1048576], "dtype": "f32", "role": "output"}},
    "program": [{"op": "map", "out": "y", "expr": "x + 1.0", "in": {"x": "x"}}]})";
  EXPECT_NEAR(command_seconds("h100-8gpu", add), 8388608.0 / 3.35e12 + 3e-6, 1e-12);
}

TEST(GemmByShape, ModelsWithoutSmCountKeepTheEfficiencyFormula) {
  // tpu-v5e gives no sm_count, so no tiles and no waves: a GEMM costs
  // max(flops / (peak x gemm_efficiency), bytes / HBM) + launch, with
  // 197 TFLOP/s bf16, efficiency 1, 819 GB/s and no launch overhead.
  const Machine m = load_machine("tpu-v5e", std::string(THUNKY_SOURCE_DIR) + "/models").value();
  ASSERT_EQ(m.sm_count, 0);
  // 1000^3, a size no GPU tile divides: exactly 2e9 flops / 1.97e14 = 10.15 us
  // (its 6 MB move in 7.3 us).
  EXPECT_NEAR(gemm_seconds("tpu-v5e", 1000, 1000, 1000), 2e9 / 1.97e14, 1e-12);
  // 8 x 8192 x 8192: 1.07e9 flops take 5.4 us, but B alone is 128 MiB:
  // (8 x 8192 + 8192 x 8192 + 8 x 8192) x 2 bytes / 8.19e11 = 164 us.
  EXPECT_NEAR(gemm_seconds("tpu-v5e", 8, 8192, 8192), (8.0 * 8192 + 8192.0 * 8192 + 8.0 * 8192) * 2 / 8.19e11, 1e-12);
}

}  // namespace
}  // namespace thunky::sim
