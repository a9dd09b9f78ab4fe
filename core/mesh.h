// Ranks of a mesh (row-major, last axis fastest) and the participants of a
// collective over some of its axes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/schedule.h"

namespace thunky {

std::vector<int64_t> rank_coords(const Mesh& m, int64_t rank);
int64_t rank_of(const Mesh& m, const std::vector<int64_t>& coords);
std::string rank_label(const Mesh& m, int64_t rank);  // "rank 3 (x=1, y=1)"

// Participants of one collective as seen from `rank`: the global ranks in
// collective order and this rank's position among them.
struct Participants {
  std::vector<int> ranks;  // empty where the members were not asked for
  int64_t size = 0;        // how many ranks the communicator has
  int position = 0;        // this rank's place among them
};

// axes: the collective's axis names; groups (or null): axis_index_groups over the
// combined (row-major, first axis slowest) index. Throws ThunkyError with
// an empty pointer on unknown axes or bad groups.
// With `members` false and no groups, the members are not listed: the
// size and position cost O(axes), not O(ranks).
Participants participants(const Mesh& m, int64_t rank, const std::vector<std::string>& axes,
                          const std::vector<std::vector<int64_t>>* groups, bool members = true);

// The ranks that start a collective (or a collective_group of `members`)
// together with `rank`: its participants, closed over every member, so a
// group of collectives over different axes (a row shift and a column
// shift) joins every rank it connects. Sorted ascending.
std::vector<int> launch_members(const Mesh& m, int64_t rank, const std::vector<const Command*>& members);

}  // namespace thunky
