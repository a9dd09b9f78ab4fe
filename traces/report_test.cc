#include "traces/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "traces/test_reports.h"

namespace thunky {
namespace {

using testing::op;
using testing::report;

using Path = std::vector<std::string>;

// One rank. Computation: A [0, 1], B [1, 3], D [3, 4]; communication: C
// [0, 2.5] beside them. D ends last; the op that ended last no later than D
// started (3) is B (C ended at 2.5); before B's start (1) only A ended.
TEST(Summary, CriticalPathStepsBackToTheOpThatEndedLastBeforeEachStart) {
  Report r = report("sim", {{op("A", "gemm", 0, 1), op("B", "gemm", 1, 3), op("C", "all_gather", 0, 2.5), op("D", "gemm", 3, 4)}});
  EXPECT_EQ(r.critical_path, (Path{"A", "B", "D"}));
  // Compute is busy over [0, 4] and the all_gather over [0, 2.5], all of it
  // hidden: exposed 0, overlap 1.
  EXPECT_DOUBLE_EQ(r.summary.compute_s, 4.0);
  EXPECT_DOUBLE_EQ(r.summary.comm_s, 2.5);
  EXPECT_DOUBLE_EQ(r.summary.exposed_comm_s, 0.0);
  EXPECT_DOUBLE_EQ(r.summary.overlap_fraction, 1.0);
  EXPECT_DOUBLE_EQ(r.makespan_s, 4.0);
}

// The same ops listed out of time order give the same path and statistics.
TEST(Summary, OpsOutOfOrderGiveTheSameSummary) {
  Report r = report("exec", {{op("D", "gemm", 3, 4), op("C", "all_gather", 0, 2.5), op("B", "gemm", 1, 3), op("A", "gemm", 0, 1)}});
  EXPECT_EQ(r.critical_path, (Path{"A", "B", "D"}));
  EXPECT_DOUBLE_EQ(r.summary.compute_s, 4.0);
  EXPECT_DOUBLE_EQ(r.summary.exposed_comm_s, 0.0);
}

// Ops that end together: the one on the next op's stream is on the path,
// in whatever order the ops are listed. X (computation) and Y
// (communication) both end at 2; Z, on the computation stream, starts at 2.
TEST(Summary, OfOpsEndingTogetherTheOneOnTheNextOpsStreamIsOnThePath) {
  for (const auto& ops : {std::vector<OpRecord>{op("X", "gemm", 0, 2), op("Y", "all_gather", 1, 2), op("Z", "gemm", 2, 3)},
                          std::vector<OpRecord>{op("Z", "gemm", 2, 3), op("Y", "all_gather", 1, 2), op("X", "gemm", 0, 2)},
                          std::vector<OpRecord>{op("Y", "all_gather", 1, 2), op("X", "gemm", 0, 2), op("Z", "gemm", 2, 3)}}) {
    Report r = report("sim", {ops});
    EXPECT_EQ(r.critical_path, (Path{"X", "Z"}));
    // The all_gather [1, 2] lies inside the compute [0, 3]: nothing exposed.
    EXPECT_DOUBLE_EQ(r.summary.exposed_comm_s, 0.0);
  }
  // Neither on Z's stream (two all_gathers end at 2): the first by id, P.
  for (const auto& ops : {std::vector<OpRecord>{op("Q", "all_gather", 0, 2), op("P", "all_gather", 1, 2), op("Z", "gemm", 2, 3)},
                          std::vector<OpRecord>{op("P", "all_gather", 1, 2), op("Q", "all_gather", 0, 2), op("Z", "gemm", 2, 3)}})
    EXPECT_EQ(report("sim", {ops}).critical_path, (Path{"P", "Z"}));
}

// Communication that runs past the compute is exposed for that long.
TEST(Summary, CommunicationPastTheComputeIsExposed) {
  // GEMM [0, 1], all_reduce [0.5, 3]: exposed over [1, 3] = 2 of 2.5.
  Report r = report("sim", {{op("G", "gemm", 0, 1), op("R", "all_reduce", 0.5, 3)}});
  EXPECT_DOUBLE_EQ(r.summary.comm_s, 2.5);
  EXPECT_DOUBLE_EQ(r.summary.exposed_comm_s, 2.0);
  EXPECT_DOUBLE_EQ(r.summary.overlap_fraction, 1.0 - 2.0 / 2.5);
  EXPECT_EQ(r.critical_path, (Path{"R"}));
}

// A collective's wait (arrived, the other members not yet) and its
// transfer are told apart, in all and where exposed.
TEST(Summary, WaitingIsToldApartFromTransfer) {
  // all_reduce [0, 10], its data moving from 4; a GEMM [2, 6] beside it.
  // comm 10 = wait [0, 4) 4 + transfer [4, 10] 6. Exposed: [0, 2] and
  // [6, 10] = 6, of which waiting [0, 2] = 2 and transfer [6, 10] = 4.
  OpRecord r = op("R", "all_reduce", 0, 10);
  r.transfer_start_s = 4;
  Report rep = report("exec", {{r, op("G", "gemm", 2, 6)}});
  EXPECT_DOUBLE_EQ(rep.summary.comm_s, 10.0);
  EXPECT_DOUBLE_EQ(rep.summary.wait_s, 4.0);
  EXPECT_DOUBLE_EQ(rep.summary.transfer_s, 6.0);
  EXPECT_DOUBLE_EQ(rep.summary.exposed_comm_s, 6.0);
  EXPECT_DOUBLE_EQ(rep.summary.exposed_wait_s, 2.0);
  EXPECT_DOUBLE_EQ(rep.summary.exposed_transfer_s, 4.0);
  // A collective without a transfer start (a backend that cannot tell) is
  // all transfer.
  Report plain = report("exec", {{op("R", "all_reduce", 0, 10)}});
  EXPECT_DOUBLE_EQ(plain.summary.wait_s, 0.0);
  EXPECT_DOUBLE_EQ(plain.summary.transfer_s, 10.0);
  // The split survives the file, its figures in the stats; a transfer
  // start outside the op is refused with its pointer.
  std::ostringstream text;
  write_report(rep, text);
  const Report back = parse_report(text.str());
  ASSERT_EQ(back.ranks[0].ops.size(), 2u);
  const OpRecord& reduce = back.ranks[0].ops[0].op == "all_reduce" ? back.ranks[0].ops[0] : back.ranks[0].ops[1];
  EXPECT_EQ(reduce.transfer_start_s, 4.0);
  EXPECT_DOUBLE_EQ(back.summary.exposed_wait_s, 2.0);
  EXPECT_NE(text.str().find("\"exposed_wait_s\""), std::string::npos);
  std::string bad = text.str();
  const size_t at = bad.find("\"transfer_start_s\"");
  ASSERT_NE(at, std::string::npos) << bad;
  bad.insert(bad.find(':', at) + 1, "11");  // 114.0 or so: past the end, 10
  try {
    parse_report(bad);
    ADD_FAILURE() << "a transfer start after the op's end was accepted";
  } catch (const ThunkyError& e) {
    EXPECT_EQ(e.pointer(), "/ranks/0/ops/0/transfer_start_s") << e.what();
  }
}

// The trace shows the wait as a slice of its own; the table has its columns.
TEST(Summary, TheTraceAndTableShowTheWait) {
  OpRecord r = op("R", "all_reduce", 0, 10e-6);
  r.transfer_start_s = 4e-6;
  Report rep = report("exec", {{r}});
  std::ostringstream trace;
  write_chrome_trace(rep, trace);
  const auto j = nlohmann::json::parse(trace.str());
  int waits = 0;
  for (const auto& e : j["traceEvents"])
    if (e.value("cat", "") == "wait") {
      ++waits;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);
      EXPECT_NEAR(e["dur"].get<double>(), 4.0, 1e-9);  // us
    }
  EXPECT_EQ(waits, 1);
  std::ostringstream table;
  print_table(rep, table);
  // wait 4 us, transfer 6 us, all of the wait exposed.
  EXPECT_NE(table.str().find("wait_us"), std::string::npos);
  EXPECT_TRUE(testing::has_row(table.str(), {"4.000", "6.000", "4.000"})) << table.str();
}

// A tally kept op by op (without the ops) gives the statistics in every
// order the ops may come in: in order of end (a simulation), of start, or
// neither (an interval that lands between or before those already merged).
TEST(Summary, ATallyOfOpsInAnyOrderGivesTheSameStatistics) {
  struct Iv {
    double start, end;
    bool collective;
  };
  // Compute [0, 1], [2, 3], [4, 5] and [4.5, 6]: busy over [0, 1], [2, 3],
  // [4, 6] = 4. Communication [0.5, 2.5] and [5.5, 7]: 3.5, of which the
  // part outside compute is exposed: [1, 2] and [6, 7] = 2.
  std::vector<Iv> ops = {{0, 1, false}, {0.5, 2.5, true}, {2, 3, false}, {4, 5, false}, {4.5, 6, false}, {5.5, 7, true}};
  std::vector<int> order = {0, 1, 2, 3, 4, 5};
  int orders = 0;
  do {
    TimelineTally t;
    for (int k : order) t.add(ops[k].start, ops[k].end, ops[k].collective);
    const RankStats s = t.stats();
    EXPECT_DOUBLE_EQ(s.compute_s, 4.0);
    EXPECT_DOUBLE_EQ(s.comm_s, 3.5);
    EXPECT_DOUBLE_EQ(s.exposed_comm_s, 2.0);
    EXPECT_DOUBLE_EQ(s.overlap_fraction, 1.0 - 2.0 / 3.5);
    EXPECT_EQ(s.ops, 6);
    EXPECT_DOUBLE_EQ(t.last_end_s(), 7.0);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 720);  // 6!
}

}  // namespace
}  // namespace thunky

