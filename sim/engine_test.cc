#include "sim/engine.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "core/accounting.h"
#include "core/load.h"
#include "core/mesh.h"
#include "sim/collective_table.h"
#include "sim/nccl_model.h"
#include "sim/symmetry.h"
#include "sim/fold_test_util.h"
#include "tests/test_util.h"
#include "tools/gen.h"

namespace thunky::sim {
namespace {

// Options that fold symmetric ranks, or simulate every rank.
SimOptions folding(bool fold) {
  SimOptions o;
  o.fold_symmetric_ranks = fold;
  return o;
}

using testing::load_ok;

// A ring machine with wraparound, 1e9 B/s per direction and no latency, so
// times are bytes / 1e9 exactly; compute at 1e12 flop/s, 1e12 B/s HBM.
Machine ring_machine(bool wrap = true, double alpha = 0) {
  return parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "test-ring",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e12, "source": "test"},
    "axes": {"*": {"topology": "ring", "wraparound": )" + std::string(wrap ? "true" : "false") +
                                                       R"(, "link_bandwidth": 1e9, "hop_latency_s": )" + std::to_string(alpha) + "}}}"));
}

std::string mesh4(const std::string& program, const std::string& extra = "") {
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [4]},
    "buffers": {"a": {"shape": [250000], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
                "b": {"shape": [250000], "dtype": "f32"}, "c": {"shape": [250000], "dtype": "f32"},
                "m": {"shape": [64, 64], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "o1": {"shape": [64, 64], "dtype": "f32"}, "o2": {"shape": [64, 64], "dtype": "f32"})" + extra + R"(},
    "program": )" + program + "}";
}

double makespan(const std::string& sched, const Machine& m, const Decisions* d = nullptr) {
  Program p = load_ok(sched);
  auto r = simulate(p, m, d);
  if (!r) {
    ADD_FAILURE() << r.errors()[0].str();
    return -1;
  }
  return r->report.makespan_s;
}

TEST(SimLinks, NeighbourShiftTakesBytesOverOneDirection) {
  // 250000 f32 = 1e6 bytes over one 1e9 B/s direction: 1 ms.
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}])"), ring_machine()), 1e-3, 1e-9);
}

TEST(SimWait, ACollectiveRecordsItsArrivalApartFromItsTransfer) {
  // Rank r first sets r * 83333 + 1 elements of b (4 bytes each at 1e12
  // B/s): rank 3 is done at 250000 * 4 / 1e12 = 1 us, rank 0 at 4 ps. The
  // all_reduce's data moves once rank 3 arrives, at 1 us: rank r waits
  // 1 us - (r * 83333 + 1) * 4 ps, rank 3 not at all; its transfer is the
  // same on every rank.
  Program p = load_ok(mesh4(R"([{"op": "memset", "dst": "b[0:x * 83333 + 1]", "value": 1},
                                {"op": "all_reduce", "src": "o1", "dst": "o2", "axis": "x"}])"));
  auto r = simulate(p, ring_machine(), nullptr, folding(false));
  ASSERT_TRUE(r) << r.errors()[0].str();
  ASSERT_EQ(r->report.ranks.size(), 4u);
  double transfer = -1;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const RankReport& line = r->report.timeline(r->report.ranks[static_cast<size_t>(rank)]);
    const OpRecord& reduce = line.ops[1];
    ASSERT_EQ(reduce.op, "all_reduce");
    ASSERT_TRUE(reduce.transfer_start_s.has_value());
    const double arrived = static_cast<double>(rank * 83333 + 1) * 4 / 1e12;
    EXPECT_NEAR(reduce.start_s, arrived, 1e-15);
    EXPECT_NEAR(*reduce.transfer_start_s, 1e-6, 1e-15);
    EXPECT_NEAR(r->report.ranks[static_cast<size_t>(rank)].stats.wait_s, 1e-6 - arrived, 1e-15);
    if (transfer < 0) transfer = reduce.end_s - *reduce.transfer_start_s;
    EXPECT_NEAR(r->report.ranks[static_cast<size_t>(rank)].stats.transfer_s, transfer, 1e-15);
  }
  EXPECT_GT(transfer, 0);
  // thunky-sim's table (statistics gathered as commands finish) agrees.
  SimOptions stats_only = folding(false);
  stats_only.timelines = false;
  auto t = simulate(p, ring_machine(), nullptr, stats_only);
  ASSERT_TRUE(t) << t.errors()[0].str();
  EXPECT_NEAR(t->report.ranks[0].stats.wait_s, 1e-6 - 4e-12, 1e-15);
  EXPECT_NEAR(t->report.ranks[3].stats.wait_s, 0, 1e-15);
  EXPECT_NEAR(t->report.ranks[0].stats.exposed_wait_s, 1e-6 - 4e-12, 1e-15);
}

TEST(SimWait, ALongRunsTableFoldsItsIntervalsAndAgreesWithItsTimeline) {
  // Rounds of (a memset as long as the rank's number, a 1 ms shift on the
  // communication stream under a 1.5 ms kernel, their join, an
  // all_reduce): 5 commands a round, so thunky-sim's table folds its
  // tallies every 256 intervals or so, each time at whatever command
  // finishes then, sometimes while a kernel that began before the horizon
  // still runs. A round adds 5 intervals to a tally (2 at the shift, 2 at
  // the all_reduce, 1 at the cond; the memset and kernel join the cond's);
  // a prefix of k (kernel, all_reduce) pairs adds 3k first, so that over
  // k = 0..4 the folds fall at every phase of a round. Every figure of
  // every rank must equal the one summarised from the full timeline; the
  // shifts are hidden and the all_reduces are not, so the exposed
  // communication lies strictly between none and all.
  const int rounds = 600;
  for (int k = 0; k < 5; ++k) {
    std::string prefix;
    for (int i = 0; i < k; ++i) prefix += R"({"op": "kernel", "cost": {"seconds": 1e-6}}, {"op": "all_reduce", "src": "o1", "dst": "o2", "axis": "x"}, )";
    Program p = load_ok(mesh4("[" + prefix + R"({"op": "while", "cond_buf": "go", "sim": {"trip_count": )" + std::to_string(rounds) + R"(},
         "cond": [{"op": "kernel", "writes": ["go"], "cost": {"seconds": 1e-7}}],
         "body": [{"op": "memset", "dst": "b[0:x * 20000 + 1]", "value": 1},
                  {"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
                    {"op": "collective_permute", "src": "a", "dst": "c", "axis": "x", "shift": 1}]},
                  {"op": "kernel", "reads": ["a"], "cost": {"seconds": 1.5e-3}},
                  {"op": "async_done", "token": "t"},
                  {"op": "all_reduce", "src": "o1", "dst": "o2", "axis": "x"}]}])",
                              R"(, "go": {"shape": [], "dtype": "bool"})"));
    auto full = simulate(p, ring_machine(), nullptr, folding(false));
    ASSERT_TRUE(full) << full.errors()[0].str();
    SimOptions stats_only = folding(false);
    stats_only.timelines = false;
    auto table = simulate(p, ring_machine(), nullptr, stats_only);
    ASSERT_TRUE(table) << table.errors()[0].str();
    ASSERT_EQ(table->report.ranks.size(), 4u);
    for (size_t rank = 0; rank < 4; ++rank) {
      const RankStats& want = full->report.ranks[rank].stats;
      const RankStats& got = table->report.ranks[rank].stats;
      EXPECT_EQ(got.ops, 2 * k + 1 + 5 * rounds);  // the prefix, the first cond, then memset, shift, kernel, all_reduce and cond a round
      for (auto [a, b] : {std::pair{got.compute_s, want.compute_s}, {got.comm_s, want.comm_s}, {got.exposed_comm_s, want.exposed_comm_s},
                          {got.transfer_s, want.transfer_s}, {got.wait_s, want.wait_s}, {got.exposed_wait_s, want.exposed_wait_s}})
        ASSERT_NEAR(a, b, 1e-9 * std::max(1e-6, b)) << "prefix " << k << ", rank " << rank;
      EXPECT_GT(want.exposed_comm_s, 0);
      EXPECT_LT(want.exposed_comm_s, 0.9 * want.comm_s);
    }
  }
}

