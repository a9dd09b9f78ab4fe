// The cuda backend against the cpu backend, on a GPU (ctest label `gpu`;
// every test skips where no CUDA device answers). Results must agree
// exactly for copies, fills, integer maps and collectives of exact values,
// and within a tolerance that follows the dtype for products, reductions
// in other orders and the device's transcendental functions.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/load.h"
#include "exec/backend.h"
#include "tests/test_util.h"

namespace thunky {
namespace {

using testing::load_file_ok;
using testing::load_ok;

// A cuda run's outcome, or nullopt where this machine has no GPU.
std::optional<Expected<ExecResult>> try_cuda(const Program& p, bool graph = false, int iters = 1, int64_t max_trips = 1'000'000) {
  auto b = make_cuda_backend();
  if (!b) return std::nullopt;
  ExecOptions o;
  o.graph = graph;
  o.iters = iters;
  o.max_trip_count = max_trips;
  auto r = b->run(p, o);
  if (!r && r.errors().front().message.find("no CUDA device") != std::string::npos) return std::nullopt;
  return r;
}

// A cuda run that must succeed, or nullopt where there is no GPU.
std::optional<ExecResult> run_cuda(const Program& p, bool graph = false, int iters = 1) {
  auto r = try_cuda(p, graph, iters);
  if (!r) return std::nullopt;
  if (!*r) {
    ADD_FAILURE() << r->errors().front().str();
    return ExecResult{};
  }
  return std::move(r->value());
}

#define CUDA_OR_SKIP(var, ...)                      \
  auto var##_opt = run_cuda(__VA_ARGS__);           \
  if (!var##_opt) GTEST_SKIP() << "no CUDA device"; \
  ExecResult& var = *var##_opt

// Relative tolerance of a dtype's results computed in another order or
// with another math library: bf16 1e-2 (as the issue's target), f16 and
// f8 a few ulps of their own, f32 1e-5, f64 1e-12; integers and bool exact.
double tolerance(DType t) {
  switch (t) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    case DType::f8e4m3:
    case DType::f8e5m2: return 0.13;
    case DType::f32: return 1e-5;
    case DType::f64: return 1e-12;
    default: return 0;
  }
}

void expect_same_outputs(const Program& p, const ExecResult& cpu, const ExecResult& gpu, const std::string& what) {
  ASSERT_EQ(cpu.memory.size(), gpu.memory.size()) << what;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.role != Role::output && buf.role != Role::inout) continue;
    const double tol = tolerance(buf.dtype);
    for (size_t r = 0; r < cpu.memory.size(); ++r) {
      int bad = 0;
      for (int64_t i = 0; i < buf.count() && bad < 5; ++i) {
        const double x = load_as_double(cpu.memory[r][b].data(), buf.dtype, static_cast<size_t>(i));
        const double y = load_as_double(gpu.memory[r][b].data(), buf.dtype, static_cast<size_t>(i));
        if (x == y || (std::isnan(x) && std::isnan(y))) continue;
        if (tol > 0 && std::fabs(x - y) <= tol * std::max({std::fabs(x), std::fabs(y), 1e-3})) continue;
        ++bad;
        ADD_FAILURE() << what << ": " << buf.name << " rank " << r << " [" << i << "]: cpu " << x << ", cuda " << y;
      }
    }
  }
}

TEST(CudaBackend, EveryExampleAndTestScheduleMatchesTheCpuBackendEagerAndCaptured) {
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"/examples", "/tests/schedules"})
    for (const auto& e : std::filesystem::directory_iterator(std::string(THUNKY_SOURCE_DIR) + dir))
      if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  int ran = 0;
  for (const auto& f : files) {
    auto loaded = load_schedule_file(f.string());
    if (!loaded) continue;  // an example kept for its diagnostic (a race)
    const Program& p = *loaded;
    ExecOptions o;
    o.max_trip_count = 1000;
    auto cpu = make_cpu_backend()->run(p, o);
    for (bool graph : {false, true}) {
      auto gpu = try_cuda(p, graph, 1, 1000);
      if (!gpu) GTEST_SKIP() << "no CUDA device";
      const std::string what = f.filename().string() + (graph ? " --graph" : "");
      // A schedule that fails on the cpu fails alike on the GPU.
      ASSERT_EQ(gpu->exit_code(), cpu.exit_code()) << what << ": " << (gpu->ok() ? "ran" : gpu->errors().front().str());
      if (!cpu) continue;
      expect_same_outputs(p, *cpu, gpu->value(), what);
      ++ran;
    }
  }
  EXPECT_GE(ran, 40);
}

