// Which ranks share a timeline: the classes of ranks the simulator
// simulates one rank of (docs/decisions.md, "Ranks are folded into
// classes").
#pragma once

#include "core/schedule.h"
#include "sim/engine.h"
#include "sim/machine.h"
#include "sim/rank_classes.h"

namespace thunky::sim {

// The classes of `p`'s ranks on `m`. A machine whose ranks share a host's
// cores (chip.host_cores) folds nothing: every rank queues for the cores.
RankClasses rank_classes(const Program& p, const Machine& m, const Decisions* decisions);

// Whether one rank's timeline is every rank's (one class).
inline bool ranks_symmetric(const Program& p, const Machine& m, const Decisions* decisions) { return rank_classes(p, m, decisions).count() == 1; }

}  // namespace thunky::sim
