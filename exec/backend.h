// The executor's backend interface: plan, initialise, execute (only the
// last is timed), and what a run gives back.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "traces/report.h"

namespace thunky {

class Processes;  // exec/processes.h

// How far a long run has got: commands finished in this iteration (every
// rank's), and iterations done of all (warm-up included).
struct ExecProgress {
  int64_t done = 0, expected = 0;  // expected: 0, not known ahead
  int iteration = 0, iterations = 1;
  double elapsed_s = 0;
};

struct ExecOptions {
  int warmup = 0;
  int iters = 1;
  int64_t max_trip_count = 1'000'000;  // a while loop past this is reported, never a hang
  // cuda: capture the whole schedule into one CUDA graph (eager where capture is impossible).
  bool graph = false;
  // cuda: the GPUs of the ranks, one per rank ("--devices 0,1,2,3"); empty
  // = one per rank when the machine has enough, else every rank on GPU 0.
  std::vector<int> devices;
  // cuda: seconds a collective may take before the run is aborted (0 = no limit).
  double timeout_s = 0;
  // cpu: the cores compute commands run on, one each, first come first
  // served (0 = this process's: its affinity mask and cgroup quota).
  int host_cores = 0;
  // Called about every five seconds while a run that has taken five seconds
  // or more goes on (cpu backend; thunky-exec prints it on stderr).
  std::function<void(const ExecProgress&)> progress;
  // cpu: this process runs one block of the ranks, and the others' through
  // these processes (mpirun, srun; exec/processes.h); null: every rank here.
  Processes* processes = nullptr;
};

struct ExecResult {
  Report report;  // the timeline of the median iteration
  // Final contents after the last iteration: [rank][buffer] bytes (across
  // processes, those of this process's ranks; the others' are empty).
  std::vector<std::vector<std::vector<uint8_t>>> memory;
  // Control-flow decisions of the last iteration, per rank: for each cond,
  // switch and while id, in execution order, the branch taken (cond: 1 then,
  // 0 else; switch: the clamped index) or the trip count (while). The
  // simulator resolves data-dependent control flow from these.
  std::vector<std::map<std::string, std::vector<int64_t>>> decisions;
  // cuda: the multiprocessors of the (first) GPU it ran on; 0 elsewhere.
  int64_t sm_count = 0;
};

// A backend runs a schedule in three stages (docs/decisions.md, "Backends
// and their stages"):
//  - plan: everything the backend cannot run is refused, and what it needs
//    is worked out (files read, kernels to build, views per rank), before
//    any memory or device is touched;
//  - initialise: memory, streams, handles, communicators and compiled
//    kernels;
//  - execute: the warm-up and timed iterations; only this is timed.
// Errors come back as diagnostics (exit 2 for bad input or a missing
// device, 1 for a wrong schedule, 3 for a collective that timed out).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // `p` and `opts` must outlive the backend's later stages.
  virtual std::vector<Diagnostic> plan(const Program& p, const ExecOptions& opts) = 0;
  virtual std::vector<Diagnostic> initialise() = 0;
  virtual Expected<ExecResult> execute() = 0;
  // The three stages in turn.
  Expected<ExecResult> run(const Program& p, const ExecOptions& opts);
};

std::unique_ptr<Backend> make_cpu_backend();
// The cuda backend, or null when this build has none.
std::unique_ptr<Backend> make_cuda_backend();
// "cpu" or "cuda"; an error names what this build lacks.
Expected<std::unique_ptr<Backend>> make_backend(const std::string& name);

// The timeline of the median makespan among the timed iterations, with
// every iteration's makespan in iteration_makespans_s, gathered one
// iteration at a time in bounded memory: every makespan is kept (8 bytes
// each), but at most kKept timelines, those nearest the running median.
// Up to kKept iterations the report is exactly the median one; past that,
// the kept timeline nearest the final median (its makespan is in the
// middle of the kept ones, which bracket the median unless the makespans
// drift by more than kKept / 2 iterations' worth).
class MedianTimeline {
 public:
  static constexpr size_t kKept = 16;
  void add(Report timeline);
  // Needs one add() or more.
  Report take();

 private:
  // The median so far, the upper one of an even count (as sorted[n / 2]),
  // from two heaps: the lower half's largest on top of low_, the upper
  // half's smallest on top of high_, which holds one more when n is odd.
  double running_median() const { return high_.top(); }
  std::vector<double> spans_;
  std::priority_queue<double> low_;
  std::priority_queue<double, std::vector<double>, std::greater<double>> high_;
  std::vector<Report> kept_;
};

// Gathers a buffer that declares `global` from every rank's shard into the
// global array (row-major bytes).
std::vector<uint8_t> gather_global(const Program& p, int buffer, const ExecResult& r);

}  // namespace thunky