TEST(CudaBackend, PtxAddOneGivesElevenTwentyOneThirtyOneFortyOne) {
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "in": {"shape": [4], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [10, 20, 30, 40]}},
      "out": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "ptx_kernel", "args": ["in", "out"], "written": [false, true], "kernel_name": "add_one_kernel",
                 "ptx_file": ")" + std::string(THUNKY_SOURCE_DIR) + R"(/examples/add_one.ptx", "grid": [1, 1, 1], "block": [4, 1, 1]}]})");
  CUDA_OR_SKIP(r, p);
  EXPECT_EQ(testing::values(p, r, "out"), (std::vector<double>{11, 21, 31, 41}));
}

// GEMMs of every form against the cpu backend: transposes, batches, a 2-D
// operand broadcast over a batch, alpha and beta, the output aliasing an
// input, and each dtype.
TEST(CudaBackend, GemmsOfEveryFormMatchTheCpuBackend) {
  for (const char* dtype : {"f32", "f64", "bf16", "f16", "f8e4m3"}) {
    for (const char* form : {"plain", "ta", "tb", "batched", "broadcast", "alpha_beta", "alias"}) {
      const std::string f = form, t = dtype;
      std::string a_shape = "[48, 40]", b_shape = "[40, 56]", c_shape = "[48, 56]", extra;
      if (f == "ta") a_shape = "[40, 48]", extra = R"(, "transpose_a": true)";
      if (f == "tb") b_shape = "[56, 40]", extra = R"(, "transpose_b": true)";
      if (f == "batched") a_shape = "[3, 48, 40]", b_shape = "[3, 40, 56]", c_shape = "[3, 48, 56]";
      if (f == "broadcast") a_shape = "[3, 48, 40]", c_shape = "[3, 48, 56]";
      if (f == "alpha_beta") extra = R"(, "alpha": 0.5, "beta": -2.0)";
      std::string program = R"([{"op": "gemm", "a": "a", "b": "b", "c": "c")" + extra + "}]";
      if (f == "alias") {
        a_shape = b_shape = c_shape = "[40, 40]";
        program = R"([{"op": "copy", "src": "a", "dst": "c"}, {"op": "gemm", "a": "c", "b": "b", "c": "c"}])";
      }
      Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
          "a": {"shape": )" + a_shape + R"(, "dtype": ")" + t + R"(", "role": "input", "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 1}},
          "b": {"shape": )" + b_shape + R"(, "dtype": ")" + t + R"(", "role": "input", "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 2}},
          "c": {"shape": )" + c_shape + R"(, "dtype": ")" + t + R"(", "role": "inout", "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 3}}},
        "program": )" + program + "}");
      CUDA_OR_SKIP(gpu, p);
      expect_same_outputs(p, testing::run_cpu(p), gpu, t + " " + f);
    }
  }
}

TEST(CudaBackend, CollectivesOnOneGpuKeepTheirSemanticsAndSayShared) {
  // 4 ranks: all_reduce of each rank's index, a shift, an in-place permute
  // and an all_to_all; values are exact.
  Program p = load_ok(R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [4]}, "buffers": {
      "v": {"shape": [8], "dtype": "s32", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
      "sum": {"shape": [8], "dtype": "s32", "role": "output"},
      "shifted": {"shape": [8], "dtype": "s32", "role": "output"},
      "swapped": {"shape": [8], "dtype": "s32", "role": "inout", "init": {"kind": "iota"}},
      "gathered": {"shape": [32], "dtype": "s32", "role": "output"},
      "a2a": {"shape": [8], "dtype": "s32", "role": "output"}},
    "program": [
      {"op": "all_reduce", "src": "v", "dst": "sum", "axis": "x"},
      {"op": "collective_permute", "src": "v", "dst": "shifted", "axis": "x", "shift": 1},
      {"op": "collective_permute", "src": "swapped", "dst": "swapped", "axis": "x", "pairs": [[0, 1], [1, 0]]},
      {"op": "all_gather", "src": "v", "dst": "gathered", "axis": "x"},
      {"op": "all_to_all", "src": "swapped", "dst": "a2a", "axis": "x"}]})");
  CUDA_OR_SKIP(gpu, p);
  expect_same_outputs(p, testing::run_cpu(p), gpu, "collectives");
  // sum = 0 + 1 + 2 + 3 on every rank; rank 1 receives rank 0's index.
  EXPECT_EQ(testing::values(p, gpu, "sum", 2), std::vector<double>(8, 6));
  EXPECT_EQ(testing::values(p, gpu, "shifted", 1), std::vector<double>(8, 0));
  EXPECT_EQ(gpu.report.placement.value_or(""), "shared-device");
}

