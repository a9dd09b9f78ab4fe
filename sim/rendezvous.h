// The rendezvous: the engine's part where a collective's ranks meet. Each
// rank's launches with one set of members are numbered in the order it
// reaches them; a launch starts when every member has reached it. It owns
// the member sets, each rank's count of launches per set, and the launches
// still waiting for members. It has no events of its own: the issuer hands
// it each arrival, at the engine's clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace thunky::sim::internal {

class Rendezvous {
 public:
  // The id of the set of ranks `members` (in any order, repeats allowed).
  int intern(std::vector<int> members);
  size_t size(int set) const { return sizes_[static_cast<size_t>(set)]; }

  // A launch every member has reached: each member's stream, in rank
  // order, and when it arrived.
  struct Met {
    std::vector<int> streams;
    std::vector<double> since;
  };
  // `rank`'s stream `stream` reaches its next launch with member set `set`
  // at `now`; the launch, once this was its last member.
  std::optional<Met> arrive(int set, int64_t rank, int stream, double now);

 private:
  struct Waiting {
    std::vector<std::pair<int64_t, int>> arrived;  // (rank, stream)
    std::vector<double> since;
  };
  std::map<std::vector<int>, int> sets_;
  std::vector<size_t> sizes_;
  std::unordered_map<uint64_t, uint64_t> launches_;  // (set, rank) -> launches reached
  std::unordered_map<uint64_t, Waiting> waiting_;    // (set, launch) -> its members so far; erased once met
};

}  // namespace thunky::sim::internal