TEST(SimWait, TheCollectiveTableOfAnyRankReadsAsTheEnginesOfRankZero) {
  // thunky-sim tallies rank 0's collectives as they run; --ranks reads any
  // rank's from its timeline. For rank 0 the two agree, figure for figure:
  // the time is the transfer (the wait left out), bytes the larger view.
  Program p = load_ok(mesh4(R"([{"op": "memset", "dst": "b[0:x * 83333 + 1]", "value": 1},
                                {"op": "all_reduce", "src": "o1", "dst": "o2", "axis": "x"},
                                {"op": "collective_permute", "src": "a", "dst": "c", "axis": "x", "shift": 1}])"));
  auto r = simulate(p, ring_machine(), nullptr, folding(false));
  ASSERT_TRUE(r) << r.errors()[0].str();
  const std::vector<CollectiveStat> read = collective_stats(p, r->report, 0);
  ASSERT_EQ(read.size(), r->collectives.size());
  ASSERT_EQ(read.size(), 2u);
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].id, r->collectives[i].id);
    EXPECT_EQ(read[i].ranks, 4);
    EXPECT_DOUBLE_EQ(read[i].bytes, r->collectives[i].bytes);
    EXPECT_NEAR(read[i].seconds, r->collectives[i].seconds, 1e-15);
    EXPECT_NEAR(read[i].bus_bw, r->collectives[i].bus_bw, 1e-6 * r->collectives[i].bus_bw);
  }
  // The shift moves 1 MB over one 1e9 B/s link: 1 ms, on rank 2 as on 0.
  const std::vector<CollectiveStat> rank2 = collective_stats(p, r->report, 2);
  ASSERT_EQ(rank2.size(), 2u);
  EXPECT_EQ(rank2[1].rank, 2);
  EXPECT_NEAR(rank2[1].seconds, 1e-3, 1e-9);
  std::ostringstream table;
  print_collective_table(rank2, true, table);
  EXPECT_NE(table.str().find("collective (rank 2)"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("1000000"), std::string::npos) << table.str();  // --per-instance keeps the bytes
}

TEST(SimLinks, TwoClockwiseShiftsShareAndOppositeShiftsDoNot) {
  // Two clockwise shifts grouped cross the same directed links: half rate each, 2 ms.
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "collective_group", "body": [
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1},
      {"op": "collective_permute", "src": "a", "dst": "c", "axis": "x", "shift": 1}]}])"), ring_machine()), 2e-3, 1e-9);
  // Clockwise and counter-clockwise use opposite directions: 1 ms together.
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "collective_group", "body": [
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1},
      {"op": "collective_permute", "src": "a", "dst": "c", "axis": "x", "shift": -1}]}])"), ring_machine()), 1e-3, 1e-9);
}

// A 2x2 mesh (x, y) whose program is one collective_group: a shift of
// 1e6 bytes along x from a into b, and `second` (writing c).
std::string group_on_2x2(const std::string& second) {
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x", "y"], "shape": [2, 2]},
    "buffers": {"a": {"shape": [250000], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
                "b": {"shape": [250000], "dtype": "f32"}, "c": {"shape": [250000], "dtype": "f32"}},
    "program": [{"op": "collective_group", "body": [
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}, )" + second + "]}]}";
}

TEST(SimLinks, GroupOfShiftsOverTwoAxesLaunchesOnEveryConnectedRank) {
  // 2x2 mesh; a shift along x and one along y grouped. Their communicators
  // connect all four ranks, so they launch as one; x and y links are
  // distinct, so each 1e6-byte shift takes 1 ms and so does the group.
  EXPECT_NEAR(makespan(group_on_2x2(R"({"op": "collective_permute", "src": "a", "dst": "c", "axis": "y", "shift": 1})"), ring_machine()), 1e-3, 1e-9);
}

TEST(SimLinks, SummaryAgreesWithTheReport) {
  // The engine-only path finishes the same commands at the same makespan.
  gen::RingMatmulOptions o;
  o.ranks = 6;
  Program p = load_ok(gen::bidirectional_ring_matmul(o).dump());
  // Folded or with every rank simulated (the summary counts finished
  // commands instead of recording them).
  for (bool fold : {true, false}) {
    auto full = simulate(p, ring_machine(), nullptr, folding(fold));
    auto summary = simulate_summary(p, ring_machine(), nullptr, folding(fold));
    ASSERT_TRUE(full.ok() && summary.ok());
    size_t ops = 0;
    for (const auto& r : full->report.ranks) ops += full->report.timeline(r).ops.size();
    EXPECT_EQ(summary->rank_commands, static_cast<int64_t>(ops));
    EXPECT_EQ(summary->makespan_s, full->report.makespan_s);
  }
}

TEST(SimLinks, UtilisationTracksPerLink) {
  Program p = load_ok(mesh4(R"([{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}])"));
  auto r = simulate(p, ring_machine(), nullptr);
  ASSERT_TRUE(r.ok());
  // Four clockwise links, each fully used from 0 to 1 ms, then idle.
  ASSERT_EQ(r->report.links.size(), 4u);
  for (const auto& l : r->report.links) {
    ASSERT_EQ(l.samples.size(), 2u) << l.name;
    EXPECT_EQ(l.samples[0], (std::pair<double, double>{0.0, 1.0}));
    EXPECT_NEAR(l.samples[1].first, 1e-3, 1e-12);
    EXPECT_EQ(l.samples[1].second, 0.0);
  }
}

TEST(SimLinks, DesignFigureThroughTheEngine) {
  // v5e, 4 ranks, no wraparound: AllGather of bf16[2048, 8192] sharded 4 ways
  // (8.4 MB shards) takes (n-1)(V/n)/(W/2) = 559.2 us; the closed ring 372.8 us.
  const std::string s = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [4]},
    "buffers": {"a": {"shape": [512, 8192], "dtype": "bf16", "role": "input", "init": {"kind": "zeros"}},
                "g": {"shape": [2048, 8192], "dtype": "bf16"}},
    "program": [{"op": "all_gather", "src": "a", "dst": "g", "axis": "x"}]})";
  auto load = [](const char* name) { return load_machine(name, std::string(THUNKY_SOURCE_DIR) + "/models").value(); };
  Machine v5e = load("tpu-v5e");
  EXPECT_NEAR(makespan(s, v5e), 559.2e-6, 0.1e-6);
  v5e.axes["*"].wraparound = true;
  EXPECT_NEAR(makespan(s, v5e), 372.8e-6, 0.1e-6);
}

TEST(SimLinks, SwitchAndHierarchicalThroughTheEngine) {
  // 1 GiB gathered (f32[2^28] over 16 ranks = f32[2^24] shards).
  auto sched = [](int n) {
    return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [)" + std::to_string(n) + R"(]},
      "buffers": {"a": {"shape": [)" + std::to_string((1 << 28) / n) + R"(], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
                  "g": {"shape": [268435456], "dtype": "f32"}},
      "program": [{"op": "all_gather", "src": "a", "dst": "g", "axis": "x"}]})";
  };
  const std::string models = std::string(THUNKY_SOURCE_DIR) + "/models";
  const double gib = 1073741824.0;
  // H100 node, NCCL model: ring/Simple all_gather, n - 1 = 7 steps:
  // 1.92 + 8.4 + 7 x 8.04 = 66.60 us, plus 7/8 x 2^30 / (0.82 x 4.5e11).
  EXPECT_NEAR(makespan(sched(8), load_machine("h100-8gpu", models).value()), 66.60e-6 + 7.0 / 8 * gib / (0.82 * 4.5e11), 1e-9);
  // H100 cluster, 16 ranks = 2 nodes: 15 steps, one across nodes (28 us):
  // 1.92 + 8.4 + 14 x 8.04 + 28 = 150.88 us, and a node's 8 NICs at
  // 0.92 x 5e10 each (368 GB/s, under NVLink's 369) bound the bandwidth.
  EXPECT_NEAR(makespan(sched(16), load_machine("h100-cluster", models).value()), 150.88e-6 + 15.0 / 16 * gib / (0.92 * 5e10 * 8), 1e-9);
}

