// thunky-exec across processes, under mpirun and under torchrun's
// variables: the same dumps and report as one process, a wrong process
// count refused on every process, and a process that hangs or dies stops
// the others.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/load.h"
#include "exec/processes.h"
#include "tests/tool_runner.h"

namespace {

namespace fs = std::filesystem;

bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

// A free TCP port of this host, for a launch's store (the kernel picks it).
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

// Every test runs under both launchers: mpirun (MPI; skipped where this
// build has no MPI or mpirun is missing) and torchrun's variables (the
// TCP store process 0 serves; tests/launch_like_torchrun.sh starts the
// processes as torchrun does, and stops the others 5 s after one fails).
class Processes : public ::testing::TestWithParam<std::string> {
 protected:
  bool torchrun() const { return GetParam() == "torchrun"; }
  void SetUp() override {
    if (!torchrun() && !thunky::processes_supported()) GTEST_SKIP() << "this build has no MPI (THUNKY_MPI)";
    if (!torchrun() && !have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
    // As root (containers, CI), Open MPI asks for these.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("thunky_processes_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // n processes of `program` (thunky-exec unless a test gives its own
  // command line) with `args`. Under AddressSanitizer, without its leak
  // check: Open MPI keeps its allocations (in components it has unloaded)
  // until exit. The same code in one process is leak-checked by the other
  // tests.
  Result launch(int n, const std::string& args, const std::string& env = "", const std::string& program = THUNKY_EXEC_BIN) const {
    const char* asan = std::getenv("ASAN_OPTIONS");  // (harmless where the build has no sanitizer)
    const std::string no_leaks = std::string(" ASAN_OPTIONS=") + (asan ? asan : "") + ":detect_leaks=0";
    if (torchrun())
      return run_tool(env + no_leaks + " " THUNKY_SOURCE_DIR "/tests/launch_like_torchrun.sh " + std::to_string(n) + " " + std::to_string(free_port()) + " 5 " + program, args);
    return run_tool(env + no_leaks + " mpirun --oversubscribe -np " + std::to_string(n) + " " + program, args);
  }
  // The variable that gives a process its index under this launcher.
  const char* rank_variable() const { return torchrun() ? "RANK" : "OMPI_COMM_WORLD_RANK"; }
  // Whether a thunky-exec of this test still runs (zombies aside): its
  // arguments name this test's own directory.
  bool exec_left_running() const {
    return std::system(("ps -eo stat=,args= | grep -v '^Z' | grep -v grep | grep -q 'thunky-exec .*" + dir_.string() + "/'").c_str()) == 0;
  }
  fs::path dir_;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Each rank's op ids, from report.json.
std::vector<std::multiset<std::string>> op_ids(const fs::path& report) {
  const auto j = nlohmann::json::parse(read_file(report));
  std::vector<std::multiset<std::string>> ids;
  for (const auto& r : j["ranks"]) {
    std::multiset<std::string> s;
    const auto& source = r.contains("same_as") ? j["ranks"][r["same_as"].get<size_t>()] : r;
    for (const auto& op : source["ops"]) s.insert(op["id"].get<std::string>());
    ids.push_back(s);
  }
  return ids;
}


std::vector<fs::path> schedules() {
  std::vector<fs::path> v;
  for (const char* d : {"examples", "tests/schedules"})
    for (const auto& e : fs::directory_iterator(fs::path(THUNKY_SOURCE_DIR) / d))
      if (e.path().extension() == ".json") v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

TEST_P(Processes, EveryScheduleGivesTheDumpsAndReportOfOneProcess) {
  // Each schedule of several ranks, on 2 and 4 processes (where they divide
  // its ranks: 4 ranks on 2 processes are 2 blocks of 2): every dumped
  // .npy is byte for byte the one-process run's, and the merged report has
  // every rank with the same commands.
  int compared = 0;
  for (const auto& sched : schedules()) {
    auto prog = thunky::load_schedule_file(sched.string());
    if (!prog.ok()) continue;  // an example of a refused schedule (a race)
    const int64_t ranks = prog->mesh.size();
    const fs::path one = dir_ / (sched.stem().string() + ".1");
    // (A schedule whose loop runs away stops at once and is skipped.)
    const Result single = run_tool(THUNKY_EXEC_BIN, sched.string() + " --max-trip-count 10000 --dump " + (one / "dump").string() + " --report " + (one / "r.json").string());
    if (single.code != 0) continue;  // not runnable on the cpu backend (a PTX kernel without a fallback)
    for (int n : {2, 4}) {
      if (ranks < n || ranks % n) continue;
      const fs::path many = dir_ / (sched.stem().string() + "." + std::to_string(n));
      const Result r = launch(n, sched.string() + " --dump " + (many / "dump").string() + " --report " + (many / "r.json").string());
      ASSERT_EQ(r.code, 0) << sched << " on " << n << " processes: " << r.err;
      for (const auto& f : fs::directory_iterator(one / "dump"))
        EXPECT_EQ(read_file(f.path()), read_file(many / "dump" / f.path().filename())) << sched << " on " << n << " processes: " << f.path().filename();
      EXPECT_EQ(op_ids(one / "r.json"), op_ids(many / "r.json")) << sched << " on " << n << " processes";
      EXPECT_EQ(nlohmann::json::parse(read_file(many / "r.json"))["processes"], n);
      ++compared;
    }
  }
  // The examples of several ranks: 6 (2 or 4 ranks) on 2 processes, and
  // the 3 of 4 ranks on 4.
  EXPECT_GE(compared, 9);
}

TEST_P(Processes, AProcessCountThatDoesNotDivideTheRanksIsRefusedOnEveryProcess) {
  // 4 ranks on 3 processes: each of the 3 says so, exit 2, before any run.
  const fs::path sched = fs::path(THUNKY_SOURCE_DIR) / "examples/ring_collective_matmul_n4.json";
  const Result r = launch(3, sched.string() + " --report " + (dir_ / "r.json").string());
  EXPECT_EQ(r.code, 2) << r.err;
  size_t lines = 0;
  for (size_t at = 0; (at = r.err.find("do not divide into 3 equal blocks", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 3u) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "r.json"));
}

TEST_P(Processes, AStuckProcessStopsTheOthersAtTheTimeout) {
  // Rank 1 (process 1) hangs at the all_reduce; rank 0 waits in it for
  // --timeout 2 s, then exits 3 naming the silent process and its rank,
  // and the launcher ends the stuck one (mpirun at once, the torchrun-like
  // launcher 5 s later): nothing is left running.
  const fs::path sched = fs::path(THUNKY_SOURCE_DIR) / "examples/sum_across_gpus.json";
  const auto start = std::chrono::steady_clock::now();
  const Result r = launch(2, sched.string() + " --timeout 2 --report " + (dir_ / "r.json").string(), "THUNKY_TEST_STOP_AT=1:/program/0:hang");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(took, 30) << r.err;
  EXPECT_NE(r.err.find("/program/0: timeout: rank 0 waited in collective #0 (/program/0) with ranks {0, 1}"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no word from process 1 within 2 s (it runs rank 1)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "r.json"));
  EXPECT_FALSE(exec_left_running());
}

TEST_P(Processes, ADeadProcessEndsTheRun) {
  // Process 1 exits (as a crash would) at the all_reduce: the run ends
  // with its failure long before the 300 s default timeout, and leaves no
  // process behind.
  const fs::path sched = fs::path(THUNKY_SOURCE_DIR) / "examples/sum_across_gpus.json";
  const auto start = std::chrono::steady_clock::now();
  const Result r = launch(2, sched.string() + " --report " + (dir_ / "r.json").string(), "THUNKY_TEST_STOP_AT=1:/program/0:exit");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_LT(took, 30) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "r.json"));
  EXPECT_FALSE(exec_left_running());
  // The store sees process 1's connection close, and process 0 stops at
  // once (within the launcher's 5 s grace), naming it and its command.
  if (torchrun()) {
    EXPECT_NE(r.err.find("rank 0 waited in collective #0 (/program/0) with ranks {0, 1}, waiting for the other processes: process 1 ended without a word"),
              std::string::npos)
        << r.err;
  }
}

TEST_P(Processes, DifferentCollectivesInTwoProcessesAreADeadlockNotAHang) {
  // Rank 0 all-reduces, rank 1 all-gathers (a cond on the rank): the
  // processes compare what they issued and stop with exit 1.
  const fs::path sched = dir_ / "mismatch.json";
  std::ofstream(sched) << R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]},
    "buffers": {"p": {"shape": [], "dtype": "bool", "role": "input", "init": {"kind": "axis_index", "axis": "x"}},
                "a": {"shape": [2], "dtype": "f32", "role": "inout", "init": {"kind": "ones"}},
                "g": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "cond", "pred": "p", "then": [{"op": "all_gather", "src": "a", "dst": "g", "axis": "x"}],
                 "else": [{"op": "all_reduce", "src": "a", "dst": "a", "axis": "x"}]}]})";
  const Result r = launch(2, sched.string() + " --timeout 20");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("issue different collectives"), std::string::npos) << r.err;
}

