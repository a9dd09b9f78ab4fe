// What an event of the simulator's queue is about, packed into the queue's
// 64-bit payload: its kind, what it concerns (`id`), and the version of the
// prediction it was made from (a newer prediction makes it stale). Each
// part of the engine schedules its own kinds.
#pragma once

#include <cstdint>

namespace thunky::sim::internal {

struct SimEvent {
  enum class Kind : uint8_t {
    compute,     // a kernel's predicted end: id a kernel of ComputeShares
    comm,        // a collective's next flow end: id a Comm
    latency,     // a collective's additive latency has passed: id a Comm
    flow_start,  // its flows start moving bytes: id a Comm
    wake,        // a stream goes on after an event's latency: id a Stream
  };
  Kind kind = Kind::compute;
  int32_t id = 0;  // below 2^29
  uint32_t version = 0;
  uint64_t pack() const { return static_cast<uint64_t>(kind) << 61 | static_cast<uint64_t>(id) << 32 | version; }
  static SimEvent unpack(uint64_t p) {
    return {static_cast<Kind>(p >> 61), static_cast<int32_t>((p >> 32) & 0x1fffffff), static_cast<uint32_t>(p & 0xffffffffu)};
  }
};

}  // namespace thunky::sim::internal