namespace thunky {
namespace {

TEST(ReportFile, RanksWithTheFirstRanksTimelineAreWrittenOnceAndReadBackWhole) {
  using testing::op;
  // Ranks 0, 1 and 3 run the same two ops at the same times; rank 2's GEMM
  // ends later. The file holds rank 0's ops, "same_as": 0 for ranks 1 and 3,
  // and rank 2's own ops; reading it back gives all four ranks' ops.
  const std::vector<OpRecord> same = {op("/0", "all_gather", 0, 2e-6), op("/1", "gemm", 2e-6, 5e-6)};
  const std::vector<OpRecord> late = {op("/0", "all_gather", 0, 2e-6), op("/1", "gemm", 2e-6, 6e-6)};
  Report r = testing::report("sim", {same, same, late, same});  // every rank its own ops in memory
  std::ostringstream text;
  write_report(r, text);
  const std::string s = text.str();
  size_t folded = 0;
  for (size_t at = 0; (at = s.find("\"same_as\":0", at)) != std::string::npos; ++at) ++folded;
  EXPECT_EQ(folded, 2u) << s;
  Report back = parse_report(s);
  ASSERT_EQ(back.ranks.size(), 4u);
  for (int k : {1, 3}) {
    const RankReport& line = back.timeline(back.ranks[k]);
    ASSERT_EQ(line.ops.size(), 2u);
    EXPECT_EQ(line.ops[1].end_s, 5e-6);
    EXPECT_EQ(back.ranks[k].rank, k);
    EXPECT_EQ(back.ranks[k].same_as, 0);
  }
  EXPECT_EQ(back.ranks[2].ops[1].end_s, 6e-6);
  // The stats are the ranks' own: rank 1 computes 3 us, like rank 0.
  EXPECT_NEAR(back.ranks[1].stats.compute_s, 3e-6, 1e-15);
}

TEST(ReportFile, SameAsMustNameAnEarlierRank) {
  const std::string j = (R"({"format": "thunky.report/1", "source": "sim", "schedule": "s",
    "mesh": {"axis_names": ["x"], "shape": [2]}, "makespan_s": 0,
    "ranks": [{"rank": 0, "coords": [0], "same_as": 1}, {"rank": 1, "coords": [1], "ops": []}]})");
  try {
    parse_report(j);
    ADD_FAILURE() << "a forward same_as was accepted";
  } catch (const ThunkyError& e) {
    EXPECT_EQ(e.pointer(), "/ranks/0/same_as");
  }
}

}  // namespace
}  // namespace thunky
