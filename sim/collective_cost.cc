#include "sim/collective_cost.h"

#include "sim/nccl_model.h"

#include <algorithm>

namespace thunky::sim {

namespace {

double combine(double latency, double transfer, bool additive) {
  return additive ? latency + transfer : std::max(latency, transfer);
}

// Multiplier of the AllGather bandwidth term for each op.
double op_volume(Op op) {
  switch (collective_kind(op)) {
    case CollectiveKind::all_reduce: return 2.0;
    case CollectiveKind::all_to_all: return 0.25;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::collective_permute: return 1.0;
  }
  return 1.0;
}

// n ranks on one switch of egress bandwidth B.
double switch_seconds(Op op, int64_t n, double bytes, double egress, double latency, bool additive) {
  if (n <= 1) return 0;
  const double frac = static_cast<double>(n - 1) / static_cast<double>(n);
  const double volume = op == Op::all_reduce ? 2.0 : 1.0;
  return combine(latency * volume, volume * frac * bytes / egress, additive);
}

}  // namespace

double collective_seconds(Op op, const std::vector<AxisSpan>& axes, double bytes, bool additive) {
  int64_t n = 1;
  for (const auto& a : axes) n *= a.ranks;
  if (n <= 1 || axes.empty()) return 0;
  const AxisLinks& first = *axes.front().links;
  if (first.topology == AxisLinks::Topology::switch_) {
    return switch_seconds(op, n, bytes, first.egress_bandwidth, first.latency_s, additive);
  }
  if (first.topology == AxisLinks::Topology::hierarchical) {
    // Two phases: among the ranks of a group over the switch, and across
    // groups over the NICs, where each rank's NIC carries 1/g of the
    // off-group data.
    const int64_t g = std::min(first.group_size, n);
    // A partial last group is a group: 12 ranks in groups of 8 span 2 nodes.
    const int64_t groups = (n + g - 1) / g;
    double inner = switch_seconds(op, g, bytes, first.egress_bandwidth, first.latency_s, additive);
    if (groups <= 1) return inner;
    const double frac = static_cast<double>(groups - 1) / static_cast<double>(groups);
    const double volume = op == Op::all_reduce ? 2.0 : 1.0;
    double outer = combine(first.nic_latency_s * volume, volume * frac * bytes / (static_cast<double>(g) * first.nic_bandwidth), additive);
    return inner + outer;
  }
  // Ring axes. The bandwidth term divides by the number of axes used at once;
  // the latency crosses every axis.
  const double k = static_cast<double>(axes.size());
  double w = 0, latency = 0;
  bool open = false;
  for (const auto& a : axes) {
    if (a.ranks <= 1) continue;
    const double wa = 2.0 * a.links->link_bandwidth;
    w = w == 0 ? wa : std::min(w, wa);
    if (!a.links->wraparound) open = true;
    latency += a.links->wraparound ? static_cast<double>(a.ranks) / 2.0 * a.links->hop_latency_s
                                   : static_cast<double>(a.ranks - 1) * a.links->hop_latency_s;
  }
  if (w == 0) return 0;
  const double volume = op_volume(op);
  double transfer;
  if (open) {
    // The farthest shard crosses n-1 links one way: (n-1) (V/n) / (W/2).
    transfer = static_cast<double>(n - 1) * (bytes / static_cast<double>(n)) / (w / 2.0) / k;
  } else {
    transfer = bytes / (k * w);
  }
  if (op == Op::all_reduce) return 2.0 * combine(latency, transfer, additive);
  return combine(latency, transfer * (op == Op::all_to_all ? volume : 1.0), additive);
}

CollectiveCost collective_cost(Op op, const std::vector<AxisSpan>& axes, double bytes) {
  int64_t n = 1;
  for (const auto& a : axes) n *= a.ranks;
  if (n <= 1 || axes.empty()) return {};
  const AxisLinks& first = *axes.front().links;
  if (first.nccl) {
    const NcclChoice c = nccl_collective(op, first, n, bytes);
    return {c.latency_s, c.transfer_s, true, c.algo, c.proto};
  }
  // The ideal formulas: the latency term alone, and what the bytes add.
  const double latency = collective_seconds(op, axes, 0, false);
  return {latency, std::max(0.0, collective_seconds(op, axes, bytes, true) - latency)};
}

std::string CollectiveCost::algorithm() const {
  if (!nccl) return "";
  return nccl_pick_name(algo, proto);
}

double permute_seconds(const AxisLinks& links, int64_t hops, double bytes, bool additive) {
  if (hops <= 0) return 0;
  if (links.topology == AxisLinks::Topology::ring)
    return combine(static_cast<double>(hops) * links.hop_latency_s, bytes / links.link_bandwidth, additive);
  return combine(links.latency_s, bytes / links.egress_bandwidth, additive);
}

double bus_factor(Op op, int64_t n) {
  if (n <= 1) return 0;
  const double frac = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (collective_kind(op)) {
    case CollectiveKind::all_reduce: return 2.0 * frac;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all: return frac;
    case CollectiveKind::collective_permute: return 1.0;
  }
  return 1.0;
}

}  // namespace thunky::sim
