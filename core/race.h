// Happens-before tracking with vector clocks over stream slots, and the
// static race detector built on it: two accesses of one rank, on different
// streams, unordered, overlapping in bytes, at least one a write.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace thunky {

using Clock = std::vector<uint32_t>;

struct Access {
  int buffer = -1;
  uint64_t lo = 0, hi = 0;  // byte range [lo, hi)
  bool write = false;
  int slot = 0;
  uint32_t seq = 0;   // position of the command on its slot (1-based)
  int command = -1;   // caller's command index
  int branch = -1;    // innermost branch node (for mutually exclusive branches), -1 = none
};

struct RaceReport {
  Access first, second;  // first issued earlier
};

class HappensBefore {
 public:
  // A new stream slot whose clock starts as a copy of `from`'s (or empty).
  int new_slot(int from = -1);
  int slots() const { return static_cast<int>(clocks_.size()); }
  // Issues one command on `slot`; returns its sequence number there.
  uint32_t tick(int slot);
  const Clock& clock(int slot) const { return clocks_[slot]; }
  void join(int slot, const Clock& other) { join(slot, other.data(), other.size()); }
  void join(int slot, const uint32_t* other, size_t n);
  void set_component(int slot, int component, uint32_t value);
  bool ordered_before(const Access& a, int slot) const {
    const Clock& c = clocks_[slot];
    return a.slot == slot || (static_cast<size_t>(a.slot) < c.size() && a.seq <= c[a.slot]);
  }
  // Least knowledge any slot has of `component` (a lower bound for the future).
  uint32_t min_known(int component) const;

 private:
  std::vector<Clock> clocks_;
};

// Branch nodes: accesses under different branches of one cond/switch never
// both happen.
struct BranchNode {
  int parent = -1;
  int cond = -1;  // caller's id of the cond/switch
  int branch = 0;
};
bool mutually_exclusive(const std::vector<BranchNode>& nodes, int a, int b);

// Records accesses per buffer and slot, and reports unordered conflicting
// pairs. Each slot's accesses to a buffer are kept as disjoint byte
// segments holding the accesses that can still race there (a later access
// of the slot replaces one it covers, a write covering a read), so an
// access is checked against the segments it overlaps, not against every
// earlier access: n disjoint accesses on two unordered streams cost
// O(n log n), not O(n^2).
class RaceDetector {
 public:
  explicit RaceDetector(size_t buffers) : per_buffer_(buffers) {}
  // Checks `a` (on a.slot, issued now) against earlier accesses, appends
  // conflicts to `out` (earliest command first, each earlier access once),
  // then records it. Once `out` holds max_reports, it does nothing.
  void access(const Access& a, const HappensBefore& hb, const std::vector<BranchNode>& branches,
              std::vector<RaceReport>& out, size_t max_reports);

 private:
  struct Segment {
    uint64_t hi = 0;
    std::vector<Access> accesses;  // usually one; more when branches keep both
  };
  // One slot's segments of one buffer, keyed by their first byte.
  struct Slot {
    std::map<uint64_t, Segment> segments;
    uint32_t newest = 0;      // the largest seq recorded
    size_t prune_at = 64;     // segment count that triggers dropping joined accesses
  };
  void record(Slot& slot, const Access& a, const HappensBefore& hb);
  static void prune(Slot& slot, uint32_t floor);
  std::vector<std::vector<Slot>> per_buffer_;  // [buffer][slot]
};

}  // namespace thunky
