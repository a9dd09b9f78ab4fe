// The command-line contract of thunky-exec: exit codes, one-line errors
// naming the file and the JSON pointer, and the --dump/--report/--trace files.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "core/npy.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

Result run_tool(const std::string& tool, const std::string& args) {
  const fs::path err = fs::temp_directory_path() / ("thunky_cli_err_" + std::to_string(::getpid()));
  std::string cmd = tool + " " + args + " 2>" + err.string();
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  // A signal (a crash) is never an acceptable outcome.
  EXPECT_TRUE(WIFEXITED(status)) << cmd;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(err);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  return r;
}

Result run(const std::string& args) { return run_tool(THUNKY_EXEC_BIN, args); }
Result sim(const std::string& args) { return run_tool(THUNKY_SIM_BIN, args); }
Result compare(const std::string& args) { return run_tool(THUNKY_COMPARE_BIN, args); }

const std::string kSrc = THUNKY_SOURCE_DIR;

TEST(ExecCli, EveryMalformedScheduleGivesExit2AndItsPointer) {
  std::ifstream manifest(kSrc + "/tests/malformed/EXPECTED");
  std::string file, pointer;
  int checked = 0;
  while (manifest >> file) {
    if (file[0] == '#') {
      std::getline(manifest, file);
      continue;
    }
    manifest >> pointer;
    const std::string path = kSrc + "/tests/malformed/" + file;
    Result r = run(path);
    EXPECT_EQ(r.code, 2) << file << ": " << r.err;
    // One line: "<file>:<pointer>: <message>".
    EXPECT_EQ(r.err.rfind(path + ":" + pointer + ": ", 0), 0u) << file << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << file << ": " << r.err;
    ++checked;
  }
  // Every file in the directory is listed.
  int files = 0;
  for (const auto& e : fs::directory_iterator(kSrc + "/tests/malformed")) files += e.path().extension() == ".json";
  EXPECT_EQ(checked, files);
  EXPECT_GE(checked, 20);
}

TEST(ExecCli, RaceExitsWith1) {
  Result r = run(kSrc + "/examples/bidirectional_ring_collective_matmul_n4_literal.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("race on buffer 'pair0'"), std::string::npos) << r.err;
}

TEST(ExecCli, RunawayLoopIsStoppedWithExit1) {
  // n never changes, so n > 1 stays true: the 1000th trip ends the run.
  Result r = run(kSrc + "/tests/schedules/runaway_loop.json --max-trip-count 1000");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("more than 1000 iterations"), std::string::npos) << r.err;
}

TEST(ExecCli, UsageErrorsExitWith2) {
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run(kSrc + "/examples/init_and_copy.json --iters 0").code, 2);
  EXPECT_EQ(run(kSrc + "/examples/init_and_copy.json --backend tpu").code, 2);
  EXPECT_EQ(run("/nonexistent/sched.json").code, 2);
}

TEST(ExecCli, DumpReportAndTrace) {
  const fs::path dir = fs::temp_directory_path() / ("thunky_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Result r = run(kSrc + "/examples/sum_across_gpus.json --dump " + (dir / "dump").string() + " --report " + (dir / "r.json").string() +
                 " --trace " + (dir / "t.json").string() + " --iters 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan"), std::string::npos);
  // out on both ranks is [4 6 8 10]; it has no global, so only per-rank files.
  for (int rank : {0, 1}) {
    auto a = thunky::read_npy((dir / "dump" / ("out.rank" + std::to_string(rank) + ".npy")).string());
    ASSERT_EQ(a.shape, (std::vector<int64_t>{4}));
    const float* f = reinterpret_cast<const float*>(a.data.data());
    EXPECT_EQ(std::vector<float>(f, f + 4), (std::vector<float>{4, 6, 8, 10}));
  }
  EXPECT_FALSE(fs::exists(dir / "dump" / "x.rank0.npy"));  // inputs are not dumped
  auto report = nlohmann::json::parse(std::ifstream(dir / "r.json"));
  EXPECT_EQ(report["format"], "thunky.report/1");
  EXPECT_EQ(report["source"], "exec");
  EXPECT_EQ(report["ranks"].size(), 2u);
  EXPECT_EQ(report["ranks"][1]["ops"][0]["id"], "/program/0");
  EXPECT_EQ(report["ranks"][1]["ops"][0]["bytes"], 16);  // f32[4]
  auto trace = nlohmann::json::parse(std::ifstream(dir / "t.json"));
  bool named = false;
  for (const auto& e : trace["traceEvents"]) named |= e["ph"] == "M" && e["args"]["name"] == "rank 1 (x=1)";
  EXPECT_TRUE(named);
  fs::remove_all(dir);
}

