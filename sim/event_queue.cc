#include "sim/event_queue.h"

namespace thunky::sim {

uint64_t EventQueue::push(Time t, uint64_t payload) {
  const uint64_t seq = next_seq_++;
  heap_.push(Entry{t, seq, payload});
  return seq;
}

std::optional<EventQueue::Entry> EventQueue::pop() {
  if (heap_.empty()) return std::nullopt;
  Entry e = heap_.top();
  heap_.pop();
  return e;
}

std::optional<Time> EventQueue::next_time() const {
  if (heap_.empty()) return std::nullopt;
  return heap_.top().time;
}

}  // namespace thunky::sim
