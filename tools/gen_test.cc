#include "tools/gen.h"

#include <gtest/gtest.h>

namespace thunky::gen {
namespace {

int count_op(const nlohmann::ordered_json& block, const std::string& op) {
  int n = 0;
  for (const auto& c : block) {
    n += c["op"] == op;
    if (c.contains("body")) n += count_op(c["body"], op);
  }
  return n;
}

TEST(Generators, RingStepCounts) {
  for (int64_t n = 1; n <= 8; ++n) {
    RingMatmulOptions o;
    o.ranks = n;
    // Unidirectional: N - 1 shifts and N GEMMs.
    auto u = ring_matmul(o);
    EXPECT_EQ(count_op(u["program"], "collective_permute"), n - 1);
    EXPECT_EQ(count_op(u["program"], "gemm"), n);
    // Bidirectional: (N - 1) / 2 grouped pairs, plus a middle shift for even N.
    auto b = bidirectional_ring_matmul(o);
    EXPECT_EQ(count_op(b["program"], "collective_group"), (n - 1) / 2);
    EXPECT_EQ(count_op(b["program"], "collective_permute"), 2 * ((n - 1) / 2) + (n % 2 == 0 ? 1 : 0));
    // Reduce-scatter ring: N - 1 passes of the partial sum, N GEMMs, and an
    // add after each pass.
    auto r = ring_reduce_scatter_matmul(o);
    EXPECT_EQ(count_op(r["program"], "collective_permute"), n - 1);
    EXPECT_EQ(count_op(r["program"], "gemm"), n);
    EXPECT_EQ(count_op(r["program"], "map"), n - 1);
    // Bidirectional: a grouped pair of opposite shifts per step, two half-block GEMMs per step.
    o.m_block = 2;
    auto rb = bidirectional_ring_reduce_scatter_matmul(o);
    EXPECT_EQ(count_op(rb["program"], "collective_group"), n - 1);
    EXPECT_EQ(count_op(rb["program"], "collective_permute"), 2 * (n - 1));
    EXPECT_EQ(count_op(rb["program"], "gemm"), n == 1 ? 1 : 2 * n);
    // Baselines: one collective and one GEMM; none and one on one device.
    EXPECT_EQ(count_op(blocking_reduce_scatter_matmul(o)["program"], "reduce_scatter"), 1);
    EXPECT_EQ(count_op(unsharded_matmul(o)["program"], "gemm"), 1);
    EXPECT_FALSE(unsharded_matmul(o).contains("mesh"));
  }
}

TEST(Generators, BadSizesThrow) {
  RingMatmulOptions o;
  o.ranks = 0;
  EXPECT_THROW(ring_matmul(o), std::invalid_argument);
}

}  // namespace
}  // namespace thunky::gen
