#include "sim/maxmin.h"

#include <gtest/gtest.h>

namespace thunky::sim {
namespace {

TEST(MaxMin, EqualShareOnOneLink) {
  // Two flows on a 10 B/s link: 5 each.
  auto r = max_min_rates({10}, {{{0}}, {{0}}});
  EXPECT_DOUBLE_EQ(r[0], 5);
  EXPECT_DOUBLE_EQ(r[1], 5);
}

TEST(MaxMin, BottleneckFreesCapacityElsewhere) {
  // A crosses links 0 (10) and 1 (4), B only 0, C only 1. Link 1 is the
  // bottleneck: A = C = 4 / 2 = 2; B takes the rest of link 0: 10 - 2 = 8.
  auto r = max_min_rates({10, 4}, {{{0, 1}}, {{0}}, {{1}}});
  EXPECT_DOUBLE_EQ(r[0], 2);
  EXPECT_DOUBLE_EQ(r[1], 8);
  EXPECT_DOUBLE_EQ(r[2], 2);
}

TEST(MaxMin, FlowBoundsAreRespected) {
  // One flow limited to 1 B/s leaves 9 of the 10 to the other.
  auto r = max_min_rates({10}, {{{0}, 1.0}, {{0}}});
  EXPECT_DOUBLE_EQ(r[0], 1);
  EXPECT_DOUBLE_EQ(r[1], 9);
}

TEST(MaxMin, OppositeDirectionsDoNotShare) {
  // A ring of 4 with 8 directed links (0-3 clockwise, 4-7 counter-clockwise):
  // a clockwise and a counter-clockwise neighbour shift each get a full link.
  std::vector<double> cap(8, 4.5e10);
  std::vector<MaxMinFlow> flows;
  for (int i = 0; i < 4; ++i) flows.push_back({{i}});
  for (int i = 0; i < 4; ++i) flows.push_back({{4 + i}});
  for (double r : max_min_rates(cap, flows)) EXPECT_DOUBLE_EQ(r, 4.5e10);
  // Two clockwise shifts at once share every clockwise link: half each.
  flows.resize(4);
  for (int i = 0; i < 4; ++i) flows.push_back({{i}});
  for (double r : max_min_rates(cap, flows)) EXPECT_DOUBLE_EQ(r, 2.25e10);
}

}  // namespace
}  // namespace thunky::sim
