#include "sim/event_queue.h"

#include <gtest/gtest.h>

namespace thunky::sim {
namespace {

TEST(EventQueue, EarliestFirstAndTiesInPushOrder) {
  EventQueue q;
  EXPECT_FALSE(q.pop());
  EXPECT_FALSE(q.next_time());
  q.push({2.0}, 20);
  q.push({1.0}, 10);
  q.push({2.0}, 21);  // same time as 20, pushed later
  q.push({1.0}, 11);
  EXPECT_EQ(q.next_time()->s, 1.0);
  std::vector<uint64_t> order;
  while (auto e = q.pop()) order.push_back(e->payload);
  EXPECT_EQ(order, (std::vector<uint64_t>{10, 11, 20, 21}));
}

}  // namespace
}  // namespace thunky::sim