// One collective alone on 4 ranks, V = 1e6 bytes (the gathered result,
// the unreduced input, the array), no latency, through the engine.
struct CollectiveCase {
  const char* topology;
  const char* op;
  double seconds;  // derived by hand below
};

Machine topology_machine(const std::string& t) {
  std::string axes;
  if (t == "ring" || t == "line")
    axes = R"({"topology": "ring", "wraparound": )" + std::string(t == "ring" ? "true" : "false") + R"(, "link_bandwidth": 1e9, "hop_latency_s": 0})";
  else if (t == "switch")
    axes = R"({"topology": "switch", "egress_bandwidth": 1e9, "latency_s": 0, "collective_model": "ideal"})";
  else
    axes = R"({"topology": "hierarchical", "group_size": 2, "switch": {"egress_bandwidth": 1e9, "latency_s": 0}, "nic_bandwidth": 1e8, "nic_latency_s": 0, "collective_model": "ideal"})";
  return parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "t",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e12, "source": "test"}, "axes": {"*": )" + axes + "}}"));
}

class EveryCollective : public ::testing::TestWithParam<CollectiveCase> {};

TEST_P(EveryCollective, AloneTakesItsClosedForm) {
  const auto& c = GetParam();
  // Shapes in f32 elements: 62500 = 250 kB, 250000 = 1 MB.
  const std::string op = c.op;
  const std::string src = op == "all_gather" ? "s" : "l", dst = op == "reduce_scatter" ? "s" : "l2";
  const std::string sched = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [4]},
    "buffers": {"s": {"shape": [62500], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "l": {"shape": [250000], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "l2": {"shape": [250000], "dtype": "f32"}},
    "program": [{"op": ")" + op + R"(", "src": ")" + src + R"(", "dst": ")" + dst + R"(", "axis": "x"}]})";
  EXPECT_NEAR(makespan(sched, topology_machine(c.topology)), c.seconds, 1e-12) << c.topology << " " << c.op;
}

// ring (W = 1e9 B/s each way, both ways used: 2e9): AG, RS V / 2e9 = 0.5 ms;
//   AR twice that; A2A a quarter: 0.125 ms.
// line (no wraparound): the farthest shard crosses 3 links one way:
//   3 (V/4) / 1e9 = 0.75 ms; AR 1.5 ms; A2A 0.1875 ms.
// switch (egress 1e9): (3/4) V / 1e9 = 0.75 ms; AR 1.5 ms; A2A 0.75 ms.
// hierarchical (groups of 2 on a 1e9 switch, NICs of 1e8): within a group
//   (1/2) V / 1e9 = 0.5 ms, across the 2 groups (1/2) V / (2 x 1e8) = 2.5 ms:
//   3 ms; AR 6 ms; A2A 3 ms.
INSTANTIATE_TEST_SUITE_P(Topologies, EveryCollective,
                         ::testing::Values(CollectiveCase{"ring", "all_gather", 0.5e-3}, CollectiveCase{"ring", "reduce_scatter", 0.5e-3},
                                           CollectiveCase{"ring", "all_reduce", 1e-3}, CollectiveCase{"ring", "all_to_all", 0.125e-3},
                                           CollectiveCase{"line", "all_gather", 0.75e-3}, CollectiveCase{"line", "reduce_scatter", 0.75e-3},
                                           CollectiveCase{"line", "all_reduce", 1.5e-3}, CollectiveCase{"line", "all_to_all", 0.1875e-3},
                                           CollectiveCase{"switch", "all_gather", 0.75e-3}, CollectiveCase{"switch", "reduce_scatter", 0.75e-3},
                                           CollectiveCase{"switch", "all_reduce", 1.5e-3}, CollectiveCase{"switch", "all_to_all", 0.75e-3},
                                           CollectiveCase{"hierarchical", "all_gather", 3e-3}, CollectiveCase{"hierarchical", "reduce_scatter", 3e-3},
                                           CollectiveCase{"hierarchical", "all_reduce", 6e-3}, CollectiveCase{"hierarchical", "all_to_all", 3e-3}));

TEST(SimLinks, PermutesAcrossNodesGoThroughTheNics) {
  // Groups of 2 on a 1e9 B/s switch, a 1e8 B/s NIC per GPU, no latency; a
  // shift by 1 of 1 MB on 4 ranks: 0>1 and 2>3 stay in their node (1e6 /
  // 1e9 = 1 ms), 1>2 and 3>0 cross through the sender's NIC and the
  // receiver's (1e6 / 1e8 = 10 ms).
  const Machine h = topology_machine("hierarchical");
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}])"), h), 10e-3, 1e-9);
  // Rank 1 sending to both ranks of the other node at once (two permutes
  // in one group): its NIC carries both, 2 MB / 1e8 = 20 ms.
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "collective_group", "body": [
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "pairs": [[1, 2]]},
      {"op": "collective_permute", "src": "a", "dst": "c", "axis": "x", "pairs": [[1, 3]]}]}])"), h), 20e-3, 1e-9);
  // A collective across nodes drives the same NICs. An all_gather of 1 MB
  // (3 ms alone) beside the shift: on the NICs of ranks 1 and 3 (out) and
  // 2 and 0 (in) each gets 5e7 B/s; the all_gather's 3 ms at 1e8 take 6
  // ms at half, when 1>2 and 3>0 have sent 3e5 of their 1e6 bytes; the rest
  // at the full 1e8 takes 7 ms more: 13 ms, not the 10 of separate NICs.
  const std::string gathered = R"(, "s": {"shape": [62500], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}}, "g": {"shape": [250000], "dtype": "f32"})";
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "collective_group", "body": [
      {"op": "all_gather", "src": "s", "dst": "g", "axis": "x"},
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}]}])", gathered), h), 13e-3, 1e-9);
}

TEST(SimLinks, PermutesOnNcclAxesAreNcclSends) {
  // 64 MiB shifted by 1, as ncclSend/ncclRecv run it (Simple over one
  // link). h100-8gpu: 1.92 + 8.4 + 8.04 = 18.36 us of latency, plus 2^26 /
  // (0.82 x 450 GB/s) = 181.87 us.
  const std::string models = std::string(THUNKY_SOURCE_DIR) + "/models";
  auto sched = [](int n) {
    return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [)" + std::to_string(n) + R"(]},
      "buffers": {"a": {"shape": [16777216], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}}, "b": {"shape": [16777216], "dtype": "f32"}},
      "program": [{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}]})";
  };
  const double v = 67108864.0;
  const Program p8 = load_ok(sched(8));
  auto node = simulate(p8, load_machine("h100-8gpu", models).value(), nullptr);
  ASSERT_TRUE(node);
  EXPECT_NEAR(node->report.makespan_s, 18.36e-6 + v / (0.82 * 4.5e11), 1e-9);
  ASSERT_EQ(node->collectives.size(), 1u);
  EXPECT_EQ(node->collectives[0].algorithm, "p2p/Simple");
  // Up to 16 KiB NCCL sends with LL: 4 KiB in 1.92 + 6.6 + 1.75 = 10.27 us
  // plus 4096 / (0.147 x 450 GB/s) = 0.06 us.
  const Machine h100 = load_machine("h100-8gpu", models).value();
  const NcclChoice small = nccl_p2p(*h100.axis("x"), false, 4096);
  EXPECT_EQ(small.proto, NcclProto::ll);
  EXPECT_NEAR(small.seconds(), 10.27e-6 + 4096 / (0.147 * 4.5e11), 1e-9);
  // h100-cluster, 16 ranks: 7>8 and 15>0 cross nodes through their NICs,
  // at the network's Simple figures: 1.92 + 8.4 + 28 = 38.32 us, plus 2^26
  // / (0.92 x 50 GB/s) = 1,458.9 us.
  EXPECT_NEAR(makespan(sched(16), load_machine("h100-cluster", models).value()), 38.32e-6 + v / (0.92 * 5e10), 1e-9);
}

