// The command-line contract of thunky-exec: exit codes, one-line errors
// naming the file and the JSON pointer, and the --dump/--report/--trace files.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <sys/stat.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "tests/test_util.h"
#include "tests/tool_runner.h"

namespace {

// Whether a line of `out` holds `fields` one after another, however the
// table spaces its columns.
bool has_row(const std::string& out, const std::vector<std::string>& fields) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> row{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    if (std::search(row.begin(), row.end(), fields.begin(), fields.end()) != row.end()) return true;
  }
  return false;
}


namespace fs = std::filesystem;



Result run(const std::string& args) { return run_tool(THUNKY_EXEC_BIN, args); }
Result sim(const std::string& args) { return run_tool(THUNKY_SIM_BIN, args); }
Result compare(const std::string& args) { return run_tool(THUNKY_COMPARE_BIN, args); }
Result calibrate(const std::string& args) { return run_tool(THUNKY_CALIBRATE_BIN, args); }

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
  // Named by the loop's pointer, as every error is.
  EXPECT_NE(r.err.find("runaway_loop.json:/program/"), std::string::npos) << r.err;
}

TEST(SimCli, AnUnknownMachineNameSuggestsTheClosestModel) {
  // "h100" is 5 edits from "h100-8gpu" (append "-8gpu"), 6 from "h200-8gpu"
  // and 8 from "h100-cluster": the first is suggested, and every model listed.
  Result r = sim(kSrc + "/examples/init_and_copy.json --machine h100");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("h100:/: no machine model file or name under "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the closest is 'h100-8gpu' (models: a100-8gpu, a100-cluster, b200-8gpu, h100-8gpu, h100-cluster,"), std::string::npos) << r.err;
}

TEST(SimCli, RunawayLoopReadsAsOnExec) {
  // thunky-sim counts an unhinted loop's trips by running the schedule on
  // the cpu backend: the same limit flag stops it with the same line.
  Result s = sim(kSrc + "/tests/schedules/runaway_loop.json --machine h100-8gpu --max-trip-count 1000");
  Result e = run(kSrc + "/tests/schedules/runaway_loop.json --max-trip-count 1000");
  EXPECT_EQ(s.code, 1);
  EXPECT_NE(s.err.find("/program/2: rank 0: the while loop at /program/2 ran more than 1000 iterations"), std::string::npos) << s.err;
  EXPECT_EQ(s.err, e.err);
}

TEST(ExecCli, TheCollectiveTableShowsAnyRankAsNcclTestsWould) {
  // The 2-stage pipeline: 4 sends of 512 KiB (131072 f32) between 2 ranks.
  // By default rank 0's collectives, grouped: one row, count 4; --ranks all
  // adds rank 1's table; --per-instance keeps the bytes column.
  const std::string sched = kSrc + "/examples/pipeline_parallel_n2.json";
  Result r = run(sched);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_row(r.out, {"collectives", "(rank", "0),", "first"})) << r.out;
  EXPECT_TRUE(has_row(r.out, {"collective_permute", "2", "524288", "4"})) << r.out;
  EXPECT_EQ(r.out.find("(rank 1)"), std::string::npos);
  r = run(sched + " --ranks all --per-instance");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_row(r.out, {"collective", "(rank", "1)"})) << r.out;
  size_t rows = 0;
  for (size_t pos = r.out.find(" collective_permute "); pos != std::string::npos; pos = r.out.find(" collective_permute ", pos + 1)) ++rows;
  EXPECT_EQ(rows, 8u);  // 4 sends, on each of 2 ranks
  EXPECT_TRUE(has_row(r.out, {"collective_permute", "2", "524288"})) << r.out;
  // A rank the mesh lacks: exit 2 and one line, before anything runs.
  r = run(sched + " --ranks 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--ranks: '2' is not 'all' or a list of ranks below 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
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
  // Global C is [4 * 64, 4 * 64], and it is A x B: A [256, 128] and B
  // [128, 256] are the schedule's uniform inits, read back from an
  // in-process run (inputs are not dumped).
  ASSERT_EQ(c.shape, (std::vector<int64_t>{256, 256}));
  thunky::Program p = thunky::testing::load_file_ok(kSrc + "/examples/ring_collective_matmul_n4.json");
  thunky::ExecResult run_result = thunky::testing::run_cpu(p);
  const auto a = thunky::testing::global_values(p, run_result, "a"), b = thunky::testing::global_values(p, run_result, "b");
  const float* cv = reinterpret_cast<const float*>(c.data.data());
  for (int64_t i = 0; i < 256; i += 17)
    for (int64_t j = 0; j < 256; j += 13) {
      double want = 0;
      for (int64_t k = 0; k < 128; ++k) want += a[i * 128 + k] * b[k * 256 + j];
      // |a|, |b| <= 1, 128 terms accumulated in f32: within 1e-4.
      ASSERT_NEAR(cv[i * 256 + j], want, 1e-4) << "C[" << i << "," << j << "]";
    }
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

// A scratch folder of this test process, removed at the end of each test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("thunky_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

TEST(SimCli, AFieldTheMachineLacksIsTheMachineFilesErrorNamingTheCommand) {
  // A model that rates f32 only, and models axis y only: a bf16 GEMM and a
  // shift over x each name the machine file's pointer, then the command
  // that needs the field, exit 2.
  TempDir d("machine_error");
  const std::string machine = (d.path / "m.json").string(), sched = (d.path / "g.json").string();
  std::ofstream(machine) << R"({"format": "thunky.machine/1", "name": "tiny",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e12, "source": "test"},
    "axes": {"y": {"topology": "ring", "wraparound": true, "link_bandwidth": 1e9}}})";
  std::ofstream(sched) << R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]},
    "buffers": {"a": {"shape": [64, 64], "dtype": "bf16", "role": "input", "init": {"kind": "ones"}}, "c": {"shape": [64, 64], "dtype": "bf16"}},
    "program": [{"op": "gemm", "a": "a", "b": "a", "c": "c"}, {"op": "collective_permute", "src": "a", "dst": "c", "axis": "x", "shift": 1}]})";
  Result r = sim(sched + " --machine " + machine);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind(machine + ":/chip/peak_flops: machine model 'tiny' gives no peak_flops for bf16 (it rates f32): needed by " + sched + ":/program/0 (gemm)", 0), 0u)
      << r.err;
  // Rated, the GEMM prices; the shift's axis is next.
  std::string text;
  {
    std::ifstream in(machine);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  text.replace(text.find("\"f32\": 1e12"), 11, "\"f32\": 1e12, \"bf16\": 1e12");
  std::ofstream(machine) << text;
  r = sim(sched + " --machine " + machine);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind(machine + ":/axes: machine 'tiny' models no axis 'x' (and has no \"*\" entry): needed by " + sched + ":/program/1 (collective_permute)", 0), 0u)
      << r.err;
}

TEST(SimCli, AHintThatTheFunctionalRunContradictsIsNoted) {
  // The second loop has no hint, so thunky-sim runs the schedule on the
  // cpu backend first; there the first loop runs 7 trips (n from 0 while
  // n < 7), against its hint of 10: one note on stderr, at the hint, and
  // the simulation goes on (exit 0). A hint of 7 draws no note.
  TempDir d("hints");
  auto sched = [&](int hint) {
    std::string name = "h";  // (appended: GCC 12 warns falsely on "h" + std::string)
    name += std::to_string(hint);
    name += ".json";
    return d.write(name, R"({"format": "thunky.sched/1", "buffers": {
        "n": {"shape": [], "dtype": "s32", "role": "inout", "init": {"kind": "zeros"}}, "go": {"shape": [], "dtype": "bool", "role": "scratch"},
        "m": {"shape": [], "dtype": "s32", "role": "inout", "init": {"kind": "zeros"}}, "go2": {"shape": [], "dtype": "bool", "role": "scratch"}},
      "program": [
        {"op": "while", "cond_buf": "go", "cond": [{"op": "map", "out": "go", "expr": "n < 7", "in": {"n": "n"}}],
         "body": [{"op": "map", "out": "n", "expr": "n + 1", "in": {"n": "n"}}], "sim": {"trip_count": )" + std::to_string(hint) + R"(}},
        {"op": "while", "cond_buf": "go2", "cond": [{"op": "map", "out": "go2", "expr": "m < 3", "in": {"m": "m"}}],
         "body": [{"op": "map", "out": "m", "expr": "m + 1", "in": {"m": "m"}}]}]})");
  };
  const std::string wrong = sched(10);
  Result r = sim(wrong + " --machine h100-8gpu");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, wrong + ":/program/0/sim/trip_count: note: the hint says trip_count 10, but rank 0's functional run gave 7 (execution 1 of 1); "
                           "the simulation follows the functional run\n");
  r = sim(sched(7) + " --machine h100-8gpu");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(DumpInputs, SimAndExecWriteTheInputsTheirInitsMake) {
  // The ring matmul's a and b are seeded uniform inputs, sharded over x:
  // thunky-sim (which runs nothing) and thunky-exec write the same bytes,
  // per rank and gathered (a's global shape is [256, 128]).
  TempDir d("dump_inputs");
  const std::string sched = kSrc + "/examples/ring_collective_matmul_n4.json";
  Result r = sim(sched + " --machine h100-8gpu --dump-inputs " + (d.path / "sim").string());
  ASSERT_EQ(r.code, 0) << r.err;
  r = run(sched + " --dump-inputs " + (d.path / "exec").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto bytes = [](const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  for (const char* f : {"a.npy", "a.rank1.npy", "b.npy", "b.rank3.npy"}) {
    ASSERT_TRUE(fs::exists(d.path / "sim" / f)) << f;
    EXPECT_EQ(bytes(d.path / "sim" / f), bytes(d.path / "exec" / f)) << f;
  }
  EXPECT_NE(bytes(d.path / "sim" / "a.npy").find("(256, 128)"), std::string::npos);
  EXPECT_FALSE(fs::exists(d.path / "sim" / "c.rank0.npy"));  // an output: not an input
  // A dump that would replace an input of the run (here the .npy that
  // inits buffer a) is refused, and the input is left as it was.
  fs::copy_file(d.path / "exec" / "a.rank0.npy", d.path / "a.rank0.npy");
  const std::string own = d.write("s.json", R"({"format": "thunky.sched/1", "buffers": {
      "a": {"shape": [64, 128], "dtype": "f32", "role": "input", "init": {"kind": "npy", "path": "a.rank0.npy"}}},
    "program": []})");
  const std::string before = bytes(d.path / "a.rank0.npy");
  r = sim(own + " --machine h100-8gpu --dump-inputs " + d.path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("would overwrite an input of the run"), std::string::npos) << r.err;
  EXPECT_EQ(bytes(d.path / "a.rank0.npy"), before);
}

