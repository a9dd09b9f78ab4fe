#include <gtest/gtest.h>

#include <tuple>

#include <cmath>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "core/load.h"
#include "core/npy.h"

#include "exec/backend.h"
#include "tests/test_util.h"

namespace thunky {
namespace {

using testing::load_ok;
using testing::run_cpu;
using testing::values;

std::string mesh_sched(const std::string& mesh, const std::string& buffers, const std::string& program) {
  return R"({"format": "thunky.sched/1", "mesh": )" + mesh + R"(, "buffers": {)" + buffers + R"(}, "program": )" + program + "}";
}

TEST(CpuBackend, StreamsOfARankRunConcurrently) {
  // Two 50 ms stand-in kernels forked onto computation:1 and :2 overlap in
  // time: each starts before the other ends.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f32"}, "b": {"shape": [4], "dtype": "f32"}},
    "program": [
      {"op": "async_start", "token": "t1", "stream": {"kind": "computation", "id": 1}, "body": [{"op": "kernel", "writes": ["a"], "cost": {"seconds": 0.05}}]},
      {"op": "async_start", "token": "t2", "stream": {"kind": "computation", "id": 2}, "body": [{"op": "kernel", "writes": ["b"], "cost": {"seconds": 0.05}}]},
      {"op": "async_done", "token": "t1"}, {"op": "async_done", "token": "t2"}]})");
  ExecOptions o;
  o.host_cores = 2;
  auto r = make_cpu_backend()->run(p, o);
  ASSERT_TRUE(r.ok());
  const auto& ops = r->report.ranks[0].ops;
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_LT(ops[0].start_s, ops[1].end_s);
  EXPECT_LT(ops[1].start_s, ops[0].end_s);
  EXPECT_GE(ops[0].end_s - ops[0].start_s, 0.05);
  // Fork and join edges of both tokens are in the report.
  EXPECT_EQ(r->report.ranks[0].flows.size(), 4u);
  EXPECT_EQ(r->report.host_cores.value_or(0), 2);
}

TEST(CpuBackend, ACollectiveIsMeasuredAsWaitingThenTransfer) {
  // Rank 1 runs a 50 ms kernel before the all_reduce; rank 0 arrives at
  // once and waits for it: at the rendezvous, rank 0's record shows about
  // 50 ms of waiting before the transfer, rank 1's next to none. (The
  // margins are tens of milliseconds: thread start and a loaded machine.)
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [2]})",
                                 R"("late": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                                    "a": {"shape": [4], "dtype": "f32"}, "b": {"shape": [4], "dtype": "f32"})",
                                 R"([{"op": "cond", "pred": "late", "then": [{"op": "kernel", "writes": ["a"], "cost": {"seconds": 0.05}}]},
                                     {"op": "all_reduce", "src": "a", "dst": "b", "axis": "x"}])"));
  ExecOptions o;
  o.host_cores = 2;
  auto r = make_cpu_backend()->run(p, o);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  auto reduce_of = [&](size_t rank) {
    for (const auto& op : r->report.ranks[rank].ops)
      if (op.op == "all_reduce") return op;
    ADD_FAILURE() << "no all_reduce on rank " << rank;
    return OpRecord{};
  };
  const OpRecord early = reduce_of(0), late = reduce_of(1);
  ASSERT_TRUE(early.transfer_start_s && late.transfer_start_s);
  EXPECT_GE(*early.transfer_start_s - early.start_s, 0.04);
  EXPECT_LE(*early.transfer_start_s, early.end_s);
  EXPECT_LT(*late.transfer_start_s - late.start_s, 0.02);
  EXPECT_GE(r->report.ranks[0].stats.wait_s, 0.04);
  EXPECT_NEAR(r->report.ranks[0].stats.wait_s + r->report.ranks[0].stats.transfer_s, r->report.ranks[0].stats.comm_s, 1e-12);
}

TEST(CpuBackend, OnOneCoreCommandsOfEveryRankAndStreamTakeTurns) {
  // --host-cores 1: two ranks, each with two 30 ms kernels on two streams.
  // The four run one after another, whole (none time-sliced with another):
  // each starts after the one before it ends, and the run takes 120 ms.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [2]})", R"("a": {"shape": [4], "dtype": "f32"}, "b": {"shape": [4], "dtype": "f32"})",
                                 R"([{"op": "async_start", "token": "t1", "stream": {"kind": "computation", "id": 1}, "body": [{"op": "kernel", "writes": ["a"], "cost": {"seconds": 0.03}}]},
      {"op": "kernel", "writes": ["b"], "cost": {"seconds": 0.03}}, {"op": "async_done", "token": "t1"}])"));
  ExecOptions o;
  o.host_cores = 1;
  auto r = make_cpu_backend()->run(p, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->report.host_cores.value_or(0), 1);
  std::vector<std::pair<double, double>> spans;
  for (const auto& rank : r->report.ranks)
    for (const auto& op : rank.ops) spans.push_back({op.start_s, op.end_s});
  std::sort(spans.begin(), spans.end());
  ASSERT_EQ(spans.size(), 4u);
  for (size_t k = 1; k < spans.size(); ++k) EXPECT_GE(spans[k].first, spans[k - 1].second) << k;
  EXPECT_GE(r->report.makespan_s, 0.12);
}

TEST(CpuBackend, AxisIndexGroups) {
  // Four ranks, groups {0,1} and {2,3}: sums 0+1 = 1 and 2+3 = 5.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [4]})",
                                 R"("a": {"shape": [2], "dtype": "f32", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                                    "o": {"shape": [2], "dtype": "f32", "role": "output"})",
                                 R"([{"op": "all_reduce", "src": "a", "dst": "o", "axis": "x", "groups": [[0, 1], [2, 3]]}])"));
  ExecResult r = run_cpu(p);
  EXPECT_EQ(values(p, r, "o", 1), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(p, r, "o", 3), (std::vector<double>{5, 5}));
}