TEST(SimLinks, ARanksHostFloorHoldsItsSendsAndCollectives) {
  // h100-8gpu whose host takes 1 ms to issue a GPU's part: a 4-byte shift
  // (10.27 us on the GPUs, LL) and a 4-byte all_reduce (33 us) each take 1
  // ms, one launch of the rank's own thread; one after the other, 2 ms.
  const std::string models = std::string(THUNKY_SOURCE_DIR) + "/models";
  Machine m = load_machine("h100-8gpu", models).value();
  m.axes.at("*").nccl_params.host_launch_s = 1e-3;
  auto sched = [](const std::string& program) {
    return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [8]},
      "buffers": {"a": {"shape": [1], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}}, "b": {"shape": [1], "dtype": "f32"}, "c": {"shape": [1], "dtype": "f32"}},
      "program": )" + program + "}";
  };
  const std::string shift = R"({"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1})";
  const std::string reduce = R"({"op": "all_reduce", "src": "a", "dst": "c", "axis": "x"})";
  EXPECT_NEAR(makespan(sched("[" + shift + "]"), m), 1e-3, 1e-12);
  EXPECT_NEAR(makespan(sched("[" + reduce + "]"), m), 1e-3, 1e-12);
  EXPECT_NEAR(makespan(sched("[" + shift + ", " + reduce + "]"), m), 2e-3, 1e-12);
}

TEST(SimLinks, AxisIndexGroupsRunAsSmallerRings) {
  // all_reduce of 1e6 bytes with groups {0,1} and {2,3} of a 4-ring: each
  // group is a 2-rank ring, 2 V / (2 x 1e9) = 1 ms, and the two groups use
  // disjoint links, so together they still take 1 ms.
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "x", "groups": [[0, 1], [2, 3]]}])"), ring_machine()), 1e-3, 1e-12);
}

TEST(SimLinks, CollectiveOverTwoAxesSplitsTheBandwidthTerm) {
  // all_gather of 1e6 bytes over both axes of a 2x2 torus: n = 4, two axes
  // at once: V / (2 x 2 x 1e9) = 0.25 ms.
  const std::string s = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x", "y"], "shape": [2, 2]},
    "buffers": {"a": {"shape": [62500], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
                "g": {"shape": [250000], "dtype": "f32"}},
    "program": [{"op": "all_gather", "src": "a", "dst": "g", "axis": ["x", "y"]}]})";
  EXPECT_NEAR(makespan(s, ring_machine()), 0.25e-3, 1e-12);
}

TEST(SimLinks, AShiftBesideAnAllGatherSharesItsLinks) {
  // On the 4-ring, an all_gather of 1e6 bytes (0.5 ms alone, one flow over
  // all 8 directed links at 1e9) runs beside a clockwise shift of 1e6 bytes
  // (1 ms alone) issued on communication:0. They share the 4 clockwise
  // links at 5e8 each: the gather's 5e5 bytes-at-link-rate need 1 ms, the
  // shift has then moved 5e5 and finishes the rest alone at 1e9: 1.5 ms.
  const std::string s = mesh4(R"([{"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}]},
    {"op": "all_gather", "src": "s", "dst": "c", "axis": "x"},
    {"op": "async_done", "token": "t"}])", R"(, "s": {"shape": [62500], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}})");
  EXPECT_NEAR(makespan(s, ring_machine()), 1.5e-3, 1e-9);
}

TEST(SimCompute, TwoKernelsOnTwoStreamsTakeTheSum) {
  // Two 1 ms kernels forked onto two streams of one rank share its
  // throughput: both end at 2 ms.
  const std::string k = R"({"op": "kernel", "writes": ["o1"], "cost": {"seconds": 0.001}})";
  const std::string k2 = R"({"op": "kernel", "writes": ["o2"], "cost": {"seconds": 0.001}})";
  Program p = load_ok(mesh4(R"([{"op": "async_start", "token": "t", "stream": {"kind": "computation", "id": 1}, "body": [)" + k +
                            R"(]}, )" + k2 + R"(, {"op": "async_done", "token": "t"}])"));
  auto r = simulate(p, ring_machine(), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->report.makespan_s, 2e-3, 1e-9);
  // They run side by side from 0 (not one after the other).
  int kernels = 0;
  for (const auto& op : r->report.ranks[0].ops) {
    if (op.op != "kernel") continue;
    ++kernels;
    EXPECT_EQ(op.start_s, 0.0) << op.id;
    EXPECT_NEAR(op.end_s, 2e-3, 1e-9) << op.id;
  }
  EXPECT_EQ(kernels, 2);
}

// Commands with the same inputs are priced once and remembered; the
// remembered price must be the one a fresh pricing gives, and commands that
// differ in beta or expression must not share one. On one stream nothing
// overlaps, so each op lasts exactly its own time.
TEST(SimCompute, RepeatedCommandsArePricedLikeFreshOnes) {
  const std::string g = R"({"op": "gemm", "a": "w", "b": "v", "c": "o1")";
  const std::string mp = R"({"op": "map", "out": "o1", "in": {"v": "m"}, "expr": )";
  Program p = load_ok(mesh4("[" + g + "}, " + g + "}, " + g + R"(, "beta": 1.0}, )" + mp + R"("v * 2.0"}, )" + mp +
                                R"("v * v + 1.0"}, )" + mp + R"("v * 2.0"}, {"op": "copy", "src": "m", "dst": "o2"}, )" + g + "}]",
                            R"(, "w": {"shape": [64, 32], "dtype": "f32"}, "v": {"shape": [32, 64], "dtype": "f32"})"));
  const Machine m = ring_machine();
  auto r = simulate(p, m, nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  const auto& ops = r->report.ranks[0].ops;
  ASSERT_EQ(ops.size(), 8u);
  const RankCtx ctx = rank_ctx(p.mesh, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Command& c = p.program[i];
    const Work w = command_work(p, c, ctx);
    EXPECT_EQ(ops[i].bytes, w.bytes) << i;
    EXPECT_EQ(ops[i].flops, w.flops) << i;
    EXPECT_NEAR(ops[i].end_s - ops[i].start_s, compute_seconds(p, m, c, w), 1e-15) << i;
  }
  // By hand: the GEMM is 2*64*64*32 = 262,144 flops over 64*32*4 + 32*64*4
  // + 64*64*4 = 32,768 bytes (49,152 with beta, which reads c too), so
  // 262,144 / 1e12 s = 0.262144 us; the maps move 2 * 4096 * 4 = 32,768
  // bytes and do one (v * 2) or two (v * v + 1) operations per element.
  EXPECT_EQ(ops[0].bytes, 32768);
  EXPECT_EQ(ops[1].bytes, 32768);
  EXPECT_EQ(ops[2].bytes, 49152);
  EXPECT_EQ(ops[7].bytes, 32768);
  EXPECT_NEAR(ops[7].end_s - ops[7].start_s, 262144e-12, 1e-18);
  EXPECT_EQ(ops[3].flops, 4096.0);
  EXPECT_EQ(ops[4].flops, 8192.0);
  EXPECT_EQ(ops[5].flops, 4096.0);
  EXPECT_NEAR(ops[3].end_s - ops[3].start_s, 32768e-12, 1e-18);
}

TEST(SimStreams, AStreamTheIssuerStaysAheadOfRunsEveryTaskInOrder) {
  // 200 async_starts onto communication:0, each a 10 us kernel, then their
  // 200 async_dones. The main stream only records their forks, so the
  // issuer pushes all 600 tasks (wait, kernel, record) onto the
  // communication stream before it has run its first: its queue never runs
  // dry, and it is compacted as it goes. The kernels must still run one
  // after another, kernel k over [10k, 10k + 10] us, and the makespan is
  // 200 x 10 us = 2 ms.
  constexpr int kStarts = 200;
  std::string prog = "[";
  for (int k = 0; k < kStarts; ++k)
    prog += R"({"op": "async_start", "token": "t)" + std::to_string(k) + R"(", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "kernel", "name": "k)" + std::to_string(k) + R"(", "writes": ["o1"], "cost": {"seconds": 1e-5}}]}, )";
  for (int k = 0; k < kStarts; ++k) prog += R"({"op": "async_done", "token": "t)" + std::to_string(k) + R"("})" + (k + 1 < kStarts ? ", " : "]");
  Program p = load_ok(mesh4(prog));
  auto r = simulate(p, ring_machine(), nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_NEAR(r->report.makespan_s, kStarts * 1e-5, 1e-12);
  std::vector<double> start(kStarts, -1), end(kStarts, -1);
  for (const auto& op : r->report.ranks[0].ops) {
    if (op.op != "kernel") continue;
    const int k = std::stoi(op.name.str().substr(1));
    start[k] = op.start_s;
    end[k] = op.end_s;
  }
  for (int k = 0; k < kStarts; ++k) {
    EXPECT_NEAR(start[k], k * 1e-5, 1e-12) << "kernel " << k;
    EXPECT_NEAR(end[k], (k + 1) * 1e-5, 1e-12) << "kernel " << k;
  }
}

TEST(SimCompute, KernelBesideACollectiveTakesTheMax) {
  // A 1 ms shift on communication:0 beside a 1.5 ms kernel: 1.5 ms.
  EXPECT_NEAR(makespan(mesh4(R"([{"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0},
      "body": [{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}]},
      {"op": "kernel", "writes": ["o1"], "cost": {"seconds": 0.0015}}, {"op": "async_done", "token": "t"}])"),
                       ring_machine()),
              1.5e-3, 1e-9);
}

