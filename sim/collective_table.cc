#include "sim/collective_table.h"

#include <cstdio>
#include <map>
#include <tuple>

namespace thunky::sim {

std::vector<CollectiveGroup> group_collectives(const std::vector<CollectiveStat>& stats) {
  std::vector<CollectiveGroup> groups;
  std::map<std::tuple<std::string, double, int64_t, std::string>, size_t> index;
  for (const auto& c : stats) {
    auto [it, fresh] = index.try_emplace({c.op, c.bytes, c.ranks, c.algorithm}, groups.size());
    if (fresh) groups.push_back({c, 0, c.seconds, c.seconds, 0});
    CollectiveGroup& g = groups[it->second];
    ++g.count;
    g.min_s = std::min(g.min_s, c.seconds);
    g.max_s = std::max(g.max_s, c.seconds);
    g.total_s += c.seconds;
  }
  return groups;
}

void print_collective_table(const std::vector<CollectiveStat>& stats, bool per_instance, std::ostream& os) {
  if (stats.empty()) return;
  char line[320];
  auto algorithm = [](const CollectiveStat& c) { return c.algorithm.empty() ? "ideal" : c.algorithm.c_str(); };
  if (per_instance) {
    std::snprintf(line, sizeof line, "%-34s %-20s %6s %14s %12s %12s  %s\n", "collective (rank 0)", "op", "ranks", "time_us", "algbw_GB/s",
                  "busbw_GB/s", "algorithm");
    os << line;
    for (const auto& c : stats) {
      std::snprintf(line, sizeof line, "%-34s %-20s %6lld %14.3f %12.2f %12.2f  %s\n", c.id.c_str(), c.op.c_str(), static_cast<long long>(c.ranks),
                    c.seconds * 1e6, c.alg_bw / 1e9, c.bus_bw / 1e9, algorithm(c));
      os << line;
    }
    return;
  }
  // Grouped: the time is the mean of the instances (their spread comes from
  // what runs beside them), the bandwidths those of the mean.
  std::snprintf(line, sizeof line, "%-34s %-20s %6s %14s %7s %14s %14s %12s %12s  %s\n", "collectives (rank 0), first", "op", "ranks", "bytes", "count",
                "mean_us", "min-max_us", "algbw_GB/s", "busbw_GB/s", "algorithm");
  os << line;
  for (const auto& g : group_collectives(stats)) {
    const CollectiveStat& c = g.first;
    const double mean = g.total_s / static_cast<double>(g.count);
    const double scale = c.seconds > 0 ? c.seconds / mean : 0;  // bandwidths at the mean time
    char spread[64];
    std::snprintf(spread, sizeof spread, "%.3f-%.3f", g.min_s * 1e6, g.max_s * 1e6);
    std::snprintf(line, sizeof line, "%-34s %-20s %6lld %14.0f %7lld %14.3f %14s %12.2f %12.2f  %s\n", c.id.c_str(), c.op.c_str(),
                  static_cast<long long>(c.ranks), c.bytes, static_cast<long long>(g.count), mean * 1e6, spread, c.alg_bw * scale / 1e9,
                  c.bus_bw * scale / 1e9, algorithm(c));
    os << line;
  }
}

}  // namespace thunky::sim