TEST(CudaBackend, CollectivesOnTwoStreamsOfARankKeepTheirOwnData) {
  // Rank 1 holds its communication stream for 50 ms before the all_gather
  // of a there, so rank 0's members build that gather late; meanwhile rank
  // 0 gathers b on its computation stream through the same staging buffer.
  // The second gather must not overwrite what the first has yet to read:
  // eager and captured, ga is a's 7s and gb b's 9s on both ranks.
  Program p = load_ok(R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]}, "buffers": {
      "slow": {"shape": [], "dtype": "bool", "role": "scratch"},
      "a": {"shape": [1024], "dtype": "s32", "role": "input", "init": {"kind": "constant", "value": 7}},
      "b": {"shape": [1024], "dtype": "s32", "role": "input", "init": {"kind": "constant", "value": 9}},
      "ga": {"shape": [2048], "dtype": "s32", "role": "output"},
      "gb": {"shape": [2048], "dtype": "s32", "role": "output"}},
    "program": [
      {"op": "map", "out": "slow", "expr": "x == 1", "in": {}},
      {"op": "async_start", "stream": {"kind": "communication", "id": 0}, "token": "t", "body": [
        {"op": "cond", "pred": "slow", "then": [{"op": "kernel", "name": "hold", "reads": [], "writes": [], "cost": {"seconds": 0.05}}], "else": []},
        {"op": "all_gather", "src": "a", "dst": "ga", "axis": "x"}]},
      {"op": "all_gather", "src": "b", "dst": "gb", "axis": "x"},
      {"op": "async_done", "token": "t"}]})");
  for (bool graph : {false, true}) {
    CUDA_OR_SKIP(gpu, p, graph);
    for (int64_t rank : {0, 1}) {
      EXPECT_EQ(testing::values(p, gpu, "ga", rank), std::vector<double>(2048, 7)) << "graph " << graph << ", rank " << rank;
      EXPECT_EQ(testing::values(p, gpu, "gb", rank), std::vector<double>(2048, 9)) << "graph " << graph << ", rank " << rank;
    }
  }
}

TEST(CudaBackend, ABufferLargerThanTheGpuIsNamedWithItsBytes) {
  // 2^38 bytes (256 GiB) is more than any GPU holds: exit 2, the buffer,
  // its rank and the bytes asked named, never a crash.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "huge": {"shape": [274877906944], "dtype": "u8", "role": "scratch"}},
    "program": [{"op": "memzero", "dst": "huge"}]})");
  auto r = try_cuda(p);
  if (!r) GTEST_SKIP() << "no CUDA device";
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->exit_code(), 2);
  const std::string m = r->errors().front().message;
  EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
  EXPECT_NE(m.find("buffer 'huge' of rank 0 needs 274877906944 bytes"), std::string::npos) << m;
}