TEST(CpuBackend, MeanAveragesInReduceAllReduceAndReduceScatter) {
  // Three ranks hold a = [x, 2x + 1] (x the axis index): the all_reduce
  // mean is [(0 + 1 + 2) / 3, (1 + 3 + 5) / 3] = [1, 3]; the reduce_scatter
  // of s = [x, x, x] gives each rank one element of the mean, 1. The reduce
  // of m [2, 3] = 1 2 4 / 8 16 32 over axis 1 gives [7/3, 56/3] as f32.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [3]})",
                                 R"("i": {"shape": [2], "dtype": "f32", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                                    "a": {"shape": [2], "dtype": "f32", "role": "output"}, "o": {"shape": [2], "dtype": "f32", "role": "output"},
                                    "s": {"shape": [3], "dtype": "f32", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                                    "e": {"shape": [1], "dtype": "f32", "role": "output"},
                                    "m": {"shape": [2, 3], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [[1, 2, 4], [8, 16, 32]]}},
                                    "r": {"shape": [2], "dtype": "f32", "role": "output"})",
                                 R"([{"op": "copy", "src": "i", "dst": "a"}, {"op": "map", "out": "a[1:2]", "expr": "2 * x + 1", "in": {"x": "i[1:2]"}},
                                     {"op": "all_reduce", "src": "a", "dst": "o", "axis": "x", "reduction": "mean"},
                                     {"op": "reduce_scatter", "src": "s", "dst": "e", "axis": "x", "reduction": "mean"},
                                     {"op": "reduce", "in": "m", "out": "r", "fn": "mean", "axes": [1]}])"));
  ExecResult r = run_cpu(p);
  for (int64_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(values(p, r, "o", rank), (std::vector<double>{1, 3})) << rank;
    EXPECT_EQ(values(p, r, "e", rank), (std::vector<double>{1})) << rank;
  }
  EXPECT_EQ(values(p, r, "r"), (std::vector<double>{static_cast<float>(7.0 / 3), static_cast<float>(56.0 / 3)}));
  // Integers have no mean in thunky: refused at load, at the field.
  auto bad = load_schedule_text(mesh_sched(R"({"axis_names": ["x"], "shape": [2]})", R"("a": {"shape": [2], "dtype": "s32", "role": "output"})",
                                           R"([{"op": "all_reduce", "src": "a", "dst": "a", "axis": "x", "reduction": "mean"}])"),
                                "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors()[0].str(), "bad.json:/program/0/reduction: all_reduce with mean needs a float dtype: src is s32[2] (use sum, and divide)");
}

TEST(CpuBackend, S8GemmsAccumulateIn32BitIntegersAndWrapAsTheGpu) {
  // a = [[1 2 3] [-4 5 127]], b = [[1 0] [0 1] [127 -128]]: c = a b =
  // [[1 + 381, 2 - 384] [-4 + 16129, 5 - 16256]] = [[382 -382] [16125 -16251]].
  // w = 2147483647 (s32's largest) plus 1 x 1 with beta 1 wraps to -2^31.
  Program p = load_ok(R"J({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [2, 3], "dtype": "s8", "role": "input", "init": {"kind": "values", "values": [[1, 2, 3], [-4, 5, 127]]}},
      "b": {"shape": [3, 2], "dtype": "s8", "role": "input", "init": {"kind": "values", "values": [[1, 0], [0, 1], [127, -128]]}},
      "one": {"shape": [1, 1], "dtype": "s8", "role": "input", "init": {"kind": "ones"}},
      "c": {"shape": [2, 2], "dtype": "s32", "role": "output"},
      "w": {"shape": [1, 1], "dtype": "s32", "role": "inout", "init": {"kind": "values", "values": [[2147483647]]}}},
    "program": [{"op": "gemm", "a": "a", "b": "b", "c": "c"}, {"op": "gemm", "a": "one", "b": "one", "c": "w", "beta": 1}]})J");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_EQ(testing::values(p, *r, "c"), (std::vector<double>{382, -382, 16125, -16251}));
  EXPECT_EQ(testing::values(p, *r, "w"), (std::vector<double>{-2147483648.0}));
  // Into anything but s32, or with a fractional alpha: refused at load.
  for (const auto& [c_dtype, alpha, why] : {std::tuple{"f32", "1", "of s8 operands writes an s32 c"}, std::tuple{"s32", "0.5", "takes integer alpha and beta"}}) {
    auto bad = load_schedule_text(std::string(R"J({"format": "thunky.sched/1", "buffers": {
        "a": {"shape": [2, 2], "dtype": "s8", "role": "input", "init": {"kind": "ones"}},
        "c": {"shape": [2, 2], "dtype": ")J") + c_dtype + R"J(", "role": "output"}},
      "program": [{"op": "gemm", "a": "a", "b": "a", "c": "c", "alpha": )J" + alpha + "}]}", "bad.json");
    ASSERT_FALSE(bad.ok()) << c_dtype;
    EXPECT_NE(bad.errors()[0].str().find(why), std::string::npos) << bad.errors()[0].str();
  }
}

TEST(CpuBackend, GroupOfShiftsOverTwoAxesJoinsEveryRankItConnects) {
  // Mesh x=2, y=2 (rank = 2x + y); rank r holds [r]. The group shifts along
  // x (b) and along y (c): rank 0 receives b from rank 2 (x-1 mod 2 = 1)
  // and c from rank 1. Rank 0's two communicators {0,2} and {0,1} connect
  // all four ranks, which launch together instead of waiting for one another.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x", "y"], "shape": [2, 2]})",
                                 R"("a": {"shape": [1], "dtype": "f32", "role": "input", "init": {"kind": "iota"}, "global": {"shape": [4], "spec": [["x", "y"]]}},
                                    "b": {"shape": [1], "dtype": "f32", "role": "output"}, "c": {"shape": [1], "dtype": "f32", "role": "output"})",
                                 R"([{"op": "collective_group", "body": [
                                       {"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1},
                                       {"op": "collective_permute", "src": "a", "dst": "c", "axis": "y", "shift": 1}]}])"));
  ExecResult r = run_cpu(p);
  // b on rank r comes from (x-1, y): 0<-2, 1<-3, 2<-0, 3<-1; c from (x, y-1): 0<-1, 1<-0, 2<-3, 3<-2.
  const double from_x[] = {2, 3, 0, 1}, from_y[] = {1, 0, 3, 2};
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(values(p, r, "b", rank), (std::vector<double>{from_x[rank]})) << rank;
    EXPECT_EQ(values(p, r, "c", rank), (std::vector<double>{from_y[rank]})) << rank;
  }
}

