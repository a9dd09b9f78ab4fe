// Ranks folded into classes (sim/symmetry.h): which classes a schedule
// has, why an axis folds no further, and that simulating one rank of each
// class predicts what simulating every rank predicts.
#include <gtest/gtest.h>

#include <filesystem>

#include "exec/backend.h"
#include "core/control_flow.h"
#include "core/load.h"
#include "sim/fold_test_util.h"
#include "sim/symmetry.h"
#include "tests/test_util.h"

namespace thunky::sim {
namespace {

using testing::load_ok;

// A machine of rings with wrap-around on every axis (1e9 B/s a direction),
// compute at 1e12 flop/s and 1e12 B/s of HBM; `axes` replaces the axes.
Machine test_machine(const std::string& axes = R"("*": {"topology": "ring", "wraparound": true, "link_bandwidth": 1e9, "hop_latency_s": 1e-6})") {
  return parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "test",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e12, "source": "test"}, "axes": {)" + axes + "}}"));
}

// A schedule on mesh `axes` x `shape` with buffers a (input) and b, c (f32
// of 65536 elements), m (input) and mo (256 x 256 f32), go (a bool), a
// bool `stage` from the index of axis `index_axis`, and `program`.
std::string schedule(const std::string& axes, const std::string& shape, const std::string& program, const std::string& index_axis = "") {
  return R"({"format": "thunky.sched/1", "mesh": {"axis_names": )" + axes + R"(, "shape": )" + shape + R"(},
    "buffers": {"a": {"shape": [65536], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "b": {"shape": [65536], "dtype": "f32"}, "c": {"shape": [65536], "dtype": "f32"},
                "m": {"shape": [256, 256], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "mo": {"shape": [256, 256], "dtype": "f32"}, "go": {"shape": [], "dtype": "bool"})" +
         (index_axis.empty() ? "" : R"(, "stage": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": ")" + index_axis + R"("}})") +
         R"(}, "program": )" + program + "}";
}

// A pipeline of 4 stages over 8 data-parallel replicas: three micro-batches,
// each a GEMM and a send to the next stage (no wrap-around: stage 3 sends
// nowhere), then a gradient all_reduce over dp beside a last GEMM.
const std::string kPipeline = schedule(R"(["pp", "dp"])", "[4, 8]", R"([
  {"op": "while", "cond_buf": "go", "sim": {"trip_count": 3}, "cond": [], "body": [
    {"op": "gemm", "a": "m", "b": "m", "c": "mo"},
    {"op": "async_start", "token": "s", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "collective_permute", "src": "a", "dst": "b", "axis": "pp", "pairs": [[0, 1], [1, 2], [2, 3]]}]},
    {"op": "async_done", "token": "s"}]},
  {"op": "async_start", "token": "g", "stream": {"kind": "communication", "id": 1}, "body": [
    {"op": "all_reduce", "src": "a", "dst": "c", "axis": "dp"}]},
  {"op": "gemm", "a": "m", "b": "m", "c": "mo"},
  {"op": "async_done", "token": "g"}])");

TEST(RankClasses, APipelineFoldsItsDataParallelAxis) {
  Program p = load_ok(kPipeline);
  for (const Machine& m : {test_machine(), model("h100-cluster"), model("tpu-v5p")}) {
    SCOPED_TRACE(m.name);
    const RankClasses c = rank_classes(p, m, nullptr);
    // The sends' pairs map onto themselves under no translation along pp
    // (0>1 would become 1>2, 2>3 and 3>0, and 3>0 is not a pair): pp stays
    // whole, 4 classes of 8 (dp folds whole).
    EXPECT_EQ(c.step, (std::vector<int64_t>{4, 1}));
    EXPECT_EQ(c.count(), 4);
    EXPECT_EQ(c.class_size(), 8);
    EXPECT_NE(c.explain(p.mesh.axis_names).find("axis pp (4): not folded: /program/0/body/1/body/0 (collective_permute): its pairs"), std::string::npos)
        << c.explain(p.mesh.axis_names);
    EXPECT_EQ(c.label(c.representative(8 * 2 + 5), p.mesh.axis_names), "pp=2, dp=*");
    expect_same_prediction(p, m);
  }
  // Folded, each rank says whose timeline it has: its stage's first replica.
  auto r = simulate(p, test_machine(), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->report.ranks[8].same_as);
  EXPECT_EQ(r->report.ranks[8 + 5].same_as, 8);
}

TEST(RankClasses, ABranchOnTheAxisIndexIsDecidedPerClassWithoutARun) {
  // Stages past the first (stage = axis index of pp, true from 1) run one
  // more GEMM; no sim hint and no functional run decide it: the rank's
  // coordinate does.
  const std::string s = schedule(R"(["pp", "dp"])", "[4, 4]", R"([
    {"op": "cond", "pred": "stage", "then": [{"op": "gemm", "a": "m", "b": "m", "c": "mo"}], "else": []},
    {"op": "all_reduce", "src": "a", "dst": "b", "axis": "dp"}])", "pp");
  Program p = load_ok(s);
  const Machine m = test_machine();
  const RankClasses c = rank_classes(p, m, nullptr);
  EXPECT_EQ(c.step, (std::vector<int64_t>{4, 1}));
  EXPECT_NE(c.why[0].find("/program/0 (cond) takes its branch by the axis index"), std::string::npos) << c.why[0];
  auto r = simulate(p, m, nullptr);
  ASSERT_TRUE(r.ok()) << r.errors()[0].str();
  // Stage 0: the all_reduce alone; stage 1 (rank 4): the GEMM and the all_reduce.
  EXPECT_EQ(r->report.timeline(r->report.ranks[1]).ops.size(), 1u);
  EXPECT_EQ(r->report.timeline(r->report.ranks[5]).ops.size(), 2u);
  expect_same_prediction(p, m);
}

