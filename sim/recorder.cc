#include "sim/recorder.h"

#include <algorithm>

#include "core/status.h"

namespace thunky::sim::internal {

void Recorder::start(Keep keep, int64_t ranks, int64_t expected) {
  keep_ = keep;
  expected_ = expected;
  started_ = last_progress_ = std::chrono::steady_clock::now();
  if (keep_ == Keep::records) {
    ops_.resize(static_cast<size_t>(ranks));
    edges_.resize(static_cast<size_t>(ranks));
  }
  if (keep_ == Keep::stats) {
    tallies_.resize(static_cast<size_t>(ranks));
    fold_at_.assign(static_cast<size_t>(ranks), kFoldAt);
  }
}

int64_t Recorder::limit() const {
  return keep_ == Keep::records ? options_.max_records : keep_ == Keep::stats ? kMaxTalliedCommands : kMaxSimulatedCommands;
}

void Recorder::record(int64_t rank, const Rec& r, bool collective) {
  if (!(r.end <= kMaxSimulatedSeconds))
    throw ThunkyError("", "the simulated time passed " + std::to_string(static_cast<int64_t>(kMaxSimulatedSeconds)) +
                              " s: a cost, latency or bandwidth of the schedule or machine model is out of range");
  if ((++simulated_ & 0xffff) == 0) maybe_report_progress();
  if (simulated_ > limit())
    throw ThunkyError("", "the simulation passed " + std::to_string(limit()) + " commands (loop trips times commands, on every rank simulated), the most thunky-sim " + limit_verb());
  switch (keep_) {
    case Keep::records: ops_[static_cast<size_t>(rank)].push_back(r); return;
    case Keep::stats:
      tallies_[static_cast<size_t>(rank)].add(r.start, r.end, collective, r.transfer >= 0 ? std::optional<double>(r.transfer) : std::nullopt, r.lost);
      return;
    case Keep::count: break;
  }
  ++counted_;
  last_end_ = std::max(last_end_, r.end);
}

void Recorder::maybe_report_progress() {
  if (!options_.progress) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_progress_ < std::chrono::seconds(5)) return;
  last_progress_ = now;
  options_.progress({simulated_, expected_, std::chrono::duration<double>(now - started_).count()});
}

}  // namespace thunky::sim::internal
