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

namespace {

bool same(const Access& x, const Access& y) { return x.slot == y.slot && x.seq == y.seq; }

// What a segment of `a`'s slot keeps once `a` covers it: `a`, plus each
// earlier access that `a` does not supersede (a read under a write, or an
// access of another branch).
bool supersedes(const Access& a, const Access& e) { return (a.write || !e.write) && e.branch == a.branch; }


}  // namespace

void RaceDetector::access(const Access& a, const HappensBefore& hb, const std::vector<BranchNode>& branches,
                          std::vector<RaceReport>& out, size_t max_reports) {
  if (a.hi <= a.lo || out.size() >= max_reports) return;
  auto& slots = per_buffer_[a.buffer];
  if (slots.size() <= static_cast<size_t>(a.slot)) slots.resize(static_cast<size_t>(a.slot) + 1);
  const Clock& known = hb.clock(a.slot);
  const size_t reported = out.size();
  for (size_t s = 0; s < slots.size(); ++s) {
    if (s == static_cast<size_t>(a.slot)) continue;
    const Slot& other = slots[s];
    const uint32_t upto = s < known.size() ? known[s] : 0;
    if (other.newest <= upto) continue;  // `a`'s slot has joined all of it
    auto it = other.segments.upper_bound(a.lo);
    if (it != other.segments.begin() && std::prev(it)->second.hi > a.lo) --it;
    for (; it != other.segments.end() && it->first < a.hi && out.size() < max_reports; ++it)
      for (const Access& e : it->second.accesses) {
        if (e.seq <= upto || (!e.write && !a.write)) continue;
        if (e.branch >= 0 && a.branch >= 0 && mutually_exclusive(branches, e.branch, a.branch)) continue;
        const bool seen = std::any_of(out.begin() + static_cast<std::ptrdiff_t>(reported), out.end(),
                                      [&](const RaceReport& r) { return same(r.first, e); });
        if (!seen && out.size() < max_reports) out.push_back({e, a});
      }
  }
  if (out.size() - reported > 1)
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(reported), out.end(),
                     [](const RaceReport& x, const RaceReport& y) { return x.first.command < y.first.command; });
  record(slots[static_cast<size_t>(a.slot)], a, hb);
}

void RaceDetector::record(Slot& slot, const Access& a, const HappensBefore& hb) {
  auto& segs = slot.segments;
  slot.newest = std::max(slot.newest, a.seq);
  // The common cases first: the same bytes again, or bytes past the end.
  auto same_range = segs.find(a.lo);
  if (same_range != segs.end() && same_range->second.hi == a.hi) {
    auto& accesses = same_range->second.accesses;
    std::erase_if(accesses, [&](const Access& e) { return supersedes(a, e); });
    accesses.push_back(a);
    return;
  }
  if (segs.empty() || std::prev(segs.end())->second.hi <= a.lo) {
    segs.emplace_hint(segs.end(), a.lo, Segment{a.hi, {a}});
    if (segs.size() >= slot.prune_at) prune(slot, hb.min_known(a.slot));
    return;
  }
  // Split the segments that straddle a.lo or a.hi, so that [a.lo, a.hi) is
  // made of whole segments and gaps.
  auto split = [&](uint64_t at) {
    auto it = segs.upper_bound(at);
    if (it == segs.begin()) return;
    --it;
    if (it->first < at && at < it->second.hi) {
      Segment right{it->second.hi, it->second.accesses};
      it->second.hi = at;
      segs.emplace(at, std::move(right));
    }
  };
  split(a.lo);
  split(a.hi);
  // Update the segments inside [a.lo, a.hi) in place and fill the gaps.
  uint64_t at = a.lo;
  for (auto it = segs.lower_bound(a.lo); it != segs.end() && it->first < a.hi; ++it) {
    if (it->first > at) it = segs.emplace_hint(it, at, Segment{it->first, {a}});
    else {
      std::erase_if(it->second.accesses, [&](const Access& e) { return supersedes(a, e); });
      it->second.accesses.push_back(a);
    }
    at = it->second.hi;
  }
  if (at < a.hi) segs.emplace_hint(segs.end(), at, Segment{a.hi, {a}});
  // Adjacent segments that now hold `a` alone become one.
  auto alone = [&](const Segment& g) { return g.accesses.size() == 1 && same(g.accesses[0], a); };
  auto it = segs.lower_bound(a.lo);
  while (it != segs.end() && it->first < a.hi) {
    auto next = std::next(it);
    if (next != segs.end() && next->first == it->second.hi && next->first <= a.hi && alone(it->second) && alone(next->second)) {
      it->second.hi = next->second.hi;
      segs.erase(next);
    } else {
      it = next;
    }
  }
  if (segs.size() >= slot.prune_at) prune(slot, hb.min_known(a.slot));
}

// Accesses every slot has joined (seq <= floor) can race with nothing to come.
void RaceDetector::prune(Slot& slot, uint32_t floor) {
  auto& segs = slot.segments;
  for (auto s = segs.begin(); s != segs.end();) {
    std::erase_if(s->second.accesses, [&](const Access& e) { return e.seq <= floor; });
    s = s->second.accesses.empty() ? segs.erase(s) : std::next(s);
  }
  slot.prune_at = std::max<size_t>(64, 2 * segs.size());
}

}  // namespace thunky
