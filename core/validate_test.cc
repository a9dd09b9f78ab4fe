#include "core/validate.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "tools/gen.h"

namespace thunky {
namespace {

using testing::load_errors;
using testing::load_ok;

// A schedule over mesh x of `n` with buffers a, b (f32[8], inout) and the given program.
std::string sched(const std::string& program, int n = 1, const std::string& extra_buffers = "") {
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [)" + std::to_string(n) + R"(]},
    "buffers": {"a": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "iota"}},
                "b": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}},
                "in": {"shape": [8], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}})" +
         extra_buffers + R"(},
    "program": )" + program + "}";
}

std::string start(const std::string& tok, const std::string& body, const std::string& stream = "communication") {
  return R"({"op": "async_start", "token": ")" + tok + R"(", "stream": {"kind": ")" + stream + R"(", "id": 0}, "body": )" + body + "}";
}
std::string done(const std::string& tok) { return R"({"op": "async_done", "token": ")" + tok + R"("})"; }

bool has(const std::vector<Diagnostic>& errs, const std::string& pointer, const std::string& text) {
  for (const auto& e : errs)
    if (e.pointer == pointer && e.message.find(text) != std::string::npos) return true;
  return false;
}

TEST(Tokens, NeverAwaitedTwiceAndUnknown) {
  const std::string body = R"([{"op": "memzero", "dst": "b"}])";
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", body) + "]")), "/program/0/token", "never awaited"));
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", body) + "," + done("t") + "," + done("t") + "]")), "/program/2/token", "awaited twice"));
  EXPECT_TRUE(has(load_errors(sched("[" + done("t") + "," + start("t", body) + "," + done("t") + "]")), "/program/0/token", "no earlier async_start"));
  EXPECT_TRUE(has(load_errors(sched("[" + start("t", body) + "," + start("t", body) + "," + done("t") + "]")), "/program/1/token", "started again"));
}

TEST(Tokens, MayNotCrossACondBranch) {
  const std::string body = R"([{"op": "memzero", "dst": "b"}])";
  // Awaiting an outer token inside a branch would await it on one path only.
  auto errs = load_errors(sched("[" + start("t", body) + R"(, {"op": "cond", "pred": "p", "then": [)" + done("t") + R"(], "else": []}])"));
  EXPECT_TRUE(has(errs, "/program/1/then/0/token", "did not start it"));
  // Starting inside a branch and awaiting outside is the same mistake.
  errs = load_errors(sched(R"([{"op": "cond", "pred": "p", "then": [)" + start("t", body) + R"(], "else": []}, )" + done("t") + "]"));
  EXPECT_TRUE(has(errs, "/program/0/then/0/token", "not awaited there"));
}

TEST(Validation, WriteToAnInputIsAnError) {
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "memzero", "dst": "in[2:]"}])")), "/program/0/dst", "role input"));
}

TEST(Validation, ShapeAndDtypeRules) {
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "copy", "src": "a[:4]", "dst": "b[:2]"}])")), "/program/0/dst", "equal byte sizes"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "copy", "src": "a[:, 1]", "dst": "b"}])")), "/program/0/src", "too many indices"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "memzero", "dst": "nope"}])")), "/program/0/dst", "unknown buffer"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "map", "out": "b", "expr": "q + 1", "in": {"v": "a"}}])")), "/program/0/expr", "unknown name 'q'"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "cond", "pred": "a[0]", "then": []}])")), "/program/0/pred", "bool scalar"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "gemm", "a": "m", "b": "m", "c": "mm"}])", 1, R"(, "m": {"shape": [2, 3], "dtype": "f32"}, "mm": {"shape": [2, 2], "dtype": "f32"})")),
                  "/program/0", "contraction dimensions differ"));
}

TEST(Validation, ViewsAreCheckedOnEveryRank) {
  // a[ds(x * 3, 3)] fits on ranks 0 and 1 (rows 0..6) but not on rank 2 (rows 6..9).
  auto errs = load_errors(sched(R"([{"op": "memzero", "dst": "a[ds(x * 3, 3)]"}])", 3));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/0/dst");
  EXPECT_NE(errs[0].message.find("rank 2"), std::string::npos);
}