TEST(CpuBackend, CollectiveOverTwoAxesIsRowMajor) {
  // Mesh x=2, y=2; rank r holds [r]. Gathering over (x, y) orders by x first.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x", "y"], "shape": [2, 2]})",
                                 R"("a": {"shape": [1], "dtype": "f32", "role": "input", "init": {"kind": "iota"}, "global": {"shape": [4], "spec": [["x", "y"]]}},
                                    "o": {"shape": [4], "dtype": "f32", "role": "output"},
                                    "oy": {"shape": [2], "dtype": "f32", "role": "output"})",
                                 R"([{"op": "all_gather", "src": "a", "dst": "o", "axis": ["x", "y"]},
                                     {"op": "all_gather", "src": "a", "dst": "oy", "axis": "y"}])"));
  ExecResult r = run_cpu(p);
  EXPECT_EQ(values(p, r, "o", 2), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(values(p, r, "oy", 2), (std::vector<double>{2, 3}));  // ranks (1,0) and (1,1)
}

TEST(CpuBackend, InPlacePermuteAndReceiversOfNothingGetZeros) {
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [3]})",
                                 R"("a": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "axis_index", "axis": "x"}},
                                    "b": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "ones"}})",
                                 R"([{"op": "collective_permute", "src": "a", "dst": "a", "axis": "x", "shift": 1},
                                     {"op": "collective_permute", "src": "b", "dst": "b", "axis": "x", "pairs": [[0, 1]]}])"));
  ExecResult r = run_cpu(p);
  // Shift by one: rank 0 gets rank 2's value.
  EXPECT_EQ(values(p, r, "a", 0), (std::vector<double>{2, 2}));
  EXPECT_EQ(values(p, r, "a", 1), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(p, r, "b", 1), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(p, r, "b", 0), (std::vector<double>{0, 0}));
}

TEST(CpuBackend, RankDependentCondAroundACollectiveIsADeadlock) {
  // p = axis index as bool: only rank 1 enters the all_reduce.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [2]})",
                                 R"("p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                                    "a": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "ones"}})",
                                 R"([{"op": "cond", "pred": "p", "then": [{"op": "all_reduce", "src": "a", "dst": "a", "axis": "x"}], "else": []}])"));
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code(), 1);
  // It names the collective's command, the rank waiting in it, and the
  // rank that never arrives.
  const auto& m = r.errors()[0].message;
  EXPECT_EQ(r.errors()[0].pointer, "/program/0/then/0");
  EXPECT_EQ(m, "deadlock: nothing can progress; rank 1 computation:0 in collective #0 (/program/0/then/0) with ranks {0, 1}, where rank 0 never arrives");
}

TEST(CpuBackend, MismatchedCollectivesAreReportedNotHung) {
  // Rank 0 all-reduces, rank 1 all-gathers on the same communicator.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [2]})",
                                 R"("p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                                    "a": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "ones"}},
                                    "g": {"shape": [4], "dtype": "f32", "role": "output"})",
                                 R"([{"op": "cond", "pred": "p", "then": [{"op": "all_gather", "src": "a", "dst": "g", "axis": "x"}],
                                      "else": [{"op": "all_reduce", "src": "a", "dst": "a", "axis": "x"}]}])"));
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.errors()[0].message.find("issue different collectives"), std::string::npos) << r.errors()[0].message;
  // The error names where: the collective the second rank issued (rank 1's all_gather).
  EXPECT_EQ(r.errors()[0].pointer, "/program/0/then/0");
}

TEST(CpuBackend, MapInputsBroadcastByNumpysRules) {
  // x [2, 3] = 1 2 3 / 4 5 6; a row max m [2, 1] = 3 / 6; a bias b [3] =
  // 10 20 30. out = x - m + b: row 0: 1-3+10, 2-3+20, 3-3+30 = 8 19 30;
  // row 1: 4-6+10, 5-6+20, 6-6+30 = 8 19 30. In place over x too.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [2, 3], "dtype": "f32", "role": "inout", "init": {"kind": "values", "values": [[1, 2, 3], [4, 5, 6]]}},
      "m": {"shape": [2, 1], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [[3], [6]]}},
      "b": {"shape": [3], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [10, 20, 30]}},
      "out": {"shape": [2, 3], "dtype": "f32", "role": "output"}},
    "program": [{"op": "map", "out": "out", "expr": "x - m + b", "in": {"x": "x", "m": "m", "b": "b"}},
                {"op": "map", "out": "x", "expr": "x * b", "in": {"x": "x", "b": "b"}}]})");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_EQ(testing::values(p, *r, "out"), (std::vector<double>{8, 19, 30, 8, 19, 30}));
  EXPECT_EQ(testing::values(p, *r, "x"), (std::vector<double>{10, 40, 90, 40, 100, 180}));
  // A [2] input does not broadcast to [2, 3] (its last dimension is 2, not 1 or 3).
  auto bad = load_schedule_text(R"({"format": "thunky.sched/1", "buffers": {
      "v": {"shape": [2], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
      "out": {"shape": [2, 3], "dtype": "f32", "role": "output"}},
    "program": [{"op": "map", "out": "out", "expr": "v", "in": {"v": "v"}}]})", "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors()[0].pointer, "/program/0/in/v");
  EXPECT_NE(bad.errors()[0].message.find("or broadcast to out's shape by numpy's rules"), std::string::npos) << bad.errors()[0].str();
}

