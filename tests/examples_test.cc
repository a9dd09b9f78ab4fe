// Every bundled example, run on the CPU backend, against the values its
// description gives (or that follow from it by hand).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/test_util.h"
#include "tools/gen.h"

namespace thunky {
namespace {

using testing::example_path;
using testing::global_values;
using testing::load_file_ok;
using testing::load_ok;
using testing::run_cpu;
using testing::values;

std::vector<double> run_example(const std::string& file, const std::string& buffer, int64_t rank = 0) {
  Program p = load_file_ok(example_path(file));
  ExecResult r = run_cpu(p);
  return values(p, r, buffer, rank);
}

TEST(BundledExamples, InitAndCopyGivesItsDescribedArray) {
  // memzero, copy src[:4] = [0 1 2 3], memset dst[4:] = 1.
  EXPECT_EQ(run_example("init_and_copy.json", "dst"), (std::vector<double>{0, 1, 2, 3, 1, 1, 1, 1}));
}

TEST(BundledExamples, SwapHalvesThroughScratch) {
  EXPECT_EQ(run_example("swap_halves.json", "buf"), (std::vector<double>{4, 5, 6, 7, 0, 1, 2, 3}));
}

TEST(BundledExamples, CallJaxScaleAndAdd) {
  auto out = run_example("pipeline_call_jax.json", "out");
  ASSERT_EQ(out.size(), 8u);
  // out[i] = sin(i) * 2 + 1, rounded once to f32.
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[i], static_cast<float>(std::sin(i) * 2.0 + 1.0)) << i;
}

TEST(BundledExamples, MatmulAndBias) {
  // a @ b = [[1+3, 2+3], [4+6, 5+6]] = [[4, 5], [10, 11]]; + 5.
  EXPECT_EQ(run_example("matmul_and_bias.json", "out"), (std::vector<double>{9, 10, 15, 16}));
}

TEST(BundledExamples, NestedFunctionsHoistScratch) {
  Program p = load_file_ok(example_path("nested_functions.json"));
  // Two call instances, each with its own hoisted (4,) scratch.
  int hoisted = 0;
  for (const auto& b : p.buffers) hoisted += b.name.rfind("helper_step.tmp_ref$", 0) == 0;
  EXPECT_EQ(hoisted, 2);
  ExecResult r = run_cpu(p);
  EXPECT_EQ(values(p, r, "x"), (std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14}));
}

TEST(BundledExamples, TiledGemmMatchesOneGemm) {
  Program p = load_file_ok(example_path("tiled_gemm.json"));
  ExecResult r = run_cpu(p);
  auto a = values(p, r, "a"), b = values(p, r, "b"), out = values(p, r, "out");
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += a[i * 4 + k] * b[k * 4 + j];
      EXPECT_NEAR(out[i * 4 + j], s, 1e-4) << i << "," << j;
    }
}

TEST(BundledExamples, CopySlices) {
  EXPECT_EQ(run_example("copy_slices.json", "dst"), (std::vector<double>{4, 5, 6, 7, 0, 0, 0, 0}));
}

TEST(BundledExamples, CondNegatesWhenPredIsTrue) {
  EXPECT_EQ(run_example("maybe_negate.json", "data"), (std::vector<double>{-1, 2, -3, 4}));
}

TEST(BundledExamples, SwitchClampsOutOfRangeIndex) {
  // index 7 with 3 branches clamps to branch 2, which fills 20.
  EXPECT_EQ(run_example("switch_select.json", "out"), (std::vector<double>{20, 20}));
}

TEST(BundledExamples, PowerOfTwoLoop) {
  Program p = load_file_ok(example_path("power_of_two_loop.json"));
  ExecResult r = run_cpu(p);
  // Five trips: 1.5 * 2^5 = 48, iters counts down to 0.
  EXPECT_EQ(values(p, r, "val"), (std::vector<double>{48}));
  EXPECT_EQ(values(p, r, "iters"), (std::vector<double>{0}));
  // Loop commands carry #k instance ids: 'double' ran 5 times (#0..#4) and
  // the cond check 6 times.
  int doubles = 0, checks = 0;
  for (const auto& op : r.report.ranks[0].ops) {
    doubles += op.name == "double";
    checks += op.name == "check_positive";
  }
  EXPECT_EQ(doubles, 5);
  EXPECT_EQ(checks, 6);
}

