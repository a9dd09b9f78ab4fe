// The simulator's compute part through its own interface: kernels sharing a
// rank's throughput, and a host's cores granted first come first served.
#include "sim/compute_shares.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "sim/sim_event.h"

namespace thunky::sim::internal {
namespace {

// Runs the queue to its end as the engine does: each kernel end that is
// still the latest prediction leaves its rank, which is shared anew.
// Returns (rank, stream, start, end) of each kernel, in end order.
struct Done {
  int64_t rank;
  int stream;
  double start, end;
};
std::vector<Done> drain(EventQueue& q, ComputeShares& c, const std::vector<std::pair<double, std::function<void(double)>>>& later = {}) {
  std::vector<Done> out;
  size_t next = 0;
  for (;;) {
    const auto t = q.next_time();
    if (next < later.size() && (!t || later[next].first <= t->s)) {
      later[next].second(later[next].first);
      ++next;
      continue;
    }
    if (!t) return out;
    const auto e = q.pop();
    const SimEvent ev = SimEvent::unpack(e->payload);
    if (const auto ended = c.end(KernelId(ev.id), ev.version)) {
      out.push_back({ended->rank, ended->stream, ended->start, e->time.s});
      c.share(ended->rank, e->time.s);
    }
  }
}

TEST(ComputeShares, KernelsOfOneDeviceShareItsThroughputEqually) {
  // Rank 0: A (1 s of work) from 0; B (1 s) from 0.5. A runs alone at the
  // full rate to 0.5, then both at half: A's last 0.5 s of work ends at
  // 1.5; B did 0.5 by then and runs its last 0.5 alone: ends at 2.0.
  // Rank 1's kernel (0.25 s from 0) shares nothing with them: ends at 0.25.
  EventQueue q;
  ComputeShares c(q, 0, [] {});
  c.set_ranks(2);
  c.start(0, 0, 1.0, 0.0);
  c.start(1, 0, 0.25, 0.0);
  const auto done = drain(q, c, {{0.5, [&](double now) { c.start(0, 1, 1.0, now); }}});
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].rank, 1);
  EXPECT_DOUBLE_EQ(done[0].end, 0.25);
  EXPECT_EQ(done[1].stream, 0);
  EXPECT_DOUBLE_EQ(done[1].end, 1.5);
  EXPECT_EQ(done[2].stream, 1);
  EXPECT_DOUBLE_EQ(done[2].start, 0.5);
  EXPECT_DOUBLE_EQ(done[2].end, 2.0);
}

TEST(ComputeShares, AHostsCoresAreGrantedFirstComeFirstServed) {
  // One core for two ranks: A (rank 0, 1 s) takes it at 0; B (rank 1, 1 s)
  // waits for it and runs from 1 to 2 at the full rate, its start the grant.
  EventQueue q;
  ComputeShares c(q, 1, [] {});
  c.set_ranks(2);
  c.start(0, 0, 1.0, 0.0);
  c.start(1, 0, 1.0, 0.0);
  const auto done = drain(q, c);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].rank, 0);
  EXPECT_DOUBLE_EQ(done[0].end, 1.0);
  EXPECT_EQ(done[1].rank, 1);
  EXPECT_DOUBLE_EQ(done[1].start, 1.0);
  EXPECT_DOUBLE_EQ(done[1].end, 2.0);
}

}  // namespace
}  // namespace thunky::sim::internal