TEST(CheckCli, ValidRacyAndBadSchedulesGiveExitCodes0To2AndTheirDiagnostics) {
  TempDir d("check");
  // Rank 1's view a[ds(3, 2)] runs past a's 4 elements; rank 0's fits.
  const std::string oob = d.write("oob.json", R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [2]},
    "buffers": {"a": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "memset", "dst": "a[ds(x * 3, 2)]", "value": 1}]})");
  const std::string valid = kSrc + "/examples/ring_collective_matmul_n4.json";
  const std::string racy = kSrc + "/examples/bidirectional_ring_collective_matmul_n4_literal.json";
  const auto check = [](const std::string& args) { return run_tool(THUNKY_CHECK_BIN, args); };
  Result r = check(valid);
  EXPECT_EQ(r.code, 0) << r.err;
  // A ring of shifts: every rank has one timeline, one class of 4.
  EXPECT_EQ(r.out, valid + ": valid on every one of its 4 ranks: no race, no deadlock\n" + valid +
                       ": its 4 ranks fold into 1 class of 4 for thunky-sim, by the schedule alone (a machine's links can split them: thunky-sim --explain-folding)\n");
  r = check(racy);
  EXPECT_EQ(r.code, 1);
  // The fix leads, the race follows.
  EXPECT_NE(r.err.find(racy + ":/program/4/body/0: missing join: add an async_done of token 'step2' on computation:0 before /program/4/body/0; race on buffer 'pair0'"),
            std::string::npos)
      << r.err;
  // The worst of the files: bad input (2) over a race (1).
  r = check(valid + " " + racy + " " + oob + " --json");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.err.empty()) << r.err;
  const auto found = nlohmann::json::parse(r.out);
  ASSERT_EQ(found.size(), 2u) << r.out;  // the valid file adds nothing
  EXPECT_EQ(found[0]["file"], racy);
  EXPECT_EQ(found[0]["pointer"], "/program/4/body/0");
  EXPECT_EQ(found[0]["kind"], "schedule");
  EXPECT_TRUE(found[0]["rank"].is_null());  // every rank races
  EXPECT_EQ(found[1]["file"], oob);
  EXPECT_EQ(found[1]["pointer"], "/program/0/dst");
  EXPECT_EQ(found[1]["kind"], "input");
  EXPECT_EQ(found[1]["rank"], 1);
  // --check on thunky-sim (no machine model needed) and thunky-exec: the
  // same line and codes, and nothing simulated or run.
  r = sim(valid + " --check --report " + (d.path / "r.json").string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, valid + ": valid on every one of its 4 ranks: no race, no deadlock\n");
  EXPECT_FALSE(fs::exists(d.path / "r.json"));
  r = run(oob + " --check");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("oob.json:/program/0/dst: "), std::string::npos) << r.err;
  EXPECT_EQ(run(racy + " --check").code, 1);
}


const std::string kOneOutput = R"({"format": "thunky.sched/1", "buffers": {
    "src": {"shape": [4], "dtype": "f32", "role": "input", "init": {"kind": "iota"}},
    "NAME": {"shape": [4], "dtype": "f32", "role": "output"}},
  "program": [{"op": "copy", "src": "src", "dst": "NAME"}]})";

std::string with_output(const std::string& name) {
  std::string s = kOneOutput;
  for (size_t at; (at = s.find("NAME")) != std::string::npos;) s.replace(at, 4, name);
  return s;
}

TEST(HostileInput, SpecialFilesAreRefusedBeforeReading) {
  // A FIFO would block the read forever, /dev/zero never ends, a directory is no file.
  TempDir d("special");
  const std::string fifo = (d.path / "sched.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& input : {fifo, std::string("/dev/zero"), d.path.string()}) {
    Result r = run(input);
    EXPECT_EQ(r.code, 2) << input;
    EXPECT_NE(r.err.find("is not a regular file"), std::string::npos) << r.err;
    Result s = sim(kSrc + "/examples/init_and_copy.json --machine " + input);
    EXPECT_EQ(s.code, 2) << input;
    EXPECT_NE(s.err.find("is not a regular file"), std::string::npos) << s.err;
    Result c = compare(input + " " + input);
    EXPECT_EQ(c.code, 2) << input;
    EXPECT_NE(c.err.find("is not a regular file"), std::string::npos) << c.err;
  }
}

// An output buffer no command names (a ref could not name these).
std::string with_extra_output(const std::string& name) {
  std::string s = with_output("dst");
  s.insert(s.find("\"dst\""), "\"" + name + "\": {\"shape\": [2], \"dtype\": \"f32\", \"role\": \"output\"},\n    ");
  return s;
}

TEST(HostileInput, DumpStaysInsideItsDirectory) {
  TempDir d("escape");
  const std::string sched = d.write("s.json", with_extra_output("../escaped"));
  Result r = run(sched + " --dump " + (d.path / "out").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("path separator"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d.path / "escaped.rank0.npy"));
  const std::string absolute = d.write("a.json", with_extra_output("/tmp/thunky_escaped"));
  EXPECT_EQ(run(absolute + " --dump " + (d.path / "out").string()).code, 2);
  EXPECT_FALSE(fs::exists("/tmp/thunky_escaped.rank0.npy"));
}

TEST(HostileInput, AnOutputNeverOverwritesAnInput) {
  TempDir d("overwrite");
  const std::string text = with_output("dst");
  const std::string sched = d.write("s.json", text);
  for (const char* opt : {" --report ", " --trace "}) {
    Result r = run(sched + opt + sched);
    EXPECT_EQ(r.code, 2) << opt;
    EXPECT_NE(r.err.find("would overwrite an input"), std::string::npos) << r.err;
    Result s = sim(sched + " --machine h100-8gpu" + opt + sched);
    EXPECT_EQ(s.code, 2) << opt;
  }
  std::ifstream f(sched);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), text);  // untouched
}

TEST(HostileInput, AFullDeviceIsAWriteError) {
  Result r = run(kSrc + "/examples/init_and_copy.json --trace /dev/full");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cannot write"), std::string::npos) << r.err;
}

TEST(HostileInput, AnOutputThatCannotBeCompletedLeavesNoFile) {
  // Under a file-size limit of 8 x 512 bytes (sh's ulimit -f), the ring's
  // trace (tens of KiB) cannot be written: exit 2 naming it, no signal
  // (SIGXFSZ), and neither the trace nor a temporary beside it remains.
  TempDir d("partial");
  const std::string trace = (d.path / "t.json").string();
  Result r = run_tool("ulimit -f 8; " + std::string(THUNKY_SIM_BIN),
                      kSrc + "/examples/ring_collective_matmul_n4.json --machine h100-8gpu --trace-ranks all --trace " + trace);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(trace + ": cannot write"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(d.path));
  // A dump under the same limit: each .npy is small enough (4 x 4 f32 =
  // 64 bytes of data and a 128-byte header), lands whole under its own
  // name, and leaves no temporary (a name starting with '.') behind.
  r = run_tool("ulimit -f 8; " + std::string(THUNKY_EXEC_BIN), kSrc + "/examples/init_and_copy.json --dump " + (d.path / "dump").string());
  EXPECT_EQ(r.code, 0) << r.err;
  for (const auto& e : fs::directory_iterator(d.path / "dump")) EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << e.path();
}

TEST(HostileInput, StandardOutputThatCannotBeWrittenIsExit2) {
  // /dev/full refuses every write: each tool's table (or schedule) is lost,
  // so the run failed.
  for (const auto& [tool, args] : std::vector<std::pair<std::string, std::string>>{
           {THUNKY_SIM_BIN, kSrc + "/examples/init_and_copy.json --machine h100-8gpu"},
           {THUNKY_EXEC_BIN, kSrc + "/examples/init_and_copy.json"},
           {THUNKY_GEN_BIN, "ring_matmul -n 4"},
           {THUNKY_COMPARE_BIN, kSrc + "/tests/hostile/report.json " + kSrc + "/tests/hostile/report.json"}}) {
    Result r = run_tool(tool, args + " >/dev/full");
    EXPECT_EQ(r.code, 2) << tool;
    EXPECT_NE(r.err.find("cannot write"), std::string::npos) << tool << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(HostileInput, AChainOf100000CallsIsRefusedAtItsDepthLimit) {
  // f0 calls f1, which calls f2, ... f99999: lowering refuses the 33rd
  // nested call (in f31) before following the chain, on every tool, where
  // following it on the machine stack overflowed.
  TempDir d("chain");
  std::string fns;
  constexpr int kChain = 100000;
  for (int i = 0; i + 1 < kChain; ++i)
    fns += "\"f" + std::to_string(i) + "\": {\"params\": [\"a\"], \"program\": [{\"op\": \"call\", \"fn\": \"f" + std::to_string(i + 1) + "\", \"args\": {\"a\": \"a\"}}]},";
  fns += "\"f" + std::to_string(kChain - 1) + "\": {\"params\": [\"a\"], \"program\": [{\"op\": \"memset\", \"dst\": \"a\", \"value\": 1}]}";
  const std::string sched = d.write("chain.json", R"({"format": "thunky.sched/1", "buffers": {"x": {"shape": [4], "dtype": "f32", "role": "output"}},
    "functions": {)" + fns + R"(}, "program": [{"op": "call", "fn": "f0", "args": {"a": "x"}}]})");
  for (Result r : {run(sched), sim(sched + " --machine h100-8gpu")}) {
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("chain.json:/functions/f31/program/0: calls nested more than 32 deep"), std::string::npos) << r.err;
  }
}