TEST(CpuBackend, ReshapedViewsReadAndWriteTheSameElements) {
  // x [2, 3] = 1 2 3 / 4 5 6. A reduce of max over the last axis into m [2]
  // gives 3 / 6; read back as m.reshape(2, 1) it broadcasts per row:
  // x - m = -2 -1 0 / -2 -1 0. The result is written through a reshaped
  // view of a flat [6] buffer, and a copy from f.reshape(3, 2)[1] takes
  // elements 2 and 3 of f: 0 and -2.
  Program p = load_ok(R"J({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [2, 3], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [[1, 2, 3], [4, 5, 6]]}},
      "m": {"shape": [2], "dtype": "f32"},
      "f": {"shape": [6], "dtype": "f32", "role": "output"},
      "g": {"shape": [2], "dtype": "f32", "role": "output"}},
    "program": [{"op": "reduce", "in": "x", "out": "m", "fn": "max", "axes": [1]},
                {"op": "map", "out": "f.reshape(2, -1)", "expr": "x - m", "in": {"x": "x", "m": "m.reshape(2, 1)"}},
                {"op": "copy", "src": "f.reshape(3, 2)[1]", "dst": "g"}]})J");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_EQ(testing::values(p, *r, "f"), (std::vector<double>{-2, -1, 0, -2, -1, 0}));
  EXPECT_EQ(testing::values(p, *r, "g"), (std::vector<double>{0, -2}));
  // A reshape to another element count is refused at load, at its ref.
  auto bad = load_schedule_text(R"J({"format": "thunky.sched/1", "buffers": {
      "v": {"shape": [6], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
      "out": {"shape": [2, 3], "dtype": "f32", "role": "output"}},
    "program": [{"op": "map", "out": "out", "expr": "v", "in": {"v": "v.reshape(2, 4)"}}]})J", "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors()[0].pointer, "/program/0/in/v");
  EXPECT_NE(bad.errors()[0].message.find("6 elements"), std::string::npos) << bad.errors()[0].str();
}

TEST(CpuBackend, BitcastViewsReadAndWriteTheSameBytesAsAnotherType) {
  // x f32 [2, 2] = 1 -2 / 0.5 0. Its bits as s32 (IEEE 754): 1.0 is
  // 0x3F800000 = 1065353216, -2.0 is 0xC0000000 = -1073741824, 0.5 is
  // 0x3F000000 = 1056964608, 0.0 is 0. Row 0 as bf16 is [4]: each f32 is
  // two bf16 halves, low first (little-endian); 1.0's are 0x0000 (0) and
  // 0x3F80 (1.0), -2.0's are 0 and 0xC000 (-2.0): 0 1 0 -2. A memset of
  // y.bitcast(s32) to 1065353216 leaves y = 1.0 1.0.
  Program p = load_ok(R"J({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [2, 2], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [[1, -2], [0.5, 0]]}},
      "bits": {"shape": [2, 2], "dtype": "s32", "role": "output"},
      "halves": {"shape": [4], "dtype": "f32", "role": "output"},
      "y": {"shape": [2], "dtype": "f32", "role": "output"}},
    "program": [{"op": "copy", "src": "x.bitcast(s32)", "dst": "bits"},
                {"op": "map", "out": "halves", "expr": "v", "in": {"v": "x[0].bitcast(bf16)"}},
                {"op": "memset", "dst": "y.bitcast(s32)", "value": 1065353216}]})J");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_EQ(testing::values(p, *r, "bits"), (std::vector<double>{1065353216, -1073741824, 1056964608, 0}));
  EXPECT_EQ(testing::values(p, *r, "halves"), (std::vector<double>{0, 1, 0, -2}));
  EXPECT_EQ(testing::values(p, *r, "y"), (std::vector<double>{1, 1}));
  // The element type is the view's: a gemm of a bf16 view and an f32
  // buffer is refused as two dtypes, and a bitcast that does not divide
  // the last axis is refused at its ref (f32 [3] is 12 bytes, not whole f64s).
  auto refused = [](const std::string& program, const std::string& pointer, const std::string& says) {
    auto bad = load_schedule_text(R"J({"format": "thunky.sched/1", "buffers": {
        "a": {"shape": [2, 2], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
        "v": {"shape": [3], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
        "c": {"shape": [2, 4], "dtype": "f32", "role": "output"}}, "program": [)J" + program + "]}", "bad.json");
    ASSERT_FALSE(bad.ok()) << program;
    EXPECT_EQ(bad.errors()[0].pointer, pointer) << bad.errors()[0].str();
    EXPECT_NE(bad.errors()[0].message.find(says), std::string::npos) << bad.errors()[0].str();
  };
  refused(R"J({"op": "gemm", "a": "a.bitcast(bf16)", "b": "c", "c": "c"})J", "/program/0", "one dtype");
  refused(R"J({"op": "map", "out": "c[0, 0:1]", "expr": "v", "in": {"v": "v.bitcast(f64)"}})J", "/program/0/in/v", "does not divide");
}

TEST(CpuBackend, ArgmaxAndArgminGiveTheFirstExtremeAndTheFirstNan) {
  // x [2, 4]: row 0 is 3 7 7 1 (argmax 1, the first of the two 7s;
  // argmin 3), row 1 is 2 nan 0 nan (the first NaN, 1, for both, as in
  // JAX). Over axis 0 of the [2, 4] (a column's two values): argmax of
  // (3, 2) is 0, of (7, nan) 1, of (7, 0) 0, of (1, nan) 1.
  Program p = load_ok(R"J({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [8], "dtype": "f32", "role": "inout", "init": {"kind": "values", "values": [3, 7, 7, 1, 2, 0, 0, 0]}},
      "hi": {"shape": [2], "dtype": "s32", "role": "output"}, "lo": {"shape": [2], "dtype": "s64", "role": "output"},
      "col": {"shape": [4], "dtype": "s32", "role": "output"}},
    "program": [{"op": "memset", "dst": "x[5:6]", "value": "nan"}, {"op": "memset", "dst": "x[7:8]", "value": "nan"},
                {"op": "reduce", "in": "x.reshape(2, 4)", "out": "hi", "fn": "argmax", "axes": [1]},
                {"op": "reduce", "in": "x.reshape(2, 4)", "out": "lo", "fn": "argmin", "axes": [-1]},
                {"op": "reduce", "in": "x.reshape(2, 4)", "out": "col", "fn": "argmax", "axes": [0]}]})J");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  EXPECT_EQ(testing::values(p, *r, "hi"), (std::vector<double>{1, 1}));
  EXPECT_EQ(testing::values(p, *r, "lo"), (std::vector<double>{3, 1}));
  EXPECT_EQ(testing::values(p, *r, "col"), (std::vector<double>{0, 1, 0, 1}));
  // Refused at load, at the field: two axes, indices into f32, an axis of 0.
  auto refused = [](const std::string& fn_axes_out, const std::string& shape) {
    auto bad = load_schedule_text(R"J({"format": "thunky.sched/1", "buffers": {
        "x": {"shape": )J" + shape + R"J(, "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
        "i": {"shape": [2], "dtype": "s32", "role": "output"}, "f": {"shape": [2], "dtype": "f32", "role": "output"},
        "one": {"shape": [], "dtype": "s32", "role": "output"}},
      "program": [{"op": "reduce", "in": "x", )J" + fn_axes_out + "}]}", "bad.json");
    EXPECT_FALSE(bad.ok()) << fn_axes_out;
    return bad.ok() ? std::string() : bad.errors()[0].str();
  };
  EXPECT_EQ(refused(R"("fn": "argmax", "axes": [0, 1], "out": "one")", "[2, 4]"), "bad.json:/program/0/axes: argmax reduces exactly one axis, not 2");
  EXPECT_EQ(refused(R"("fn": "argmin", "axes": [1], "out": "f")", "[2, 4]"), "bad.json:/program/0/out: argmin writes indices: out must be s32 or s64, not f32[2]");
  EXPECT_EQ(refused(R"("fn": "argmax", "axes": [1], "out": "i")", "[2, 0]"), "bad.json:/program/0/axes: argmax over an axis of 0 elements has no index to give");
  EXPECT_NE(refused(R"("fn": "argmedian", "axes": [1], "out": "i")", "[2, 4]").find("bad.json:/program/0/fn: unknown reduction 'argmedian' (expected sum, prod, min, max, mean, argmax or argmin)"), std::string::npos);
}

