// Max-min fair sharing of link bandwidth (progressive filling): every flow
// crossing a set of directed links gets the largest rate such that no link
// is over capacity and no flow could go faster without slowing a flow that
// is no faster than it. The simulator re-solves at every start and end.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace thunky::sim {

struct MaxMinFlow {
  std::vector<int> links;  // indices into the capacity vector
  double bound = std::numeric_limits<double>::infinity();  // the flow's own rate limit
};

// Returns one rate per flow (bytes/s). A flow that crosses no link gets its bound
// (infinity when unbounded).
std::vector<double> max_min_rates(const std::vector<double>& capacity, const std::vector<MaxMinFlow>& flows);

}  // namespace thunky::sim
