// Lowering: inline `call`s (views compose, scratch is hoisted into the
// outer allocation plan, tokens are renamed per call instance), bind every
// ref to its buffer, and give every command its id in the lowered schedule.
#pragma once

#include "core/schedule.h"

namespace thunky {

// Throws ThunkyError naming the JSON pointer of the offending field.
void lower(Program& p);

}  // namespace thunky
