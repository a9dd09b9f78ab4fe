// What cond, switch and while mean when a schedule runs, written once for
// every consumer that runs them: the simulator's issuer, the cpu backend,
// and the cuda backend's eager and graph paths. Each consumer supplies how
// it reads a scalar, how it enters a block and how it logs a decision; the
// choice of block, the clamping of a switch index and the message of a
// runaway loop come from here, so they read the same everywhere. (The
// validator visits every branch, not the one taken: it walks sub-blocks
// with for_each_sub_block.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/status.h"

namespace thunky {

// The block a cond or switch enters for a value read at run time (a cond's
// predicate, a switch's index), and the decision a report logs for it: 1 or
// 0 for a cond, the clamped index for a switch. A switch index outside
// [0, branches) selects the nearest branch, as lax.switch clamps it.
struct Branch {
  const Block* block = nullptr;
  int64_t decision = 0;
};
inline Branch take_branch(const Command& c, int64_t value) {
  if (const Cond* x = c.get_if<Cond>()) return value != 0 ? Branch{&x->then_, 1} : Branch{&x->else_, 0};
  const auto& branches = c.as<Switch>().branches;
  const int64_t k = std::clamp<int64_t>(value, 0, static_cast<int64_t>(branches.size()) - 1);
  return {&branches[static_cast<size_t>(k)], k};
}

// The branch a cond's or switch's sim hint names (1 or 0 for a cond),
// where it has one.
inline std::optional<int64_t> hinted_branch(const Command& c) {
  if (const Cond* x = c.get_if<Cond>()) return x->taken ? std::optional<int64_t>(*x->taken ? 1 : 0) : std::nullopt;
  if (const Switch* x = c.get_if<Switch>()) return x->branch;
  return std::nullopt;
}

// The buffers some command writes, by index: a buffer none writes keeps
// the value its init gives it all through the run.
inline std::vector<bool> written_buffers(const Program& p) {
  std::vector<bool> written(p.buffers.size(), false);
  any_command(p.program, [&](const Command& c) {
    for_each_use(c, [&](RefUse u) {
      if (u.write && u.ref->buffer >= 0) written[static_cast<size_t>(u.ref->buffer)] = true;
    });
    return false;
  });
  return written;
}

// The mesh axis that alone decides a cond or switch: its predicate or
// index reads a buffer initialised from that axis's index (init
// axis_index) that no command writes (`written`, from written_buffers).
inline std::optional<int> deciding_axis(const Program& p, const Command& c, const std::vector<bool>& written) {
  const Ref* r = nullptr;
  if (const Cond* x = c.get_if<Cond>()) r = &x->pred;
  if (const Switch* x = c.get_if<Switch>()) r = &x->index;
  if (!r || r->buffer < 0 || written[static_cast<size_t>(r->buffer)]) return std::nullopt;
  const Buffer& b = p.buffers[static_cast<size_t>(r->buffer)];
  if (b.init.kind != Init::Kind::axis_index) return std::nullopt;
  return p.mesh.axis(b.init.axis);
}

// The branch such a cond or switch takes at coordinate `coord` along its
// deciding axis, as take_branch decides it from the value read.
inline int64_t branch_at(const Command& c, int64_t coord) { return take_branch(c, coord).decision; }

// A while loop that ran past the limit on its trips (--max-trip-count): a
// wrong schedule (exit 1), named by the loop's pointer.
inline ThunkyError runaway_loop(const Command& loop, int64_t rank, int64_t limit) {
  return ThunkyError(loop.pointer, "rank " + std::to_string(rank) + ": the while loop at " + loop.id() + " ran more than " + std::to_string(limit) +
                                       " iterations (raise --max-trip-count if it is meant to)",
                     ErrorKind::schedule);
}

// Runs one cond, switch or while on a consumer that evaluates it as it
// goes (the cpu backend, the cuda backend's eager path):
//   read(ref) -> double   the value of a scalar buffer now;
//   run(block, in_loop)   runs a block to its end;
//   decide(value)         logs the decision (branch or trip count).
// A loop runs its cond block, reads cond_buf, and runs its body while that
// is non-zero; past max_trips trips it throws runaway_loop.
template <typename Read, typename Run, typename Decide>
void run_control_flow(const Command& c, int64_t rank, int64_t max_trips, bool in_loop, Read&& read, Run&& run, Decide&& decide) {
  if (c.op() != Op::while_) {
    const double v = read(c.op() == Op::cond ? c.as<Cond>().pred : c.as<Switch>().index);
    // A switch index is an s32 scalar; the clamp keeps the cast defined for any double.
    const Branch b = take_branch(c, c.op() == Op::cond ? (v != 0 ? 1 : 0) : std::isnan(v) ? 0 : static_cast<int64_t>(std::clamp(v, -1e18, 1e18)));
    decide(b.decision);
    run(*b.block, in_loop);
    return;
  }
  const While& w = c.as<While>();
  for (int64_t trips = 0;; ++trips) {
    run(w.cond, true);
    if (read(w.cond_buf) == 0) {
      decide(trips);
      return;
    }
    if (trips >= max_trips) throw runaway_loop(c, rank, max_trips);
    run(w.body, true);
  }
}

}  // namespace thunky