#if !defined(__SANITIZE_ADDRESS__)  // the sanitizer's shadow memory does not fit under ulimit -v
TEST(HostileInput, ThreadsFitUnderATwoGigabyteAddressSpace) {
  // As a batch system sets it: 2,000,000 KiB of address space. 2,048 ranks
  // are 2,048 threads of 512 KiB stacks (1 GiB) sharing the C library's
  // arenas: the all_reduce of ones over 2,048 ranks gives 2048 everywhere.
  // 1,000 streams on one rank (1,001 threads) run too.
  const std::string limit = "ulimit -v 2000000; ";
  TempDir d("threads");
  Result r = run_tool(limit + THUNKY_EXEC_BIN, kSrc + "/tests/hostile/two_thousand_ranks.json --dump " + d.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto x = thunky::read_npy((d.path / "x.rank2047.npy").string());
  const float* f = reinterpret_cast<const float*>(x.data.data());
  EXPECT_EQ(std::vector<float>(f, f + 4), std::vector<float>(4, 2048.0f));
  r = run_tool(limit + THUNKY_EXEC_BIN, kSrc + "/tests/hostile/thousand_streams.json");
  EXPECT_EQ(r.code, 0) << r.err;
  // thunky-sim resolves this cond on 1,024 ranks by running the cpu
  // backend in its own process, whose allocator (mimalloc, where linked)
  // reserves 32 MiB a thread: either it fits, or the run is refused before
  // any thread starts, naming the limit, never aborted halfway.
  r = run_tool(limit + THUNKY_SIM_BIN, kSrc + "/tests/hostile/cond_on_1024_ranks.json --machine h100-8gpu");
  if (r.code == 0) {
    EXPECT_TRUE(has_row(r.out, {"all_reduce", "1024", "16", "1"})) << r.out;
  } else {
    EXPECT_EQ(r.code, 2);
    // 1,024 threads x (0.5 MiB of stack + 32 MiB of heap) = 33,288 MiB.
    EXPECT_NE(r.err.find("cond_on_1024_ranks.json:/: the cpu backend, with a thread for every rank and stream, needs about 33288 MiB of address space (1024 threads x 32.5 MiB of stack and heap"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(ulimit -v)"), std::string::npos) << r.err;
  }
}
#endif

TEST(HostileInput, ALongRunShowsProgressAndStopsAtOnceOnSigint) {
  // The runaway loop under a cap of 10^9 trips runs for minutes: after
  // five seconds it prints a progress line; SIGINT at seven seconds ends it
  // with exit 130 at once, and the report it was to write does not exist.
  TempDir d("sigint");
  const std::string report = (d.path / "r.json").string();
  Result r = run_tool("sh -c '" + std::string(THUNKY_EXEC_BIN) + " " + kSrc + "/tests/schedules/runaway_loop.json --max-trip-count 1000000000 --report " + report +
                          " & pid=$!; sleep 7; kill -INT $pid; t0=$(date +%s%N); wait $pid; rc=$?; echo $rc $(( ($(date +%s%N) - t0) / 1000000 ))'",
                      "");
  int code = -1, ms = -1;
  std::istringstream(r.out) >> code >> ms;
  EXPECT_EQ(code, 130) << r.out << r.err;
  EXPECT_LT(ms, 1000) << r.out;
  EXPECT_NE(r.progress.find("thunky-exec: iteration 1 of 1, "), std::string::npos) << r.progress;
  EXPECT_NE(r.err.find("thunky-exec: interrupted (SIGINT); no output written"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(d.path));
}

TEST(HostileInput, NpyHeadersAreCheckedBeforeMemoryIsSetAside) {
  TempDir d("npy");
  auto npy = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    // Format 1.0 (2-byte header length), or 2.0 (4 bytes) for a long header.
    const bool v2 = header.size() > 60000;
    std::string h = header;
    while (((v2 ? 12 : 10) + h.size() + 1) % 64) h += ' ';
    h += '\n';
    std::string file = std::string(v2 ? "\x93NUMPY\x02\x00" : "\x93NUMPY\x01\x00", 8);
    for (int b = 0; b < (v2 ? 4 : 2); ++b) file += static_cast<char>((h.size() >> (8 * b)) & 0xff);
    file += h + std::string(data_bytes, '\0');
    return d.write(name, file);
  };
  auto sched_reading = [&](const std::string& npy_path) {
    return d.write("s.json", R"({"format": "thunky.sched/1", "buffers": {
        "x": {"shape": [4], "dtype": "f32", "role": "input", "init": {"kind": "npy", "path": ")" + npy_path + R"("}},
        "y": {"shape": [4], "dtype": "f32", "role": "output"}},
      "program": [{"op": "copy", "src": "x", "dst": "y"}]})");
  };
  struct Case {
    std::string header, why;
    size_t bytes;
  };
  const Case cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", "non-negative", 16},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (17179869184,), }", "shorter than its shape says", 16},  // 64 GiB claimed, 16 bytes there
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), " + std::string(70000, ' ') + "}", "header too large", 16},
  };
  for (const auto& c : cases) {
    const std::string f = npy("bad.npy", c.header, c.bytes);
    Result r = run(sched_reading(f));
    EXPECT_EQ(r.code, 2) << c.why;
    EXPECT_NE(r.err.find(c.why), std::string::npos) << r.err;
  }
  // A well-formed one still loads: [0 0 0 0].
  Result ok = run(sched_reading(npy("good.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 16)));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(HostileInput, DeepExpressionsAreRefusedNotRecursedInto) {
  // 2,000 terms would overflow a recursive evaluator's stack; the parser
  // refuses trees over 256 levels, naming the map's expr.
  std::string expr = "x";
  for (int i = 0; i < 2000; ++i) expr += " + 1.0";
  TempDir d("deep");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [4], "dtype": "f32", "role": "input", "init": {"kind": "iota"}}, "y": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "map", "out": "y", "expr": ")" + expr + R"(", "in": {"x": "x"}}]})");
  Result r = run(sched);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/program/0/expr"), std::string::npos) << r.err.substr(0, 300);
  EXPECT_NE(r.err.find("256 operations deep"), std::string::npos) << r.err.substr(0, 300);
}

TEST(HostileInput, TheCpuBackendsLimitsAreCheckedBeforeItStarts) {
  TempDir d("limits");
  // 1,024 ranks x 3 streams = 3,072 threads, over the limit of 2,048.
  const std::string wide = d.write("wide.json", R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [1024]}, "buffers": {
      "a": {"shape": [4], "dtype": "f32", "role": "output"}, "b": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "async_start", "token": "t", "stream": {"kind": "communication", "id": 0}, "body": [{"op": "memzero", "dst": "a"}]},
                {"op": "async_start", "token": "u", "stream": {"kind": "communication", "id": 1}, "body": [{"op": "memzero", "dst": "b"}]},
                {"op": "async_done", "token": "t"}, {"op": "async_done", "token": "u"}]})");
  Result r = run(wide);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("1024 ranks x 3 streams = 3072 threads"), std::string::npos) << r.err;
  // A stand-in kernel of 10^9 s would hold its stream for 31 years.
  const std::string slow = d.write("slow.json", R"({"format": "thunky.sched/1", "buffers": {"a": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "kernel", "reads": [], "writes": ["a"], "cost": {"seconds": 1e9}}]})");
  r = run(slow);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/program/0/cost/seconds"), std::string::npos) << r.err;
  // The simulator stops past 10^7 s of simulated time, where a double can
  // no longer advance by short commands' durations (it would spin).
  Result s = sim(slow + " --machine h100-8gpu");
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("simulated time passed 10000000 s"), std::string::npos) << s.err;
  // So does a send over a NIC of 1e-300 B/s, whose end a double cannot
  // hold (it was reported as a deadlock).
  const std::string tiny_nic = d.write("tiny_nic.json", R"({"format": "thunky.machine/1", "name": "t", "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e12, "source": "t"},
    "axes": {"*": {"topology": "hierarchical", "group_size": 2, "switch": {"egress_bandwidth": 1e9, "latency_s": 0}, "nic_bandwidth": 1e-300, "nic_latency_s": 0}}})");
  const std::string shift = d.write("shift.json", R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [4]},
    "buffers": {"a": {"shape": [250000000], "dtype": "f32", "role": "input", "init": {"kind": "zeros"}}, "b": {"shape": [250000000], "dtype": "f32"}},
    "program": [{"op": "collective_permute", "src": "a", "dst": "b", "axis": "x", "shift": 1}]})");
  s = sim(shift + " --machine " + tiny_nic);
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("simulated time passed 10000000 s"), std::string::npos) << s.err;
}

TEST(HostileInput, ReportsWithImpossibleRanksOrOpsAreRefusedByPointer) {
  TempDir d("reports");
  ASSERT_EQ(run(kSrc + "/examples/sum_across_gpus.json --report " + (d.path / "good.json").string()).code, 0);
  auto good = nlohmann::ordered_json::parse(std::ifstream(d.path / "good.json"));
  struct Case {
    std::string pointer;
    nlohmann::ordered_json value;
  };
  // sum_across_gpus has 2 ranks: 99, -1 and 0.5 name none of them.
  for (const Case& c : {Case{"/ranks/1/rank", 99}, Case{"/ranks/1/rank", -1}, Case{"/ranks/1/rank", 0.5}, Case{"/ranks/0/ops", nullptr}}) {
    auto bad = good;
    bad[nlohmann::ordered_json::json_pointer(c.pointer)] = c.value;
    const std::string path = d.write("bad.json", bad.dump());
    Result r = compare(path + " " + (d.path / "good.json").string());
    EXPECT_EQ(r.code, 2) << c.pointer << " = " << c.value.dump();
    EXPECT_NE(r.err.find(path + ":" + c.pointer + ":"), std::string::npos) << r.err;
  }
}

