// Lowering: inline `call`s (views compose, scratch is hoisted into the
// outer allocation plan, tokens are renamed per call instance), bind every
// ref to its buffer, and give every command its id in the lowered schedule.
#pragma once

#include "core/schedule.h"

namespace thunky {

// The most commands a program may lower to (calls inlined): 4,194,304,
// about 1.7 GB of commands. Checked before a call's copy is made.
constexpr int64_t kMaxLoweredCommands = int64_t{1} << 22;
// Calls nested in calls: a chain deeper than this is refused before lowering follows it.
constexpr int kMaxCallDepth = 32;

// Throws ThunkyError naming the JSON pointer of the offending field.
void lower(Program& p);

}  // namespace thunky
