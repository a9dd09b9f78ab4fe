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

TEST(RaceDetector, OnlyAccessesPastTheJoinAreUnordered) {
  // s0 writes bytes [0, 8), then [0, 4), then [4, 8) (commands 0, 1, 2);
  // s1 joins s0 after command 0. s2 reads [0, 8) (command 3). s1 then
  // writes [0, 8) (command 4): commands 1, 2 (not joined) and 3 (never
  // joined) race with it, command 0 does not. The reports come earliest
  // command first.
  HappensBefore hb;
  int s0 = hb.new_slot(), s1 = hb.new_slot(), s2 = hb.new_slot();
  RaceDetector d(1);
  std::vector<RaceReport> out;
  std::vector<BranchNode> br;
  d.access({0, 0, 8, true, s0, hb.tick(s0), 0, -1}, hb, br, out, 10);
  hb.join(s1, hb.clock(s0));
  d.access({0, 0, 4, true, s0, hb.tick(s0), 1, -1}, hb, br, out, 10);
  d.access({0, 4, 8, true, s0, hb.tick(s0), 2, -1}, hb, br, out, 10);
  ASSERT_TRUE(out.empty());  // one slot is one order
  d.access({0, 0, 8, false, s2, hb.tick(s2), 3, -1}, hb, br, out, 10);
  // s2's read is unordered with s0's writes; it is reported against 1 and 2,
  // the last writes of every byte: 0's bytes were all rewritten after it on
  // its own stream, so whatever is unordered with 0 is unordered with them.
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first.command, 1);
  EXPECT_EQ(out[1].first.command, 2);
  out.clear();
  d.access({0, 0, 8, true, s1, hb.tick(s1), 4, -1}, hb, br, out, 10);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].first.command, 1);
  EXPECT_EQ(out[1].first.command, 2);
  EXPECT_EQ(out[2].first.command, 3);
  for (const auto& r : out) EXPECT_EQ(r.second.command, 4);
}

}  // namespace
}  // namespace thunky

namespace thunky {
namespace {

TEST(RaceDetector, DisjointAccessesOnTwoStreamsAreNoRaceAndTheCapHolds) {
  // Two unordered streams write alternate 4-byte elements of one buffer:
  // no race. Then one write of the whole buffer on a third stream races
  // with both streams; each earlier command is reported once however many
  // segments it left, up to the cap. (What such a walk costs is
  // bench/load_bench's BM_RaceCheckDisjointStreams, not a test's.)
  HappensBefore hb;
  int s0 = hb.new_slot(), s1 = hb.new_slot(), s2 = hb.new_slot();
  RaceDetector d(1);
  std::vector<RaceReport> out;
  std::vector<BranchNode> br;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const int s = i % 2 ? s1 : s0;
    d.access({0, 4u * i, 4u * i + 4, true, s, hb.tick(s), i, -1}, hb, br, out, 10);
  }
  EXPECT_TRUE(out.empty());
  d.access({0, 0, 4u * n, true, s2, hb.tick(s2), n, -1}, hb, br, out, 10);
  // Ten reports (the cap), every one a different earlier command, earliest first.
  ASSERT_EQ(out.size(), 10u);
  for (size_t k = 1; k < out.size(); ++k) EXPECT_LT(out[k - 1].first.command, out[k].first.command);
}

}  // namespace
}  // namespace thunky
