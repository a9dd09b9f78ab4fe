#include "sim/collective_cost.h"

#include <gtest/gtest.h>

namespace thunky::sim {
namespace {

AxisLinks ring(double bw, bool wrap, double alpha = 1e-6) {
  AxisLinks a;
  a.topology = AxisLinks::Topology::ring;
  a.link_bandwidth = bw;
  a.wraparound = wrap;
  a.hop_latency_s = alpha;
  return a;
}

TEST(CollectiveCost, DesignWorkedFigureV5e) {
  // bf16[2048, 8192] gathered = 33,554,432 bytes over 4 ranks, 4.5e10 B/s per direction.
  const double v = 2048.0 * 8192 * 2;
  AxisLinks closed = ring(4.5e10, true), open = ring(4.5e10, false);
  // Closed ring: V / W = 33554432 / 9e10 = 372.8 us.
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&closed, 4}}, v, false), 372.8e-6, 0.1e-6);
  // Open line: (n-1) (V/n) / (W/2) = 3 * 8388608 / 4.5e10 = 559.2 us.
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&open, 4}}, v, false), 559.2e-6, 0.1e-6);
}

TEST(CollectiveCost, DesignWorkedFigureIronwood) {
  // W = 2e11 B/s (1e11 per direction), 1 GB per device.
  AxisLinks a = ring(1e11, true);
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&a, 8}}, 1e9, false), 5e-3, 1e-9);    // V / W
  EXPECT_NEAR(collective_seconds(Op::all_reduce, {{&a, 8}}, 1e9, false), 10e-3, 1e-9);   // 2 V / W
  EXPECT_NEAR(collective_seconds(Op::all_to_all, {{&a, 8}}, 1e9, false), 1.25e-3, 1e-9); // V / 4W
}

TEST(CollectiveCost, LatencyFloorOnSmallMessages) {
  // 1 KiB on a closed ring of 8 with 1 us hops: V / W = 11 ns < n/2 alpha = 4 us.
  AxisLinks a = ring(4.5e10, true);
  EXPECT_DOUBLE_EQ(collective_seconds(Op::all_gather, {{&a, 8}}, 1024, false), 4e-6);
  EXPECT_DOUBLE_EQ(collective_seconds(Op::all_reduce, {{&a, 8}}, 1024, false), 8e-6);
  // Additive (alpha-beta): 4 us + 1024 / 9e10.
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&a, 8}}, 1024, true), 4e-6 + 1024 / 9e10, 1e-15);
}

TEST(CollectiveCost, SeveralAxesDivideTheBandwidthTerm) {
  AxisLinks a = ring(4.5e10, true, 0);
  const double one = collective_seconds(Op::all_gather, {{&a, 4}}, 1e8, false);
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&a, 4}, {&a, 4}}, 1e8, false), one / 2, 1e-12);
}

TEST(CollectiveCost, SwitchAndHierarchical) {
  AxisLinks sw;
  sw.topology = AxisLinks::Topology::switch_;
  sw.egress_bandwidth = 4.5e11;
  sw.latency_s = 5e-6;
  // 8 GPUs, 1 GiB all_gather: 7/8 * 2^30 / 4.5e11 = 2.0877 ms, + 5 us additive.
  const double gib = 1073741824.0;
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&sw, 8}}, gib, true), 7.0 / 8 * gib / 4.5e11 + 5e-6, 1e-12);
  EXPECT_NEAR(collective_seconds(Op::all_reduce, {{&sw, 8}}, gib, true), 2 * 7.0 / 8 * gib / 4.5e11 + 10e-6, 1e-12);
  AxisLinks h = sw;
  h.topology = AxisLinks::Topology::hierarchical;
  h.group_size = 8;
  h.nic_bandwidth = 5e10;
  h.nic_latency_s = 1e-5;
  // 32 ranks = 4 nodes: inner 7/8 V/B + 5 us, outer 3/4 V / (8 * 5e10) + 10 us.
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&h, 32}}, gib, true),
              7.0 / 8 * gib / 4.5e11 + 5e-6 + 0.75 * gib / (8 * 5e10) + 1e-5, 1e-12);
  // 12 ranks in groups of 8 span 2 nodes (not 1): inner 7/8 V/B + 5 us,
  // outer 1/2 V / (8 * 5e10) + 10 us.
  EXPECT_NEAR(collective_seconds(Op::all_gather, {{&h, 12}}, gib, true),
              7.0 / 8 * gib / 4.5e11 + 5e-6 + 0.5 * gib / (8 * 5e10) + 1e-5, 1e-12);
}

TEST(CollectiveCost, NeighbourShiftAndBusFactors) {
  AxisLinks a = ring(4.5e10, true);
  // max(alpha, bytes / (W/2)) = 4.5e6 / 4.5e10 = 100 us.
  EXPECT_DOUBLE_EQ(permute_seconds(a, 1, 4.5e6, false), 1e-4);
  EXPECT_DOUBLE_EQ(permute_seconds(a, 1, 100, false), 1e-6);
  EXPECT_DOUBLE_EQ(bus_factor(Op::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(Op::all_gather, 8), 0.875);
}

}  // namespace
}  // namespace thunky::sim
