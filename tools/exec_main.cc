// thunky-exec SCHED: runs a schedule for real and measures every command.
#include "tools/cli.h"
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include "core/npy.h"
#include "core/load.h"
#include "core/validate.h"
#include "exec/backend.h"
#include "exec/processes.h"
#include "sim/collective_table.h"
#include "traces/report.h"
#include "traces/svg.h"
#include "tools/dump.h"

namespace {

// thunky-exec itself has no cuda backend, so that it loads no CUDA library
// and starts in milliseconds; a cuda run is handed, with the same
// arguments, to thunky-exec-cuda beside it (the same program with the
// backend linked). Returns only where there is none to hand it to.
void hand_cuda_run_over(char** argv) {
#ifndef THUNKY_EXEC_HAS_CUDA
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  const std::string cuda = (self.parent_path() / "thunky-exec-cuda").string();
  if (::access(cuda.c_str(), X_OK) != 0) return;
  ::execv(cuda.c_str(), argv);
  std::cerr << "thunky-exec: cannot start " << cuda << ": " << std::strerror(errno) << "\n";
#else
  (void)argv;
#endif
}

// How long a process waits for the others in one collective or barrier
// when --timeout does not say (a run across processes only).
constexpr double kDefaultProcessTimeoutS = 300;

struct Options {
  std::string schedule;
  std::string backend = "cpu";
  int warmup = 0;
  int iters = 1;
  std::string report, trace, trace_ranks, dump, dump_inputs, svg, table_ranks;
  bool per_instance = false;
  int64_t max_trip_count = 1'000'000;
  bool graph = false, check = false;
  std::string devices;
  double timeout_s = 0;
  int host_cores = 0;
};

// The exit code of a wait between processes that stopped: another
// process's failure ends this one with its code (a missing GPU there is
// bad input here too), a silent process with 3.
int stop_code(const std::exception& e) {
  const auto* failure = dynamic_cast<const thunky::ProcessFailure*>(&e);
  return failure ? failure->exit_code : 3;
}

int fail(const std::vector<thunky::Diagnostic>& errors, int code) {
  for (const auto& e : errors) std::cerr << e.str() + "\n";  // one write a line: processes' lines do not interleave
  return code;
}

// Across processes: every process's report (its ranks) and, for --dump,
// its ranks' output buffers, gathered on process 0, which writes them as
// one run's. Returns false where the others could not be heard from.
std::string to_text(const thunky::Report& r) {
  std::ostringstream os;
  thunky::write_report(r, os);
  return os.str();
}

bool gather_run(thunky::Processes& procs, const thunky::Program& p, bool with_memory, double clock_uncertainty_s, thunky::ExecResult& result) {
  using thunky::Role;
  const int count = procs.place().count;
  const thunky::RankBlock mine = thunky::rank_block(p.mesh.size(), procs.place().index, count);
  auto is_dumped = [&](const thunky::Buffer& b) { return with_memory && (b.role == Role::output || b.role == Role::inout); };
  const std::string text = to_text(result.report);
  const uint64_t n = text.size();
  std::vector<uint8_t> message(sizeof n + text.size());
  std::memcpy(message.data(), &n, sizeof n);
  std::memcpy(message.data() + sizeof n, text.data(), text.size());
  for (int64_t r = mine.first; r < mine.first + mine.n; ++r)
    for (size_t b = 0; b < p.buffers.size(); ++b)
      if (is_dumped(p.buffers[b])) message.insert(message.end(), result.memory[r][b].begin(), result.memory[r][b].end());
  const auto all = procs.gather(message);
  if (procs.place().index != 0) return true;
  thunky::Report merged = result.report;
  merged.ranks.clear();
  for (int k = 0; k < count; ++k) {
    const auto& m = all[static_cast<size_t>(k)];
    uint64_t len = 0;
    std::memcpy(&len, m.data(), sizeof len);
    thunky::Report part = thunky::parse_report(std::string(reinterpret_cast<const char*>(m.data()) + sizeof len, len));
    for (auto& rr : part.ranks) {
      if (rr.same_as) rr.ops = part.timeline(rr).ops, rr.flows = part.timeline(rr).flows, rr.same_as.reset();
      merged.ranks.push_back(std::move(rr));
    }
    size_t at = sizeof len + len;
    const thunky::RankBlock theirs = thunky::rank_block(p.mesh.size(), k, count);
    for (int64_t r = theirs.first; r < theirs.first + theirs.n; ++r) {
      auto& mem = result.memory[static_cast<size_t>(r)];
      mem.resize(p.buffers.size());
      for (size_t b = 0; b < p.buffers.size(); ++b) {
        if (!is_dumped(p.buffers[b])) continue;
        const size_t bytes = p.buffers[b].bytes();
        mem[b].assign(m.begin() + static_cast<std::ptrdiff_t>(at), m.begin() + static_cast<std::ptrdiff_t>(at + bytes));
        at += bytes;
      }
    }
  }
  std::sort(merged.ranks.begin(), merged.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  thunky::summarize(merged);
  merged.processes = count;
  merged.clock_uncertainty_s = clock_uncertainty_s;
  result.report = std::move(merged);
  return true;
}

// How far apart the processes may leave a barrier: the longest, over the
// processes, of the time one barrier takes (the best of 5).
double barrier_uncertainty(thunky::Processes& procs) {
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t = std::chrono::steady_clock::now();
    procs.barrier();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return procs.max(best);
}

}  // namespace

int run_main(int argc, char** argv) {
  Options o;
  CLI::App app{"thunky-exec: run a thunky schedule (sched.json) and measure every command"};
  app.add_option("SCHED", o.schedule, "schedule file (thunky.sched/1)")->required();
  app.add_option("--backend", o.backend, "cpu (reference, default) or cuda");
  app.add_option("--warmup", o.warmup, "untimed iterations before the timed ones")->check(CLI::Range(0, 1000000));
  app.add_option("--iters", o.iters, "timed iterations; the report shows the median one")->check(CLI::Range(1, 1000000));
  app.add_option("--report", o.report, "write report.json (thunky.report/1)");
  app.add_option("--trace", o.trace, "write a Chrome trace (Perfetto, chrome://tracing)");
  app.add_option("--trace-ranks", o.trace_ranks, "ranks in the trace and SVG: all, or a list such as 0-7,12 (default: all up to 32 ranks, else 0-15)");
  app.add_option("--svg", o.svg, "write an SVG timeline of the measured run (one lane per stream, rank rows)");
  app.add_flag("--per-instance", o.per_instance, "one collective row per instance instead of one per kind");
  app.add_option("--ranks", o.table_ranks, "ranks whose collectives the table lists, a table each: all, or a list such as 0-3,12 (default 0)");
  app.add_option("--max-trip-count", o.max_trip_count, "stop a while loop that runs more iterations than this (default 1000000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--dump", o.dump, "write every output and inout buffer as .npy into this directory");
  app.add_option("--dump-inputs", o.dump_inputs, "write every input and inout buffer as its init made it (seeded random values included) as .npy into this directory");
  app.add_flag("--check", o.check, "only validate the schedule for every rank (races, deadlocks), as thunky-check: nothing runs");
  app.add_flag("--graph", o.graph, "cuda: capture the whole schedule into one CUDA graph (eager, with the reason on stderr, where it cannot)");
  app.add_option("--devices", o.devices, "cuda: GPUs by rank, e.g. 0,1,2,3 (one per rank) or 0 (every rank on GPU 0)");
  app.add_option("--timeout", o.timeout_s, "cuda, or across processes: abort a collective that takes longer than this many seconds (exit 3; across processes 300 by default)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--host-cores", o.host_cores,
                 "cpu: the cores compute commands run on, one each, first come first served (default: this process's, from its affinity mask and cgroup quota)")
      ->check(CLI::Range(1, 1024));
  if (auto code = thunky::cli::parse(app, "thunky-exec", argc, argv)) return *code;
  if (o.check) {  // before any launcher or device: nothing runs
    auto prog = thunky::load_schedule_file(o.schedule);
    if (!prog) return fail(prog.errors(), prog.exit_code());
    return std::cout << thunky::cli::valid_line(o.schedule, prog->mesh.size()), 0;
  }
  if (o.backend == "cuda") hand_cuda_run_over(argv);
  // Launched by mpirun or srun: this process's place, and MPI.
  std::unique_ptr<thunky::Processes> procs;
  try {
    procs = thunky::start_processes();
  } catch (const thunky::ThunkyError& e) {
    return std::cerr << "thunky-exec: " << e.what() << "\n", 2;
  }
  // A failure here is every process's. Bad input (exit 2) is refused
  // alike by every process before the run: each says so, and they meet
  // once so that mpirun ends none before it has spoken. A failure in the
  // run is sent to the others, so that none waits for this one until its
  // timeout.
  auto stop = [&](int code) {
    if (procs && code == 3) std::_Exit(3);  // a process is silent: it will not meet the others, and mpirun ends it
    if (procs && code != 0) {
      if (code != 2) procs->fail("exit " + std::to_string(code) + " (its message is above)", code);
      procs->timeout_s = 5;
      try {
        procs->barrier();  // every process that fails meets here; one stuck is left after 5 s
      } catch (const std::exception&) {
      }
      // Without MPI_Finalize: mpirun ends the job as the first process
      // exits, and a failed run has nothing left to say.
      std::cout.flush();
      std::cerr.flush();
      std::_Exit(code);
    }
    return code;
  };
  auto prog = thunky::load_schedule_file(o.schedule);
  if (!prog) return stop(fail(prog.errors(), prog.exit_code()));
  const auto shown_collectives = thunky::cli::table_ranks("thunky-exec", o.table_ranks, prog->mesh.size());
  if (!shown_collectives) return stop(2);
  if (procs) {
    const int64_t ranks = prog->mesh.size();
    const int count = procs->place().count;
    if (ranks % count != 0)
      return stop((std::cerr << o.schedule + ":/mesh/shape: launched as " + std::to_string(count) + " processes (" + procs->place().from + "), but the mesh's " +
                                    std::to_string(ranks) + " ranks do not divide into " + std::to_string(count) +
                                    " equal blocks: launch a number of processes that divides " + std::to_string(ranks) + "\n",
                   2));
    if (o.timeout_s <= 0) o.timeout_s = kDefaultProcessTimeoutS;
    procs->timeout_s = o.timeout_s;
    // Every process must run the same schedule: a node with another copy
    // of the file would otherwise wait in collectives the others never issue.
    std::ifstream in(o.schedule, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      if (!thunky::same_on_every_process(*procs, thunky::fingerprint(text)))
        return stop((std::cerr << o.schedule + ":/: the processes loaded different schedules (this file differs between them): every process must run the same file\n", 2));
    } catch (const std::exception& e) {
      return stop((std::cerr << "thunky-exec: " + std::string(e.what()) + "\n", stop_code(e)));
    }
  }
  if (auto code = thunky::cli::refuse_overwrite("thunky-exec", {{"--report", o.report}, {"--trace", o.trace}, {"--svg", o.svg}}, thunky::cli::inputs_of(*prog))) return stop(*code);
  auto backend = thunky::make_backend(o.backend);
  if (!backend) return stop(fail(backend.errors(), 2));
  thunky::ExecOptions eo;
  eo.warmup = o.warmup;
  eo.iters = o.iters;
  eo.max_trip_count = o.max_trip_count;
  eo.graph = o.graph;
  eo.timeout_s = o.timeout_s;
  eo.host_cores = o.host_cores;
  eo.progress = [](const thunky::ExecProgress& p) {
    // "thunky-exec: iteration 3 of 1000, 12000 commands finished in it, 6 s elapsed, about 1994 s left"
    std::cerr << "thunky-exec: iteration " << p.iteration + 1 << " of " << p.iterations << ", " << p.done << " commands finished in it, "
              << static_cast<int64_t>(p.elapsed_s) << " s elapsed";
    if (p.iteration > 0) std::cerr << ", about " << static_cast<int64_t>(p.elapsed_s / p.iteration * (p.iterations - p.iteration) + 0.5) << " s left";
    std::cerr << "\n";
  };
  if (!o.devices.empty()) {
    auto devices = thunky::cli::parse_int_list(o.devices);
    if (!devices) return std::cerr << "thunky-exec: --devices: expected a comma-separated list of GPU numbers, got '" << o.devices << "'\n", 2;
    eo.devices = *devices;
  }
  if (o.backend == "cpu" && (o.graph || !o.devices.empty() || (o.timeout_s > 0 && !procs)))
    return stop((std::cerr << "thunky-exec: --graph, --devices and --timeout apply to --backend cuda (and --timeout to a run across processes)\n", 2));
  eo.processes = procs.get();
  double clock_uncertainty_s = 0;
  if (procs) {
    try {
      clock_uncertainty_s = barrier_uncertainty(*procs);
    } catch (const std::exception& e) {
      return stop((std::cerr << "thunky-exec: " << e.what() << "\n", stop_code(e)));
    }
  }
  if (o.backend == "cuda" && o.host_cores > 0) return std::cerr << "thunky-exec: --host-cores applies to --backend cpu\n", 2;
  auto result = (*backend)->run(*prog, eo);
  if (!result) {
    auto errors = result.errors();
    for (auto& e : errors)
      if (e.file.empty()) e.file = o.schedule;
    return stop(fail(errors, result.exit_code()));
  }
  if (procs) {
    try {
      gather_run(*procs, *prog, !o.dump.empty(), clock_uncertainty_s, *result);
    } catch (const std::exception& e) {
      return stop((std::cerr << "thunky-exec: gathering the processes' results: " << e.what() << "\n", stop_code(e)));
    }
    if (procs->place().index != 0) return 0;  // process 0 writes the run's outputs
  }
  result->report.warmup_iterations = o.warmup;
  thunky::print_table(result->report, std::cout);
  // Each shown rank's collectives as nccl-tests reports them: count, mean,
  // spread, algBw and busBw of the transfer (its wait left out).
  std::vector<thunky::sim::CollectiveStat> collectives;
  for (int64_t rank : *shown_collectives)
    for (auto& s : thunky::sim::collective_stats(*prog, result->report, rank)) collectives.push_back(std::move(s));
  thunky::sim::print_collective_table(collectives, o.per_instance, std::cout);
  if (!o.report.empty()) {
    auto err = thunky::write_output_file(o.report, [&](std::ostream& os) { thunky::write_report(result->report, os); });
    if (!err.empty()) return std::cerr << o.report << ": " << err << "\n", 2;
  }
  if (!o.trace.empty() || !o.svg.empty()) {
    auto ranks = thunky::cli::traced_ranks("thunky-exec", o.trace_ranks, static_cast<int64_t>(result->report.ranks.size()));
    if (!ranks) return 2;
    const thunky::Report shown = thunky::select_ranks(result->report, *ranks);
    if (!o.trace.empty()) {
      auto err = thunky::write_output_file(o.trace, [&](std::ostream& os) { thunky::write_chrome_trace(shown, os); });
      if (!err.empty()) return std::cerr << o.trace << ": " << err << "\n", 2;
    }
    if (!o.svg.empty()) {
      auto err = thunky::write_output_file(o.svg, [&](std::ostream& os) { os << thunky::timeline_svg(shown); });
      if (!err.empty()) return std::cerr << o.svg << ": " << err << "\n", 2;
    }
  }
  if (!o.dump_inputs.empty())
    if (int code = thunky::cli::dump_inputs(*prog, o.dump_inputs)) return code;
  if (!o.dump.empty()) return thunky::cli::dump(*prog, *result, o.dump, thunky::cli::Dumped::outputs);
  return 0;
}

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-exec", run_main, argc, argv); }
