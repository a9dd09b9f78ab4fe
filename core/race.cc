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

void HappensBefore::join(int slot, const uint32_t* other, size_t n) {
  Clock& c = clocks_[slot];
  if (c.size() < n) c.resize(n, 0);
  for (size_t i = 0; i < n; ++i) c[i] = std::max(c[i], other[i]);
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

void RaceDetector::access(const Access& a, const HappensBefore& hb, const std::vector<BranchNode>& branches,
                          std::vector<RaceReport>& out, size_t max_reports) {
  if (a.hi <= a.lo) return;
  auto& lists = per_buffer_[a.buffer];
  if (lists.size() <= static_cast<size_t>(a.slot)) lists.resize(static_cast<size_t>(a.slot) + 1);
  const Clock& known = hb.clock(a.slot);
  const size_t reported = out.size();
  for (size_t s = 0; s < lists.size(); ++s) {
    if (s == static_cast<size_t>(a.slot)) continue;
    const std::vector<Access>& items = lists[s].items;
    const uint32_t upto = s < known.size() ? known[s] : 0;
    // Newest first, down to the entries `a`'s slot has already joined.
    for (size_t i = items.size(); i-- > 0;) {
      const Access& e = items[i];
      if (e.seq <= upto) break;
      if ((!e.write && !a.write) || e.hi <= a.lo || a.hi <= e.lo) continue;
      if (e.branch >= 0 && a.branch >= 0 && mutually_exclusive(branches, e.branch, a.branch)) continue;
      if (out.size() < max_reports) out.push_back({e, a});
    }
  }
  if (out.size() - reported > 1)
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(reported), out.end(),
                     [](const RaceReport& x, const RaceReport& y) { return x.first.command < y.first.command; });
  List& own = lists[static_cast<size_t>(a.slot)];
  // An earlier access on the same slot that `a` covers completely, with a at
  // least as strong (a write covers a read), adds nothing for the future.
  if (!own.items.empty()) {
    Access& last = own.items.back();
    if (last.lo >= a.lo && last.hi <= a.hi && (a.write || !last.write) && last.branch == a.branch) {
      last = a;
      return;
    }
  }
  own.items.push_back(a);
  if (own.items.size() >= own.prune_at) {
    // Entries every slot has joined can race with nothing to come.
    const uint32_t floor = hb.min_known(a.slot);
    auto keep = std::find_if(own.items.begin(), own.items.end(), [&](const Access& e) { return e.seq > floor; });
    own.items.erase(own.items.begin(), keep);
    own.prune_at = std::max<size_t>(64, 2 * own.items.size());
  }
}

}  // namespace thunky