TEST(CudaBackend, TheReportIsMeasuredAndComparable) {
  Program p = load_file_ok(testing::example_path("ring_collective_matmul_n4.json"));
  CUDA_OR_SKIP(gpu, p, false, 5);
  const Report& r = gpu.report;
  EXPECT_EQ(r.backend.value_or(""), "cuda");
  EXPECT_EQ(r.iteration_makespans_s.size(), 5u);
  ASSERT_TRUE(r.timing_overhead_s.has_value());
  EXPECT_GT(*r.timing_overhead_s, 0);
  EXPECT_LT(*r.timing_overhead_s, 1e-4);  // a pair of events costs microseconds at most
  // Issuing a GEMM with its two events takes microseconds of host time,
  // not the 100 us and more a rank's thread may wait in a collective.
  ASSERT_TRUE(r.dispatch_s_per_command.has_value());
  EXPECT_GT(*r.dispatch_s_per_command, 0);
  EXPECT_LT(*r.dispatch_s_per_command, 1e-4);
  ASSERT_EQ(r.ranks.size(), 4u);
  for (const auto& rank : r.ranks) {
    EXPECT_FALSE(rank.ops.empty());
    for (const auto& op : rank.ops) {
      EXPECT_GE(op.start_s, 0) << op.id;
      EXPECT_GE(op.end_s, op.start_s) << op.id;
      EXPECT_LE(op.end_s, r.makespan_s * (1 + 1e-9)) << op.id;
    }
  }
  // The same ids as the simulator's: every op id of the cpu run is there.
  ExecResult cpu = testing::run_cpu(p);
  std::set<std::string> gpu_ids, cpu_ids;
  for (const auto& op : r.ranks[0].ops) gpu_ids.insert(op.id);
  for (const auto& op : cpu.report.ranks[0].ops) cpu_ids.insert(op.id);
  EXPECT_EQ(gpu_ids, cpu_ids);
}

TEST(CudaBackend, ARunawayLoopIsAWrongScheduleEagerAndCaptured) {
  // Captured, the loop's trips are counted on the device: it stops, never hangs.
  Program p = load_file_ok(std::string(THUNKY_SOURCE_DIR) + "/tests/schedules/runaway_loop.json");
  for (bool graph : {false, true}) {
    auto r = try_cuda(p, graph, 1, 50);
    if (!r) GTEST_SKIP() << "no CUDA device";
    ASSERT_FALSE(r->ok()) << graph;
    EXPECT_EQ(r->exit_code(), 1);
    EXPECT_NE(r->errors().front().message.find("more than 50 iterations"), std::string::npos) << r->errors().front().str();
  }
}

TEST(CudaBackend, ControlFlowCapturedAsConditionalNodesGivesTheCpuResults) {
  // cond (then and else), a clamped switch and a while whose body holds a
  // cond: every kind of conditional node, nested.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "n": {"shape": [], "dtype": "s32", "role": "inout", "init": {"kind": "constant", "value": 27}},
      "steps": {"shape": [], "dtype": "s32", "role": "inout", "init": {"kind": "zeros"}},
      "go": {"shape": [], "dtype": "bool", "role": "scratch"},
      "even": {"shape": [], "dtype": "bool", "role": "scratch"},
      "k": {"shape": [], "dtype": "s32", "role": "input", "init": {"kind": "constant", "value": 9}},
      "out": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [
      {"op": "while", "cond_buf": "go",
       "cond": [{"op": "map", "out": "go", "expr": "n > 1", "in": {"n": "n"}}],
       "body": [{"op": "map", "out": "even", "expr": "(n % 2) == 0", "in": {"n": "n"}},
                {"op": "cond", "pred": "even",
                 "then": [{"op": "map", "out": "n", "expr": "n // 2", "in": {"n": "n"}}],
                 "else": [{"op": "map", "out": "n", "expr": "3 * n + 1", "in": {"n": "n"}}]},
                {"op": "map", "out": "steps", "expr": "s + 1", "in": {"s": "steps"}}]},
      {"op": "switch", "index": "k", "branches": [
        [{"op": "memset", "dst": "out", "value": 1}], [{"op": "memset", "dst": "out", "value": 2}],
        [{"op": "memset", "dst": "out", "value": 3}]]}]})");
  CUDA_OR_SKIP(gpu, p, true);
  // Collatz from 27 takes 111 steps; index 9 clamps to branch 2 (fills 3).
  EXPECT_EQ(testing::values(p, gpu, "steps"), std::vector<double>{111});
  EXPECT_EQ(testing::values(p, gpu, "out"), std::vector<double>(4, 3));
  EXPECT_FALSE(gpu.report.graph_launch_s.value_or(0) <= 0);
}

}  // namespace
}  // namespace thunky