TEST(HostileInput, TheGeneratorRefusesUnknownDtypesAndFailedWrites) {
  Result r = run_tool(THUNKY_GEN_BIN, "ring_matmul --dtype foo");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown element type 'foo'"), std::string::npos) << r.err;
  r = run_tool(THUNKY_GEN_BIN, "ring_matmul -o /dev/full");
  EXPECT_EQ(r.code, 2);
}

TEST(HostileInput, IntegerDivisionOverflowWrapsAndDivisionByZeroIsZero) {
  // s64: INT64_MIN // -1 wraps to INT64_MIN, INT64_MIN % -1 is 0; 7 // 0 and 7 % 0 are 0 (documented).
  TempDir d("intdiv");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1", "buffers": {
      "x": {"shape": [2], "dtype": "s64", "role": "input", "init": {"kind": "values", "values": [-9223372036854775808, 7]}},
      "y": {"shape": [2], "dtype": "s64", "role": "input", "init": {"kind": "values", "values": [-1, 0]}},
      "q": {"shape": [2], "dtype": "s64", "role": "output"},
      "r": {"shape": [2], "dtype": "s64", "role": "output"}},
    "program": [{"op": "map", "out": "q", "expr": "x // y", "in": {"x": "x", "y": "y"}},
                {"op": "map", "out": "r", "expr": "x % y", "in": {"x": "x", "y": "y"}}]})");
  Result r = run(sched + " --dump " + (d.path / "out").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto q = thunky::read_npy((d.path / "out" / "q.rank0.npy").string()), m = thunky::read_npy((d.path / "out" / "r.rank0.npy").string());
  const int64_t* qv = reinterpret_cast<const int64_t*>(q.data.data());
  const int64_t* mv = reinterpret_cast<const int64_t*>(m.data.data());
  EXPECT_EQ(qv[0], INT64_MIN);
  EXPECT_EQ(qv[1], 0);
  EXPECT_EQ(mv[0], 0);
  EXPECT_EQ(mv[1], 0);
}