TEST(CpuBackend, MemsetWritesNanInfinitiesAndAny32BitPattern) {
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [4], "dtype": "f32", "role": "output"}, "b": {"shape": [2], "dtype": "s32", "role": "output"}},
    "program": [{"op": "memset", "dst": "a[0:1]", "value": "nan"}, {"op": "memset", "dst": "a[1:2]", "value": "-inf"},
                {"op": "memset", "dst": "a[2:4]", "bits": "0x7fc00001"}, {"op": "memset", "dst": "b", "bits": 4294967295}]})");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  uint32_t a[4];
  std::memcpy(a, r->memory[0][0].data(), 16);
  // A quiet NaN is 0x7fc00000, -inf 0xff800000; the pattern lands as given.
  EXPECT_EQ(std::vector<uint32_t>(a, a + 4), (std::vector<uint32_t>{0x7fc00000u, 0xff800000u, 0x7fc00001u, 0x7fc00001u}));
  EXPECT_EQ(testing::values(p, *r, "b"), (std::vector<double>{-1, -1}));  // all ones, as s32
  // Written back, the schedule says the same: "nan", "-inf" and the hex pattern.
  const json j = to_json(p);
  EXPECT_EQ(j["program"][0]["value"], "nan");
  EXPECT_EQ(j["program"][1]["value"], "-inf");
  EXPECT_EQ(j["program"][2]["bits"], "0x7fc00001");
  EXPECT_EQ(j["program"][3]["bits"], "0xffffffff");
}

TEST(CpuBackend, RunawayWhileIsStopped) {
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {"c": {"shape": [], "dtype": "bool"}},
    "program": [{"op": "while", "cond_buf": "c", "cond": [{"op": "memset", "dst": "c", "value": 1}], "body": []}]})");
  ExecOptions o;
  o.max_trip_count = 1000;
  auto r = make_cpu_backend()->run(p, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.errors()[0].message.find("more than 1000 iterations"), std::string::npos);
}

TEST(CpuBackend, PtxKernelWithoutCpuFallbackIsRefused) {
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f32"}},
    "program": [{"op": "ptx_kernel", "args": ["a"], "written": [true], "kernel_name": "k", "ptx": ".version 7.0"}]})");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_EQ(r.errors()[0].pointer, "/program/0");
  EXPECT_NE(r.errors()[0].message.find("'cpu' fallback"), std::string::npos);
}

TEST(CpuBackend, IterationsReInitialiseInputs) {
  // a += 1 on an inout: every iteration starts from the init, so 3 iterations still give 1.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "zeros"}}},
    "program": [{"op": "map", "out": "a", "expr": "a + 1", "in": {"a": "a"}}]})");
  ExecResult r = run_cpu(p, 3);
  EXPECT_EQ(values(p, r, "a"), (std::vector<double>{1, 1}));
  EXPECT_EQ(r.report.iteration_makespans_s.size(), 3u);
}

