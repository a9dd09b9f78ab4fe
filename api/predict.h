// Predicting a loaded schedule: thunky-sim and the C++ API both go
// through here, so both resolve data-dependent control flow the same way.
#pragma once

#include "core/schedule.h"
#include "core/status.h"
#include "sim/engine.h"
#include "sim/machine.h"

namespace thunky {

// Simulates `p` on `m`. Control flow without hints (a cond's `taken`, a
// switch's `branch`, a while's `trip_count`) is resolved first by running
// the schedule once on the cpu backend, the functional model.
Expected<sim::SimResult> predict(const Program& p, const sim::Machine& m, const sim::SimOptions& options);

}  // namespace thunky
