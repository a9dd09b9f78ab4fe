// A timeline a person can read in a browser: one row per rank, one lane per
// stream, commands coloured by kind (hover for id, bytes and flops), token
// edges as arrows.
#pragma once

#include <string>

#include "traces/report.h"

namespace thunky {

std::string timeline_svg(const Report& r);

}  // namespace thunky
