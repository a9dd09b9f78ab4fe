#include "core/race.h"

#include <gtest/gtest.h>

namespace thunky {
namespace {

TEST(HappensBefore, ForkAndJoinOrderTwoSlots) {
  HappensBefore hb;
  int main = hb.new_slot(), side = hb.new_slot();
  uint32_t a = hb.tick(main);  // command a on main
  hb.join(side, hb.clock(main));  // fork after a
  Access acc{0, 0, 8, true, main, a, 0, -1};
  EXPECT_TRUE(hb.ordered_before(acc, side));
  uint32_t b = hb.tick(side);
  Access bacc{0, 0, 8, true, side, b, 1, -1};
  EXPECT_FALSE(hb.ordered_before(bacc, main));  // not yet joined
  hb.join(main, hb.clock(side));
  EXPECT_TRUE(hb.ordered_before(bacc, main));
}

TEST(RaceDetector, OverlapWithAWriteOnUnorderedSlotsIsARace) {
  HappensBefore hb;
  int s0 = hb.new_slot(), s1 = hb.new_slot();
  RaceDetector d(1);
  std::vector<RaceReport> out;
  std::vector<BranchNode> br;
  d.access({0, 0, 16, false, s0, hb.tick(s0), 0, -1}, hb, br, out, 10);
  d.access({0, 16, 32, true, s1, hb.tick(s1), 1, -1}, hb, br, out, 10);  // disjoint bytes
  EXPECT_TRUE(out.empty());
  d.access({0, 8, 24, false, s1, hb.tick(s1), 2, -1}, hb, br, out, 10);  // read vs read
  EXPECT_TRUE(out.empty());
  d.access({0, 12, 14, true, s1, hb.tick(s1), 3, -1}, hb, br, out, 10);  // write over s0's read
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first.command, 0);
  EXPECT_EQ(out[0].second.command, 3);
}

TEST(RaceDetector, ExclusiveBranchesNeverRace) {
  HappensBefore hb;
  int s0 = hb.new_slot(), s1 = hb.new_slot();
  std::vector<BranchNode> br{{-1, 7, 0}, {-1, 7, 1}};  // then / else of cond 7
  RaceDetector d(1);
  std::vector<RaceReport> out;
  d.access({0, 0, 4, true, s0, hb.tick(s0), 0, 0}, hb, br, out, 10);
  d.access({0, 0, 4, true, s1, hb.tick(s1), 1, 1}, hb, br, out, 10);
  EXPECT_TRUE(out.empty());
  d.access({0, 0, 4, true, s1, hb.tick(s1), 2, -1}, hb, br, out, 10);  // outside the cond
  EXPECT_EQ(out.size(), 1u);
}

}  // namespace
}  // namespace thunky