TEST(BundledExamples, CollatzOf27Takes111Steps) {
  Program p = load_file_ok(example_path("collatz.json"));
  ExecResult r = run_cpu(p);
  EXPECT_EQ(values(p, r, "steps_out"), (std::vector<double>{111}));
  // The decision log the simulator reads: one while with 111 trips, and its
  // cond ran 111 times; 27 is odd, so the first decision is the else branch.
  ASSERT_EQ(r.decisions.size(), 1u);
  EXPECT_EQ(r.decisions[0].at("/program/2"), (std::vector<int64_t>{111}));
  const auto& conds = r.decisions[0].at("/program/2/body/1");
  ASSERT_EQ(conds.size(), 111u);
  EXPECT_EQ(conds[0], 0);
  // Collatz(27) takes 41 odd (3n + 1) steps and 70 even ones.
  EXPECT_EQ(std::count(conds.begin(), conds.end(), 1), 70);
}

TEST(BundledExamples, ConcurrentBranches) {
  Program p = load_file_ok(example_path("concurrent_branches.json"));
  ExecResult r = run_cpu(p);
  auto a = values(p, r, "a"), b = values(p, r, "b"), oa = values(p, r, "out_a"), ob = values(p, r, "out_b");
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_FLOAT_EQ(oa[i], static_cast<float>(std::exp(a[i])));
    EXPECT_FLOAT_EQ(ob[i], static_cast<float>(std::cos(b[i])));
  }
  std::set<std::string> streams;
  for (const auto& op : r.report.ranks[0].ops) streams.insert(op.stream);
  EXPECT_EQ(streams, (std::set<std::string>{"computation:0", "computation:1"}));
}

TEST(BundledExamples, PtxKernelRunsItsCpuFallback) {
  EXPECT_EQ(run_example("ptx_add_one.json", "out"), (std::vector<double>{1, 2, 3, 4}));
}

TEST(BundledExamples, PallasPipeline) {
  auto out = run_example("pallas_and_jax_pipeline.json", "out");
  ASSERT_EQ(out.size(), 128u * 128u);
  for (size_t i = 0; i < out.size(); i += 997) EXPECT_EQ(out[i], 3.0 * static_cast<double>(i) + 1.0) << i;
}

TEST(BundledExamples, CholeskyFactor) {
  auto a = run_example("cholesky.json", "a");
  // tril(a) is the expected factor; the strict upper triangle keeps A's values.
  EXPECT_EQ(a, (std::vector<double>{2, 12, -16, 6, 1, -43, -8, 5, 3}));
}

TEST(BundledExamples, AllReduceAcrossTwoDevices) {
  // rank 0 holds [0 1 2 3], rank 1 [4 5 6 7]: the sum is [4 6 8 10] on both.
  EXPECT_EQ(run_example("sum_across_gpus.json", "out", 0), (std::vector<double>{4, 6, 8, 10}));
  EXPECT_EQ(run_example("sum_across_gpus.json", "out", 1), (std::vector<double>{4, 6, 8, 10}));
}

