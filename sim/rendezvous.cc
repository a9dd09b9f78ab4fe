#include "sim/rendezvous.h"

#include <algorithm>
#include <numeric>

namespace thunky::sim::internal {

int Rendezvous::intern(std::vector<int> members) {
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  auto [it, fresh] = sets_.try_emplace(std::move(members), static_cast<int>(sizes_.size()));
  if (fresh) sizes_.push_back(it->first.size());
  return it->second;
}

std::optional<Rendezvous::Met> Rendezvous::arrive(int set, int64_t rank, int stream, double now) {
  const uint64_t launch = launches_[(static_cast<uint64_t>(set) << 32) | static_cast<uint64_t>(rank)]++;
  const uint64_t key = (static_cast<uint64_t>(set) << 32) | launch;
  Waiting& w = waiting_[key];
  const size_t need = sizes_[static_cast<size_t>(set)];
  if (w.arrived.empty()) {
    w.arrived.reserve(need);
    w.since.reserve(need);
  }
  w.arrived.emplace_back(rank, stream);
  w.since.push_back(now);
  if (w.arrived.size() < need) return std::nullopt;
  std::vector<size_t> order(w.arrived.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w.arrived[a].first < w.arrived[b].first; });
  Met met;
  met.streams.reserve(order.size());
  met.since.reserve(order.size());
  for (size_t k : order) {
    met.streams.push_back(w.arrived[k].second);
    met.since.push_back(w.since[k]);
  }
  waiting_.erase(key);
  return met;
}

}  // namespace thunky::sim::internal