TEST(SimCli, APipelineIsSimulatedAndShownAsAClassAStage) {
  // 3 stages over 4 data-parallel replicas: a GEMM, a send to the next
  // stage (no wrap-around), an all_reduce over dp. Each stage is a class
  // of 4 ranks: 3 rows in the table, 3 lane groups in the picture, and
  // --explain-folding names the sends' pairs as what keeps pp whole.
  TempDir d("classes");
  const std::string s = d.write("pp.json", R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["pp", "dp"], "shape": [3, 4]},
    "buffers": {"a": {"shape": [65536], "dtype": "f32", "role": "input", "init": {"kind": "ones"}},
                "b": {"shape": [65536], "dtype": "f32"}, "c": {"shape": [65536], "dtype": "f32"},
                "m": {"shape": [256, 256], "dtype": "f32", "role": "input", "init": {"kind": "ones"}}, "mo": {"shape": [256, 256], "dtype": "f32"}},
    "program": [{"op": "gemm", "a": "m", "b": "m", "c": "mo"},
                {"op": "collective_permute", "src": "a", "dst": "b", "axis": "pp", "pairs": [[0, 1], [1, 2]]},
                {"op": "all_reduce", "src": "b", "dst": "c", "axis": "dp"}]})");
  const std::string svg = (d.path / "t.svg").string();
  Result r = sim(s + " --machine h100-8gpu --explain-folding --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("folding: 12 ranks in 3 classes of 4 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("axis pp (3): not folded: /program/1 (collective_permute): its pairs (or shift) and groups do not map onto themselves"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("axis dp (4): folded whole"), std::string::npos) << r.err;
  for (const char* row : {"pp=0, dp=* (4 ranks)", "pp=1, dp=* (4 ranks)", "pp=2, dp=* (4 ranks)"}) EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 5"), std::string::npos) << r.out;
  std::ifstream in(svg);
  const std::string picture((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(picture.find("pp=2, dp=* (4 ranks) computation:0"), std::string::npos);
  EXPECT_EQ(picture.find("rank 5"), std::string::npos);
  // Every rank simulated: the same makespan, a row a rank.
  Result every = sim(s + " --machine h100-8gpu --every-rank");
  ASSERT_EQ(every.code, 0) << every.err;
  EXPECT_EQ(every.out.substr(0, every.out.find('\n')), r.out.substr(0, r.out.find('\n')));
  EXPECT_NE(every.out.find("rank 5 (pp=1,dp=1)"), std::string::npos) << every.out;
  // thunky-check counts the classes.
  Result check = run_tool(THUNKY_CHECK_BIN, s);
  EXPECT_NE(check.out.find("its 12 ranks fold into 3 classes of 4 for thunky-sim"), std::string::npos) << check.out;
}

TEST(GenCli, ATransformerStepIsWrittenPredictedAndSwept) {
  TempDir d("transformer");
  const std::string out = (d.path / "step.json").string();
  const auto gen = [](const std::string& args) { return run_tool(THUNKY_GEN_BIN, args); };
  // GPT-3 175B on 64 A100s (TP 8, PP 8), selective recomputation: the
  // prediction (13.1 s against Korthikanti's 13.75) and its breakdown.
  Result r = gen("transformer --model gpt3-175b --gpus 64 --tp 8 --pp 8 --global-batch 64 --recompute selective --machine a100-cluster -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* line : {"step time", "tokens/s/GPU", "model TFLOP/s/GPU", "MFU", "exposed TP communication", "pipeline bubble", "memory per GPU"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_TRUE(fs::exists(out));
  EXPECT_EQ(run_tool(THUNKY_CHECK_BIN, out).code, 0);
  // A sweep: tp 8 pp 8 is predicted; tp 5 x pp 8 = 40 does not divide the 64 GPUs.
  r = gen("transformer --model gpt3-175b --gpus 64 --global-batch 64 --recompute full --machine a100-cluster --sweep tp=5,8 pp=8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_row(r.out, {"tp", "8", "pp", "8", "mb", "1"})) << r.out;
  EXPECT_NE(r.out.find("does not fit: 64 GPUs are not a multiple of tp x pp x cp = 40"), std::string::npos) << r.out;
  // Bad input: an unknown model, a layout that does not divide.
  r = gen("transformer --model gpt4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown model 'gpt4' (gpt3-175b,"), std::string::npos) << r.err;
  r = gen("transformer --model llama3-70b --pp 3 --gpus 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("pp 3 does not divide the 80 layers"), std::string::npos) << r.err;
}

TEST(SimCli, EveryRankPrintsTheFoldedPrediction) {
  // The bidirectional matmul on TPU v4 (closed rings) is folded by default
  // into one class, a row for its four ranks; --every-rank simulates all
  // four and prints a row each, with the same figures, and the same mean
  // and collectives.
  const std::string sched = kSrc + "/examples/bidirectional_ring_collective_matmul_n4.json --machine tpu-v4";
  Result folded = sim(sched), every = sim(sched + " --every-rank");
  ASSERT_EQ(folded.code, 0) << folded.err;
  ASSERT_EQ(every.code, 0) << every.err;
  EXPECT_NE(folded.out.find("busbw_GB/s"), std::string::npos);
  auto figures_of = [](const std::string& out, const std::string& label) {
    const size_t at = out.find(label);
    if (at == std::string::npos) return std::string("(no row " + label + ")");
    const size_t from = at + label.size(), to = out.find('\n', from);
    const std::string rest = out.substr(from, to - from);
    return rest.substr(rest.find_first_not_of(' '));
  };
  EXPECT_EQ(figures_of(folded.out, "x=* (4 ranks)"), figures_of(every.out, "rank 3 (x=3)")) << folded.out << every.out;
  EXPECT_EQ(folded.out.substr(folded.out.find("\nmean")), every.out.substr(every.out.find("\nmean")));
  EXPECT_EQ(folded.out.find("rank 1"), std::string::npos) << folded.out;
  // The statistics gathered as the simulation runs (no output file) are
  // those of the report's ops (11.6% of the communication hidden).
  TempDir d("everyrank");
  Result reported = sim(sched + " --every-rank --report " + (d.path / "r.json").string());
  ASSERT_EQ(reported.code, 0) << reported.err;
  EXPECT_NE(every.out.find("11.6%"), std::string::npos) << every.out;
  EXPECT_EQ(every.out, reported.out);
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
  // Every rank has rank 0's timeline here, so ranks 1-3 are written as
  // "same_as": 0.
  EXPECT_EQ(report["ranks"][0]["ops"].size(), 7u);
  EXPECT_EQ(report["ranks"][2]["same_as"], 0);
  // The SVG has one bar (a rectangle with a tooltip) per op of every rank:
  // 4 x 7, a legend of the six kinds of command and of waiting for peers
  // (a collective's colour under the hatching: two rects), the hatching's
  // own rect in its pattern, and a time axis in us (the makespan is some
  // hundreds of microseconds). No collective here waits (the ring is
  // folded: every rank arrives at once), so no bar is hatched.
  std::stringstream svg;
  svg << std::ifstream(dir / "t.svg").rdbuf();
  const std::string text = svg.str();
  size_t bars = 0, rects = 0;
  for (size_t pos = text.find("<rect"); pos != std::string::npos; pos = text.find("<rect", pos + 1)) {
    ++rects;
    bars += text.compare(text.find('>', pos) + 1, 7, "<title>") == 0;
  }
  EXPECT_EQ(bars, 28u);
  EXPECT_EQ(rects, 28u + 6u + 2u + 1u);
  EXPECT_NE(text.find(">time (us)<"), std::string::npos);
  EXPECT_NE(text.find(">collective<"), std::string::npos);
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
  // --svg draws both on one time axis and says where: 4 ranks x 2 streams,
  // a predicted and a measured lane each, a tooltip on all 56 bars.
  const std::string svg = (dir / "both.svg").string();
  r = compare((dir / "p.json").string() + " " + (dir / "m.json").string() + " --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("both timelines: " + svg), std::string::npos) << r.out;
  // How often `needle` occurs in the file at `path`.
  auto occurrences = [](const std::string& path, const std::string& needle) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t n = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
    return n;
  };
  EXPECT_EQ(occurrences(svg, " predicted</text>"), 8u);
  EXPECT_EQ(occurrences(svg, "<title>/program/"), 56u);
  // It never replaces an input.
  r = compare((dir / "p.json").string() + " " + (dir / "m.json").string() + " --svg " + (dir / "m.json").string());
  EXPECT_EQ(r.code, 2);
  // thunky-exec draws its own timeline too: a lane per rank and stream
  // (4 x 2), a bar and a tooltip per command (28).
  const std::string exec_svg = (dir / "exec.svg").string();
  ASSERT_EQ(run(sched + " --svg " + exec_svg).code, 0);
  EXPECT_EQ(occurrences(exec_svg, ":0</text>"), 8u);
  EXPECT_EQ(occurrences(exec_svg, "<title>/program/"), 28u);
  EXPECT_EQ(run(sched + " --svg " + sched).code, 2);  // never over an input
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

namespace {

TEST(CalibrateCli, FitsNcclTestsAndWritesAMachineThatThunkySimLoads) {
  TempDir d("calibrate");
  const std::string out = (d.path / "a100-cal.json").string();
  Result r = calibrate("nccl-tests " + kSrc + "/tests/nccl/a100_8gpu_all_reduce_perf.txt --machine a100-8gpu -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  // One row per size (28), then the fit's summary.
  EXPECT_NE(r.out.find("fit over 28 sizes"), std::string::npos) << r.out;
  auto m = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(m["name"], "a100-8gpu-nvlink-calibrated");
  EXPECT_EQ(m["axes"]["*"]["collective_model"], "nccl");
  EXPECT_NE(m["chip"]["source"].get<std::string>().find("a100_8gpu_all_reduce_perf.txt"), std::string::npos);
  Result s = sim(kSrc + "/examples/sum_across_gpus.json --machine " + out);
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("ring/LL"), std::string::npos) << s.out;  // a tiny all_reduce takes LL
  // An all_reduce alone: the other two collectives take its figures, and
  // all_gather the base's copy_factor (a100-8gpu's 1.10); the fit says so.
  EXPECT_NE(r.out.find("not measured: all_gather, reduce_scatter, priced with the figures fitted to these runs (copy_factor 1.10, the base's); "
                       "measured nodes run all_gather and reduce_scatter at 0.82 to 1.10 of all_reduce's bus bandwidth"),
            std::string::npos)
      << r.out;
}

TEST(CalibrateCli, AFitSaysWhichCollectivesItsRunsLeftOut) {
  TempDir d("calibrate_left_out");
  const std::string nccl = kSrc + "/tests/nccl/h100_4gpu_", out = (d.path / "o.json").string();
  // all_gather alone: all_reduce and reduce_scatter are not measured; the
  // copy_factor is fitted (all_gather is a copy), so none is named as kept.
  Result ag = calibrate("nccl-tests " + nccl + "all_gather_perf.txt --machine h100-8gpu -o " + out);
  ASSERT_EQ(ag.code, 0) << ag.err;
  EXPECT_NE(ag.out.find("not measured: all_reduce, reduce_scatter, priced with the figures fitted to these runs; measured nodes"), std::string::npos) << ag.out;
  // All three: nothing to say.
  Result all = calibrate("nccl-tests " + nccl + "all_reduce_perf.txt " + nccl + "all_gather_perf.txt " + nccl + "reduce_scatter_perf.txt --machine h100-8gpu -o " + out);
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(all.out.find("not measured"), std::string::npos) << all.out;
}

TEST(CalibrateCli, AThreadDrivingSeveralGpusGetsItsFloorAndTheModelKeepsIt) {
  // 4 x H100, one thread driving the four (nGpus 4): the fit finds the
  // thread's floor, 4 x 5.8 = 23.3 us (the all_reduce is flat at 23.2-23.4
  // us up to 4 KiB; NcclModel.CalibrationSeparatesTheHostsFloorFromTheGpus
  // derives it), says so, and writes host_launch_s; --check of the written
  // model on the same run gives the fit's own error back.
  TempDir d("calibrate_floor");
  const std::string run = kSrc + "/tests/nccl/h100_4gpu_all_reduce_perf.txt", out = (d.path / "h100x4.json").string();
  Result r = calibrate("nccl-tests " + run + " --machine h100-8gpu -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("host floor: one thread drove up to 4 GPUs (nGpus)"), std::string::npos) << r.out;
  const double host = nlohmann::json::parse(std::ifstream(out))["axes"]["*"]["nccl"]["host_launch_s"].get<double>();
  EXPECT_NEAR(4 * host, 23.3e-6, 0.5e-6);
  const size_t at = r.out.find("fit over 31 sizes: mean |error| ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string summary = r.out.substr(at + 4, r.out.find('\n', at) - at - 4);  // "over 31 sizes: mean |error| ..."
  Result check = calibrate("nccl-tests " + run + " --machine " + out + " --check");
  ASSERT_EQ(check.code, 0) << check.err;
  EXPECT_NE(check.out.find("model " + summary), std::string::npos) << check.out;
}

TEST(CalibrateCli, ARunWithNcclsLogSaysWhetherTheModelPicksAsNcclDid) {
  // A 6-GPU all_reduce run with NCCL_DEBUG=INFO: NCCL's messages cut every
  // row, and say it picked NVLS/Simple; h100-8gpu picks the same at all six
  // sizes (NcclTests.ReadsRowsThatNcclsLogCutAndNcclsPicks).
  Result r = calibrate("nccl-tests " + kSrc + "/tests/nccl/h100_6gpu_all_reduce_nccl_debug_perf.txt --machine h100-8gpu --check");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_row(r.out, {"model_pick", "nccl_pick"})) << r.out;
  EXPECT_TRUE(has_row(r.out, {"nvls/Simple", "nvls/Simple"})) << r.out;
  EXPECT_NE(r.out.find("the model picks the same algorithm and protocol at 6 of 6 sizes"), std::string::npos) << r.out;
  // Each row names its file whole, however long the name (41 characters
  // and the line here), and the header's first column is as wide.
  EXPECT_NE(r.out.find("\nh100_6gpu_all_reduce_nccl_debug_perf.txt:"), std::string::npos) << r.out;
  const size_t header_end = r.out.find('\n');
  ASSERT_NE(header_end, std::string::npos);
  EXPECT_EQ(r.out.find("op "), r.out.find(" all_reduce ", header_end) - header_end) << r.out;
  // Runs whose logs say nothing of NCCL's picks get no such columns.
  Result plain = calibrate("nccl-tests " + kSrc + "/tests/nccl/h100_8gpu_reduce_scatter_ring_perf.txt --machine h100-8gpu --check");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("nccl_pick"), std::string::npos) << plain.out;
}

TEST(CalibrateCli, CheckPrintsAModelAgainstRunsAndFitsNothing) {
  TempDir d("calibrate_check");
  // h100-8gpu against a public 8x H100 reduce_scatter run it was not fitted
  // on: 7 sizes, 2.2% mean error, 2.8% at its largest (the library test
  // NcclModel.H100ModelPredictsAReduceScatterItWasNotFittedOn derives them).
  Result r = calibrate("nccl-tests " + kSrc + "/tests/nccl/h100_8gpu_reduce_scatter_ring_perf.txt --machine h100-8gpu --check");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("model over 7 sizes: mean |error| 2.2%, max 2.8%"), std::string::npos) << r.out;
  EXPECT_TRUE(has_row(r.out, {"measured_us", "model_us"})) << r.out;
  // Several collectives: one line each, then the whole.
  const std::string b200 = kSrc + "/tests/nccl/b200_8gpu_";
  Result three = calibrate("nccl-tests " + b200 + "all_reduce_perf.txt " + b200 + "all_gather_perf.txt " + b200 + "reduce_scatter_perf.txt --machine b200-8gpu --check");
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_NE(three.out.find("all_gather: mean |error|"), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("reduce_scatter: mean |error|"), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("model over 88 sizes"), std::string::npos) << three.out;
  // A file name past 64 bytes keeps its end, whole characters only: 60
  // two-byte letters and "_perf.txt:16" are 132 bytes, cut to "..." and
  // the last 61, which would start inside a letter: so the last 60, 24
  // letters and "_perf.txt:16".
  std::string letters;
  for (int i = 0; i < 60; ++i) letters += "\xc3\xa9";
  std::ifstream rs(kSrc + "/tests/nccl/h100_8gpu_reduce_scatter_ring_perf.txt");
  const std::string long_name = d.write(letters + "_perf.txt", std::string(std::istreambuf_iterator<char>(rs), {}));
  Result cut = calibrate("nccl-tests " + long_name + " --machine h100-8gpu --check");
  ASSERT_EQ(cut.code, 0) << cut.err;
  EXPECT_NE(cut.out.find("\n..." + letters.substr(0, 48) + "_perf.txt:16 reduce_scatter"), std::string::npos) << cut.out;
  // The same run as the JSON report nccl-tests -J writes (one device a
  // process, each result's halves with their time in us) reads and prices
  // as its stdout does, each row named by its pointer.
  std::string results;
  {
    std::ifstream in(kSrc + "/tests/nccl/h100_8gpu_reduce_scatter_ring_perf.txt");
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::vector<std::string> w;
      for (std::string x; words >> x;) w.push_back(x);
      if (w.empty() || w[0] == "#") continue;
      auto half = [&](size_t at) { return w.size() > at ? "{\"time\":" + w[at] + ",\"alg_bw\":" + w[at + 1] + ",\"bus_bw\":" + w[at + 2] + ",\"nwrong\":0}" : std::string("null"); };
      results += std::string(results.empty() ? "" : ",") + "{\"size\":" + w[0] + ",\"count\":" + w[1] + ",\"type\":\"float\",\"redop\":\"sum\",\"root\":\"    -1\"," +
                 "\"out_of_place\":" + half(5) + ",\"in_place\":" + half(9) + "}";
    }
  }
  std::string devices;
  for (int rank = 0; rank < 8; ++rank) devices += std::string(rank ? "," : "") + "{\"rank\":" + std::to_string(rank) + ",\"group\":0,\"hostname\":\"node\"}";
  const std::string report = d.write("rs.json", "{\"version\":3,\"args\":[\"./build/reduce_scatter_perf\",\"-b\",\"128M\"],\"config\":{\"nthreads\":1,\"ngpus\":1,\"graph\":0,\"devices\":[" +
                                                    devices + "]},\"results\":[" + results + "]}");
  Result json = calibrate("nccl-tests " + report + " --machine h100-8gpu --check");
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("model over 7 sizes: mean |error| 2.2%, max 2.8%"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\nrs.json:/results/0 "), std::string::npos) << json.out;
  // -o and --check together, or neither: exit 2, nothing written.
  const std::string out = (d.path / "o.json").string();
  EXPECT_EQ(calibrate("nccl-tests " + kSrc + "/tests/nccl/h100_8gpu_reduce_scatter_ring_perf.txt --machine h100-8gpu --check -o " + out).code, 2);
  EXPECT_EQ(calibrate("nccl-tests " + kSrc + "/tests/nccl/h100_8gpu_reduce_scatter_ring_perf.txt --machine h100-8gpu").code, 2);
  EXPECT_FALSE(fs::exists(out));
}

TEST(CalibrateCli, RunsMadeUnderNcclAlgoArePricedSoAndTheModelKeepsTheBasesChoice) {
  TempDir d("calibrate_algo");
  const std::string ar = kSrc + "/tests/nccl/b200_8gpu_all_reduce_perf.txt";
  // b200-8gpu prices the 16 GiB all_reduce as NVLS, 35.77 ms (measured
  // 35.67). As a ring (NCCL_ALGO=Ring): 1.92 us of overhead + 8.4 base +
  // 14 steps x 5 us = 80.3 us, plus 14/8 x 16 GiB / (0.749 x 900 GB/s) =
  // 44,600 us: 44,680 us, 25.3% over the NVLS run.
  for (const char* algo : {"Ring", "ring", "^NVLS", "^nvls,tree"}) {
    Result r = calibrate("nccl-tests " + ar + " --machine b200-8gpu --check --algorithms " + algo);
    ASSERT_EQ(r.code, 0) << algo << r.err;
    EXPECT_TRUE(has_row(r.out, {"35667.80", "44680.19", "+25.3%"})) << algo << r.out;
  }
  Result nvls = calibrate("nccl-tests " + ar + " --machine b200-8gpu --check");
  EXPECT_EQ(nvls.out.find("44680.19"), std::string::npos) << nvls.out;
  // Fitted so, the model written still lets NCCL choose every algorithm.
  const std::string out = (d.path / "ring.json").string();
  Result fit = calibrate("nccl-tests " + ar + " --machine b200-8gpu --algorithms Ring -o " + out);
  ASSERT_EQ(fit.code, 0) << fit.err;
  auto m = nlohmann::json::parse(std::ifstream(out));
  EXPECT_FALSE(m["axes"]["*"].contains("algorithms"));
  // A name NCCL_ALGO does not know, or a list that leaves none: exit 2.
  Result bad = calibrate("nccl-tests " + ar + " --machine b200-8gpu --check --algorithms Rings");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown name 'Rings'"), std::string::npos) << bad.err;
  EXPECT_EQ(calibrate("nccl-tests " + ar + " --machine b200-8gpu --check --algorithms ^ring,tree,nvls,nvls_tree").code, 2);
  // NCCL_PROTO=Simple: the 16-byte row costs ring/Simple's latency on
  // b200-8gpu, 1.92 + 8.4 + 14 x 5 us = 80.32 us (measured 18.89).
  Result simple = calibrate("nccl-tests " + ar + " --machine b200-8gpu --check --protocols Simple");
  ASSERT_EQ(simple.code, 0) << simple.err;
  EXPECT_TRUE(has_row(simple.out, {"18.89", "80.32", "+325.2%"})) << simple.out;
  EXPECT_EQ(calibrate("nccl-tests " + ar + " --machine b200-8gpu --check --protocols Simpel").code, 2);
}

TEST(CalibrateCli, WarnsWhenRunsSpanMoreHostsThanTheMachineHasNodes) {
  // A 2 x 8 run against a one-node model: priced as the model says, and said.
  const std::string two = kSrc + "/tests/nccl/h200_2x8_all_reduce_perf.txt";
  Result r = calibrate("nccl-tests " + two + " --machine h200-8gpu --check");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + two + ":line"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("16 ranks are on 2 hosts (8 each), but the axis is one node"), std::string::npos) << r.err;
  Result fine = calibrate("nccl-tests " + two + " --machine h200-cluster --check");
  EXPECT_EQ(fine.code, 0) << fine.err;
  EXPECT_EQ(fine.err, "");
  // The same run split one group a node (NCCL_TESTS_SPLIT="DIV 8", the
  // second host's ranks in Group 1): two collectives of 8 ranks at once,
  // each on one host, which the one-node model stands for; the split is said.
  std::string split;
  {
    std::ifstream in(two);
    for (std::string line; std::getline(in, line);) {
      if (line.find(" on   GPU-3841 ") != std::string::npos) line.replace(line.find("Group  0"), 8, "Group  1");
      split += line + "\n";
    }
  }
  TempDir d("calibrate_split");
  const std::string split_file = d.write("all_reduce_perf.txt", split);
  Result groups = calibrate("nccl-tests " + split_file + " --machine h200-8gpu --check");
  EXPECT_EQ(groups.code, 0) << groups.err;
  EXPECT_EQ(groups.err.find("hosts"), std::string::npos) << groups.err;
  EXPECT_NE(groups.err.find("the run's ranks are in 2 groups, each running its own collective at the same time (NCCL_TESTS_SPLIT); a row is priced as one group's collective of 8 ranks"),
            std::string::npos)
      << groups.err;
  // A run made with -z (a wait after every iteration) is said to hold it.
  std::string waited = split;
  waited.insert(waited.find("#\n# Using devices"), "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  Result blocking = calibrate("nccl-tests " + d.write("all_reduce_perf_z.txt", waited) + " --machine h200-8gpu --check");
  EXPECT_EQ(blocking.code, 0) << blocking.err;
  EXPECT_NE(blocking.err.find("the run waited for the GPUs after every iteration (nccl-tests -z)"), std::string::npos) << blocking.err;
  EXPECT_EQ(groups.err.find("-z"), std::string::npos) << groups.err;
  // So is one that launched several collectives an iteration as one group.
  std::string grouped = split;
  grouped.replace(grouped.find("agg iters: 1"), 12, "agg iters: 4");
  Result agg = calibrate("nccl-tests " + d.write("all_reduce_perf_m.txt", grouped) + " --machine h200-8gpu --check");
  EXPECT_EQ(agg.code, 0) << agg.err;
  EXPECT_NE(agg.err.find("the run launched 4 collectives as one NCCL group each iteration (nccl-tests -m)"), std::string::npos) << agg.err;
  EXPECT_EQ(groups.err.find("-m)"), std::string::npos) << groups.err;
}

TEST(CalibrateCli, ExecMeasuresThisHostIntoAModelThunkySimLoads) {
  TempDir d("calibrate_exec");
  const std::string out = (d.path / "cpu.json").string();
  Result r = calibrate("exec --backend cpu --ranks 2 --quick -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("calibrate [1] gemm f32"), std::string::npos) << r.err;  // the progress lines
  auto m = nlohmann::json::parse(std::ifstream(out));
  // Any CPU multiplies at 10 MFLOP/s or more and copies at 10 MB/s or more,
  // even in the Debug build under ASan and UBSan with another test beside
  // it (a CI host measured 97 MFLOP/s there). A figure in the wrong unit
  // (GFLOP/s, GB/s) would be 10^9 times smaller.
  EXPECT_GT(m["chip"]["peak_flops"]["f32"].get<double>(), 1e7);
  EXPECT_GT(m["chip"]["hbm_bandwidth"].get<double>(), 1e7);
  EXPECT_GT(m["chip"]["launch_overhead_s"].get<double>(), 0);
  EXPECT_GT(m["axes"]["*"]["latency_s"].get<double>(), 0);  // a 2-rank all_reduce takes time
  // A thread woken by another's event takes time to run: more than 0, and
  // in seconds (a figure in microseconds or nanoseconds would read 1e3 or
  // 1e6 times larger), however loaded the host.
  EXPECT_GT(m["chip"]["event_latency_s"].get<double>(), 0);
  EXPECT_LT(m["chip"]["event_latency_s"].get<double>(), 1.0);
  EXPECT_NE(r.err.find("hand-offs between streams while 2 ranks compute"), std::string::npos) << r.err;
  // The ranks' commands share this host's cores: those this process may
  // use (its affinity mask and cgroup quota), at most as many as it has.
  EXPECT_GE(m["chip"]["host_cores"].get<unsigned>(), 1u);
  EXPECT_LE(m["chip"]["host_cores"].get<unsigned>(), std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_NE(m["chip"]["source"].get<std::string>().find("measured by thunky-calibrate exec --backend cpu"), std::string::npos);
  Result s = sim(kSrc + "/examples/ring_collective_matmul_n4.json --machine " + out);
  EXPECT_EQ(s.code, 0) << s.err;
}

TEST(CalibrateCli, ABadFileNamesItsLine) {
  TempDir d("calibrate_bad");
  const std::string bad = d.write("all_gather_perf.txt",
                                  "# nThread 1 nGpus 8\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                                  "  1024  256  float  none  -1  12.5  0.1  0.1  0  twelve  0.1  0.1  0\n");
  Result r = calibrate("nccl-tests " + bad + " --machine h100-8gpu -o " + (d.path / "o.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(bad + ":line 3: in-place time 'twelve'"), std::string::npos) << r.err;
  EXPECT_EQ(calibrate("nccl-tests " + bad + " -o x.json").code, 2);  // --machine is required
  // A JSON report (nccl-tests -J) names the pointer; one cut short, itself.
  const std::string report = d.write("report.json", R"({"args": ["all_gather_perf"], "config": {"ngpus": 8}, "results": [{"size": 1024, "out_of_place": {"time": "x"}}]})");
  Result json = calibrate("nccl-tests " + report + " --machine h100-8gpu --check");
  EXPECT_EQ(json.code, 2);
  EXPECT_EQ(json.err, report + ":/results/0/out_of_place/time: expected a number of microseconds, got \"x\"\n");
  const std::string cut = d.write("cut.json", R"({"args": ["all_gather_perf"], "config": {"ngpus": 8}, "resu)");
  Result cut_short = calibrate("nccl-tests " + cut + " --machine h100-8gpu --check");
  EXPECT_EQ(cut_short.code, 2);
  EXPECT_EQ(cut_short.err.rfind(cut + ": malformed JSON: ", 0), 0u) << cut_short.err;
  // More rows than a fit takes (4,096): exit 2 before the fit, not minutes of it.
  std::string many = "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 8\n#  size count type redop root time algbw busbw #wrong\n";
  for (int i = 0; i < 4097; ++i) many += "  1024  256  float  sum  -1  12.5  0.1  0.1  0\n";
  const std::string big = d.write("all_reduce_perf.txt", many);
  Result r2 = calibrate("nccl-tests " + big + " --machine h100-8gpu -o " + (d.path / "o.json").string());
  EXPECT_EQ(r2.code, 2);
  EXPECT_NE(r2.err.find("4097 result rows in all; a fit takes at most 4096"), std::string::npos) << r2.err;
  EXPECT_FALSE(fs::exists(d.path / "o.json"));
}

}  // namespace

namespace {

const char* kFlatRing = R"({"format": "thunky.machine/1", "name": "flat-ring",
  "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e18, "launch_overhead_s": 0, "gemm_efficiency": 1.0, "source": "test"},
  "axes": {"*": {"topology": "ring", "wraparound": true, "link_bandwidth": 1e9, "hop_latency_s": 0}}})";

TEST(Overlap, CompareGivesTheFractionOfCommunicationRecovered) {
  // N = 2, A [2 x 64, 128], B [128, 2 x 64], f32, on a ring of L = 1e9 B/s per
  // direction without latency and 1e12 FLOP/s:
  //   blocking: AllGather V = 128 x 128 x 4 = 65536 B at W = 2L: 32.768 us,
  //             then GEMM [128, 128] x [128, 64] = 2 x 128 x 128 x 64 = 2.097152 us: 34.865 us;
  //   ring: the shift of one chunk (32768 B at L) 32.768 us, under which GEMM 0
  //         (1.048576 us) runs, then GEMM 1: 33.817 us;
  //   unsharded: the GEMM alone, 2.097 us.
  // Recovered: (34.865 - 33.817) / (34.865 - 2.097) = 1.048576 / 32.768 = 3.2%.
  TempDir d("overlap");
  const std::string machine = d.write("flat.json", kFlatRing);
  std::string reports;
  for (const char* pattern : {"blocking_matmul", "ring_matmul", "unsharded_matmul"}) {
    const std::string sched = (d.path / (std::string(pattern) + ".json")).string();
    const std::string report = (d.path / (std::string(pattern) + ".report.json")).string();
    ASSERT_EQ(run_tool(THUNKY_GEN_BIN, std::string(pattern) + " -n 2 --dtype f32 -o " + sched).code, 0);
    Result s = sim(sched + " --machine " + machine + " --report " + report);
    ASSERT_EQ(s.code, 0) << s.err;
    reports += report + " ";
  }
  std::istringstream names(reports);
  std::string b, o, u;
  names >> b >> o >> u;
  Result r = compare("--blocking " + b + " --overlapped " + o + " --unsharded " + u);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_row(r.out, {"blocking", "34.865"})) << r.out;
  EXPECT_TRUE(has_row(r.out, {"overlapped", "33.817"})) << r.out;
  EXPECT_TRUE(has_row(r.out, {"unsharded", "2.097"})) << r.out;
  EXPECT_NE(r.out.find("communication cost (blocking - unsharded): 32.768 us"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.049 us = 3.2% of it"), std::string::npos) << r.out;
  // All three are needed, and they exclude the predicted/measured pair.
  EXPECT_EQ(compare("--blocking " + b + " --overlapped " + o).code, 2);
  EXPECT_EQ(compare(b + " " + o + " --blocking " + b + " --overlapped " + o + " --unsharded " + u).code, 2);
}

TEST(ShardedMatmulCli, PrintsTheCaseAndWritesAScheduleThatRuns) {
  TempDir d("matmul");
  const std::string sched = (d.path / "m.json").string();
  // A[I_X, J_Y] . B[J_Y, K] on X=2, Y=2, f32: case 3 over Y; an AllReduce of C's
  // shard [8/2, 4] x 4 bytes = 64 bytes per device.
  Result g = run_tool(THUNKY_GEN_BIN, "matmul --mesh X=2,Y=2 --lhs 8x8 --lhs-spec X,Y --rhs 8x4 --rhs-spec Y,None --dtype f32 -o " + sched);
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_NE(g.out.find("A[I_X, J_Y] f32[8, 8]: shard f32[4, 4], 64 B per device, 1 copy of each shard"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("B[J_Y, K] f32[8, 4]: shard f32[4, 4], 64 B per device, 2 copies of each shard"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("B[0,0] on 0,2; B[1,0] on 1,3;"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("case 3"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("all_reduce of C over Y: 64 B per device"), std::string::npos) << g.out;
  Result r = run(sched);
  EXPECT_EQ(r.code, 0) << r.err;
  // Bad specs are usage errors.
  Result bad = run_tool(THUNKY_GEN_BIN, "matmul --mesh X=2 --lhs 8x8 --lhs-spec X,X --rhs 8x4 --rhs-spec None,None");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("axis X shards two dimensions"), std::string::npos) << bad.err;
  // With a machine: both case 2 strategies, priced, and which one is written.
  const std::string machine = d.write("flat.json", kFlatRing);
  Result s = run_tool(THUNKY_GEN_BIN, "matmul --mesh X=4 --lhs 64x1024 --lhs-spec None,None --rhs 1024x256 --rhs-spec X,None --dtype f32 --machine " +
                                          machine + " -o " + sched);
  ASSERT_EQ(s.code, 0) << s.err;
  // See ShardedMatmul.StrategyFlipMatchesTheClosedForm for the figures.
  EXPECT_NE(s.out.find("reduce is cheaper below I = 831.169"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("reduce is cheaper up to I = 828, gather from 832"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("writing the reduce strategy"), std::string::npos) << s.out;
  // The written (reduce) step: AllReduce of C [64, 256] f32 = 65,536 B at 2 V / W_ici
  // = 2 x 65536 / 2e9 = 65.54 us; GEMM [64, 256] x [256, 256] = 2 x 64 x 256 x 256 / 1e12 = 8.389 us.
  EXPECT_NE(s.out.find("all_reduce of C over X: 65.5 kB per device, 65.54 us"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("0.008389 GFLOP per device, 8.389 us"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("communication-bound"), std::string::npos) << s.out;
}

}  // namespace

namespace {

TEST(HostileInput, BuffersPastTheCpuBackendsMemoryAreRefusedBeforeAllocating) {
  // 2^20 x 2^20 f32 = 4 TiB, more than 3/4 of any machine this runs on.
  TempDir d("bigbuf");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1",
    "buffers": {"x": {"shape": [1048576, 1048576], "dtype": "f32", "role": "output"}},
    "program": [{"op": "memset", "dst": "x", "value": 1.0}]})");
  Result r = run(sched);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("would allocate 4398046511104 bytes (1 ranks x every buffer), more than its limit of"), std::string::npos) << r.err;
}

#if !defined(__SANITIZE_ADDRESS__)
TEST(HostileInput, AllocationFailureIsAnErrorNotAnAbort) {
  // 3 GiB of buffers under a 2 GiB address-space limit (the tool and its
  // CUDA libraries start in about 1 GiB): the allocation fails, whatever the
  // allocator, and the tool says so (exit 2).
  TempDir d("oom");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1",
    "buffers": {"x": {"shape": [786432, 1024], "dtype": "f32", "role": "output"}},
    "program": [{"op": "memset", "dst": "x", "value": 1.0}]})");
  Result r = run_tool("ulimit -v 2097152; exec " + std::string(THUNKY_EXEC_BIN), sched);
  EXPECT_EQ(r.code, 2) << r.err;
  // The address-space check refuses it before allocating (3,072 MiB of
  // buffers); on a machine of less than 4 GiB the memory cap does first.
  const bool limited = r.err.find("and 3072 MiB of buffers), more than") != std::string::npos && r.err.find("(ulimit -v)") != std::string::npos;
  const bool capped = r.err.find("more than its limit") != std::string::npos;
  EXPECT_TRUE(limited || capped) << r.err;
}
#endif

}  // namespace

namespace {

TEST(HostileInput, CallsThatFanOutPastTheCommandLimitAreRefusedBeforeCopying) {
  // f0 calls f1 ten times, ... f6 calls f7 ten times, f7 is one memset:
  // 10^7 commands from a 3 KB file, more than 2^22 = 4,194,304.
  nlohmann::ordered_json s;
  s["format"] = "thunky.sched/1";
  s["buffers"]["x"] = {{"shape", {4}}, {"dtype", "f32"}, {"role", "output"}};
  auto fn = [](int d) {  // (appended: GCC 12 warns falsely on "f" + std::string)
    std::string name = "f";
    return name.append(std::to_string(d));
  };
  for (int d = 0; d < 7; ++d) {
    nlohmann::ordered_json call = {{"op", "call"}, {"fn", fn(d + 1)}, {"args", nlohmann::ordered_json::object()}};
    s["functions"][fn(d)] = {{"params", nlohmann::ordered_json::array()}, {"program", nlohmann::ordered_json::array({call, call, call, call, call, call, call, call, call, call})}};
  }
  s["functions"]["f7"] = {{"params", nlohmann::ordered_json::array()}, {"program", {{{"op", "memset"}, {"dst", "x"}, {"value", 1.0}}}}};
  s["program"] = {{{"op", "call"}, {"fn", "f0"}, {"args", nlohmann::ordered_json::object()}}};
  TempDir d("fanout");
  const std::string sched = d.write("s.json", s.dump());
  Result r = sim(sched + " --machine h100-8gpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("s.json:/program/0: calls of function 'f0' expand the program past 4194304 commands"), std::string::npos) << r.err;
}

TEST(HostileInput, DuplicateParametersAndReportErrorsNameTheirPointer) {
  TempDir d("dups");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1", "buffers": {"x": {"shape": [4], "dtype": "f32", "role": "output"}},
    "functions": {"f": {"params": ["a", "a"], "program": []}}, "program": []})");
  Result r = run(sched);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("s.json:/functions/f/params/1: parameter 'a' is listed twice"), std::string::npos) << r.err;
  const std::string report = d.write("m.json", R"({"format": "thunky.report/1", "ranks": 5})");
  r = compare(report + " " + report);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("m.json:/: missing required field 'source'"), std::string::npos) << r.err;
}

TEST(HostileInput, ATripCountPastTheSimulatorsLimitIsRefused) {
  TempDir d("trips");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1", "buffers": {
      "c": {"shape": [], "dtype": "bool", "role": "output"}, "x": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "while", "cond_buf": "c", "cond": [{"op": "memset", "dst": "c", "value": 1}],
                 "body": [{"op": "memset", "dst": "x", "value": 1.0}], "sim": {"trip_count": 1000000000000000}}]})");
  // Refused before the run, from the expected count: 1 + 10^15 x 2 memsets
  // (the cond block runs once more than the body). Reported on (--report):
  // --max-records, 2^22 by default, at 450 bytes a record; only tallied for
  // the table: 2^27.
  Result r = sim(sched + " --machine h100-8gpu --report " + (d.path / "r.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("s.json:/program/0/sim/trip_count: this loop takes the report past 4194304 commands, --max-records (about 2000000000000001 in all"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d.path / "r.json"));
  r = sim(sched + " --machine h100-8gpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("s.json:/program/0/sim/trip_count: this loop takes the simulation past 134217728 commands (about 2000000000000001 in all"), std::string::npos) << r.err;
  // 2 x 10^5 + 1 records: past --max-records 200000, within 300000 (small
  // enough that the accepted run takes seconds under AddressSanitizer).
  const std::string smaller = d.write("m.json", R"({"format": "thunky.sched/1", "buffers": {
      "c": {"shape": [], "dtype": "bool", "role": "output"}, "x": {"shape": [4], "dtype": "f32", "role": "output"}},
    "program": [{"op": "while", "cond_buf": "c", "cond": [{"op": "memset", "dst": "c", "value": 1}],
                 "body": [{"op": "memset", "dst": "x", "value": 1.0}], "sim": {"trip_count": 100000}}]})");
  r = sim(smaller + " --machine h100-8gpu --report " + (d.path / "r.json").string() + " --max-records 200000");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("takes the report past 200000 commands, --max-records (about 200001 in all"), std::string::npos) << r.err;
  r = sim(smaller + " --machine h100-8gpu --report " + (d.path / "r.json").string() + " --max-records 300000");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(d.path / "r.json"));
}

}  // namespace

namespace {

// Processes (ranks) in a Chrome trace.
int traced_processes(const std::string& path) {
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  int n = 0;
  for (const auto& e : j["traceEvents"]) n += e["ph"] == "M" && e["name"] == "process_name";
  return n;
}

TEST(BigSchedules, TracesShowTheRanksAskedForAndSaySoForLargeMeshes) {
  TempDir d("traceranks");
  const std::string sched = (d.path / "r.json").string(), trace = (d.path / "t.json").string();
  ASSERT_EQ(run_tool(THUNKY_GEN_BIN, "ring_matmul -n 40 --m-block 2 --k 4 --n-block 2 -o " + sched).code, 0);
  // Folded, the 40 ranks are one class: one process, named by the class.
  Result r = sim(sched + " --machine h100-8gpu --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(traced_processes(trace), 1);
  EXPECT_NE(std::string(std::istreambuf_iterator<char>(std::ifstream(trace).rdbuf()), {}).find("\"x=* (40 ranks)\""), std::string::npos);
  // Every rank simulated, 40 ranks, more than 32: the first 16, said on stderr.
  r = sim(sched + " --machine h100-8gpu --every-rank --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the trace and picture show ranks 0-15 of 40"), std::string::npos) << r.err;
  EXPECT_EQ(traced_processes(trace), 16);
  // The picture shows the same ranks and says so.
  const std::string svg = (d.path / "t.svg").string();
  ASSERT_EQ(sim(sched + " --machine h100-8gpu --every-rank --svg " + svg).code, 0);
  std::stringstream picture;
  picture << std::ifstream(svg).rdbuf();
  EXPECT_NE(picture.str().find("16 of 40 ranks shown"), std::string::npos);
  // As asked: ranks 0, 5 and 10-12.
  r = sim(sched + " --machine h100-8gpu --trace " + trace + " --trace-ranks 0,5,10-12");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(traced_processes(trace), 5);
  EXPECT_EQ(sim(sched + " --machine h100-8gpu --trace " + trace + " --trace-ranks all").code, 0);
  EXPECT_EQ(traced_processes(trace), 40);
  // A rank past the mesh, or nonsense, is a usage error.
  EXPECT_EQ(sim(sched + " --machine h100-8gpu --trace " + trace + " --trace-ranks 40").code, 2);
  EXPECT_EQ(sim(sched + " --machine h100-8gpu --trace " + trace + " --trace-ranks 3-1").code, 2);
}

TEST(BigSchedules, PastThirtyTwoRanksRanksThatReadTheSameShareARow) {
  // 40 ranks; each memsets (x // 20 + 1) MiB of b: ranks 0-19 write 4 MiB,
  // ranks 20-39 8 MiB, so the table has two runs of ranks, not 40 rows.
  TempDir d("rankruns");
  const std::string sched = d.write("s.json", R"({"format": "thunky.sched/1", "mesh": {"axis_names": ["x"], "shape": [40]},
    "buffers": {"b": {"shape": [2097152], "dtype": "f32", "role": "output"}},
    "program": [{"op": "memset", "dst": "b[ds(0, (x // 20 + 1) * 1048576)]", "value": 1}]})");
  Result r = sim(sched + " --machine h100-8gpu");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nranks 0-19 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nranks 20-39 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 1 "), std::string::npos) << r.out;
  // Without output files thunky-sim keeps each rank's statistics, not its
  // ops; with a report it keeps the ops: the table reads the same.
  Result with_report = sim(sched + " --machine h100-8gpu --report " + (d.path / "r.json").string());
  ASSERT_EQ(with_report.code, 0) << with_report.err;
  EXPECT_EQ(r.out, with_report.out);
}

TEST(BigSchedules, TheCollectiveTableGroupsIdenticalCollectives) {
  // The 40-rank ring: 39 shifts of one 2 x 4 f32 block (32 bytes), one row
  // with a count of 39; --per-instance gives the 39 rows.
  TempDir d("grouped");
  const std::string sched = (d.path / "r.json").string();
  ASSERT_EQ(run_tool(THUNKY_GEN_BIN, "ring_matmul -n 40 --m-block 2 --k 4 --n-block 2 --dtype f32 -o " + sched).code, 0);
  Result r = sim(sched + " --machine h100-8gpu");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_row(r.out, {"collective_permute", "40", "32", "39"})) << r.out;
  r = sim(sched + " --machine h100-8gpu --per-instance");
  int rows = 0;
  for (size_t at = 0; (at = r.out.find("collective_permute", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 39);
}

}  // namespace

namespace {

std::string trim_spaces(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(' ') - b + 1);
}

TEST(HostileInput, EveryHostileInputGivesItsExitCodeAndMessage) {
  // tests/hostile/EXPECTED: FILE | TOOL | ARGS | EXIT | message.
  const std::string dir = kSrc + "/tests/hostile/";
  std::ifstream manifest(dir + "EXPECTED");
  std::string line;
  int checked = 0;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::stringstream parts(line);
    for (std::string c; std::getline(parts, c, '|');) cols.push_back(trim_spaces(c));
    ASSERT_GE(cols.size(), 4u) << line;
    TempDir tmp("hostile");
    std::string args = cols[2];
    if (auto at = args.find("{dir}"); at != std::string::npos) args.replace(at, 5, (tmp.path / "dump").string());
    // Relative machine files live beside the inputs.
    for (const char* machine : {"zero_peak_machine.json", "infinite_bandwidth_machine.json"})
      if (auto at = args.find(machine); at != std::string::npos) args.insert(at, dir);
    // TOOL is exec, sim or compare (FILE is then the second report),
    // optionally followed by a shell limit: "exec, ulimit -v 2000000".
    const std::string name = cols[1].substr(0, cols[1].find(','));
    const std::string limit = cols[1].find(',') == std::string::npos ? "" : cols[1].substr(cols[1].find(',') + 1) + "; ";
    const std::string tool = name == "sim" ? THUNKY_SIM_BIN : name == "compare" ? THUNKY_COMPARE_BIN : THUNKY_EXEC_BIN;
    if (name == "compare") args = dir + "report.json " + args;
    Result r = run_tool(limit + tool, name == "compare" ? args + " " + dir + cols[0] : dir + cols[0] + " " + args);
    EXPECT_EQ(r.code, std::stoi(cols[3])) << line << "\n" << r.err;
    const std::string message = cols.size() > 4 ? cols[4] : "";
    if (r.code == 0) {
      EXPECT_TRUE(r.err.empty()) << line << "\n" << r.err;
    } else {
      EXPECT_NE(r.err.find(message), std::string::npos) << line << "\n" << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << line << "\n" << r.err;
      EXPECT_NE(r.err.find(".json:/"), std::string::npos) << line << "\n" << r.err;
    }
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
