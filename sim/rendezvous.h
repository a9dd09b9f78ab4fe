// The rendezvous: the engine's part where a collective's ranks meet. Each
// rank's launches with one set of members are numbered in the order it
// reaches them; a launch starts when every member has reached it. It owns
// the member sets, each member's count of launches reached, and the
// launches still waiting for members. It has no events of its own: the
// issuer hands it each arrival, at the engine's clock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "sim/ids.h"

namespace thunky::sim::internal {

class Rendezvous {
 public:
  // The id of the set of ranks `members` (in any order, repeats allowed).
  SetId intern(std::vector<int> members);

  // A launch every member has reached: each member's stream, in rank
  // order, and when it arrived.
  struct Met {
    std::vector<int> streams;
    std::vector<double> since;
  };
  // `rank`'s stream `stream` reaches its next launch with member set `set`
  // at `now`; the launch, once this was its last member.
  std::optional<Met> arrive(SetId set, int64_t rank, int stream, double now);

 private:
  // A launch's members so far, by their place in the set.
  struct Waiting {
    Met by_member;
    size_t arrived = 0;
  };
  // Launches complete in the order they are numbered (a member reaches
  // launch k + 1 only after k), so those still open are a run from
  // `first_open`, and a completed one is always the first.
  struct Set {
    std::vector<int> members;       // sorted
    // Members evenly spaced (an axis of the mesh: first + k * step): a
    // member's place is worked out, not searched for. 0: not so spaced.
    int64_t first = 0, step = 0;
    std::vector<uint64_t> reached;  // by member: launches it has reached
    std::deque<Waiting> open;       // launches first_open, first_open + 1, ...
    uint64_t first_open = 0;
  };
  std::map<std::vector<int>, SetId> ids_;
  std::vector<Set> sets_;
};

}  // namespace thunky::sim::internal
