// Links as the machine model lays them out (classes under folding), and
// when a collective's flows next change (sim/network.h shares the links).
#include "sim/engine_internal.h"

namespace thunky::sim::internal {

const AxisLinks& Engine::axis_links(const std::string& axis) const {
  const auto dim = p_.mesh.axis(axis);
  const AxisLinks* a = dim ? links_by_dim_[*dim] : m_.axis(axis);
  if (!a) throw MachineError("/axes", "machine '" + m_.name + "' models no axis '" + axis + "' (and has no \"*\" entry)");
  return *a;
}

int64_t Engine::translate(int64_t rank, int64_t by, int sign) const {
  int64_t r = 0;
  for (size_t d = 0; d < strides_.size(); ++d) r += floor_mod(coord(rank, static_cast<int>(d)) + sign * coord(by, static_cast<int>(d)), p_.mesh.shape[d]) * strides_[d];
  return r;
}

uint64_t Engine::link_class(uint64_t key) const {
  const auto kind = static_cast<LinkKey::Kind>(key >> 60);
  const int64_t from = static_cast<int64_t>((key >> 30) & 0x3fffffff), to = static_cast<int64_t>(key & 0x3fffffff);
  if (kind == LinkKey::ingress || kind == LinkKey::nic_in) return LinkKey::make(kind, 0, representative(to));
  const int64_t rep = representative(from);
  if (kind != LinkKey::ring) return LinkKey::make(kind, rep, 0);
  // The translation that takes `from` to its representative takes `to` along.
  const int64_t by = rep == 0 ? from : translate(from, rep, -1);
  return LinkKey::make(kind, rep, translate(to, by, -1));
}

uint64_t Engine::link_at(uint64_t key, int64_t rank) const {
  const auto kind = static_cast<LinkKey::Kind>(key >> 60);
  const int64_t rep = static_cast<int64_t>((key >> 30) & 0x3fffffff);
  if (kind == LinkKey::ring) return LinkKey::make(kind, rank, translate(static_cast<int64_t>(key & 0x3fffffff), translate(rank, rep, -1), 1));
  if (kind == LinkKey::ingress || kind == LinkKey::nic_in) return LinkKey::make(kind, 0, rank);
  return LinkKey::make(kind, rank, 0);
}

int64_t Engine::neighbour(int64_t rank, int dim, int dir) const {
  const int64_t n = p_.mesh.shape[dim], c = coord(rank, dim);
  return rank + ((c + dir + n) % n - c) * strides_[dim];
}

LinkId Engine::ring_link(int64_t from, int dim, int dir, const AxisLinks& a) {
  return link(LinkKey::make(LinkKey::ring, from, neighbour(from, dim, dir)), a.link_bandwidth);
}

void Engine::reschedule_comm(int a) {
  Comm& act = comms_[a];
  if (act.finished) return;
  ++act.version;
  double end = INFINITY;
  for (FlowId f : act.flows) {
    const Flow& fl = network_.flow(f);
    if (fl.done || !fl.active || fl.rate <= 0) continue;
    // A flow too slow to end in a double's range (a link of 1e-300 B/s)
    // still ends past the simulated-time limit, which names the cause.
    end = std::min(end, std::min(fl.last + fl.remaining / fl.rate, 2 * kMaxSimulatedSeconds));
  }
  if (end < INFINITY) queue_.push({end}, SimEvent{SimEvent::Kind::comm, a, act.version}.pack());
}

}  // namespace thunky::sim::internal
