// Typed ids of the simulator's parts: an index that says what it numbers,
// so that a link's id passed where a flow's is wanted does not compile.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>

namespace thunky::sim::internal {

template <typename Tag>
struct Id {
  int32_t v = -1;  // -1: none
  constexpr Id() = default;
  constexpr explicit Id(int32_t value) : v(value) {}
  constexpr explicit Id(size_t value) : v(static_cast<int32_t>(value)) {}
  constexpr size_t index() const { return static_cast<size_t>(v); }
  constexpr bool valid() const { return v >= 0; }
  auto operator<=>(const Id&) const = default;
};

using LinkId = Id<struct LinkTag>;  // a link of the network (its class, folded)
using FlowId = Id<struct FlowTag>;  // a flow on links
using CommId = Id<struct CommTag>;  // a running collective: the activity its flows belong to
using SetId = Id<struct SetTag>;    // a set of ranks that meet in a rendezvous
using KernelId = Id<struct KernelTag>;  // a kernel sharing its rank's throughput

}  // namespace thunky::sim::internal
