// When one rank's timeline is every rank's: the condition under which the
// simulator simulates rank 0 alone (docs/decisions.md, "Symmetric ranks are
// simulated once").
#pragma once

#include "core/schedule.h"
#include "sim/engine.h"
#include "sim/machine.h"

namespace thunky::sim {

// Whether every rank of `p` has the same timeline on `m`, so that simulating
// one rank predicts them all: every axis is a closed ring, a switch or a
// hierarchy (translations along an axis map its links onto its links); no
// command's work depends on the rank; collectives have no axis index groups
// and shifts no explicit pairs or second axis; and the control-flow
// decisions (if any) are the same on every rank.
bool ranks_symmetric(const Program& p, const Machine& m, const Decisions* decisions);

}  // namespace thunky::sim
