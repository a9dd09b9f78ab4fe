#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/init.h"
#include "exec/backend.h"
#include "exec/processes.h"

namespace thunky {

Expected<ExecResult> Backend::run(const Program& p, const ExecOptions& opts) {
  // Across processes, a process that cannot start tells the others, whose
  // waits (a barrier, an NCCL id) then stop at once, not at the timeout.
  auto refused = [&](std::vector<Diagnostic> errors) -> Expected<ExecResult> {
    Expected<ExecResult> r(std::move(errors));
    if (opts.processes) opts.processes->fail(r.errors().front().message, r.exit_code());
    return r;
  };
  if (auto errors = plan(p, opts); !errors.empty()) return refused(std::move(errors));
  if (auto errors = initialise(); !errors.empty()) return refused(std::move(errors));
  return execute();
}

void MedianTimeline::add(Report timeline) {
  const double span = timeline.makespan_s;
  spans_.push_back(span);
  // high_ holds the upper ceil(n/2) makespans, low_ the rest.
  if (!high_.empty() && span < high_.top()) low_.push(span);
  else high_.push(span);
  if (low_.size() > high_.size()) {
    high_.push(low_.top());
    low_.pop();
  } else if (high_.size() > low_.size() + 1) {
    low_.push(high_.top());
    high_.pop();
  }
  kept_.push_back(std::move(timeline));
  if (kept_.size() <= kKept) return;
  // One over: the timeline farthest from the median so far goes.
  const double median = running_median();
  auto farthest = std::max_element(kept_.begin(), kept_.end(), [&](const Report& a, const Report& b) {
    return std::abs(a.makespan_s - median) < std::abs(b.makespan_s - median);
  });
  kept_.erase(farthest);
}

Report MedianTimeline::take() {
  const double median = running_median();
  auto nearest = std::min_element(kept_.begin(), kept_.end(), [&](const Report& a, const Report& b) {
    return std::abs(a.makespan_s - median) < std::abs(b.makespan_s - median);
  });
  Report r = std::move(*nearest);
  r.iteration_makespans_s = std::move(spans_);
  kept_.clear();
  return r;
}

std::vector<uint8_t> gather_global(const Program& p, int buffer, const ExecResult& r) {
  const Buffer& b = p.buffers[buffer];
  const size_t es = dtype_size(b.dtype);
  const auto& gshape = b.global->shape;
  int64_t total = 1;
  for (auto d : gshape) total *= d;
  std::vector<uint8_t> out(static_cast<size_t>(total) * es, 0);
  const size_t nd = gshape.size();
  for (int64_t rank = 0; rank < p.mesh.size(); ++rank) {
    ShardLayout l = shard_layout(p.mesh, *b.global, rank);
    const auto& src = r.memory[rank][buffer];
    std::vector<int64_t> idx(nd, 0);
    const int64_t n = b.count();
    // Copy row by row (the last dimension is contiguous in both).
    const int64_t row = nd ? b.shape[nd - 1] : 1;
    for (int64_t i = 0; i < n; i += row) {
      int64_t g = 0;
      for (size_t d = 0; d < nd; ++d) g = g * gshape[d] + l.start[d] + idx[d];
      std::memcpy(out.data() + g * es, src.data() + i * es, row * es);
      for (int d = static_cast<int>(nd) - 2; d >= 0; --d) {
        if (++idx[d] < b.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

}  // namespace thunky
