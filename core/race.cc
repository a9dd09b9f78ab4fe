#include "core/race.h"

#include <algorithm>

namespace thunky {

int HappensBefore::new_slot(int from) {
  Clock c = from >= 0 ? clocks_[from] : Clock{};
  clocks_.push_back(std::move(c));
  return static_cast<int>(clocks_.size()) - 1;
}

uint32_t HappensBefore::tick(int slot) {
  Clock& c = clocks_[slot];
  if (c.size() <= static_cast<size_t>(slot)) c.resize(slot + 1, 0);
  return ++c[slot];
}

void HappensBefore::join(int slot, const Clock& other) {
  Clock& c = clocks_[slot];
  if (c.size() < other.size()) c.resize(other.size(), 0);
  for (size_t i = 0; i < other.size(); ++i) c[i] = std::max(c[i], other[i]);
}

void HappensBefore::set_component(int slot, int component, uint32_t value) {
  Clock& c = clocks_[slot];
  if (c.size() <= static_cast<size_t>(component)) c.resize(component + 1, 0);
  c[component] = value;
}

uint32_t HappensBefore::min_known(int component) const {
  uint32_t m = UINT32_MAX;
  for (const auto& c : clocks_) m = std::min(m, static_cast<size_t>(component) < c.size() ? c[component] : 0u);
  return m;
}

bool mutually_exclusive(const std::vector<BranchNode>& nodes, int a, int b) {
  for (int x = a; x >= 0; x = nodes[x].parent)
    for (int y = b; y >= 0; y = nodes[y].parent)
      if (nodes[x].cond == nodes[y].cond && nodes[x].branch != nodes[y].branch) return true;
  return false;
}

void RaceDetector::prune(std::vector<Access>& list, const HappensBefore& hb) {
  std::vector<uint32_t> known(hb.slots());
  for (int s = 0; s < hb.slots(); ++s) known[s] = hb.min_known(s);
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const Access& a) { return a.seq <= known[a.slot]; }),
             list.end());
}

void RaceDetector::access(const Access& a, const HappensBefore& hb, const std::vector<BranchNode>& branches,
                          std::vector<RaceReport>& out, size_t max_reports) {
  if (a.hi <= a.lo) return;
  auto& list = per_buffer_[a.buffer];
  if (prune_at_.size() != per_buffer_.size()) prune_at_.assign(per_buffer_.size(), 64);
  for (const Access& e : list) {
    if (e.slot == a.slot || (!e.write && !a.write) || e.hi <= a.lo || a.hi <= e.lo) continue;
    if (hb.ordered_before(e, a.slot)) continue;
    if (e.branch >= 0 && a.branch >= 0 && mutually_exclusive(branches, e.branch, a.branch)) continue;
    if (out.size() < max_reports) out.push_back({e, a});
  }
  // An earlier access on the same slot that `a` covers completely, with a at
  // least as strong (a write covers a read), adds nothing for the future.
  if (!list.empty()) {
    Access& last = list.back();
    if (last.slot == a.slot && last.lo >= a.lo && last.hi <= a.hi && (a.write || !last.write) && last.branch == a.branch) {
      last = a;
      return;
    }
  }
  list.push_back(a);
  if (list.size() >= prune_at_[a.buffer]) {
    prune(list, hb);
    prune_at_[a.buffer] = std::max<size_t>(64, 2 * list.size());
  }
}

}  // namespace thunky
