// The engine's rendezvous and recorder, each through its own interface:
// the rendezvous as ranks arrive at launches, the recorder as commands
// finish.
#include <gtest/gtest.h>

#include <cmath>

#include "core/status.h"
#include "sim/recorder.h"
#include "sim/rendezvous.h"

namespace thunky::sim::internal {
namespace {

TEST(Rendezvous, ASetIsTheSameInAnyOrderWithRepeatsAndDiffersFromAnother) {
  Rendezvous r;
  const SetId a = r.intern({2, 0, 1});
  EXPECT_EQ(r.intern({0, 1, 2}), a);
  EXPECT_EQ(r.intern({1, 1, 0, 2}), a);  // a repeat is the same member
  EXPECT_NE(r.intern({0, 1}), a);
}

TEST(Rendezvous, ALaunchStartsWhenItsLastMemberArrivesWithEachMembersStreamAndTime) {
  Rendezvous r;
  const SetId s = r.intern({0, 1, 2});
  // Ranks 2, 0, 1 arrive on streams 20, 0, 10 at 3, 1, 2 seconds.
  EXPECT_FALSE(r.arrive(s, 2, 20, 3.0));
  EXPECT_FALSE(r.arrive(s, 0, 0, 1.0));
  const auto met = r.arrive(s, 1, 10, 2.0);
  ASSERT_TRUE(met);
  // In rank order, not arrival order.
  EXPECT_EQ(met->streams, (std::vector<int>{0, 10, 20}));
  EXPECT_EQ(met->since, (std::vector<double>{1.0, 2.0, 3.0}));
}

TEST(Rendezvous, EachMembersLaunchesAreMatchedInTheOrderItReachesThem) {
  Rendezvous r;
  const SetId s = r.intern({0, 1});
  // Rank 0 runs ahead: its launches 0 and 1 at t = 1 and 2.
  EXPECT_FALSE(r.arrive(s, 0, 0, 1.0));
  EXPECT_FALSE(r.arrive(s, 0, 0, 2.0));
  // Rank 1's first arrival meets rank 0's first, its second the second.
  const auto first = r.arrive(s, 1, 1, 5.0);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->since, (std::vector<double>{1.0, 5.0}));
  const auto second = r.arrive(s, 1, 1, 6.0);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->since, (std::vector<double>{2.0, 6.0}));
  // Nothing is left open: a third launch waits for both again.
  EXPECT_FALSE(r.arrive(s, 1, 1, 7.0));
}

TEST(Rendezvous, MembersSpacedEvenlyOrNotMeetAlike) {
  Rendezvous r;
  // {1, 3, 5}: an axis of stride 2 (members' places worked out); {0, 1, 5}: searched.
  for (const std::vector<int>& members : {std::vector<int>{1, 3, 5}, std::vector<int>{0, 1, 5}}) {
    const SetId s = r.intern(members);
    EXPECT_FALSE(r.arrive(s, members[2], 2, 0.5));
    EXPECT_FALSE(r.arrive(s, members[0], 0, 0.25));
    const auto met = r.arrive(s, members[1], 1, 0.75);
    ASSERT_TRUE(met);
    EXPECT_EQ(met->streams, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(met->since, (std::vector<double>{0.25, 0.75, 0.5}));
  }
}

TEST(Recorder, RecordsAreKeptByRankInTheOrderTheyFinish) {
  SimOptions o;
  Recorder r(o);
  r.start(Recorder::Keep::records, 2, 3);
  r.record(1, Rec{0.0, 1.0, 7, -1, 0}, false);
  r.record(0, Rec{0.5, 2.0, 3, -1, 0}, true);
  r.record(1, Rec{1.0, 3.0, 8, 2, 0}, false);
  ASSERT_EQ(r.records(0).size(), 1u);
  ASSERT_EQ(r.records(1).size(), 2u);
  EXPECT_EQ(r.records(1)[0].info, 7);
  EXPECT_EQ(r.records(1)[1].instance, 2);
  EXPECT_EQ(r.records(0)[0].end, 2.0);
  EXPECT_EQ(r.expected(), 3);
}

TEST(Recorder, TheLimitDependsOnWhatIsKeptAndIsRefusedPastIt) {
  SimOptions o;
  o.max_records = 2;
  Recorder records(o), stats(o), count(o);
  records.start(Recorder::Keep::records, 1, 0);
  stats.start(Recorder::Keep::stats, 1, 0);
  count.start(Recorder::Keep::count, 1, 0);
  EXPECT_EQ(records.limit(), 2);
  EXPECT_EQ(stats.limit(), int64_t{1} << 27);
  EXPECT_EQ(count.limit(), int64_t{1} << 30);
  records.record(0, Rec{0, 1}, false);
  records.record(0, Rec{1, 2}, false);
  EXPECT_THROW(records.record(0, Rec{2, 3}, false), ThunkyError);  // the third of at most two
}

TEST(Recorder, ATimePastTenMillionSecondsIsRefused) {
  SimOptions o;
  Recorder r(o);
  r.start(Recorder::Keep::count, 1, 0);
  r.record(0, Rec{0, 9e6}, false);
  EXPECT_THROW(r.record(0, Rec{0, 2e7}, false), ThunkyError);
  // NaN is refused as well: it compares as no time at all.
  EXPECT_THROW(r.record(0, Rec{0, std::nan("")}, false), ThunkyError);
}

TEST(Recorder, CountingKeepsOnlyTheCountAndTheLatestEnd) {
  SimOptions o;
  Recorder r(o);
  r.start(Recorder::Keep::count, 3, 0);
  r.record(0, Rec{0, 4.0}, false);
  r.record(2, Rec{1, 2.5}, true);
  EXPECT_EQ(r.counted(), 2);
  EXPECT_EQ(r.last_end(), 4.0);
}

TEST(Recorder, StatisticsTallyComputeAndCommunicationWithTheirOverlap) {
  SimOptions o;
  Recorder r(o);
  r.start(Recorder::Keep::stats, 1, 0);
  // Compute [0, 2]; a collective [1, 4], of which [1, 2] hides behind compute.
  r.record(0, Rec{0, 2}, false);
  r.record(0, Rec{1, 4}, true);
  const RankStats s = r.tally(0).stats();
  EXPECT_DOUBLE_EQ(s.compute_s, 2.0);
  EXPECT_DOUBLE_EQ(s.comm_s, 3.0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_s, 2.0);  // [2, 4]
  EXPECT_EQ(s.ops, 2);
}

TEST(Recorder, ACollectivesRowIsMadeOnceAnInstance) {
  SimOptions o;
  Recorder r(o);
  r.start(Recorder::Keep::records, 1, 0);
  int made = 0;
  auto make = [&] {
    ++made;
    return CollectiveStat{};
  };
  EXPECT_EQ(r.new_row(5, 0, make), 0);
  EXPECT_EQ(r.new_row(5, 0, make), -1);  // the same instance: made before
  EXPECT_EQ(r.new_row(5, 1, make), 1);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(r.take_rows().size(), 2u);
}

}  // namespace
}  // namespace thunky::sim::internal
