#include "sim/maxmin.h"

#include <algorithm>

namespace thunky::sim {

std::vector<double> max_min_rates(const std::vector<double>& capacity, const std::vector<MaxMinFlow>& flows) {
  const size_t nf = flows.size();
  std::vector<double> rate(nf, 0.0);
  std::vector<bool> frozen(nf, false);
  std::vector<double> left = capacity;
  std::vector<int> users(capacity.size(), 0);  // unfrozen flows per link
  std::vector<std::vector<int>> on_link(capacity.size());
  size_t active = 0;
  for (size_t f = 0; f < nf; ++f) {
    if (flows[f].links.empty()) {
      rate[f] = flows[f].bound;
      frozen[f] = true;
      continue;
    }
    ++active;
    for (int l : flows[f].links) {
      ++users[l];
      on_link[l].push_back(static_cast<int>(f));
    }
  }
  while (active > 0) {
    // The tightest constraint: a link's equal share, or a flow's bound.
    double share = std::numeric_limits<double>::infinity();
    for (size_t l = 0; l < left.size(); ++l)
      if (users[l] > 0) share = std::min(share, std::max(0.0, left[l]) / users[l]);
    for (size_t f = 0; f < nf; ++f)
      if (!frozen[f]) share = std::min(share, flows[f].bound);
    // Freeze every flow held at that rate: those on a saturated link and
    // those at their bound.
    const double eps = share * 1e-12;
    std::vector<int> freeze;
    for (size_t l = 0; l < left.size(); ++l)
      if (users[l] > 0 && std::max(0.0, left[l]) / users[l] <= share + eps)
        for (int f : on_link[l])
          if (!frozen[f]) freeze.push_back(f);
    for (size_t f = 0; f < nf; ++f)
      if (!frozen[f] && flows[f].bound <= share + eps) freeze.push_back(static_cast<int>(f));
    std::sort(freeze.begin(), freeze.end());
    freeze.erase(std::unique(freeze.begin(), freeze.end()), freeze.end());
    for (int f : freeze) {
      frozen[f] = true;
      rate[f] = share;
      --active;
      for (int l : flows[f].links) {
        left[l] -= share;
        --users[l];
      }
    }
  }
  return rate;
}

}  // namespace thunky::sim