TEST(SimCompute, OnASharedHostACollectiveWaitsForACoreAheadOfCompute) {
  // One core for 4 ranks. Each forks a 1 MB shift (1 ms at 1e9 B/s) onto
  // communication:0 and runs a 1 ms kernel. At 0, rank 0's kernel takes
  // the core and the other three queue; the shift's members all arrive at
  // 0, and it goes ahead of those kernels (the cpu backend moves a
  // collective on a core, before waiting compute): it runs 1-2 ms, and
  // the kernels of ranks 1, 2, 3 at 2, 3 and 4 ms. Makespan 5 ms.
  Machine host = ring_machine();
  host.host_cores = 1;
  auto r = simulate(load_ok(mesh4(R"([{"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0},
      "body": [{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}]},
      {"op": "kernel", "writes": ["o1"], "cost": {"seconds": 0.001}}, {"op": "async_done", "token": "t"}])")),
                    host, nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_NEAR(r->report.makespan_s, 5e-3, 1e-9);
  std::vector<double> kernel_starts;
  for (const auto& rank : r->report.ranks)
    for (const auto& op : rank.ops) {
      if (op.op == "collective_permute") EXPECT_NEAR(op.end_s, 2e-3, 1e-9) << "rank " << rank.rank;
      else kernel_starts.push_back(op.start_s);
    }
  std::sort(kernel_starts.begin(), kernel_starts.end());
  ASSERT_EQ(kernel_starts.size(), 4u);
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(kernel_starts[k], k == 0 ? 0 : (k + 1) * 1e-3, 1e-9) << k;
}

TEST(SimCompute, OnASharedHostACommandRunsOnACoreOrWaitsForOne) {
  // chip.host_cores = 2: the 4 ranks' commands run on 2 cores.
  Machine host = ring_machine();
  host.host_cores = 2;
  const std::string k = R"({"op": "kernel", "writes": ["o1"], "cost": {"seconds": 0.001}})";
  const std::string k2 = R"({"op": "kernel", "writes": ["o2"], "cost": {"seconds": 0.001}})";
  const std::string two_streams = mesh4(R"([{"op": "async_start", "token": "t", "stream": {"kind": "computation", "id": 1}, "body": [)" + k +
                                        R"(]}, )" + k2 + R"(, {"op": "async_done", "token": "t"}])");
  auto starts = [](const SimResult& r) {
    std::vector<double> s;
    for (const auto& rank : r.report.ranks)
      for (const auto& op : rank.ops) s.push_back(op.start_s);
    std::sort(s.begin(), s.end());
    return s;
  };
  // One 1 ms kernel on each of 4 ranks: two run at once from 0 at the
  // full rate, the other two when a core frees at 1 ms; all end by 2 ms
  // (a rank of a GPU machine takes 1 ms). Folding is off: the ranks
  // share the cores, so no rank's timeline stands for the others'.
  for (bool fold : {true, false}) {
    auto r = simulate(load_ok(mesh4("[" + k + "]")), host, nullptr, folding(fold));
    ASSERT_TRUE(r.ok()) << r.errors()[0].str();
    EXPECT_NEAR(r->report.makespan_s, 2e-3, 1e-9);
    EXPECT_EQ(starts(*r), (std::vector<double>{0, 0, 1e-3, 1e-3}));
  }
  // Two 1 ms kernels on two streams of each rank: 8 on 2 cores, four
  // rounds, 4 ms (2 ms on a GPU machine, where a rank's two share it).
  auto r = simulate(load_ok(two_streams), host, nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_NEAR(r->report.makespan_s, 4e-3, 1e-9);
  EXPECT_EQ(starts(*r), (std::vector<double>{0, 0, 1e-3, 1e-3, 2e-3, 2e-3, 3e-3, 3e-3}));
  // On a 1-rank mesh the two streams' kernels take a core each: 1 ms, not
  // the 2 ms of one device shared.
  std::string one_rank = two_streams;
  one_rank.replace(one_rank.find(R"("shape": [4])"), 12, R"("shape": [1])");
  r = simulate(load_ok(one_rank), host, nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_NEAR(r->report.makespan_s, 1e-3, 1e-9);
  r = simulate(load_ok(one_rank), ring_machine(), nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_NEAR(r->report.makespan_s, 2e-3, 1e-9);
}

TEST(SimCompute, AForkAndAJoinEachWaitTheEventLatency) {
  // With chip.event_latency_s = 20 us, a 1 ms shift on communication:0
  // (1e6 bytes at 1e9 B/s) starts 20 us after its fork is recorded (t = 0)
  // on every rank and ends at 1.020 ms; the main stream's 0.5 ms kernel
  // has long finished, so the join lets the last 0.5 ms kernel start at
  // 1.020 + 0.020 = 1.040 ms: it ends at 1.540 ms. Without the latency:
  // 1 + 0.5 = 1.5 ms.
  const std::string sched = mesh4(R"([{"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0},
      "body": [{"op": "collective_permute", "name": "far", "src": "a", "dst": "b", "axis": "x", "shift": 1}]},
      {"op": "kernel", "writes": ["o1"], "cost": {"seconds": 0.0005}}, {"op": "async_done", "token": "t"},
      {"op": "kernel", "name": "after", "writes": ["o1"], "cost": {"seconds": 0.0005}}])");
  Machine m = ring_machine();
  EXPECT_NEAR(makespan(sched, m), 1.5e-3, 1e-9);
  m.event_latency_s = 20e-6;
  Program p = load_ok(sched);
  auto r = simulate(p, m, nullptr);
  ASSERT_TRUE(r) << r.errors()[0].str();
  EXPECT_NEAR(r->report.makespan_s, 1.54e-3, 1e-9);
  for (const auto& op : r->report.ranks[0].ops) {
    if (op.name == "far") {
      EXPECT_NEAR(op.start_s, 20e-6, 1e-12);
    }
    if (op.name == "after") {
      EXPECT_NEAR(op.start_s, 1.04e-3, 1e-9);
    }
  }
  // The trace's flows run from the record to the waiting stream's next
  // command: the join's from 1.020 ms to 1.040 ms.
  bool joined = false;
  for (const auto& f : r->report.ranks[0].flows)
    if (f.join) {
      joined = true;
      EXPECT_NEAR(f.from_s, 1.02e-3, 1e-9);
      EXPECT_NEAR(f.to_s, 1.04e-3, 1e-9);
    }
  EXPECT_TRUE(joined);
}