TEST(ExecCli, GatheredDumpOfTheRingMatmul) {
  const fs::path dir = fs::temp_directory_path() / ("thunky_cli_ring_" + std::to_string(::getpid()));
  Result r = run(kSrc + "/examples/ring_collective_matmul_n4.json --dump " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto c = thunky::read_npy((dir / "c.npy").string());
  // Global C is [4 * 64, 4 * 64].
  EXPECT_EQ(c.shape, (std::vector<int64_t>{256, 256}));
  fs::remove_all(dir);
}

TEST(ExecCli, TheCudaBackendRunsOrSaysWhyNotInOneLine) {
  // Where a GPU answers the run succeeds; elsewhere (no device, no driver,
  // or a build without the backend) it is exit 2 with one line saying so,
  // never a crash.
  Result r = run(kSrc + "/examples/init_and_copy.json --backend cuda");
  if (r.code == 0) {
    EXPECT_NE(r.out.find("backend cuda"), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.code, 2) << r.err;
  const bool no_device = r.err.find("no CUDA device") != std::string::npos;
  const bool no_build = r.err.find("this build has no cuda backend") != std::string::npos;
  EXPECT_TRUE(no_device || no_build) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(ExecCli, CudaOptionsAreRefusedOnTheCpuBackendAndCheckedForm) {
  for (const char* args : {" --graph", " --devices 0", " --timeout 5"}) {
    Result r = run(kSrc + "/examples/init_and_copy.json" + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.err.find("apply to --backend cuda"), std::string::npos) << r.err;
  }
  for (const char* devices : {"a", "0,,1", "-1", "99999"}) {
    Result r = run(kSrc + "/examples/init_and_copy.json --backend cuda --devices " + devices);
    EXPECT_EQ(r.code, 2) << devices;
    EXPECT_FALSE(r.err.empty()) << devices;
  }
}

TEST(SimCli, EveryRankPrintsTheFoldedPrediction) {
  // The bidirectional matmul on TPU v4 (closed rings) is folded by default;
  // --every-rank simulates all four ranks and prints the same table.
  const std::string sched = kSrc + "/examples/bidirectional_ring_collective_matmul_n4.json --machine tpu-v4";
  Result folded = sim(sched), every = sim(sched + " --every-rank");
  ASSERT_EQ(folded.code, 0) << folded.err;
  ASSERT_EQ(every.code, 0) << every.err;
  EXPECT_NE(folded.out.find("busbw_GB/s"), std::string::npos);
  EXPECT_EQ(folded.out, every.out);
}

TEST(SimCli, PredictsWritesTheSameReportFormatAndFollowsExitCodes) {
  const fs::path dir = fs::temp_directory_path() / ("thunky_sim_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Result r = sim(kSrc + "/examples/ring_collective_matmul_n4.json --machine tpu-v5e --report " + (dir / "r.json").string() +
                 " --trace " + (dir / "t.json").string() + " --svg " + (dir / "t.svg").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("busbw_GB/s"), std::string::npos);
  auto report = nlohmann::json::parse(std::ifstream(dir / "r.json"));
  EXPECT_EQ(report["format"], "thunky.report/1");
  EXPECT_EQ(report["source"], "sim");
  EXPECT_EQ(report["machine"], "tpu-v5e-4x4");
  // Same ids as thunky-exec's report: 7 ops per rank (4 GEMMs, 3 shifts).
  EXPECT_EQ(report["ranks"][2]["ops"].size(), 7u);
  // The SVG has one rectangle per op of every rank: 4 x 7.
  std::stringstream svg;
  svg << std::ifstream(dir / "t.svg").rdbuf();
  const std::string text = svg.str();
  size_t rects = 0;
  for (size_t pos = text.find("<rect"); pos != std::string::npos; pos = text.find("<rect", pos + 1)) ++rects;
  EXPECT_EQ(rects, 28u);
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  // The trace carries a counter track per link.
  auto trace = nlohmann::json::parse(std::ifstream(dir / "t.json"));
  int counters = 0;
  for (const auto& e : trace["traceEvents"]) counters += e["ph"] == "C";
  EXPECT_GT(counters, 0);
  fs::remove_all(dir);
  // No machine model anywhere: exit 2 naming /machine.
  r = sim(kSrc + "/examples/init_and_copy.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(":/machine: "), std::string::npos) << r.err;
  EXPECT_EQ(sim(kSrc + "/examples/init_and_copy.json --machine no-such-model").code, 2);
  // A race is a wrong schedule: exit 1, as thunky-exec.
  EXPECT_EQ(sim(kSrc + "/examples/bidirectional_ring_collective_matmul_n4_literal.json --machine tpu-v5e").code, 1);
  // Control flow without hints runs the functional model: Collatz has 111 trips.
  r = sim(kSrc + "/examples/collatz.json --machine h100-8gpu");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(" 447 "), std::string::npos) << r.out;  // copy, memzero, 112 checks, 111 x 3 body ops
}

TEST(CompareCli, PredictedAgainstMeasuredCommandByCommand) {
  const fs::path dir = fs::temp_directory_path() / ("thunky_compare_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string sched = kSrc + "/examples/ring_collective_matmul_n4.json";
  ASSERT_EQ(sim(sched + " --machine h100-8gpu --report " + (dir / "p.json").string()).code, 0);
  ASSERT_EQ(run(sched + " --report " + (dir / "m.json").string()).code, 0);
  Result r = compare((dir / "p.json").string() + " " + (dir / "m.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  // Every command of every rank is in both: 4 ranks x 7 ops, none unmatched.
  EXPECT_NE(r.out.find("28 commands matched"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 only predicted, 0 only measured"), std::string::npos) << r.out;
  // Rank 0's rows: its 4 GEMMs and 3 shifts.
  size_t gemms = 0;
  for (size_t pos = r.out.find(" gemm "); pos != std::string::npos; pos = r.out.find(" gemm ", pos + 1)) ++gemms;
  EXPECT_EQ(gemms, 4u);
  // A schedule is not a report: exit 2 naming the file and the pointer.
  r = compare(sched + " " + (dir / "m.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(sched + ":/format: "), std::string::npos) << r.err;
  // Reports of different meshes: exit 2.
  ASSERT_EQ(sim(kSrc + "/examples/init_and_copy.json --machine h100-8gpu --report " + (dir / "one.json").string()).code, 0);
  EXPECT_EQ(compare((dir / "one.json").string() + " " + (dir / "m.json").string()).code, 2);
  EXPECT_EQ(compare("").code, 2);
  fs::remove_all(dir);
}

}  // namespace
