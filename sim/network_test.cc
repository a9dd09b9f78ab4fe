// The simulator's network part through its own interface: flows share
// links by max-min, and a flow that leaves gives its share back.
#include "sim/network.h"

#include <gtest/gtest.h>

#include <memory_resource>
#include <vector>

namespace thunky::sim::internal {
namespace {

TEST(Network, FlowsShareLinksByMaxMinAndALeavingFlowGivesItsShareBack) {
  // Link a (100 B/s) carries f1 and f2; link b (40 B/s) carries f2 too.
  // Max-min: f2 is held to 40 by b, and f1 takes the 60 of a left over
  // (not an equal 50/50, which would waste 10 of a). f3 alone on c (30 B/s)
  // gets all of it, untouched by the others.
  std::pmr::monotonic_buffer_resource arena;
  Network n(&arena);
  const LinkId a = n.link(1, 100.0), b = n.link(2, 40.0), c = n.link(3, 30.0);
  EXPECT_EQ(n.link(1, 100.0), a);  // a link is made once
  const FlowId f1 = n.new_flow(CommId(0), 1000, 0.0), f2 = n.new_flow(CommId(1), 1000, 0.0), f3 = n.new_flow(CommId(2), 1000, 0.0);
  n.flow(f1).links.push_back(a);
  n.flow(f2).links.push_back(a);
  n.flow(f2).links.push_back(b);
  n.flow(f3).links.push_back(c);
  const FlowId all[] = {f1, f2, f3};
  const std::vector<CommId> changed = n.start(all, CommId(), 0.0);
  EXPECT_EQ(changed, (std::vector<CommId>{CommId(0), CommId(1), CommId(2)}));
  EXPECT_DOUBLE_EQ(n.flow(f1).rate, 60.0);
  EXPECT_DOUBLE_EQ(n.flow(f2).rate, 40.0);
  EXPECT_DOUBLE_EQ(n.flow(f3).rate, 30.0);
  // At 5 s f2 leaves: f1 (700 bytes left after 5 s at 60) has all of a;
  // f3, on no link f2 used, is not solved again and does not come back.
  std::vector<LinkId> seeds;
  n.retire(f2, seeds);
  const std::vector<CommId> after = n.solve(seeds, CommId(1), 5.0);
  EXPECT_EQ(after, (std::vector<CommId>{CommId(0), CommId(1)}));
  EXPECT_DOUBLE_EQ(n.flow(f1).rate, 100.0);
  EXPECT_DOUBLE_EQ(n.flow(f1).remaining, 1000.0 - 5 * 60.0);
  EXPECT_DOUBLE_EQ(n.flow(f3).rate, 30.0);
}

}  // namespace
}  // namespace thunky::sim::internal
