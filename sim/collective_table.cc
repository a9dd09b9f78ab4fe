#include "sim/collective_table.h"

#include <cstdio>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/mesh.h"
#include "sim/collective_cost.h"

namespace thunky::sim {

std::vector<CollectiveStat> collective_stats(const Program& p, const Report& r, int64_t rank) {
  // Each collective of the lowered program by its id (a group's members too).
  std::unordered_map<std::string, const Command*> by_id;
  std::function<void(const Block&)> index = [&](const Block& b) {
    for (const Command& c : b) {
      if (is_collective(c.op())) by_id.emplace(c.id(), &c);
      for_each_sub_block(c, index);
    }
  };
  index(p.program);
  std::vector<CollectiveStat> stats;
  const RankReport* line = nullptr;
  for (const auto& rr : r.ranks)
    if (rr.rank == rank) line = &r.timeline(rr);
  if (!line) return stats;
  for (const OpRecord& op : line->ops) {
    if (!op.collective) continue;
    const std::string id = op.id.str().substr(0, op.id.str().find('#'));  // loop instances: "#k"
    auto it = by_id.find(id);
    if (it == by_id.end()) continue;
    const Collective& k = collective_of(*it->second);
    CollectiveStat s;
    s.rank = rank;
    s.id = op.id.str();
    s.op = op.op.str();
    s.ranks = participants(p.mesh, rank, k.axis, k.groups.get(), /*members=*/false).size;
    s.bytes = static_cast<double>(op.bytes);
    s.seconds = op.end_s - op.transfer_start();
    s.alg_bw = s.seconds > 0 ? s.bytes / s.seconds : 0;
    s.bus_bw = s.alg_bw * bus_factor(it->second->op(), s.ranks);
    s.algorithm = op.algorithm.str();
    if (s.algorithm.empty() && r.source == "exec") s.algorithm.push_back('-');  // a run has no model's algorithm
    stats.push_back(std::move(s));
  }
  return stats;
}

std::vector<CollectiveGroup> group_collectives(const std::vector<CollectiveStat>& stats) {
  std::vector<CollectiveGroup> groups;
  std::map<std::tuple<int64_t, std::string, double, int64_t, std::string>, size_t> index;
  for (const auto& c : stats) {
    auto [it, fresh] = index.try_emplace({c.rank, c.op, c.bytes, c.ranks, c.algorithm}, groups.size());
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
  // One table a rank, in the order the stats list the ranks.
  for (size_t from = 0; from < stats.size();) {
    size_t to = from;
    while (to < stats.size() && stats[to].rank == stats[from].rank) ++to;
    const std::vector<CollectiveStat> mine(stats.begin() + static_cast<std::ptrdiff_t>(from), stats.begin() + static_cast<std::ptrdiff_t>(to));
    // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) of "..." + std::string.
    std::string who = "(rank ";
    who += std::to_string(stats[from].rank);
    who += ')';
    std::string single = "collective ", grouped = "collectives ";
    single += who;
    grouped += who;
    grouped += ", first";
    from = to;
    if (per_instance) {
      std::snprintf(line, sizeof line, "%-34s %-20s %6s %14s %14s %12s %12s  %s\n", single.c_str(), "op", "ranks", "bytes", "time_us",
                    "algbw_GB/s", "busbw_GB/s", "algorithm");
      os << line;
      for (const auto& c : mine) {
        std::snprintf(line, sizeof line, "%-34s %-20s %6lld %14.0f %14.3f %12.2f %12.2f  %s\n", c.id.c_str(), c.op.c_str(), static_cast<long long>(c.ranks),
                      c.bytes, c.seconds * 1e6, c.alg_bw / 1e9, c.bus_bw / 1e9, algorithm(c));
        os << line;
      }
      continue;
    }
    // Grouped: the time is the mean of the instances (their spread comes
    // from what runs beside them), the bandwidths those of the mean.
    std::snprintf(line, sizeof line, "%-34s %-20s %6s %14s %7s %14s %14s %12s %12s  %s\n", grouped.c_str(), "op", "ranks",
                  "bytes", "count", "mean_us", "min-max_us", "algbw_GB/s", "busbw_GB/s", "algorithm");
    os << line;
    for (const auto& g : group_collectives(mine)) {
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
}

}  // namespace thunky::sim
