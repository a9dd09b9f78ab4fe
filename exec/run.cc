#include <algorithm>
#include <cstring>

#include "core/init.h"
#include "exec/backend.h"

namespace thunky {

Expected<ExecResult> Backend::run(const Program& p, const ExecOptions& opts) {
  if (auto errors = plan(p, opts); !errors.empty()) return errors;
  if (auto errors = initialise(); !errors.empty()) return errors;
  return execute();
}

Report median_timeline(std::vector<Report> timelines) {
  std::vector<double> spans;
  for (const auto& t : timelines) spans.push_back(t.makespan_s);
  std::vector<size_t> order(timelines.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  Report r = std::move(timelines[order[order.size() / 2]]);
  r.iteration_makespans_s = spans;
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
