// Predicted (thunky-sim) against measured (thunky-exec): the two reports
// share one schema, so their commands match by rank and id.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "traces/report.h"

namespace thunky {

// A matched command; its id and op are those of the measured report's
// record, which must outlive the comparison.
struct CommandComparison {
  int64_t rank = 0;
  const OpRecord* measured = nullptr;
  double predicted_s = 0, measured_s = 0;  // durations
  double predicted_interference_s = 0;     // of predicted_s, lost to interference (sim)
};

struct RankComparison {
  int64_t rank = 0;
  RankStats predicted, measured;
};

struct Comparison {
  double predicted_makespan_s = 0, measured_makespan_s = 0;
  double makespan_error = 0;      // (predicted - measured) / measured
  double mean_command_error = 0;  // mean of |predicted - measured| / measured over matched commands
  std::vector<RankComparison> ranks;
  std::vector<CommandComparison> commands;  // matched, in measured order per rank
  size_t only_predicted = 0, only_measured = 0;
};

// Throws ThunkyError when the two reports are of different meshes.
Comparison compare_reports(const Report& predicted, const Report& measured);

// The side-by-side table: makespans, per-rank overlap and exposed
// communication, and rank 0's commands one by one (the first max_rows).
void print_comparison(const Report& predicted, const Report& measured, const Comparison& c, std::ostream& os, size_t max_rows = 60);

// How much of its communication cost an overlapped schedule hides: with
// the makespans of the blocking schedule (the collective, then the GEMM),
// the overlapped one and the unsharded one (the GEMM alone, no
// communication), (T_blocking - T_overlapped) / (T_blocking - T_unsharded).
// Predicted and measured reports alike; no fraction when the blocking
// schedule is not slower than the unsharded one (nothing to recover).
struct Recovery {
  double blocking_s = 0, overlapped_s = 0, unsharded_s = 0;
  std::optional<double> fraction;
};
Recovery recovered_fraction(const Report& blocking, const Report& overlapped, const Report& unsharded);
void print_recovery(const Report& blocking, const Report& overlapped, const Report& unsharded, const Recovery& r, std::ostream& os);

}  // namespace thunky
