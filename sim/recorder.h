// The recorder: the engine's part that keeps what the report says of each
// finished command. It owns the records (a timeline per rank), or each
// rank's tallies (thunky-sim's table), or only a count; the flows between
// streams; the collective table's rows; and the limits on how many commands
// a run may finish. It has no events of its own: the other parts hand it
// each command as it finishes, at the engine's clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine.h"
#include "traces/report.h"

namespace thunky::sim::internal {

// What the report will say of one finished command: kept compact while the
// simulation runs and turned into OpRecords at the end.
struct Rec {
  double start = 0, end = 0;
  int32_t info = -1;
  int32_t instance = -1;
  int32_t stream = -1;
  double transfer = -1;  // a collective: when its data began to move (start: when this rank arrived); else -1
  double lost = 0;       // seconds lost to interference (docs/machines.md)
};

// A hand-off between two streams through an event (a token's async_start
// or async_done), as the report's flow arrows show it.
struct Edge {
  double from_s = 0, to_s = 0;
  int32_t from_stream = -1, to_stream = -1;
  int32_t info = -1;  // the async_start / async_done that names the token
  bool join = false;
};

class Recorder {
 public:
  // What is kept of a finished command: its record for the report, its
  // interval in its rank's statistics, or only a count (simulate_summary).
  enum class Keep { records, stats, count };
  // Past 10^7 s (116 days) a double's step is a microsecond's tenth, and
  // events of short commands stop advancing time.
  static constexpr double kMaxSimulatedSeconds = 1e7;

  explicit Recorder(const SimOptions& options) : options_(options) {}

  // Before the run: what to keep, for how many simulated ranks, and how
  // many commands the run is expected to finish (0: not known).
  void start(Keep keep, int64_t ranks, int64_t expected);
  Keep keep() const { return keep_; }
  int64_t expected() const { return expected_; }

  // The most commands a run may finish (each rank simulated counts its
  // own): options' max_records when each is kept for the report (2^22 by
  // default, about 1.9 GB of records); 2^27 when only statistics are (at
  // most 16 bytes each, a minute of simulation); 2^30 when they are only
  // counted (a few minutes).
  int64_t limit() const;
  const char* limit_verb() const { return keep_ == Keep::count ? "runs" : "reports on"; }

  // A command of `rank` finished (`collective`: a collective, or a member
  // of one). Throws ThunkyError past the limits.
  void record(int64_t rank, const Rec& r, bool collective);
  // Keep::stats: whether `rank`'s tally has grown enough to fold, and
  // folding it under `horizon` (no command of the rank that finishes later
  // started before it). Each fold lets the tally double before the next,
  // so that a horizon held back by a long command costs no more than
  // keeping every interval.
  bool wants_fold(int64_t rank) const {
    return keep_ == Keep::stats && tallies_[static_cast<size_t>(rank)].held() >= fold_at_[static_cast<size_t>(rank)];
  }
  void fold(int64_t rank, double horizon) {
    TimelineTally& t = tallies_[static_cast<size_t>(rank)];
    t.fold(horizon);
    fold_at_[static_cast<size_t>(rank)] = std::max(kFoldAt, 2 * t.held());
  }
  void edge(int64_t rank, const Edge& e) {
    if (keep_ == Keep::records) edges_[static_cast<size_t>(rank)].push_back(e);
  }

  // The collective table's row of command `info`'s instance `inst`, made by
  // `make()` (a CollectiveStat) the first time; -1 when it was made before.
  template <typename Make>
  int new_row(int info, int32_t inst, Make make) {
    auto [it, fresh] = rows_seen_.try_emplace(std::pair{info, inst}, static_cast<int>(rows_.size()));
    if (!fresh) return -1;
    rows_.push_back(make());
    return it->second;
  }
  CollectiveStat& row(int i) { return rows_[static_cast<size_t>(i)]; }

  // At the end.
  std::vector<Rec>& records(int64_t rank) { return ops_[static_cast<size_t>(rank)]; }
  std::vector<Edge>& edges(int64_t rank) { return edges_[static_cast<size_t>(rank)]; }
  const TimelineTally& tally(int64_t rank) const { return tallies_[static_cast<size_t>(rank)]; }
  std::vector<CollectiveStat> take_rows() { return std::move(rows_); }
  int64_t counted() const { return counted_; }  // Keep::count: commands finished
  double last_end() const { return last_end_; }  // Keep::count: the latest end

 private:
  static constexpr int64_t kMaxTalliedCommands = int64_t{1} << 27;
  static constexpr int64_t kMaxSimulatedCommands = int64_t{1} << 30;
  static constexpr size_t kFoldAt = 256;  // intervals a tally holds before it folds
  // Reports progress (options_.progress) if five seconds have passed.
  void maybe_report_progress();

  const SimOptions& options_;
  Keep keep_ = Keep::records;
  int64_t expected_ = 0;
  int64_t simulated_ = 0;  // commands finished, kept or not
  int64_t counted_ = 0;
  double last_end_ = 0;
  std::chrono::steady_clock::time_point started_, last_progress_;
  std::vector<std::vector<Rec>> ops_;      // Keep::records: by rank
  std::vector<std::vector<Edge>> edges_;   // Keep::records: by rank
  std::vector<TimelineTally> tallies_;     // Keep::stats: by rank
  std::vector<size_t> fold_at_;            // Keep::stats: by rank, the size that asks for a fold
  std::vector<CollectiveStat> rows_;       // rank 0's collectives; seconds filled in as they finish
  std::map<std::pair<int, int32_t>, int> rows_seen_;  // (command, instance) -> its row
};

}  // namespace thunky::sim::internal
