// What every consumer of a collective needs to know about it, in one
// place: a collective_permute's pairs, and the signature that every member
// of a communicator must agree on. The validator, the simulator and both
// backends read these; none keeps a switch of its own for them. (The refs
// a command reads and writes come from its op's description:
// for_each_use in core/schedule.h.)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ref.h"
#include "core/schedule.h"

namespace thunky {

// A collective_permute's (source, target) pairs by position among its n
// participants: `pairs` as written, or every i sending to (i + shift) mod n.
std::vector<std::pair<int64_t, int64_t>> permute_pairs(const Command& c, int64_t n);
// Where position `source` sends under a permute's `shift` (without
// overflow for any shift).
inline int64_t shift_target(const Command& c, int64_t source, int64_t n) {
  return floor_mod(source + floor_mod(*c.as<CollectivePermute>().shift, n), n);
}

// What every member of a communicator must issue alike, as text: the op,
// both views' dtype and shape, the reduction, and a permute's pairs
// (sorted). Two ranks whose signatures differ deadlock or exchange the
// wrong data.
std::string collective_signature(const Program& p, const Command& c, const View& src, const View& dst, int64_t n);

}  // namespace thunky
