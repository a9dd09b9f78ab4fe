// The collective-order check: every member of a communicator must issue
// the same collectives in the same order (op, views, reduction, pairs), or
// the schedule deadlocks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rank_walk.h"

namespace thunky {

// Communicator (its ranks) -> (rank, the sequence that rank issued on it).
using CollectiveSequences = std::map<std::vector<int>, std::vector<std::pair<int64_t, std::vector<CollectiveSig>>>>;

// The first communicator whose members' sequences differ, as a deadlock
// naming both ranks and the first collective where they part.
std::optional<Diagnostic> collective_order(const Program& p, const CollectiveSequences& sequences);

// "0, 1, 2, ... (16 ranks)": up to 8 ranks of a list, for messages.
std::string rank_list(const std::vector<int64_t>& ranks);

}  // namespace thunky
