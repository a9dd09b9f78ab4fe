#include "core/mesh.h"

#include <gtest/gtest.h>

namespace thunky {
namespace {

Mesh mesh(std::vector<std::string> names, std::vector<int64_t> shape) {
  Mesh m;
  m.axis_names = std::move(names);
  m.shape = std::move(shape);
  return m;
}

// Mesh x=2, y=3, z=4, row-major: rank = 12x + 4y + z. Rank 17 is (1, 1, 1).
TEST(Participants, OneAxisAndTwoAxesInTheirListedOrder) {
  const Mesh m = mesh({"x", "y", "z"}, {2, 3, 4});
  // Along y, x and z held: 12 + 4y + 1 for y = 0, 1, 2.
  Participants p = participants(m, 17, {"y"}, nullptr);
  EXPECT_EQ(p.ranks, (std::vector<int>{13, 17, 21}));
  EXPECT_EQ(p.position, 1);
  // Over [z, x] the combined index is k = 2z + x (z slowest), y held at 1:
  // rank 4 + 12x + z.
  p = participants(m, 17, {"z", "x"}, nullptr);
  EXPECT_EQ(p.ranks, (std::vector<int>{4, 16, 5, 17, 6, 18, 7, 19}));
  EXPECT_EQ(p.position, 3);  // z = 1, x = 1
}

// Nine axes of 2 (more than the eight held on the stack): rank bits, a0
// the most significant. Over every axis in order the participants are all
// ranks in order; in reverse order, index k lists the rank whose bits are
// k's reversed.
TEST(Participants, NineAxes) {
  std::vector<std::string> names;
  for (int i = 0; i < 9; ++i) names.push_back(std::string("a").append(std::to_string(i)));  // (GCC 12 warns falsely on "a" + std::string)
  const Mesh m = mesh(names, std::vector<int64_t>(9, 2));
  Participants p = participants(m, 300, names, nullptr);
  ASSERT_EQ(p.ranks.size(), 512u);
  for (int k = 0; k < 512; ++k) EXPECT_EQ(p.ranks[k], k);
  EXPECT_EQ(p.position, 300);
  const std::vector<std::string> reversed(names.rbegin(), names.rend());
  p = participants(m, 300, reversed, nullptr);
  auto reverse_bits = [](int v) {
    int r = 0;
    for (int b = 0; b < 9; ++b) r |= ((v >> b) & 1) << (8 - b);
    return r;
  };
  for (int k = 0; k < 512; ++k) EXPECT_EQ(p.ranks[k], reverse_bits(k)) << k;
  EXPECT_EQ(p.ranks[p.position], 300);
}

TEST(Participants, GroupsOverTheCombinedIndex) {
  const Mesh m = mesh({"x"}, {4});
  // Groups {0, 2} and {3, 1}: rank 1 is the second member of the second.
  const std::vector<std::vector<int64_t>> groups{{0, 2}, {3, 1}};
  Participants p = participants(m, 1, {"x"}, &groups);
  EXPECT_EQ(p.ranks, (std::vector<int>{3, 1}));
  EXPECT_EQ(p.position, 1);
}

TEST(Participants, UnknownAndRepeatedAxesAreErrors) {
  const Mesh m = mesh({"x", "y"}, {2, 2});
  EXPECT_THROW(participants(m, 0, {"w"}, nullptr), ThunkyError);
  EXPECT_THROW(participants(m, 0, {"x", "y", "x"}, nullptr), ThunkyError);
}

}  // namespace
}  // namespace thunky
