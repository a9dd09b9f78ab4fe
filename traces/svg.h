// A timeline a person can read in a browser: one row per rank, one lane per
// stream, commands coloured by kind (hover for id, bytes and flops), token
// edges as arrows.
#pragma once

#include <string>

#include "traces/report.h"

namespace thunky {

std::string timeline_svg(const Report& r);

// Predicted against measured on one time axis: for each rank and stream a
// predicted lane (pale bars) above a measured one, the same colour per op
// kind; every command's tooltip gives its id, op, both times and the
// error, and a measured bar whose duration is off the prediction by more
// than `divergent` (a fraction) is outlined in red.
std::string comparison_svg(const Report& predicted, const Report& measured, double divergent = 0.25);

}  // namespace thunky