TEST(BundledExamples, GroupedExchangeAndReduce) {
  Program p = load_file_ok(example_path("grouped_exchange_and_reduce.json"));
  ExecResult r = run_cpu(p);
  // a = axis index: 0 + 1 = 1 everywhere; b is swapped between the two ranks.
  EXPECT_EQ(values(p, r, "out_a", 0), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(values(p, r, "out_b", 0), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(values(p, r, "out_b", 1), (std::vector<double>{0, 1, 2, 3}));
}

TEST(BundledExamples, SplicedPsum) {
  EXPECT_EQ(run_example("splice_jax_collective.json", "out", 1), (std::vector<double>{8, 12, 16, 20}));
}

// C = A x B from the gathered inputs (the local ones on one device),
// computed naively in double.
void expect_matmul(const Program& p, const ExecResult& r, int64_t n) {
  auto a = global_values(p, r, "a"), b = global_values(p, r, "b"), c = global_values(p, r, "c");
  const Buffer& ab = p.buffers[p.find_buffer("a")];
  const Buffer& bb = p.buffers[p.find_buffer("b")];
  const auto& a_shape = ab.global ? ab.global->shape : ab.shape;
  const auto& b_shape = bb.global ? bb.global->shape : bb.shape;
  const int64_t rows = a_shape[0], depth = a_shape[1], cols = b_shape[1];
  ASSERT_EQ(b_shape[0], depth);
  ASSERT_EQ(static_cast<int64_t>(c.size()), rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0;
      for (int64_t k = 0; k < depth; ++k) s += a[i * depth + k] * b[k * cols + j];
      // |a|, |b| <= 1 and at most 8 x 16 terms: f32 accumulation error stays below 1e-4.
      ASSERT_NEAR(c[i * cols + j], s, 1e-4) << "N=" << n << " C[" << i << "," << j << "]";
    }
}

class RingMatmul : public ::testing::TestWithParam<int64_t> {};

// Each generator's schedule loads (validation, race check), runs on the CPU
// backend and gives A x B for N = 1..8.
void expect_generated_matmul(const nlohmann::ordered_json& schedule, int64_t n) {
  Program p = load_ok(schedule.dump());
  expect_matmul(p, run_cpu(p), n);
}

TEST_P(RingMatmul, UnidirectionalGathersCorrectly) {
  expect_generated_matmul(gen::ring_matmul({GetParam(), 4, 16, 3, "f32", false}), GetParam());
}

TEST_P(RingMatmul, BidirectionalGathersCorrectly) {
  expect_generated_matmul(gen::bidirectional_ring_matmul({GetParam(), 4, 16, 3, "f32", false}), GetParam());
}

TEST_P(RingMatmul, BlockingBaselineGathersCorrectly) {
  expect_generated_matmul(gen::blocking_matmul({GetParam(), 4, 16, 3, "f32", false}), GetParam());
}

TEST_P(RingMatmul, UnshardedBaselineMultiplies) {
  // One device: [N 4, 16] x [16, 3].
  expect_generated_matmul(gen::unsharded_matmul({GetParam(), 4, 16, 3, "f32", false}), GetParam());
}

TEST_P(RingMatmul, ReduceScatterRingSumsCorrectly) {
  // A [N 4, N 2] . B [N 2, 3], C reduce-scattered by rows.
  expect_generated_matmul(gen::ring_reduce_scatter_matmul({GetParam(), 4, 2, 3, "f32", false}), GetParam());
}

TEST_P(RingMatmul, BidirectionalReduceScatterRingSumsCorrectly) {
  // Row blocks of 5: halves of 2 and 3 rows travel opposite ways.
  expect_generated_matmul(gen::bidirectional_ring_reduce_scatter_matmul({GetParam(), 5, 2, 3, "f32", false}), GetParam());
}

TEST_P(RingMatmul, ReduceScatterBaselinesMultiply) {
  expect_generated_matmul(gen::blocking_reduce_scatter_matmul({GetParam(), 4, 2, 3, "f32", false}), GetParam());
  expect_generated_matmul(gen::unsharded_reduce_scatter_matmul({GetParam(), 4, 2, 3, "f32", false}), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ranks1To8, RingMatmul, ::testing::Range<int64_t>(1, 9));

TEST(RingMatmulExamples, BundledSchedulesMatchTheGenerator) {
  // examples/ holds the N = 4 schedules thunky-gen writes with its defaults.
  gen::RingMatmulOptions o;
  EXPECT_EQ(to_json(load_file_ok(example_path("ring_collective_matmul_n4.json"))).dump(),
            to_json(load_ok(gen::ring_matmul(o).dump())).dump());
  EXPECT_EQ(to_json(load_file_ok(example_path("bidirectional_ring_collective_matmul_n4.json"))).dump(),
            to_json(load_ok(gen::bidirectional_ring_matmul(o).dump())).dump());
}

}  // namespace
}  // namespace thunky
