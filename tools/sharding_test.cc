// thunky-gen matmul: the case, the collectives and their bytes for each
// sharding, and the written schedule's CPU result against A . B.
#include "tools/sharding.h"

#include <gtest/gtest.h>

#include "sim/machine.h"
#include "tests/test_util.h"
#include "tools/sharding_cost.h"

namespace thunky::gen {
namespace {

MatmulProblem problem(const std::string& mesh, const std::string& lhs, const std::string& lhs_spec, const std::string& rhs,
                      const std::string& rhs_spec, const std::string& out_spec = "") {
  MatmulProblem p;
  p.mesh = parse_mesh(mesh);
  p.lhs = parse_shape(lhs, "--lhs");
  p.rhs = parse_shape(rhs, "--rhs");
  p.lhs_spec = parse_spec(lhs_spec, p.mesh, 2, "--lhs-spec");
  p.rhs_spec = parse_spec(rhs_spec, p.mesh, 2, "--rhs-spec");
  if (!out_spec.empty()) p.out_spec = parse_spec(out_spec, p.mesh, 2, "--out-spec");
  p.dtype = "f32";
  return p;
}

// The schedule loads (validation and race check), runs on the CPU backend
// and its gathered C equals the product of its gathered A and B.
void expect_product(const MatmulPlan& plan) {
  Program p = testing::load_ok(plan.schedule.dump());
  ExecResult r = testing::run_cpu(p);
  auto a = testing::global_values(p, r, "a"), b = testing::global_values(p, r, "b"), c = testing::global_values(p, r, "c");
  const int64_t I = plan.problem.lhs[0], J = plan.problem.lhs[1], K = plan.problem.rhs[1];
  ASSERT_EQ(static_cast<int64_t>(c.size()), I * K);
  for (int64_t i = 0; i < I; ++i)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t j = 0; j < J; ++j) s += a[i * J + j] * b[j * K + k];
      // |a|, |b| <= 1 and J <= 16 terms summed in f32 (some as partial
      // sums stored in f32 between collectives): error far below 1e-4.
      ASSERT_NEAR(c[i * K + k], s, 1e-4) << plan.schedule["description"] << " C[" << i << "," << k << "]";
    }
}

std::vector<std::string> ops(const MatmulPlan& plan) {
  std::vector<std::string> v;
  for (const auto& c : plan.collectives) v.push_back(c.op);
  return v;
}

TEST(ShardedMatmul, Case1NoContractionShardingIsLocal) {
  // A[I_X, J] . B[J, K_Y] on X=2, Y=2: each device multiplies its shards into C[I_X, K_Y].
  MatmulPlan plan = plan_matmul(problem("X=2,Y=2", "8x6", "X,None", "6x4", "None,Y"));
  EXPECT_EQ(plan.case_number, 1);
  EXPECT_TRUE(plan.collectives.empty());
  EXPECT_EQ(spec_notation("C", "IK", plan.c_spec), "C[I_X, K_Y]");
  // Local GEMM [8/2, 6] x [6, 4/2]: 2 * 4 * 6 * 2 = 96 flops.
  EXPECT_EQ(plan.flops_per_device, 96);
  expect_product(plan);
}

