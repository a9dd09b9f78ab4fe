#include "sim/rendezvous.h"

#include <algorithm>

namespace thunky::sim::internal {

namespace {

// The place of `rank` in the sorted `members`, which hold it: a binary
// search without branches (a conditional move a step), as every arrival
// asks it and a member's place is as good as random to a branch predictor.
size_t place_of(const std::vector<int>& members, int64_t rank) {
  const int* at = members.data();
  for (size_t n = members.size(); n > 1;) {
    const size_t half = n / 2;
    at = at[half] <= rank ? at + half : at;
    n -= half;
  }
  return static_cast<size_t>(at - members.data());
}

}  // namespace

SetId Rendezvous::intern(std::vector<int> members) {
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  auto [it, fresh] = ids_.try_emplace(members, SetId(sets_.size()));
  if (fresh) {
    Set& s = sets_.emplace_back();
    s.reached.assign(members.size(), 0);
    s.first = members.front();
    s.step = members.size() > 1 ? members[1] - members[0] : 1;
    for (size_t k = 1; k < members.size() && s.step > 0; ++k)
      if (members[k] - members[k - 1] != s.step) s.step = 0;
    s.members = std::move(members);
  }
  return it->second;
}

std::optional<Rendezvous::Met> Rendezvous::arrive(SetId set, int64_t rank, int stream, double now) {
  Set& s = sets_[set.index()];
  const size_t n = s.members.size();
  const size_t member = s.step > 0 ? static_cast<size_t>((rank - s.first) / s.step) : place_of(s.members, rank);
  const size_t k = static_cast<size_t>(s.reached[member]++ - s.first_open);
  while (s.open.size() <= k) {
    Waiting& w = s.open.emplace_back();
    w.by_member.streams.assign(n, -1);
    w.by_member.since.assign(n, 0);
  }
  Waiting& w = s.open[k];
  w.by_member.streams[member] = stream;
  w.by_member.since[member] = now;
  if (++w.arrived < n) return std::nullopt;
  // The last member of the first open launch (k is 0: see Set).
  Met met = std::move(w.by_member);
  s.open.pop_front();
  ++s.first_open;
  return met;
}

}  // namespace thunky::sim::internal