TEST(CpuBackend, GlobalShardsGatherBack) {
  // b [2, 4] global, spec [null, x] over 2 ranks: rank 1 holds columns 2..3.
  Program p = load_ok(mesh_sched(R"({"axis_names": ["x"], "shape": [2]})",
                                 R"("b": {"shape": [2, 2], "dtype": "f32", "role": "inout", "init": {"kind": "iota"}, "global": {"shape": [2, 4], "spec": [null, "x"]}})",
                                 "[]"));
  ExecResult r = run_cpu(p);
  EXPECT_EQ(values(p, r, "b", 1), (std::vector<double>{2, 3, 6, 7}));
  EXPECT_EQ(testing::global_values(p, r, "b"), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace thunky

namespace thunky {
namespace {

std::string sharded_uniform(int ranks) {
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [)" + std::to_string(ranks) + R"(]},
    "buffers": {"u": {"shape": [)" + std::to_string(8 / ranks) + R"(, 3], "dtype": "f32", "role": "inout",
      "init": {"kind": "uniform", "low": -2, "high": 2, "seed": 5}, "global": {"shape": [8, 3], "spec": ["x", null]}},
      "n": {"shape": [)" + std::to_string(8 / ranks) + R"(, 3], "dtype": "f32", "role": "inout",
      "init": {"kind": "normal", "seed": 6}, "global": {"shape": [8, 3], "spec": ["x", null]}}},
    "program": []})";
}

TEST(Inits, RandomDataIsTheSameForEveryRankCount) {
  Program one = testing::load_ok(sharded_uniform(1));
  ExecResult r1 = testing::run_cpu(one);
  auto u1 = testing::global_values(one, r1, "u"), n1 = testing::global_values(one, r1, "n");
  for (double v : u1) {
    EXPECT_GE(v, -2);
    EXPECT_LT(v, 2);
  }
  for (int ranks : {2, 4, 8}) {
    Program p = testing::load_ok(sharded_uniform(ranks));
    ExecResult r = testing::run_cpu(p);
    EXPECT_EQ(testing::global_values(p, r, "u"), u1) << ranks;
    EXPECT_EQ(testing::global_values(p, r, "n"), n1) << ranks;
  }
}

TEST(Inits, RandomDataHasItsDistributionAndDependsOnlyOnTheSeed) {
  // 20,000 values of each: uniform on [-2, 2) has mean 0 and standard
  // deviation 4 / sqrt(12) = 1.155; normal has mean 0 and deviation 1. With
  // n = 20,000 the mean's standard error is 0.008 (uniform) and 0.007
  // (normal): bounds of 0.05 are over six of them.
  auto sched = [](int seed) {
    return R"({"format": "thunky.sched/1", "buffers": {
      "u": {"shape": [20000], "dtype": "f32", "role": "inout", "init": {"kind": "uniform", "low": -2, "high": 2, "seed": )" + std::to_string(seed) + R"(}},
      "n": {"shape": [20000], "dtype": "f32", "role": "inout", "init": {"kind": "normal", "seed": )" + std::to_string(seed) + R"(}}},
      "program": []})";
  };
  auto stats = [](const std::vector<double>& v) {
    double mean = 0, var = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    for (double x : v) var += (x - mean) * (x - mean);
    return std::pair{mean, std::sqrt(var / static_cast<double>(v.size()))};
  };
  Program p = testing::load_ok(sched(7));
  ExecResult r = testing::run_cpu(p);
  const auto u = testing::values(p, r, "u"), n = testing::values(p, r, "n");
  auto [um, us] = stats(u);
  auto [nm, ns] = stats(n);
  EXPECT_NEAR(um, 0, 0.05);
  EXPECT_NEAR(us, 4 / std::sqrt(12.0), 0.02);
  EXPECT_NEAR(nm, 0, 0.05);
  EXPECT_NEAR(ns, 1, 0.02);
  // The same seed gives the same data; another seed, other data.
  ExecResult again = testing::run_cpu(p);
  EXPECT_EQ(testing::values(p, again, "n"), n);
  Program q = testing::load_ok(sched(8));
  ExecResult other = testing::run_cpu(q);
  EXPECT_NE(testing::values(q, other, "n"), n);
}

TEST(Inits, NpyFileRelativeToTheSchedule) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("thunky_npy_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<int32_t> data{3, 1, 4, 1, 5, 9};
  write_npy((dir / "x.npy").string(), DType::s32, {2, 3}, reinterpret_cast<const uint8_t*>(data.data()));
  std::ofstream(dir / "s.json") << R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]},
    "buffers": {"a": {"shape": [1, 3], "dtype": "f32", "role": "inout", "init": {"kind": "npy", "path": "x.npy"},
                      "global": {"shape": [2, 3], "spec": ["x", null]}}}, "program": []})";
  Program p = testing::load_file_ok((dir / "s.json").string());
  ExecResult r = testing::run_cpu(p);
  EXPECT_EQ(values(p, r, "a", 1), (std::vector<double>{1, 5, 9}));  // rank 1 holds row 1
  // A shape that does not match is refused at load time.
  std::ofstream(dir / "bad.json") << R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [3, 2], "dtype": "f32", "role": "input",
    "init": {"kind": "npy", "path": "x.npy"}}}, "program": []})";
  auto bad = load_schedule_file((dir / "bad.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors()[0].pointer, "/buffers/a/init/path");
  fs::remove_all(dir);
}


// An .npy file written byte by byte: a raw-bits dtype ('<u2') that
// write_npy has no reason to write.
static void write_raw_npy(const std::filesystem::path& path, const std::string& descr, int64_t count, const void* data, size_t bytes) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(count) + ",), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
  f.write(len, 2);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

TEST(Inits, NpyRawBitsOfANamedDtypeAndSameTypeFilesAreCopiedBitForBit) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("thunky_npy_bits_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // bf16 bits: 1.5 = 0x3fc0, -2.25 = 0xc010, 0.1 rounds to 0x3dcd (0.10009765625), a NaN with payload 0x7fc1.
  const uint16_t bf16[4] = {0x3fc0, 0xc010, 0x3dcd, 0x7fc1};
  write_raw_npy(dir / "h.npy", "<u2", 4, bf16, sizeof bf16);
  // s64 extremes, which a double would round (2^63 - 1 is not a double).
  const int64_t s64[3] = {INT64_MAX, INT64_MIN, INT64_MAX - 1};
  write_npy((dir / "i.npy").string(), DType::s64, {3}, reinterpret_cast<const uint8_t*>(s64));
  std::ofstream(dir / "s.json") << R"({"format": "thunky.sched/1", "buffers": {
    "h": {"shape": [4], "dtype": "bf16", "role": "inout", "init": {"kind": "npy", "path": "h.npy", "dtype": "bf16"}},
    "w": {"shape": [4], "dtype": "f32", "role": "inout", "init": {"kind": "npy", "path": "h.npy", "dtype": "bf16"}},
    "i": {"shape": [3], "dtype": "s64", "role": "inout", "init": {"kind": "npy", "path": "i.npy"}}}, "program": []})";
  Program p = testing::load_file_ok((dir / "s.json").string());
  ExecResult r = testing::run_cpu(p);
  const int hb = p.find_buffer("h"), ib = p.find_buffer("i");
  EXPECT_EQ(std::memcmp(r.memory[0][hb].data(), bf16, sizeof bf16), 0);  // the bits, NaN payload and all
  EXPECT_EQ(std::memcmp(r.memory[0][ib].data(), s64, sizeof s64), 0);
  // Into another dtype the bits are read as bf16, then converted: 0x3dcd is 0.10009765625.
  const auto w = values(p, r, "w");
  EXPECT_EQ(w[0], 1.5);
  EXPECT_EQ(w[1], -2.25);
  EXPECT_EQ(w[2], 0.10009765625);
  EXPECT_TRUE(std::isnan(w[3]));
  // Raw bits without the dtype named, and bits of the wrong size, are refused at the init's pointer.
  std::ofstream(dir / "bad.json") << R"({"format": "thunky.sched/1", "buffers": {"h": {"shape": [4], "dtype": "bf16", "role": "input",
    "init": {"kind": "npy", "path": "h.npy"}}}, "program": []})";
  auto bad = load_schedule_file((dir / "bad.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors()[0].pointer, "/buffers/h/init/path");
  EXPECT_NE(bad.errors()[0].message.find("name that dtype in the init's \"dtype\""), std::string::npos) << bad.errors()[0].message;
  std::ofstream(dir / "bad2.json") << R"({"format": "thunky.sched/1", "buffers": {"h": {"shape": [4], "dtype": "f8e4m3", "role": "input",
    "init": {"kind": "npy", "path": "h.npy", "dtype": "f8e4m3"}}}, "program": []})";
  auto bad2 = load_schedule_file((dir / "bad2.json").string());
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.errors()[0].message.find("holds elements of 2 bytes ('<u2'), not the bits of f8e4m3 (1 bytes)"), std::string::npos)
      << bad2.errors()[0].message;
  fs::remove_all(dir);
}