TEST(Validation, MovingViewsAreCheckedOnEveryRankWithoutRaceTracking) {
  // a[ds(x * 3, 3)] overflows a's 8 rows on rank 2 (rows 6..9), whether or
  // not races are tracked, and inside a PTX kernel's CPU fallback too.
  ValidateOptions no_races;
  no_races.races = false;
  auto p = load_schedule_text(sched(R"([{"op": "memzero", "dst": "a[ds(x * 3, 3)]"}])", 3), "t.json", no_races);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.errors()[0].message.find("rank 2"), std::string::npos) << p.errors()[0].message;
  auto errs = load_errors(sched(R"([{"op": "ptx_kernel", "args": ["b[0:3]"], "written": [true], "kernel_name": "k", "ptx": ".version 8.0",
                                     "cpu": {"out": "a[ds(x * 3, 3)]", "expr": "v", "in": {"v": "b[0:3]"}}}])", 3));
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].pointer, "/program/0/cpu/out");
  EXPECT_NE(errs[0].message.find("rank 2"), std::string::npos) << errs[0].message;
}

TEST(Collectives, CountRulesNameBothShapes) {
  // all_gather over 2 ranks: dst must hold 2 x 4 = 8 elements, b[:6] has 6.
  auto errs = load_errors(sched(R"([{"op": "all_gather", "src": "a[:4]", "dst": "b[:6]", "axis": "x"}])", 2));
  ASSERT_TRUE(has(errs, "/program/0/dst", "n x src"));
  EXPECT_NE(errs[0].message.find("f32[4]"), std::string::npos);
  EXPECT_NE(errs[0].message.find("f32[6]"), std::string::npos);
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "reduce_scatter", "src": "a", "dst": "b[:2]", "axis": "x"}])", 2)), "/program/0/dst", "n x dst"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "all_reduce", "src": "a[:4]", "dst": "a[2:6]", "axis": "x"}])", 2)), "/program/0/dst", "overlap"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "y"}])", 2)), "/program/0/axis", "unknown mesh axis"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "pairs": [[0, 2]]}])", 2)), "/program/0/pairs/0", "outside"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "x", "groups": [[0, 1], [2]]}])", 4)), "/program/0/groups", "equal size"));
  EXPECT_TRUE(has(load_errors(sched(R"([{"op": "collective_group", "body": [{"op": "memzero", "dst": "b"}]}])", 2)), "/program/0/body/0/op", "only collectives"));
}

TEST(Collectives, InPlaceFormsAreAccepted) {
  // all_gather with src = this rank's slice of dst, all_reduce in place.
  load_ok(sched(R"([{"op": "all_gather", "src": "a[ds(x * 4, 4)]", "dst": "a", "axis": "x"},
                    {"op": "all_reduce", "src": "b", "dst": "b", "axis": "x"},
                    {"op": "reduce_scatter", "src": "a", "dst": "a[ds(x * 4, 4)]", "axis": "x"}])", 2));
}

