// Bytes moved and flops of one command on one rank: shared by the
// simulator's cost model and the reports of both tools.
#pragma once

#include <cstdint>

#include "core/validate.h"

namespace thunky {

struct Work {
  int64_t bytes = 0;  // bytes read plus bytes written
  double flops = 0;
};

Work command_work(const Program& p, const Command& c, const RankCtx& ctx);

}  // namespace thunky
