// The discrete-event timing model: every rank's streams run their commands
// in order, joined by token events; a collective starts on all its ranks
// when the last participant reaches it (early ranks hold their stream);
// concurrent kernels of a rank share its throughput (processor sharing) and
// concurrent transfers share every directed link (max-min fair). Rates are
// recomputed at every start and end.
#pragma once

#include <functional>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/accounting.h"
#include "core/schedule.h"
#include "sim/machine.h"
#include "sim/rank_classes.h"
#include "traces/report.h"

namespace thunky::sim {

// Control-flow outcomes per rank: command id -> decisions in execution order
// (cond 1/0, switch index, while trip count), as the CPU backend logs them.
using Decisions = std::vector<std::map<std::string, std::vector<int64_t>>>;

struct CollectiveStat {
  int64_t rank = 0;  // the rank whose instance this is
  std::string id;
  std::string op;
  int64_t ranks = 0;
  double bytes = 0;  // V of the cost model
  double seconds = 0;
  double alg_bw = 0, bus_bw = 0;
  std::string algorithm;  // "ring/Simple" under the NCCL model, else empty
};

struct SimResult {
  Report report;
  // The classes of ranks simulated once each (every rank its own when
  // nothing folds), and why each axis folds no further.
  RankClasses classes;
  std::vector<CollectiveStat> collectives;  // rank 0's view, in start order
  // What the user should know but that stops nothing, each message led by
  // "note: " (a sim hint that the functional model contradicts).
  std::vector<Diagnostic> notes;
};

// How far a long simulation has got: rank-commands finished, and how many
// its trip counts and branches lead to expect (0 when not known).
struct SimProgress {
  int64_t done = 0, expected = 0;
  double elapsed_s = 0;
  // Still deciding control flow by running the schedule on the cpu
  // backend (api/predict.h): `done` counts commands run there.
  bool functional = false;
};
constexpr double kBytesPerRecord = 450;

struct SimOptions {
  // Simulate one rank of each class of ranks that provably share a
  // timeline (see docs/decisions.md, "Ranks are folded into classes");
  // false always simulates every rank.
  bool fold_symmetric_ranks = true;
  // false: the report's ranks hold their statistics (and op counts) but
  // not their ops, flows or link samples, and there is no critical path;
  // each rank's statistics are gathered as its commands finish, in a few
  // bytes a command (what thunky-sim's table needs, without --report,
  // --trace or --svg).
  bool timelines = true;
  // Control flow without sim hints is decided by running the schedule on
  // the cpu backend first (api/predict.h); a while loop there past this
  // many trips stops the run, as thunky-exec's --max-trip-count does.
  int64_t max_trip_count = 1'000'000;
  // The most rank-commands kept for a report, trace or SVG (`timelines`):
  // each takes about kBytesPerRecord while simulating and as much again in
  // each file written. A run expected to pass it (from its trip counts) is
  // refused before it starts, with the estimate; thunky-sim's
  // --max-records raises it.
  int64_t max_records = int64_t{1} << 22;
  // A collective's CTAs take SMs from the kernels beside it, and its HBM
  // traffic shares the chip's bandwidth with theirs (docs/machines.md,
  // "Interference"); false prices each as if it ran alone
  // (thunky-sim --no-interference).
  bool interference = true;
  // At most this many CTAs for any collective (NCCL_MAX_CTAS; thunky-sim
  // --nccl-max-ctas); 0: NCCL's own counts.
  int64_t nccl_max_ctas = 0;
  // Called about every five seconds while a simulation that has run five
  // seconds or more goes on (thunky-sim prints it on stderr).
  std::function<void(const SimProgress&)> progress;
};

// `decisions` may be null: then every cond/switch/while needs a sim hint.
Expected<SimResult> simulate(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options = {});

// The same simulation without building the report: the makespan and the
// number of rank-commands that finished (benchmarks, quick what-ifs).
struct SimSummary {
  double makespan_s = 0;
  int64_t rank_commands = 0;
};
Expected<SimSummary> simulate_summary(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options = {});

// Standalone seconds of a compute command (docs/machines.md, "Compute"),
// from its work on the rank it runs on.
double compute_seconds(const Program& p, const Machine& m, const Command& c, const Work& w);

// The flops a GEMM costs as the GPU runs it: whole tiles in whole waves,
// each tile's K rounded up and paying its overhead (Machine::sm_count).
// Small problems fill the GPU better with smaller tiles, which cuBLAS's
// heuristics pick at a lower rate per tile: the machine's tile, half as
// wide (at 0.9 of its rate) and half in both (at 0.75) are priced, and the
// cheapest taken. Its own flops where the machine prices GEMMs by
// efficiency alone.
double gemm_flops_by_shape(const Machine& m, const Work& w);

}  // namespace thunky::sim
