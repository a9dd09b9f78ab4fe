// The executor's backend interface: plan, initialise, execute (only the
// last is timed), and what a run gives back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "traces/report.h"

namespace thunky {

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
};

struct ExecResult {
  Report report;  // the timeline of the median iteration
  // Final contents after the last iteration: [rank][buffer] bytes.
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
// every iteration's makespan in iteration_makespans_s. Needs one or more.
Report median_timeline(std::vector<Report> timelines);

// Gathers a buffer that declares `global` from every rank's shard into the
// global array (row-major bytes).
std::vector<uint8_t> gather_global(const Program& p, int buffer, const ExecResult& r);

}  // namespace thunky
