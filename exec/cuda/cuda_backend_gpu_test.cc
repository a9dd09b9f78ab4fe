// The cuda backend against the cpu backend, on a GPU (ctest label `gpu`;
// every test skips where no CUDA device answers). Results must agree
// exactly for copies, fills, integer maps and collectives of exact values,
// and within a tolerance that follows the dtype for products, reductions
// in other orders and the device's transcendental functions.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

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

double epsilon(DType t) {
  return t == DType::f64 ? 0x1p-53 : 0x1p-24;  // the accumulation's unit roundoff (f32 for every narrower type)
}

// Each element may differ by tolerance(dtype) of its own magnitude, plus
// `bound` where given (a GEMM's rounding bound, below). Without one, the
// floor is tolerance(dtype) of the buffer's largest magnitude: a product
// summed in another order (cuBLASLt's fused multiply-adds against
// Eigen's) errs by about K eps (|A| |B|), which near a zero element is
// far more than that element's own digits, but small beside the buffer.
// NaN matches NaN, an infinity the same infinity, and nothing else.
void expect_same_outputs(const Program& p, const ExecResult& cpu, const ExecResult& gpu, const std::string& what,
                         const std::map<std::string, std::vector<double>>& bounds = {}) {
  ASSERT_EQ(cpu.memory.size(), gpu.memory.size()) << what;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer& buf = p.buffers[b];
    if (buf.role != Role::output && buf.role != Role::inout) continue;
    const double tol = tolerance(buf.dtype);
    const auto bound = bounds.find(buf.name);
    for (size_t r = 0; r < cpu.memory.size(); ++r) {
      double largest = 0;
      for (int64_t i = 0; i < buf.count(); ++i) {
        const double x = load_as_double(cpu.memory[r][b].data(), buf.dtype, static_cast<size_t>(i));
        if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
      }
      int bad = 0;
      for (int64_t i = 0; i < buf.count() && bad < 5; ++i) {
        const double x = load_as_double(cpu.memory[r][b].data(), buf.dtype, static_cast<size_t>(i));
        const double y = load_as_double(gpu.memory[r][b].data(), buf.dtype, static_cast<size_t>(i));
        if (x == y || (std::isnan(x) && std::isnan(y))) continue;
        if (std::isfinite(x) && std::isfinite(y) && tol > 0) {
          const double floor = bound != bounds.end() ? bound->second[static_cast<size_t>(i)] : tol * largest;
          if (std::fabs(x - y) <= tol * std::max(std::fabs(x), std::fabs(y)) + floor) continue;
        }
        ++bad;
        ADD_FAILURE() << what << ": " << buf.name << " rank " << r << " [" << i << "]: cpu " << x << ", cuda " << y;
      }
    }
  }
}

TEST(CudaBackend, EveryExampleAndTestScheduleMatchesTheCpuBackendEagerAndCaptured) {
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"/examples", "/tests/schedules"})
    for (const auto& e : std::filesystem::directory_iterator(testing::source_dir() + dir))
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
                 "ptx_file": ")" + testing::source_dir() + R"(/examples/add_one.ptx", "grid": [1, 1, 1], "block": [4, 1, 1]}]})");
  CUDA_OR_SKIP(r, p);
  EXPECT_EQ(testing::values(p, r, "out"), (std::vector<double>{11, 21, 31, 41}));
}

// The rounding bound of the GEMM test's c, elementwise: |alpha| K eps
// (|op(A)| |op(B)|) + |beta| eps |C0| (plus the store's half ulp, which
// tolerance() covers), from the operands as the cpu run left them (a and
// b are inputs; in the alias form A is c's initial copy of a).
std::vector<double> gemm_bound(const Program& p, const ExecResult& cpu, const std::string& form) {
  auto buffer = [&](const std::string& name) -> const Buffer& {
    for (const auto& b : p.buffers)
      if (b.name == name) return b;
    throw std::runtime_error(name);
  };
  const Buffer& A = buffer("a");
  const Buffer& B = buffer("b");
  const Buffer& C = buffer("c");
  auto values = [&](const Buffer& x) {
    std::vector<double> v(static_cast<size_t>(x.count()));
    const size_t index = static_cast<size_t>(&x - p.buffers.data());
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::fabs(load_as_double(cpu.memory[0][index].data(), x.dtype, i));
    return v;
  };
  const std::vector<double> a = values(A), b = values(B);
  const bool ta = form == "ta", tb = form == "tb";
  const int64_t m = C.shape[C.shape.size() - 2], n = C.shape.back();
  const int64_t k = ta ? A.shape[A.shape.size() - 2] : A.shape.back();
  const int64_t batch = C.count() / (m * n);
  const double alpha = form == "alpha_beta" ? 0.5 : 1.0, beta = form == "alpha_beta" ? 2.0 : 0.0;
  const double eps = epsilon(C.dtype) * static_cast<double>(k);
  std::vector<double> out(static_cast<size_t>(C.count()));
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t ao = A.shape.size() == 3 ? q * m * k : 0, bo = B.shape.size() == 3 ? q * k * n : 0;
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += a[static_cast<size_t>(ao + (ta ? l * m + i : i * k + l))] * b[static_cast<size_t>(bo + (tb ? j * k + l : l * n + j))];
        // beta |C0| <= beta (|C| + alpha sum): C's own magnitude stands in for C0's.
        out[static_cast<size_t>(q * m * n + i * n + j)] = alpha * eps * sum + beta * epsilon(C.dtype) * (sum + 1.0);
      }
  return out;
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
      const ExecResult cpu = testing::run_cpu(p);
      expect_same_outputs(p, cpu, gpu, t + " " + f, {{"c", gemm_bound(p, cpu, f)}});
    }
  }
}