TEST(SimPipeline, RingMatmulMatchesItsClosedForm) {
  // N = 4, m_block 64, k 128 (f32): a shift moves 64 * 128 * 4 = 32768 B,
  // 32.768 us at 1e9 B/s. Every GEMM costs 100 us (override), more than a
  // shift, so after the first shift the pipeline is compute-bound:
  // makespan = 4 GEMMs = 400 us.
  gen::RingMatmulOptions o;
  nlohmann::ordered_json s = gen::ring_matmul(o);
  for (auto& c : s["program"])
    if (c["op"] == "gemm") c["cost"] = {{"seconds", 1e-4}};
  EXPECT_NEAR(makespan(s.dump(), ring_machine()), 4e-4, 1e-9);
  // The blocking baseline: AllGather (V/W = 4 * 32768 / 2e9 = 65.5 us) then
  // one GEMM of 400 us: 465.5 us.
  nlohmann::ordered_json b = gen::blocking_matmul(o);
  b["program"][1]["cost"] = {{"seconds", 4e-4}};
  EXPECT_NEAR(makespan(b.dump(), ring_machine()), 4e-4 + 4 * 32768 / 2e9, 1e-9);
  // Communication-bound: 10 us GEMMs under 32.768 us shifts. Each of the 3
  // steps takes the longer of its shift and the GEMM beside it, then the last
  // GEMM runs alone: 3 * 32.768 + 10 = 108.304 us.
  for (auto& c : s["program"])
    if (c["op"] == "gemm") c["cost"] = {{"seconds", 1e-5}};
  EXPECT_NEAR(makespan(s.dump(), ring_machine()), 3 * 32.768e-6 + 1e-5, 1e-9);
}

TEST(SimDeadlock, RankDependentBranchIsReportedNotHung) {
  // Decisions as the functional model logs them: only rank 1 takes the branch
  // holding the all_reduce, so it waits for ranks that never come.
  const std::string s = mesh4(R"([{"op": "cond", "pred": "p", "then": [{"op": "all_reduce", "src": "a", "dst": "b", "axis": "x"}], "else": []}])",
                              R"(, "p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}})");
  Program p = load_ok(s);
  Decisions d(4);
  for (int r = 0; r < 4; ++r) d[r]["/program/0"] = {r == 1 ? 1 : 0};
  auto r = simulate(p, ring_machine(), &d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.errors()[0].message.find("rank 1 (x=1) computation:0 at /program/0/then/0"), std::string::npos) << r.errors()[0].message;
}

TEST(SimControlFlow, HintsOrAnError) {
  const std::string loop = R"({"format": "thunky.sched/1", "buffers": {"c": {"shape": [], "dtype": "bool"}, "o": {"shape": [4], "dtype": "f32"}},
    "program": [{"op": "while", "cond_buf": "c", "cond": [{"op": "kernel", "writes": ["c"], "cost": {"seconds": 1e-6}}],
                 "body": [{"op": "kernel", "writes": ["o"], "cost": {"seconds": 1e-5}}] HINT}]})";
  // 3 trips: 4 cond kernels and 3 body kernels = 4 us + 30 us.
  std::string hinted = loop;
  hinted.replace(hinted.find("HINT"), 4, R"(, "sim": {"trip_count": 3})");
  EXPECT_NEAR(makespan(hinted, ring_machine()), 34e-6, 1e-12);
  std::string bare = loop;
  bare.replace(bare.find("HINT"), 4, "");
  auto r = simulate(load_ok(bare), ring_machine(), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors()[0].pointer, "/program/0");
  EXPECT_EQ(r.exit_code(), 2);
}

TEST(SimLinks, GroupAcrossCommunicatorsDrivesEveryInstance) {
  // 2x2 mesh on a switch (1e9 B/s egress, no latency). A shift along x
  // grouped with an all_reduce along y launches all four ranks at once, so
  // both shifts (y = 0 and y = 1) and both reductions ({0,1} and {2,3}) move
  // data. Each rank's egress carries its shift (1e6 bytes) and its
  // reduction (alone V/B = 1 ms, so 1e6 bytes' worth): 0.5e9 B/s each, both
  // done at 2 ms, and every egress link busy at 100 % until then.
  Program p = load_ok(group_on_2x2(R"({"op": "all_reduce", "src": "a", "dst": "c", "axis": "y"})"));
  for (bool fold : {false, true}) {
    auto r = simulate(p, topology_machine("switch"), nullptr, folding(fold));
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->report.makespan_s, 2e-3, 1e-12);
    int egress = 0;
    for (const auto& l : r->report.links) {
      if (l.name.rfind("egress", 0) != 0) continue;
      ++egress;
      ASSERT_FALSE(l.samples.empty()) << l.name;
      EXPECT_EQ(l.samples.front(), (std::pair<double, double>{0.0, 1.0})) << l.name;
    }
    EXPECT_EQ(egress, 4) << (fold ? "folded" : "every rank");
  }
}

// ---- ranks folded by symmetry ----

struct FoldCase {
  std::string machine;
  int64_t ranks;
};

class FoldedRing : public ::testing::TestWithParam<FoldCase> {};

TEST_P(FoldedRing, PredictsWhatEveryRankPredicts) {
  const Machine m = model(GetParam().machine);
  gen::RingMatmulOptions o;
  o.ranks = GetParam().ranks;
  // The generated matmuls are SPMD on a closed ring, a switch or a
  // hierarchy; but past one node of a hierarchy a shift crosses to the
  // next node at some ranks only (through their NICs), and is not folded.
  const AxisLinks& x = *m.axis("x");
  const bool crosses = x.topology == AxisLinks::Topology::hierarchical && GetParam().ranks > x.group_size;
  for (const auto& [doc, shifts] : {std::pair{gen::ring_matmul(o), true}, {gen::bidirectional_ring_matmul(o), true}, {gen::blocking_matmul(o), false}}) {
    Program p = load_ok(doc.dump());
    EXPECT_EQ(ranks_symmetric(p, m, nullptr), !(shifts && crosses));
    expect_same_prediction(p, m);
  }
}