TEST(RankClasses, GroupsOfEqualBlocksFoldByTheirBlock) {
  const Machine m = test_machine();
  auto classes = [&](const std::string& groups) {
    Program p = load_ok(schedule(R"(["x"])", "[8]", R"([{"op": "all_reduce", "src": "a", "dst": "b", "axis": "x", "groups": )" + groups + "}]"));
    expect_same_prediction(p, m);
    return rank_classes(p, m, nullptr).count();
  };
  // Blocks of 4: a translation by 4 maps each block onto the other; by 1
  // or 2 it splits them. Ranks 4 apart share a timeline: 4 classes.
  EXPECT_EQ(classes("[[0, 1, 2, 3], [4, 5, 6, 7]]"), 4);
  // Strided groups {0, 4}, {1, 5}, ...: a translation by 1 maps each onto the next.
  EXPECT_EQ(classes("[[0, 4], [1, 5], [2, 6], [3, 7]]"), 1);
  // Pairs: a translation by 2 maps them onto each other; 2 classes.
  EXPECT_EQ(classes("[[0, 1], [2, 3], [4, 5], [6, 7]]"), 2);
  // Pairs that no translation but the whole ring maps onto pairs ({0, 1}
  // by 2 is {2, 3}, by 4 {4, 5}, neither a group): 8 classes.
  EXPECT_EQ(classes("[[0, 1], [2, 5], [3, 4], [6, 7]]"), 8);
}

TEST(RankClasses, AHierarchyWithALineBetweenNodesFoldsItsGpus) {
  // 4 nodes on a line (no wrap-around) of 8 GPUs each on a switch: the
  // GPUs' axis folds whole, the nodes' does not (its end nodes have one
  // neighbour): 4 classes.
  const Machine m = test_machine(R"("node": {"topology": "ring", "wraparound": false, "link_bandwidth": 1e9, "hop_latency_s": 1e-6},
                                    "gpu": {"topology": "switch", "egress_bandwidth": 4e9, "latency_s": 1e-6})");
  Program p = load_ok(schedule(R"(["node", "gpu"])", "[4, 8]", R"([
    {"op": "all_reduce", "src": "a", "dst": "b", "axis": "gpu"},
    {"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [
      {"op": "all_reduce", "src": "b", "dst": "c", "axis": "node"}]},
    {"op": "gemm", "a": "m", "b": "m", "c": "mo"},
    {"op": "async_done", "token": "t"},
    {"op": "collective_permute", "src": "c", "dst": "b", "axis": "gpu", "shift": 1}])"));
  const RankClasses c = rank_classes(p, m, nullptr);
  EXPECT_EQ(c.step, (std::vector<int64_t>{4, 1}));
  EXPECT_NE(c.why[0].find("a line (no wrap-around)"), std::string::npos) << c.why[0];
  expect_same_prediction(p, m);
}

TEST(RankClasses, ASizeByTheAxisIndexBreaksThatAxisAlone) {
  // The copy's size grows with x: ranks along x differ, along y they do not.
  Program p = load_ok(schedule(R"(["x", "y"])", "[2, 4]", R"([
    {"op": "copy", "src": "a[0:1000*(x+1)]", "dst": "b[0:1000*(x+1)]"},
    {"op": "all_reduce", "src": "b", "dst": "c", "axis": ["x", "y"]}])"));
  const RankClasses c = rank_classes(p, test_machine(), nullptr);
  EXPECT_EQ(c.step, (std::vector<int64_t>{2, 1}));
  EXPECT_NE(c.why[0].find("sizes a view by the axis index"), std::string::npos);
  expect_same_prediction(p, test_machine());
}

TEST(RankClasses, EveryExampleAndTestSchedulePredictsWhatEveryRankPredicts) {
  // On every bundled machine model: whether or not a schedule folds, and
  // into however many classes, its prediction is the one of every rank.
  std::vector<std::string> files;
  for (const char* dir : {"/examples", "/tests/schedules"})
    for (const auto& e : std::filesystem::directory_iterator(testing::source_dir() + dir))
      if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::vector<std::string> machines;
  for (const auto& e : std::filesystem::directory_iterator(testing::source_dir() + "/models")) machines.push_back(e.path().stem().string());
  int compared = 0;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    auto p = load_schedule_file(f);
    if (!p) continue;  // an example of a refusal
    // Control flow no hint decides is decided as thunky-sim decides it: by
    // a run on the cpu backend.
    std::optional<Decisions> decisions;
    const std::vector<bool> written = written_buffers(*p);
    if (any_command(p->program, [&](const Command& c) {
          if (const While* w = c.get_if<While>()) return !w->trip_count;
          return (c.op() == Op::cond || c.op() == Op::switch_) && !hinted_branch(c) && !deciding_axis(*p, c, written);
        })) {
      ExecOptions o;
      o.max_trip_count = 1000;
      auto run = make_cpu_backend()->run(*p, o);
      if (!run) continue;  // a runaway loop, as the file means
      decisions = run->decisions;
    }
    for (const std::string& name : machines) {
      SCOPED_TRACE(name);
      const Machine m = model(name);
      const Decisions* d = decisions ? &*decisions : nullptr;
      if (!simulate(p.value(), m, d).ok()) continue;  // needs what this model lacks (a dtype's peak)
      ++compared;
      expect_same_prediction(*p, m, d);
    }
  }
  EXPECT_GE(compared, 150);  // 25 files on 10 models, less what a model cannot price
}

}  // namespace
}  // namespace thunky::sim