TEST(CollectiveOrder, RankDependentSizesAreADeadlock) {
  // Rank 0 all-reduces 1 element, rank 1 two: the sequences differ.
  auto p = load_schedule_text(sched(R"([{"op": "all_reduce", "src": "a[ds(0, x + 1)]", "dst": "b[ds(0, x + 1)]", "axis": "x"}])", 2), "t.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_NE(p.errors()[0].message.find("deadlock: ranks 0 and 1"), std::string::npos);
}

TEST(Races, UnjoinedStreamsRaceAndTheReportNamesBoth) {
  // b is written on communication:0 and read on computation:0 before the join.
  auto p = load_schedule_text(sched("[" + start("t", R"([{"op": "memset", "dst": "b", "value": 1}])") +
                                    R"(, {"op": "copy", "src": "b[:4]", "dst": "a[:4]"}, )" + done("t") + "]"),
                              "t.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.exit_code(), 1);
  const auto& m = p.errors()[0].message;
  EXPECT_NE(m.find("race on buffer 'b' bytes [0, 16)"), std::string::npos) << m;
  EXPECT_NE(m.find("/program/0/body/0"), std::string::npos);
  EXPECT_NE(m.find("/program/1"), std::string::npos);
  EXPECT_NE(m.find("async_done of token 't'"), std::string::npos);
}

TEST(Races, RankDependentViewsRaceOnlyWhereTheyOverlap) {
  // 4 ranks. The communication stream zeroes a[4:6] while the main stream,
  // unjoined, zeroes a[ds(x * 2, 2)]: rows 2x..2x+1 meet rows 4..5 only on
  // rank 2, bytes [16, 24). b is zeroed on both streams on every rank.
  auto errs = load_errors(sched("[" + start("t", R"([{"op": "memzero", "dst": "a[4:6]"}, {"op": "memzero", "dst": "b"}])") +
                                R"(, {"op": "memzero", "dst": "a[ds(x * 2, 2)]"}, {"op": "memzero", "dst": "b[0:2]"}, )" + done("t") + "]", 4));
  ASSERT_EQ(errs.size(), 2u);
  std::string on_a, on_b;
  for (const auto& e : errs) (e.message.find("buffer 'a'") != std::string::npos ? on_a : on_b) = e.message;
  EXPECT_NE(on_a.find("bytes [16, 24)"), std::string::npos) << on_a;
  EXPECT_NE(on_a.find("(on ranks 2)"), std::string::npos) << on_a;
  // b's views do not move with the rank: one report for all four ranks.
  EXPECT_NE(on_b.find("bytes [0, 8)"), std::string::npos) << on_b;
  EXPECT_NE(on_b.find("(on every rank)"), std::string::npos) << on_b;
}

TEST(Races, ExclusiveBranchesAndJoinedWorkDoNotRace) {
  const std::string w = R"([{"op": "memset", "dst": "b", "value": 1}])";
  load_ok(sched(R"([{"op": "cond", "pred": "p", "then": [)" + start("t", w) + "," + done("t") + R"(], "else": [)" +
                start("u", w, "computation") + "," + done("u") + R"(]}, {"op": "copy", "src": "b", "dst": "a"}])", 2));
}

// The guide's ring collective matmul: every single async_done removed
// leaves a GEMM reading a ring buffer that a shift still writes.
class RingRaces : public ::testing::TestWithParam<int64_t> {};

TEST_P(RingRaces, RemovingAnyAsyncDoneIsReportedAsARace) {
  gen::RingMatmulOptions o{GetParam(), 2, 4, 2, "f32", false};
  for (bool bidir : {false, true}) {
    json s = bidir ? gen::bidirectional_ring_matmul(o) : gen::ring_matmul(o);
    load_ok(s.dump());  // the correct schedule passes
    int removed = 0;
    for (size_t i = 0; i < s["program"].size(); ++i) {
      if (s["program"][i]["op"] != "async_done") continue;
      json broken = s;
      broken["program"].erase(i);
      auto p = load_schedule_text(broken.dump(), "ring.json");
      ASSERT_FALSE(p.ok());
      bool race = false;
      for (const auto& e : p.errors()) race |= e.kind == ErrorKind::schedule && e.message.find("race on buffer") != std::string::npos;
      EXPECT_TRUE(race) << (bidir ? "bidirectional" : "unidirectional") << " N=" << GetParam() << " without /program/" << i;
      ++removed;
    }
    // One async_done per shift step: N - 1 unidirectional, ceil((N - 1) / 2) bidirectional.
    EXPECT_EQ(removed, bidir ? (GetParam() / 2) : GetParam() - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks2To8, RingRaces, ::testing::Range<int64_t>(2, 9));

TEST(Races, GuidesLiteralBidirectionalScheduleRacesAtFourRanks) {
  // With N = 4 the guide sizes its workspace as min(2, num_pairs) = 1 pair
  // buffer. The middle shift (step 2, launched in the prologue) writes
  // pair0[:m] while GEMM 1 reads pair0: bytes [0, 2 * 4 * 4) of pair0 for
  // m_block = 2, k = 4, f32. A real race.
  gen::RingMatmulOptions o{4, 2, 4, 2, "f32", true};
  auto p = load_schedule_text(gen::bidirectional_ring_matmul(o).dump(), "literal.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.exit_code(), 1);
  EXPECT_NE(p.errors()[0].message.find("race on buffer 'pair0' bytes [0, 32)"), std::string::npos) << p.errors()[0].message;
  // At every other N the literal sizing is race-free.
  for (int64_t n : {1, 2, 3, 5, 6, 7, 8}) {
    o.ranks = n;
    load_ok(gen::bidirectional_ring_matmul(o).dump());
  }
}

}  // namespace
}  // namespace thunky