// ---- collectives against a reference ----
// Random collectives on random one- and two-axis meshes (an axis list in
// either order, axis index groups, explicit pairs with ranks that receive
// nothing, each reduction), each rank's src distinct (iota + 100 x + 1000 y,
// or small positive values for prod), checked element by element against
// the JAX semantics computed here from the mesh coordinates.
TEST(CollectiveSemantics, RandomCollectivesMatchAReference) {
  for (uint32_t seed = 1; seed <= 80; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    const std::vector<std::vector<int64_t>> meshes = {{2}, {3}, {4}, {2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}};
    const std::vector<int64_t> shape = meshes[pick(static_cast<int>(meshes.size()))];
    const std::vector<std::string> names = shape.size() == 2 ? std::vector<std::string>{"x", "y"} : std::vector<std::string>{"x"};
    const int64_t n_ranks = shape.size() == 2 ? shape[0] * shape[1] : shape[0];
    const char* ops[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"};
    const std::string op = ops[pick(5)];
    std::vector<int> axes;  // mesh dimensions of the collective, in its order
    if (names.size() == 2 && op != "collective_permute" && pick(5) < 2) axes = pick(2) ? std::vector<int>{0, 1} : std::vector<int>{1, 0};
    else axes = {pick(static_cast<int>(names.size()))};
    int64_t n = 1;
    for (int d : axes) n *= shape[d];
    const char* reductions[] = {"sum", "max", "min", "prod"};
    const std::string red = op == "all_reduce" || op == "reduce_scatter" ? reductions[pick(4)] : "";
    std::vector<std::vector<int64_t>> groups;
    if (op != "collective_permute" && axes.size() == 1 && n >= 4 && n % 2 == 0 && pick(5) < 2) {
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) idx[k] = k;
      std::shuffle(idx.begin(), idx.end(), rng);
      groups = {{idx.begin(), idx.begin() + n / 2}, {idx.begin() + n / 2, idx.end()}};
      for (auto& g : groups) std::sort(g.begin(), g.end());
    }
    const int64_t k = groups.empty() ? n : n / 2;  // ranks in one instance
    const int64_t e = 6 * k;
    const int64_t dst_len = op == "all_gather" ? e * k : op == "reduce_scatter" ? e / k : e;
    nlohmann::ordered_json axis = nlohmann::ordered_json::array();
    for (int d : axes) axis.push_back(names[d]);
    nlohmann::ordered_json c = {{"op", op}, {"src", "s"}, {"dst", "d"}, {"axis", axes.size() == 1 && pick(2) ? axis[0] : axis}};
    if (!red.empty()) c["reduction"] = red;
    if (!groups.empty()) c["groups"] = groups;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    if (op == "collective_permute") {
      if (pick(2)) {
        const int shifts[] = {1, -1, 2, 0, 3};
        const int shift = shifts[pick(5)];
        c["shift"] = shift;
        for (int64_t i = 0; i < n; ++i) pairs.emplace_back(i, ((i + shift) % n + n) % n);
      } else {
        std::vector<int64_t> target(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) target[i] = i;
        std::shuffle(target.begin(), target.end(), rng);
        nlohmann::ordered_json pj = nlohmann::ordered_json::array();
        for (int64_t i = 0; i < n; ++i)
          if (pick(10) < 7) {
            pairs.emplace_back(i, target[i]);
            pj.push_back({i, target[i]});
          }
        c["pairs"] = pj;
      }
    }
    const std::string expr = red == "prod" ? (names.size() == 2 ? "(v % 3) + 1 + x + y" : "(v % 3) + 1 + x")
                                           : (names.size() == 2 ? "v + 100 * x + 1000 * y" : "v + 100 * x");
    const nlohmann::ordered_json sched = {
        {"format", "thunky.sched/1"},
        {"mesh", {{"axis_names", names}, {"shape", shape}}},
        {"buffers", {{"a", {{"shape", {e}}, {"dtype", "f32"}, {"role", "input"}, {"init", {{"kind", "iota"}}}}},
                     {"s", {{"shape", {e}}, {"dtype", "f32"}}},
                     {"d", {{"shape", {dst_len}}, {"dtype", "f32"}, {"role", "output"}}}}},
        {"program", {{{"op", "map"}, {"out", "s"}, {"expr", expr}, {"in", {{"v", "a"}}}}, c}}};
    Program p = load_ok(sched.dump());
    ExecResult r = run_cpu(p);
    // Coordinates and each rank's src.
    auto coord = [&](int64_t rank, int d) { return d == 0 ? (shape.size() == 2 ? rank / shape[1] : rank) : rank % shape[1]; };
    auto src = [&](int64_t rank) {
      std::vector<double> v(static_cast<size_t>(e));
      for (int64_t i = 0; i < e; ++i) {
        const double y = names.size() == 2 ? static_cast<double>(coord(rank, 1)) : 0.0, x = static_cast<double>(coord(rank, 0));
        v[i] = red == "prod" ? static_cast<double>(i % 3) + 1 + x + y : static_cast<double>(i) + 100 * x + 1000 * y;
      }
      return v;
    };
    // A rank's instance: ranks agreeing on the other axes, ordered row-major
    // over the collective's axes in its order, then the group holding it.
    auto instance = [&](int64_t rank) {
      std::vector<int64_t> members;
      for (int64_t q = 0; q < n_ranks; ++q) {
        bool same = true;
        for (int d = 0; d < static_cast<int>(shape.size()); ++d)
          if (std::find(axes.begin(), axes.end(), d) == axes.end() && coord(q, d) != coord(rank, d)) same = false;
        if (same) members.push_back(q);
      }
      std::sort(members.begin(), members.end(), [&](int64_t a, int64_t b) {
        for (int d : axes)
          if (coord(a, d) != coord(b, d)) return coord(a, d) < coord(b, d);
        return false;
      });
      if (groups.empty()) return members;
      const int64_t me = std::find(members.begin(), members.end(), rank) - members.begin();
      for (const auto& g : groups)
        if (std::find(g.begin(), g.end(), me) != g.end()) {
          std::vector<int64_t> sub;
          for (int64_t i : g) sub.push_back(members[i]);
          return sub;
        }
      return members;
    };
    auto reduce = [&](double a, double b) {
      if (red == "max") return std::max(a, b);
      if (red == "min") return std::min(a, b);
      if (red == "prod") return a * b;
      return a + b;
    };
    for (int64_t rank = 0; rank < n_ranks; ++rank) {
      const std::vector<int64_t> inst = instance(rank);
      const int64_t me = std::find(inst.begin(), inst.end(), rank) - inst.begin();
      std::vector<double> want;
      if (op == "all_reduce" || op == "reduce_scatter") {
        want = src(inst[0]);
        for (size_t q = 1; q < inst.size(); ++q) {
          const auto v = src(inst[q]);
          for (int64_t i = 0; i < e; ++i) want[i] = reduce(want[i], v[i]);
        }
        if (op == "reduce_scatter") want = std::vector<double>(want.begin() + me * (e / k), want.begin() + (me + 1) * (e / k));
      } else if (op == "all_gather") {
        for (int64_t q : inst) {
          const auto v = src(q);
          want.insert(want.end(), v.begin(), v.end());
        }
      } else if (op == "all_to_all") {
        for (int64_t q : inst) {
          const auto v = src(q);
          want.insert(want.end(), v.begin() + me * (e / k), v.begin() + (me + 1) * (e / k));
        }
      } else {
        want.assign(static_cast<size_t>(e), 0.0);  // receivers of nothing get zeros
        for (auto [from, to] : pairs)
          if (to == me) want = src(inst[from]);
      }
      EXPECT_EQ(values(p, r, "d", rank), want) << op << " rank " << rank << " " << c.dump();
    }
  }
}

}  // namespace
}  // namespace thunky