TEST(ShardedMatmul, Case2GathersTheOperandShardedOnJ) {
  // A[I, J] . B[J_X, K], X=4, f32: AllGather B along J; V = the gathered
  // B, J * K * 4 bytes = 8 * 4 * 4 = 128 per device.
  MatmulPlan plan = plan_matmul(problem("X=4", "4x8", "None,None", "8x4", "X,None"));
  EXPECT_EQ(plan.case_number, 2);
  ASSERT_EQ(ops(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.collectives[0].bytes, 128);
  EXPECT_EQ(plan.collectives[0].axes, DimAxes{"X"});
  expect_product(plan);
  // The mirror, A[I, J_X] . B[J, K]: A is gathered along J, its second
  // dimension, as four blocks; V = I * J * 4 = 4 * 8 * 4 = 128.
  MatmulPlan mirror = plan_matmul(problem("X=4", "4x8", "None,X", "8x4", "None,None"));
  EXPECT_EQ(mirror.case_number, 2);
  ASSERT_EQ(ops(mirror), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(mirror.collectives[0].bytes, 128);
  expect_product(mirror);
}

TEST(ShardedMatmul, Case3ReducesThePartialSums) {
  // A[I, J_X] . B[J_X, K], X=4: partial C[I, K]{U_X}, AllReduce of the
  // array, V = I * K * 4 = 4 * 6 * 4 = 96 bytes.
  MatmulPlan plan = plan_matmul(problem("X=4", "4x8", "None,X", "8x6", "X,None"));
  EXPECT_EQ(plan.case_number, 3);
  ASSERT_EQ(ops(plan), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(plan.collectives[0].bytes, 96);
  EXPECT_EQ(plan.unreduced, DimAxes{"X"});
  expect_product(plan);
  // With --out-spec X,None the result stays sharded: ReduceScatter, V = the
  // unreduced input, the same 96 bytes.
  MatmulPlan rs = plan_matmul(problem("X=4", "4x8", "None,X", "8x6", "X,None", "X,None"));
  ASSERT_EQ(ops(rs), std::vector<std::string>{"reduce_scatter"});
  EXPECT_EQ(rs.collectives[0].bytes, 96);
  expect_product(rs);
}

TEST(ShardedMatmul, Case4GathersAFirst) {
  // A[I_X, J] . B[J, K_X], X=2: C cannot be sharded over X twice; AllGather
  // A along I, V = I * J * 4 = 4 * 6 * 4 = 96 bytes; C[I, K_X].
  MatmulPlan plan = plan_matmul(problem("X=2", "4x6", "X,None", "6x4", "None,X"));
  EXPECT_EQ(plan.case_number, 4);
  ASSERT_EQ(ops(plan), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(plan.collectives[0].bytes, 96);
  EXPECT_EQ(spec_notation("C", "IK", plan.c_spec), "C[I, K_X]");
  expect_product(plan);
}

TEST(ShardedMatmul, MultiAxisSpecs) {
  // A[I, J_{XY}] . B[J_{XY}, K] on X=2, Y=2: case 3 over both axes at once.
  // V = I * K * 4 = 4 * 2 * 4 = 32 bytes.
  MatmulPlan plan = plan_matmul(problem("X=2,Y=2", "4x8", "None,X+Y", "8x2", "(X,Y),None"));
  EXPECT_EQ(plan.case_number, 3);
  ASSERT_EQ(ops(plan), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(plan.collectives[0].axes, (DimAxes{"X", "Y"}));
  EXPECT_EQ(plan.collectives[0].bytes, 32);
  expect_product(plan);
  // Kept sharded as C[I_{XY}, K]: ReduceScatter over (X, Y).
  MatmulPlan rs = plan_matmul(problem("X=2,Y=2", "4x8", "None,X+Y", "8x2", "(X,Y),None", "X+Y,None"));
  ASSERT_EQ(ops(rs), std::vector<std::string>{"reduce_scatter"});
  expect_product(rs);
  // A[I_{XY}, J_Z] . B[J_Z, K] on three axes, reduced over Z into C[I_{XYZ}, K].
  expect_product(plan_matmul(problem("X=2,Y=1,Z=2", "8x4", "X+Y,Z", "4x3", "Z,None", "X+Y+Z,None")));
  // B sharded on J over (X, Y) and A on J over X only: both gathered.
  MatmulPlan both = plan_matmul(problem("X=2,Y=2", "4x8", "None,X", "8x2", "X+Y,None"));
  EXPECT_EQ(ops(both), (std::vector<std::string>{"all_gather", "all_gather"}));
  expect_product(both);
}

TEST(ShardedMatmul, OutSpecReshardsTheFirstDimension) {
  // C[I_X, K] gathered to C[I, K]: AllGather, V = I * K * 4 = 4 * 2 * 4 = 32.
  MatmulPlan gather = plan_matmul(problem("X=2", "4x3", "X,None", "3x2", "None,None", "None,None"));
  ASSERT_EQ(ops(gather), std::vector<std::string>{"all_gather"});
  EXPECT_EQ(gather.collectives[0].bytes, 32);
  expect_product(gather);
  // C[I, K] to C[I_X, K]: a local slice, no collective.
  MatmulPlan slice = plan_matmul(problem("X=2", "4x3", "None,None", "3x2", "None,None", "X,None"));
  EXPECT_TRUE(slice.collectives.empty());
  expect_product(slice);
  // C[I_X, K] to C[I_Y, K]: gather over X, keep the Y block.
  expect_product(plan_matmul(problem("X=2,Y=2", "4x3", "X,None", "3x2", "None,None", "Y,None")));
  // Partial sums over X, wanted as C[I_{YX}, K]: not X minor, so AllReduce, then slice.
  MatmulPlan ar = plan_matmul(problem("X=2,Y=2", "8x4", "Y,X", "4x2", "X,None", "X+Y,None"));
  EXPECT_EQ(ops(ar), (std::vector<std::string>{"all_reduce", "all_gather"}));
  expect_product(ar);
}

TEST(ShardedMatmul, SpecSyntaxes) {
  const MeshAxes mesh = parse_mesh("{'X': 4, 'Y': 2}");
  EXPECT_EQ(mesh.names, (std::vector<std::string>{"X", "Y"}));
  EXPECT_EQ(mesh.sizes, (std::vector<int64_t>{4, 2}));
  const PartitionSpec want = {{"X", "Y"}, {}};
  EXPECT_EQ(parse_spec("X+Y,None", mesh, 2, "s"), want);
  EXPECT_EQ(parse_spec("(X,Y),None", mesh, 2, "s"), want);
  EXPECT_EQ(parse_spec("P(('X', 'Y'), None)", mesh, 2, "s"), want);
  EXPECT_EQ(spec_notation("A", "IJ", want), "A[I_{XY}, J]");
}

void expect_invalid(const std::string& lhs_spec, const std::string& rhs_spec, const std::string& needle, const std::string& out_spec = "") {
  try {
    plan_matmul(problem("X=4,Y=2", "8x16", lhs_spec, "16x8", rhs_spec, out_spec));
    ADD_FAILURE() << lhs_spec << " . " << rhs_spec << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ShardedMatmul, InvalidSpecsAreRefused) {
  expect_invalid("X,X", "None,None", "axis X shards two dimensions");
  expect_invalid("Z,None", "None,None", "unknown mesh axis 'Z'");
  expect_invalid("X", "None,None", "has 1 entries for a 2-D operand");
  expect_invalid("X,None,None", "None,None", "has 3 entries");
  expect_invalid("None,None", "None,None", "--out-spec: axis X shards two dimensions", "X,X");
  try {
    plan_matmul(problem("X=4", "6x4", "X,None", "4x4", "None,None"));
    ADD_FAILURE() << "6 rows over 4 devices were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--lhs-spec: dimension 0 (6) is not divisible by X = 4 devices");
  }
  EXPECT_THROW(plan_matmul(problem("X=4", "4x6", "None,None", "4x4", "None,None")), std::invalid_argument);  // J differs
  expect_invalid("None,None", "None,None", "reshards C along its first dimension", "None,X");
  EXPECT_THROW(parse_mesh("X=0"), std::invalid_argument);
  EXPECT_THROW(parse_mesh("X=2,X=2"), std::invalid_argument);
  EXPECT_THROW(parse_shape("8x", "--lhs"), std::invalid_argument);
}

// A ring axis of per-direction link L = 1e9 B/s without latency, f32 at
// C = 1e12 FLOP/s and an HBM fast enough that every GEMM is compute-bound.
sim::Machine flat_ring() {
  return sim::parse_machine_text(R"({"format": "thunky.machine/1", "name": "flat-ring",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e18, "launch_overhead_s": 0, "gemm_efficiency": 1.0, "source": "test"},
    "axes": {"*": {"topology": "ring", "wraparound": true, "link_bandwidth": 1e9, "hop_latency_s": 0}}})");
}

TEST(ShardedMatmul, StrategyFlipMatchesTheClosedForm) {
  // X[B, D] . W[D_X, F], X = 4, D = 1024, F = 256, f32 (s = 4).
  // W_ici = 2L = 2e9 B/s (an AllGather of V bytes takes V / 2L on a ring),
  // C = 1e12. gather: s D F / W + 2 B D F / C = 524.288 us + B * 0.524288 us;
  // reduce: 2 B D F / (4 C) + 2 s B F / W = B * (0.131072 + 1.024) us.
  // Equal at B* = 524.288 / 0.630784 = 831.17; closed form
  // s D / (2 s - 2 (3/4) D W / C) = 4096 / (8 - 3.072) = 831.17.
  MatmulProblem p = problem("X=4", "64x1024", "None,None", "1024x256", "X,None");
  const StrategyComparison c = compare_strategies(p, flat_ring());
  EXPECT_EQ(c.batch_name, "I");
  EXPECT_NEAR(c.w_ici, 2e9, 1);
  EXPECT_NEAR(c.c_flops, 1e12, 1);
  ASSERT_TRUE(c.closed_form_batch);
  EXPECT_NEAR(*c.closed_form_batch, 831.17, 0.01);
  // Simulated in steps of 4 devices: reduce wins up to 828, gather from 832.
  ASSERT_TRUE(c.flip_low && c.flip_high);
  EXPECT_EQ(*c.flip_low, 828);
  EXPECT_EQ(*c.flip_high, 832);
  // At B = 64 reduce is cheaper: 73.9 us against 557.8 us.
  EXPECT_NEAR(c.reduce.total_s(), 64 * 1.155072e-6, 1e-9);
  EXPECT_NEAR(c.gather.total_s(), 524.288e-6 + 64 * 0.524288e-6, 1e-9);
  // Both strategies' schedules compute A . B.
  p.strategy = Strategy::reduce;
  MatmulProblem small = problem("X=4", "4x8", "None,None", "8x4", "X,None");
  small.strategy = Strategy::reduce;
  MatmulPlan reduce = plan_matmul(small);
  EXPECT_EQ(ops(reduce), std::vector<std::string>{"all_reduce"});
  expect_product(reduce);
}

}  // namespace
}  // namespace thunky::gen
