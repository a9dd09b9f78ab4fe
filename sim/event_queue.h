// The simulator's event queue: a binary heap ordered by (time, sequence
// number), so events at equal times pop in the order they were pushed and
// every run is deterministic. "No event" is an empty optional.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace thunky::sim {

// Simulated time in seconds: the one time type of the simulator.
struct Time {
  double s = 0;
  auto operator<=>(const Time&) const = default;
};

class EventQueue {
 public:
  struct Entry {
    Time time;
    uint64_t seq = 0;
    uint64_t payload = 0;  // the engine's event id
  };

  // Returns the sequence number given to the event.
  uint64_t push(Time t, uint64_t payload);
  std::optional<Entry> pop();
  std::optional<Time> next_time() const;
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

 private:
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace thunky::sim
