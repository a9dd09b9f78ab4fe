// thunky-sim's collective table: one row per kind of collective (op,
// bytes, ranks, algorithm) with its count and times, or one per instance.
#pragma once

#include <ostream>
#include <vector>

#include "sim/engine.h"

namespace thunky::sim {

struct CollectiveGroup {
  CollectiveStat first;  // the first instance (its id names the group)
  int64_t count = 0;
  double min_s = 0, max_s = 0, total_s = 0;
};

// Groups one rank's collectives by (op, bytes, ranks, algorithm), in order
// of first appearance.
std::vector<CollectiveGroup> group_collectives(const std::vector<CollectiveStat>& stats);

// The collectives of `rank` in report `r` of schedule `p` (a run's or a
// simulation's timelines), as the simulator tallies rank 0's: time is
// the transfer (from transfer_start_s, when every member had arrived, to
// the end), bytes the report's, bandwidths as nccl-tests gives them.
std::vector<CollectiveStat> collective_stats(const Program& p, const Report& r, int64_t rank);

// The table: grouped, or every instance when `per_instance`; stats of
// several ranks give a table each, in order of rank.
void print_collective_table(const std::vector<CollectiveStat>& stats, bool per_instance, std::ostream& os);

}  // namespace thunky::sim