INSTANTIATE_TEST_SUITE_P(Machines, FoldedRing,
                         ::testing::Values(FoldCase{"tpu-v4", 2}, FoldCase{"tpu-v4", 3}, FoldCase{"tpu-v4", 8}, FoldCase{"tpu-v5p", 5},
                                           FoldCase{"h100-8gpu", 4}, FoldCase{"h100-8gpu", 8}, FoldCase{"h100-cluster", 16}),
                         [](const auto& info) {
                           std::string n = info.param.machine + "_" + std::to_string(info.param.ranks);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A 2 x 4 mesh: a GEMM beside an all_gather along y and a two-hop shift
// along y (two flows on each of its links) on two more streams, a shift
// along x, and an all_reduce over both axes, joined by tokens.
const char* kTwoAxes = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x", "y"], "shape": [2, 4]},
  "buffers": {"a": {"shape": [256, 256], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
              "g": {"shape": [1024, 256], "dtype": "f32"}, "c": {"shape": [256, 256], "dtype": "f32"},
              "s": {"shape": [256, 256], "dtype": "f32"}, "r": {"shape": [256, 256], "dtype": "f32"},
              "h": {"shape": [256, 256], "dtype": "f32"}},
  "program": [
    {"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "all_gather", "src": "a", "dst": "g", "axis": "y"}]},
    {"op": "async_start", "token": "u", "stream": {"kind": "communication", "id": 1}, "body": [
      {"op": "collective_permute", "src": "a", "dst": "h", "axis": "y", "shift": 2}]},
    {"op": "gemm", "a": "a", "b": "a", "c": "c"},
    {"op": "collective_permute", "src": "c", "dst": "s", "axis": "x", "shift": 1},
    {"op": "async_done", "token": "t"},
    {"op": "async_done", "token": "u"},
    {"op": "all_reduce", "src": "s", "dst": "r", "axis": ["x", "y"]}]})";

TEST(SimFold, TwoAxesPredictsWhatEveryRankPredicts) {
  Program p = load_ok(kTwoAxes);
  for (const char* name : {"tpu-v4", "h100-8gpu", "h100-cluster"}) {
    const Machine m = model(name);
    EXPECT_TRUE(ranks_symmetric(p, m, nullptr)) << name;
    expect_same_prediction(p, m);
  }
}

TEST(SimFold, LoopsAndBranchesPredictWhatEveryRankPredicts) {
  // A hinted while of three trips, each overlapping a shift with a GEMM, and
  // a hinted cond around an all_reduce: loop instances (#k) fold too.
  const std::string s = R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [4]},
    "buffers": {"a": {"shape": [128, 128], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "b": {"shape": [128, 128], "dtype": "f32"}, "c": {"shape": [128, 128], "dtype": "f32"},
                "go": {"shape": [], "dtype": "bool"}, "p": {"shape": [], "dtype": "bool"}},
    "program": [
      {"op": "while", "cond_buf": "go", "sim": {"trip_count": 3},
       "cond": [{"op": "kernel", "writes": ["go"], "cost": {"seconds": 1e-6}}],
       "body": [
         {"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
           {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": -1}]},
         {"op": "gemm", "a": "a", "b": "a", "c": "c"},
         {"op": "async_done", "token": "t"}]},
      {"op": "cond", "pred": "p", "sim": {"taken": true},
       "then": [{"op": "all_reduce", "src": "c", "dst": "b", "axis": "x"}], "else": []}]})";
  Program p = load_ok(s);
  for (const char* name : {"tpu-v4", "h100-8gpu"}) {
    const Machine m = model(name);
    EXPECT_TRUE(ranks_symmetric(p, m, nullptr)) << name;
    expect_same_prediction(p, m);
    // 4 cond kernels, 3 x (shift, GEMM) and the all_reduce on each rank.
    auto r = simulate(p, m, nullptr);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->report.timeline(r->report.ranks[3]).ops.size(), 11u);
  }
}

TEST(SimFold, EveryExamplePredictsWhatEveryRankPredicts) {
  // Whether or not an example folds, the prediction is the one of every rank.
  for (const char* name : {"sum_across_gpus.json", "grouped_exchange_and_reduce.json", "splice_jax_collective.json", "swap_halves.json",
                           "concurrent_branches.json", "ring_collective_matmul_n4.json", "bidirectional_ring_collective_matmul_n4.json", "blocking_matmul_n4.json",
                           "collatz.json", "power_of_two_loop.json", "switch_select.json", "maybe_negate.json"}) {
    SCOPED_TRACE(name);
    Program p = testing::load_file_ok(testing::example_path(name));
    auto fr = make_cpu_backend()->run(p, {});
    ASSERT_TRUE(fr.ok());
    for (const char* machine : {"tpu-v4", "h100-8gpu"}) expect_same_prediction(p, model(machine), &fr->decisions);
  }
}

TEST(SimFold, AsymmetricSchedulesAreNotFolded) {
  const Machine ring = ring_machine(true), line = ring_machine(false);
  auto sched = [](const std::string& cmd) { return mesh4("[" + cmd + "]"); };
  const std::string shift = R"({"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1})";
  EXPECT_TRUE(ranks_symmetric(load_ok(sched(shift)), ring, nullptr));
  // A line's end ranks have one neighbour.
  EXPECT_FALSE(ranks_symmetric(load_ok(sched(shift)), line, nullptr));
  // Explicit pairs need not be a translation.
  EXPECT_FALSE(ranks_symmetric(load_ok(sched(R"({"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "pairs": [[0, 1]]})")), ring, nullptr));
  // Axis index groups split the ring unevenly in general.
  EXPECT_FALSE(ranks_symmetric(load_ok(sched(R"({"op": "all_reduce", "src": "a", "dst": "b", "axis": "x", "groups": [[0, 1], [2, 3]]})")), ring, nullptr));
  // A view whose size depends on the rank.
  EXPECT_FALSE(ranks_symmetric(load_ok(sched(R"({"op": "copy", "src": "a[0:1000*(x+1)]", "dst": "b[0:1000*(x+1)]"})")), ring, nullptr));
  // Control flow decided differently on rank 1.
  const std::string branch = sched(R"({"op": "cond", "pred": "p", "then": [{"op": "memzero", "dst": "b"}], "else": []})");
  std::string with_pred = branch;
  with_pred.replace(with_pred.find(R"("o2")"), 0, R"("p": {"shape": [], "dtype": "bool"}, )");
  Program p = load_ok(with_pred);
  Decisions same(4), differ(4);
  for (int r = 0; r < 4; ++r) {
    same[r]["/program/0"] = {1};
    differ[r]["/program/0"] = {r == 1 ? 1 : 0};
  }
  EXPECT_TRUE(ranks_symmetric(p, ring, &same));
  EXPECT_FALSE(ranks_symmetric(p, ring, &differ));
  // Not folded, the branch on rank 1 alone takes 1e6 bytes / 1e12 B/s = 1 us.
  auto r = simulate(p, ring, &differ);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->report.ranks[1].ops.size(), 1u);
  EXPECT_EQ(r->report.ranks[0].ops.size(), 0u);
}

TEST(SimFold, FoldedSummaryCountsEveryRank) {
  // The bidirectional matmul at N = 6 runs the same commands on each rank:
  // the folded summary counts them six times, as the full engine does.
  gen::RingMatmulOptions o;
  o.ranks = 6;
  Program p = load_ok(gen::bidirectional_ring_matmul(o).dump());
  auto folded = simulate_summary(p, ring_machine(), nullptr);
  auto every = simulate_summary(p, ring_machine(), nullptr, folding(false));
  ASSERT_TRUE(folded.ok() && every.ok());
  EXPECT_EQ(folded->rank_commands, every->rank_commands);
  EXPECT_EQ(folded->rank_commands % 6, 0);
  EXPECT_NEAR(folded->makespan_s, every->makespan_s, 1e-12 * every->makespan_s);
}


