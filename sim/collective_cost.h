// Closed-form collective times (docs/machines.md, "The cost model"): ring axes with and without
// wraparound, several axes at once, NVLink switches and hierarchical
// clusters, under the floor or the additive latency model; and the
// algorithm / bus bandwidths nccl-tests reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "sim/machine.h"

namespace thunky::sim {

// One axis a collective runs over: its links and how many ranks of the
// collective lie along it.
struct AxisSpan {
  const AxisLinks* links = nullptr;
  int64_t ranks = 1;
};

// Seconds for one collective alone on an idle machine. `bytes` is V of
// the ideal formulas: the gathered result (all_gather), the unreduced input
// (reduce_scatter), the array (all_reduce, all_to_all) per device.
double collective_seconds(Op op, const std::vector<AxisSpan>& axes, double bytes, bool additive);

// A collective_permute pair moving `bytes` over `hops` links of a ring axis
// (or through a switch when the axis is not a ring).
double permute_seconds(const AxisLinks& links, int64_t hops, double bytes, bool additive);

// A collective's price split as the engine runs it: a latency, then a
// transfer (whose rate the links it drives share by max-min), and, under
// the NCCL model, the algorithm and protocol it got ("ring/LL128").
struct CollectiveCost {
  double latency_s = 0, transfer_s = 0;
  bool nccl = false;  // priced by the NCCL model, which chose:
  NcclAlgo algo = NcclAlgo::ring;
  NcclProto proto = NcclProto::simple;
  std::string algorithm() const;  // "ring/LL128", or "" under the ideal formulas
};
// The axes' collective model decides: the ideal formulas, or NCCL's
// (nccl_model.h) when the first axis says "collective_model": "nccl".
CollectiveCost collective_cost(Op op, const std::vector<AxisSpan>& axes, double bytes);

// nccl-tests' convention: algBw = bytes / time; busBw = algBw * factor with
// factor (n-1)/n for all_gather, reduce_scatter and all_to_all, 2(n-1)/n
// for all_reduce, 1 for collective_permute.
double bus_factor(Op op, int64_t n);

}  // namespace thunky::sim