TEST(CudaBackend, GemmEdgeCasesMatchTheCpuBackend) {
  // bf16 operands into an f32 c (cuBLASLt's tensor-core path, no widening
  // pass); K = 0 gives beta c (here -2 c) and, with beta 0, zeros.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [64, 96], "dtype": "bf16", "role": "input", "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 1}},
      "b": {"shape": [96, 32], "dtype": "bf16", "role": "input", "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 2}},
      "c": {"shape": [64, 32], "dtype": "f32", "role": "output"},
      "e": {"shape": [8, 0], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
      "f": {"shape": [0, 4], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}},
      "g": {"shape": [8, 4], "dtype": "bf16", "role": "inout", "init": {"kind": "iota"}},
      "h": {"shape": [8, 4], "dtype": "f32", "role": "inout", "init": {"kind": "iota"}}},
    "program": [{"op": "gemm", "a": "a", "b": "b", "c": "c"},
                {"op": "gemm", "a": "e", "b": "f", "c": "g", "beta": -2.0},
                {"op": "gemm", "a": "e", "b": "f", "c": "h"}]})");
  CUDA_OR_SKIP(gpu, p);
  const ExecResult cpu = testing::run_cpu(p);
  expect_same_outputs(p, cpu, gpu, "edge cases");
  // iota times -2: element 5 is -10; h has beta 0: all zeros.
  EXPECT_EQ(testing::values(p, gpu, "g")[5], -10);
  EXPECT_EQ(testing::values(p, gpu, "h"), std::vector<double>(32, 0));
}

TEST(CudaBackend, MapInputsAtOneAddressWithTwoSizesAreStagedApart) {
  // x is v[0:8], y is v[0:1] broadcast; out overlaps both (v[1:9]). Each is
  // staged into its own slot: out[i] = v[i] + v[0] read before any write,
  // so with v = iota, v[1 + i] = i + 0.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "v": {"shape": [16], "dtype": "f32", "role": "inout", "init": {"kind": "iota"}}},
    "program": [{"op": "map", "out": "v[1:9]", "expr": "x + y", "in": {"x": "v[0:8]", "y": "v[0:1]"}}]})");
  CUDA_OR_SKIP(gpu, p);
  expect_same_outputs(p, testing::run_cpu(p), gpu, "staged map");
  EXPECT_EQ(testing::values(p, gpu, "v")[8], 7);
}

TEST(CudaBackend, TwoCapturedWhileLoopsEachReportTheirRunaway) {
  // Two loops on one rank, the second runaway: its guard slot was sized
  // before the capture, so --graph exits 1 naming it, as eager does.
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "go": {"shape": [], "dtype": "bool", "role": "scratch"},
      "n": {"shape": [], "dtype": "s32", "role": "inout", "init": {"kind": "constant", "value": 3}}},
    "program": [
      {"op": "while", "cond_buf": "go", "cond": [{"op": "map", "out": "go", "expr": "n > 0", "in": {"n": "n"}}],
       "body": [{"op": "map", "out": "n", "expr": "n - 1", "in": {"n": "n"}}]},
      {"op": "while", "cond_buf": "go", "cond": [{"op": "map", "out": "go", "expr": "True", "in": {}}],
       "body": [{"op": "map", "out": "n", "expr": "n + 1", "in": {"n": "n"}}]}]})");
  for (bool graph : {false, true}) {
    auto r = try_cuda(p, graph, 1, 20);
    if (!r) GTEST_SKIP() << "no CUDA device";
    ASSERT_FALSE(r->ok()) << graph;
    EXPECT_EQ(r->exit_code(), 1) << graph;
    EXPECT_NE(r->errors().front().message.find("/program/1 ran more than 20 iterations"), std::string::npos) << r->errors().front().str();
  }
}

TEST(CudaBackend, ACholeskyOutOfPlaceAndAScheduleWithOneRunsEagerlyUnderGraph) {
  Program p = load_ok(R"({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [3, 3], "dtype": "f32", "role": "input", "init": {"kind": "values", "values": [[4, 12, -16], [12, 37, -43], [-16, -43, 98]]}},
      "r": {"shape": [3, 3], "dtype": "f32", "role": "inout", "init": {"kind": "constant", "value": 7}},
      "info": {"shape": [], "dtype": "s32", "role": "output"}},
    "program": [{"op": "custom_call", "target": "cholesky", "operands": ["a"], "results": ["r", "info"], "backend_config": {"lower": false}}]})");
  for (bool graph : {false, true}) {
    CUDA_OR_SKIP(gpu, p, graph);
    expect_same_outputs(p, testing::run_cpu(p), gpu, graph ? "cholesky --graph" : "cholesky");
    // L = [[2 0 0], [6 1 0], [-8 5 3]] below; a's values above.
    EXPECT_EQ(testing::values(p, gpu, "r"), (std::vector<double>{2, 12, -16, 6, 1, -43, -8, 5, 3}));
    EXPECT_FALSE(gpu.report.graph_launch_s.has_value());
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
  Program p = load_file_ok(testing::source_dir() + "/tests/schedules/runaway_loop.json");
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