TEST_P(Processes, ProcessesThatLoadDifferentSchedulesAreRefusedBeforeTheRun) {
  // Process k runs s<k>.json: the two differ in their description only, so
  // both load and validate, and every process refuses (exit 2) at once
  // rather than waiting in collectives until its timeout.
  std::ifstream in(fs::path(THUNKY_SOURCE_DIR) / "examples/sum_across_gpus.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(dir_ / "s0.json") << text;
  std::ofstream(dir_ / "s1.json") << text.replace(text.find("rank d holds"), 12, "rank d keeps");
  const auto start = std::chrono::steady_clock::now();
  const Result r = launch(2, "", "", "sh -c 'exec " THUNKY_EXEC_BIN " " + (dir_ / "s$").string() + rank_variable() + ".json --timeout 60'");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30) << r.err;
  for (const char* f : {"s0.json", "s1.json"})
    EXPECT_NE(r.err.find(std::string(f) + ":/: the processes loaded different schedules"), std::string::npos) << r.err;
}

TEST_P(Processes, TheCudaBackendAcrossProcessesRunsOrEveryProcessSaysWhyNot) {
  // Two processes of one rank each: with two GPUs (or two NCCL ranks on a
  // node), each process takes the GPU of its local rank and the dumps are
  // the cpu backend's; on a machine without a GPU (or a build without
  // CUDA) every process says why in one line and exits 2 at once, none
  // waiting for the other.
  const fs::path sched = fs::path(THUNKY_SOURCE_DIR) / "examples/sum_across_gpus.json";
  const auto start = std::chrono::steady_clock::now();
  const Result r = launch(2, sched.string() + " --backend cuda --timeout 60 --report " + (dir_ / "r.json").string());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30) << r.err;
  if (r.code == 0) {
    EXPECT_EQ(op_ids(dir_ / "r.json").size(), 2u);  // one report, both ranks
    return;
  }
  EXPECT_EQ(r.code, 2) << r.err;
  // Each process's line: its own refusal, or the first one's, passed on
  // ("process 0 stopped: no CUDA device ...") when it came first.
  size_t lines = 0;
  for (size_t at = r.err.find("no CUDA device"); at != std::string::npos; at = r.err.find("no CUDA device", at + 1)) ++lines;
  // (A build without the cuda backend says so; a machine of one GPU
  // refuses process 1, which needs GPU 1: gpu-check reads that case.)
  const bool other = r.err.find("this build has no cuda backend") != std::string::npos || r.err.find("needs GPU 1, but this node has 1") != std::string::npos;
  if (!other) {
    EXPECT_EQ(lines, 2u) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_ / "r.json"));
}

INSTANTIATE_TEST_SUITE_P(Launchers, Processes, ::testing::Values("mpirun", "torchrun"), [](const auto& info) { return info.param; });

}  // namespace
