// Bytes moved and flops of one command on one rank: shared by the
// simulator's cost model and the reports of both tools.
#pragma once

#include <cstdint>
#include <memory_resource>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/validate.h"

namespace thunky {

struct Work {
  int64_t bytes = 0;  // bytes read plus bytes written
  double flops = 0;
  // A GEMM's problem: batch x [m, k] x [k, n] (0 for other commands), for
  // cost models that price by shape.
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0, gemm_batch = 0;
};

// Whether a ref's view can differ between ranks: an index expression names
// a mesh axis (the only names index expressions may use).
inline bool ref_moves_with_rank(const Ref& r) { return r.syntax->moves_with_rank; }
// Whether the element count of a ref's view can differ between ranks: an
// index or a ds start only moves a view; slice bounds and ds sizes size it.
inline bool size_depends_on_rank(const Ref& r) { return r.syntax->sized_by_rank; }
// Whether any ref of the command (not of its sub-blocks) sizes by rank.
inline bool work_depends_on_rank(const Command& c) { return any_ref(c, size_depends_on_rank); }

// Remembers the view shapes of refs sized alike on every rank (keyed by
// the shared ref syntax and buffer), so a long schedule resolves each
// distinct ref once.
class ShapeCache {
 public:
  explicit ShapeCache(std::pmr::memory_resource* m = std::pmr::get_default_resource()) : shapes_(m) {}
  // Valid until the next call.
  std::span<const int64_t> shape(const Program& p, const Ref& r, const RankCtx& ctx) {
    // The whole buffer (resolving checks nothing a loaded schedule can fail).
    if (r.syntax->groups.empty()) return p.buffers[r.buffer].shape;
    return view_shape(p, r, ctx);
  }

 private:
  std::span<const int64_t> view_shape(const Program& p, const Ref& r, const RankCtx& ctx);

  struct Hash {
    size_t operator()(const std::pair<const void*, int>& k) const {
      return std::hash<const void*>()(k.first) ^ (static_cast<size_t>(k.second) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::pmr::unordered_map<std::pair<const void*, int>, std::pmr::vector<int64_t>, Hash> shapes_;
  Shape scratch_;
};

// `cache` may be null. `sized_by_rank`, when given, is set to whether a view
// the work was computed from sizes by rank, so that the result may differ
// on another rank (a cheaper and tighter test than work_depends_on_rank,
// which looks at every ref the command has).
Work command_work(const Program& p, const Command& c, const RankCtx& ctx, ShapeCache* cache = nullptr,
                  bool* sized_by_rank = nullptr);

}  // namespace thunky
