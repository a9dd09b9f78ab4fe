// Validation of a lowered program, for every rank of the mesh, before
// anything runs. Its passes:
//   1. buffers: init values, axes, global layouts, npy files;
//   2. every rank's walk (core/rank_walk.h): views, op rules, roles,
//      tokens, happens-before and races;
//   3. races gathered across ranks, each reported once with its ranks;
//   4. collective order (core/collective_order.h): deadlocks.
// Loading (core/load.h) runs parse, lower and this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/schedule.h"

namespace thunky {

struct RankCtx {
  int64_t rank = 0;
  std::vector<int64_t> coords;
};
RankCtx rank_ctx(const Mesh& m, int64_t rank);

// Resolves a bound ref on one rank. Throws ThunkyError at the ref's pointer.
View resolve(const Program& p, const Ref& r, const RankCtx& ctx);
// The element type `r` reads as on every rank: its buffer's, or its last
// .bitcast's.
DType ref_dtype(const Program& p, const Ref& r);

struct ValidateOptions {
  bool races = true;
  bool collective_order = true;
  size_t max_errors = 20;
};

// Returns every problem found (empty = valid). Input errors (ErrorKind::input)
// come first and suppress the race and deadlock checks.
std::vector<Diagnostic> validate(const Program& p, const ValidateOptions& opts = {});

}  // namespace thunky