// Random SPMD schedules: shifts, pairs, reductions, gathers and scatters
// over one or two axes, alone, grouped, on side streams joined by tokens,
// inside hinted loops and branches, beside GEMMs, maps and kernels. Whether
// or not a schedule folds, its prediction must be the full simulation's.
nlohmann::ordered_json random_schedule(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  const std::vector<std::vector<int64_t>> meshes = {{1}, {2}, {3}, {4}, {8}, {2, 2}, {2, 4}, {4, 2}, {3, 2}, {1, 4}};
  const std::vector<int64_t> shape = meshes[pick(static_cast<int>(meshes.size()))];
  const std::vector<std::string> names = shape.size() == 2 ? std::vector<std::string>{"x", "y"} : std::vector<std::string>{"x"};
  int64_t n = 1;
  for (auto d : shape) n *= d;
  const int64_t e = 64;
  nlohmann::ordered_json buffers = {{"a", {{"shape", {e}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "iota"}}}}},
                                    {"g", {{"shape", {e * n}}, {"dtype", "f32"}}},
                                    {"p", {{"shape", nlohmann::ordered_json::array()}, {"dtype", "bool"}}},
                                    {"m", {{"shape", {16, 16}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "ones"}}}}},
                                    {"mo", {{"shape", {16, 16}}, {"dtype", "f32"}}},
                                    // true off the first coordinate of an axis: a branch per class
                                    {"q", {{"shape", nlohmann::ordered_json::array()}, {"dtype", "bool"}, {"role", "input"},
                                           {"init", {{"kind", "axis_index"}, {"axis", names[pick(static_cast<int>(names.size()))]}}}}}};
  std::vector<std::string> free;
  for (int k = 0; k < 6; ++k) {
    free.push_back("b" + std::to_string(k));
    buffers[free.back()] = {{"shape", {e}}, {"dtype", "f32"}};
  }
  auto fresh = [&]() -> std::string {
    if (free.empty()) return "";
    const int k = pick(static_cast<int>(free.size()));
    std::string b = free[k];
    free.erase(free.begin() + k);
    return b;
  };
  auto size_of = [&](const nlohmann::ordered_json& axis) {
    int64_t k = 1;
    for (const auto& a : axis.is_array() ? axis : nlohmann::ordered_json::array({axis})) k *= shape[a == "x" ? 0 : 1];
    return k;
  };
  auto collective = [&](const std::string& dst) {
    nlohmann::ordered_json axis = names.size() == 2 && chance(0.3) ? nlohmann::ordered_json(names) : nlohmann::ordered_json(names[pick(static_cast<int>(names.size()))]);
    const char* ops[] = {"all_reduce", "all_gather", "collective_permute", "collective_permute", "reduce_scatter", "all_to_all"};
    std::string op = ops[pick(6)];
    const int64_t k = size_of(axis);
    if (op == "collective_permute") {
      if (axis.is_array()) axis = axis[0];
      nlohmann::ordered_json c = {{"op", op}, {"src", "a"}, {"dst", dst}, {"axis", axis}};
      if (chance(0.3)) {
        // Some of a ring's pairs, or a pipeline's (no wrap-around).
        nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
        const bool pipeline = chance(0.5);
        for (int64_t i = 0; i < size_of(axis) - (pipeline ? 1 : 0); ++i)
          if (pipeline || chance(0.7)) pairs.push_back({i, (i + 1) % size_of(axis)});
        c["pairs"] = pairs;
      } else {
        const int shifts[] = {1, -1, 2, 3, 0};
        c["shift"] = shifts[pick(5)];
      }
      return c;
    }
    if (op == "all_gather") return nlohmann::ordered_json{{"op", op}, {"src", "a"}, {"dst", "g[0:" + std::to_string(e * k) + "]"}, {"axis", axis}};
    if ((op == "reduce_scatter" || op == "all_to_all") && e % k != 0) op = "all_reduce";
    if (op == "reduce_scatter") return nlohmann::ordered_json{{"op", op}, {"src", "a"}, {"dst", dst + "[0:" + std::to_string(e / k) + "]"}, {"axis", axis}};
    nlohmann::ordered_json c = {{"op", op}, {"src", "a"}, {"dst", dst}, {"axis", axis}};
    if (op == "all_reduce" && k % 2 == 0 && k > 2 && chance(0.3)) {
      // Two blocks, or pairs k / 2 apart.
      const bool blocks = chance(0.5);
      nlohmann::ordered_json groups = nlohmann::ordered_json::array();
      for (int64_t g = 0; g < (blocks ? 2 : k / 2); ++g) {
        nlohmann::ordered_json members = nlohmann::ordered_json::array();
        for (int64_t i = 0; i < (blocks ? k / 2 : 2); ++i) members.push_back(blocks ? g * (k / 2) + i : g + i * (k / 2));
        groups.push_back(members);
      }
      c["groups"] = groups;
    }
    return c;
  };
  auto compute = [&](const std::string& dst) {
    const int r = pick(10);
    if (r < 3) return nlohmann::ordered_json{{"op", "gemm"}, {"a", "m"}, {"b", "m"}, {"c", "mo"}};
    if (r < 6) return nlohmann::ordered_json{{"op", "map"}, {"out", dst}, {"expr", "v * 2.0 + x"}, {"in", {{"v", "a"}}}};
    const double secs[] = {1e-6, 5e-6, 2e-5};
    if (r < 8) return nlohmann::ordered_json{{"op", "kernel"}, {"reads", {"a"}}, {"writes", {dst}}, {"cost", {{"seconds", secs[pick(3)]}}}};
    return nlohmann::ordered_json{{"op", "memzero"}, {"dst", dst}};
  };
  nlohmann::ordered_json prog = nlohmann::ordered_json::array();
  const int steps = 1 + pick(6);
  for (int step = 0; step < steps; ++step) {
    const std::string d = fresh();
    if (d.empty()) break;
    const int r = pick(20);
    if (r < 8) {
      const std::string t = "t" + std::to_string(step);
      prog.push_back({{"op", "async_start"}, {"token", t}, {"stream", {{"kind", "communication"}, {"id", pick(2)}}}, {"body", {collective(d)}}});
      if (const std::string d2 = fresh(); !d2.empty()) prog.push_back(compute(d2));
      prog.push_back({{"op", "async_done"}, {"token", t}});
    } else if (r < 12) {
      nlohmann::ordered_json members = nlohmann::ordered_json::array({collective(d)});
      bool gathers = members[0]["op"] == "all_gather";
      for (int k = pick(3); k > 0; --k) {
        const std::string dk = fresh();
        if (dk.empty()) break;
        auto c = collective(dk);
        if (c["op"] == "all_gather" && gathers) continue;  // one writer of g per group
        gathers = gathers || c["op"] == "all_gather";
        members.push_back(c);
      }
      prog.push_back({{"op", "collective_group"}, {"body", members}});
    } else if (r < 15) {
      prog.push_back({{"op", "while"}, {"cond_buf", "p"}, {"sim", {{"trip_count", pick(4)}}},
                      {"cond", {{{"op", "kernel"}, {"writes", {"p"}}, {"cost", {{"seconds", 1e-6}}}}}}, {"body", {compute(d)}}});
    } else if (r < 17) {
      prog.push_back({{"op", "cond"}, {"pred", "p"}, {"sim", {{"taken", chance(0.5)}}}, {"then", {collective(d)}}, {"else", nlohmann::ordered_json::array()}});
    } else if (r < 18) {
      // Decided by the rank's coordinate: compute only, which waits for no other rank.
      prog.push_back({{"op", "cond"}, {"pred", "q"}, {"then", {compute(d)}}, {"else", nlohmann::ordered_json::array()}});
    } else {
      prog.push_back(chance(0.5) ? collective(d) : compute(d));
    }
  }
  return {{"format", "thunky.sched/1"}, {"mesh", {{"axis_names", names}, {"shape", shape}}}, {"buffers", buffers}, {"program", prog}};
}

TEST(SimFold, RandomSchedulesPredictWhatEveryRankPredicts) {
  const Machine machines[] = {model("tpu-v4"), model("h100-8gpu"), model("h100-cluster")};
  int folded = 0, loaded = 0, partly = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto text = random_schedule(seed).dump();
    auto p = load_schedule_text(text, "random.json");
    // A schedule the generator got wrong (two writers racing) is skipped;
    // the generator keeps writers apart, so nearly all load.
    if (!p) continue;
    ++loaded;
    for (const Machine& m : machines) {
      folded += ranks_symmetric(*p, m, nullptr) && p->mesh.size() > 1;
      const int64_t classes = rank_classes(*p, m, nullptr).count();
      partly += classes > 1 && classes < p->mesh.size();
      expect_same_prediction(*p, m);
    }
  }
  // Enough of them load and fold for the comparison to mean something.
  EXPECT_GE(loaded, 50);
  EXPECT_GT(folded, 40);
  EXPECT_GT(partly, 10);  // folded into more than one class
}

}  // namespace
}  // namespace thunky::sim