namespace thunky {
namespace {

TEST(CpuBackend, TransposePermutesTheAxes) {
  // x = iota over [2, 3, 2]; perm [2, 0, 1] gives dst[k][i][j] = x[i][j][k]
  // = 6i + 2j + k: dst[1] = [[1 3 5] [7 9 11]], dst[0] the even numbers.
  Program p = testing::load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [2, 3, 2], "dtype": "s32", "role": "input", "init": {"kind": "iota"}},
      "y": {"shape": [2, 2, 3], "dtype": "s32", "role": "output"}},
    "program": [{"op": "transpose", "src": "x", "dst": "y", "perm": [2, 0, 1]}]})");
  auto r = make_cpu_backend()->run(p, {});
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> y(12);
  std::memcpy(y.data(), r->memory[0][1].data(), 48);
  EXPECT_EQ(y, (std::vector<int32_t>{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}));
  // A perm that repeats a dimension, and a dst of the wrong shape, are refused at their pointers.
  auto bad = [](const std::string& perm, const std::string& shape) {
    return load_schedule_text(R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [2, 3], "dtype": "f32", "role": "input", "init": {"kind": "iota"}},
      "y": {"shape": )" + shape + R"(, "dtype": "f32", "role": "output"}},
      "program": [{"op": "transpose", "src": "x", "dst": "y", "perm": )" + perm + "}]}", "t.json");
  };
  auto twice = bad("[0, 0]", "[2, 3]");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.errors()[0].pointer, "/program/0/perm/1");
  auto shape = bad("[1, 0]", "[2, 3]");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.errors()[0].pointer, "/program/0/dst");
}

}  // namespace
}  // namespace thunky

namespace thunky {
namespace {

Report timeline_of(double makespan) {
  Report r;
  r.makespan_s = makespan;
  return r;
}

TEST(MedianTimeline, FewIterationsGiveTheExactMedianOne) {
  // Makespans 5 1 4 2 3: sorted 1 2 3 4 5, the median (index 5 / 2 = 2) is 3.
  MedianTimeline m;
  for (double s : {5.0, 1.0, 4.0, 2.0, 3.0}) m.add(timeline_of(s));
  Report r = m.take();
  EXPECT_EQ(r.makespan_s, 3.0);
  EXPECT_EQ(r.iteration_makespans_s, (std::vector<double>{5, 1, 4, 2, 3}));
  // Four: sorted 1 2 3 4, the upper median (index 2) is 3.
  MedianTimeline even;
  for (double s : {4.0, 1.0, 3.0, 2.0}) even.add(timeline_of(s));
  EXPECT_EQ(even.take().makespan_s, 3.0);
}

TEST(MedianTimeline, ManyIterationsKeepFewTimelinesAndFindTheMedian) {
  // 10,000 iterations alternating 1 s and 3 s, then one of 2 s: sorted,
  // 5,000 ones come first, so the median (index 10001 / 2 = 5000) is the
  // last iteration's 2 s, though only 16 timelines are kept: when it
  // arrives it is nearer the median than any kept 1 or 3.
  MedianTimeline m;
  for (int i = 0; i < 10000; ++i) m.add(timeline_of(i % 2 ? 3.0 : 1.0));
  m.add(timeline_of(2.0));
  Report r = m.take();
  EXPECT_EQ(r.makespan_s, 2.0);
  ASSERT_EQ(r.iteration_makespans_s.size(), 10001u);
  EXPECT_EQ(r.iteration_makespans_s[1], 3.0);
  EXPECT_EQ(r.iteration_makespans_s.back(), 2.0);
}

}  // namespace
}  // namespace thunky
