#include "traces/compare.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include <cmath>
#include <cstdio>
#include <iomanip>

namespace thunky {

namespace {
std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * f);
  return buf;
}
}  // namespace

Comparison compare_reports(const Report& predicted, const Report& measured) {
  if (predicted.mesh_shape != measured.mesh_shape || predicted.ranks.size() != measured.ranks.size())
    throw ThunkyError("/mesh", "the reports are of different meshes (" + std::to_string(predicted.ranks.size()) + " and " +
                                   std::to_string(measured.ranks.size()) + " ranks)");
  Comparison c;
  c.predicted_makespan_s = predicted.makespan_s;
  c.measured_makespan_s = measured.makespan_s;
  c.makespan_error = measured.makespan_s > 0 ? (predicted.makespan_s - measured.makespan_s) / measured.makespan_s : 0;
  double error_sum = 0;
  size_t errors = 0;
  for (size_t k = 0; k < measured.ranks.size(); ++k) {
    const RankReport& p = predicted.timeline(predicted.ranks[k]);
    const RankReport& m = measured.timeline(measured.ranks[k]);
    c.ranks.push_back({measured.ranks[k].rank, predicted.ranks[k].stats, measured.ranks[k].stats});
    std::unordered_map<Name, const OpRecord*> by_id;  // interned: equal ids are one pointer
    by_id.reserve(p.ops.size());
    for (const auto& op : p.ops) by_id[op.id] = &op;
    for (const auto& op : m.ops) {
      auto it = by_id.find(op.id);
      if (it == by_id.end()) {
        ++c.only_measured;
        continue;
      }
      const double pd = it->second->end_s - it->second->start_s, md = op.end_s - op.start_s;
      c.commands.push_back({measured.ranks[k].rank, &op, pd, md, it->second->interference_s});
      if (md > 0) {
        error_sum += std::abs(pd - md) / md;
        ++errors;
      }
      by_id.erase(it);
    }
    c.only_predicted += by_id.size();
  }
  c.mean_command_error = errors ? error_sum / static_cast<double>(errors) : 0;
  return c;
}

void print_comparison(const Report& predicted, const Report& measured, const Comparison& c, std::ostream& os, size_t max_rows) {
  auto source = [](const Report& r) {
    return r.schedule + " (" + r.source + (r.machine ? ", machine " + *r.machine : "") + (r.backend ? ", backend " + *r.backend : "") + ")";
  };
  char line[256];
  os << "predicted: " << source(predicted) << ": makespan " << us(c.predicted_makespan_s) << " us\n";
  os << "measured:  " << source(measured) << ": makespan " << us(c.measured_makespan_s) << " us\n";
  // A model of GPUs against a run on a CPU (or the reverse) differs by the
  // machines' speeds, not by the model's error: said before the figures.
  auto on_host = [](const Report& r) { return r.source == "sim" ? r.host_cores.has_value() : r.backend.value_or("cpu") == "cpu"; };
  if (on_host(predicted) != on_host(measured)) {
    os << "note: the prediction is for " << (on_host(predicted) ? "a CPU host" : "GPUs or TPUs") << " and the measurement ran on "
       << (on_host(measured) ? "a CPU (backend cpu)" : "GPUs (backend cuda)")
       << ": the errors below are the machines' difference, not the model's; predict with a model of the measuring machine (thunky-calibrate exec --backend "
       << (on_host(measured) ? "cpu" : "cuda") << ") to compare like with like\n";
  }
  os << "makespan error " << percent(c.makespan_error) << "; " << c.commands.size() << " commands matched, mean |error| per command "
     << percent(c.mean_command_error).substr(1) << "; " << c.only_predicted << " only predicted, " << c.only_measured << " only measured\n";
  // Communication splits into waiting for the other members and transfer
  // (comm = wait + transfer), predicted and measured.
  std::snprintf(line, sizeof line, "%-8s %14s %14s %14s %14s %10s %10s %14s %14s %14s %14s\n", "rank", "comm_us pred", "comm_us meas", "exposed pred",
                "exposed meas", "overlap p", "overlap m", "wait pred", "wait meas", "transfer pred", "transfer meas");
  os << line;
  for (const auto& r : c.ranks) {
    std::snprintf(line, sizeof line, "%-8lld %14s %14s %14s %14s %9.1f%% %9.1f%% %14s %14s %14s %14s\n", static_cast<long long>(r.rank),
                  us(r.predicted.comm_s).c_str(), us(r.measured.comm_s).c_str(), us(r.predicted.exposed_comm_s).c_str(),
                  us(r.measured.exposed_comm_s).c_str(), 100 * r.predicted.overlap_fraction, 100 * r.measured.overlap_fraction,
                  us(r.predicted.wait_s).c_str(), us(r.measured.wait_s).c_str(), us(r.predicted.transfer_s).c_str(), us(r.measured.transfer_s).c_str());
    os << line;
  }
  // What the prediction lost to interference (a kernel beside a
  // collective's CTAs and HBM traffic, docs/machines.md), by rank and
  // command, where it lost anything: a measurement holds it inside its
  // durations and cannot tell it apart.
  const bool lost = std::any_of(c.ranks.begin(), c.ranks.end(), [](const RankComparison& r) {
    return r.predicted.compute_interference_s > 0 || r.predicted.comm_interference_s > 0;
  });
  if (lost) {
    os << "predicted interference (of the durations above; thunky-sim --no-interference prices them solo):\n";
    std::snprintf(line, sizeof line, "%-8s %18s %18s\n", "rank", "intf_comp_us pred", "intf_comm_us pred");
    os << line;
    for (const auto& r : c.ranks) {
      std::snprintf(line, sizeof line, "%-8lld %18s %18s\n", static_cast<long long>(r.rank), us(r.predicted.compute_interference_s).c_str(),
                    us(r.predicted.comm_interference_s).c_str());
      os << line;
    }
  }
  std::snprintf(line, sizeof line, "%-34s %-20s %14s %14s %10s%s\n", "command (rank 0)", "op", "predicted_us", "measured_us", "error", lost ? "   of which intf_us" : "");
  os << line;
  size_t shown = 0, rest = 0;
  for (const auto& cmd : c.commands) {
    if (c.ranks.empty() || cmd.rank != c.ranks.front().rank) break;
    if (shown == max_rows) {
      ++rest;
      continue;
    }
    ++shown;
    const std::string err = cmd.measured_s > 0 ? percent((cmd.predicted_s - cmd.measured_s) / cmd.measured_s) : "-";
    const std::string intf = lost ? "   " + std::string(16 - std::min<size_t>(16, us(cmd.predicted_interference_s).size()), ' ') + us(cmd.predicted_interference_s) : "";
    std::snprintf(line, sizeof line, "%-34s %-20s %14s %14s %10s%s\n", cmd.measured->id.c_str(), cmd.measured->op.c_str(), us(cmd.predicted_s).c_str(), us(cmd.measured_s).c_str(),
                  err.c_str(), intf.c_str());
    os << line;
  }
  if (rest > 0) os << "... and " << rest << " more commands of rank 0 (--all-commands prints them)\n";
}

Recovery recovered_fraction(const Report& blocking, const Report& overlapped, const Report& unsharded) {
  Recovery r;
  r.blocking_s = blocking.makespan_s;
  r.overlapped_s = overlapped.makespan_s;
  r.unsharded_s = unsharded.makespan_s;
  if (r.blocking_s > r.unsharded_s) r.fraction = (r.blocking_s - r.overlapped_s) / (r.blocking_s - r.unsharded_s);
  return r;
}

void print_recovery(const Report& blocking, const Report& overlapped, const Report& unsharded, const Recovery& r, std::ostream& os) {
  const auto flags = os.flags();
  os << std::fixed << std::setprecision(3);
  os << std::left << std::setw(12) << "schedule" << std::right << std::setw(14) << "makespan_us" << "  source  name\n";
  auto row = [&](const char* what, const Report& rep, double s) {
    os << std::left << std::setw(12) << what << std::right << std::setw(14) << s * 1e6 << "  " << std::left << std::setw(6)
       << rep.source << "  " << rep.schedule << "\n";
  };
  row("blocking", blocking, r.blocking_s);
  row("overlapped", overlapped, r.overlapped_s);
  row("unsharded", unsharded, r.unsharded_s);
  if (blocking.source != overlapped.source || blocking.source != unsharded.source)
    os << "note: the reports mix predicted (sim) and measured (exec) makespans\n";
  os << "communication cost (blocking - unsharded): " << (r.blocking_s - r.unsharded_s) * 1e6 << " us\n";
  if (r.fraction) {
    os << "recovered by overlap (blocking - overlapped): " << (r.blocking_s - r.overlapped_s) * 1e6 << " us = " << std::setprecision(1)
       << *r.fraction * 100 << "% of it\n";
  } else {
    os << "recovered by overlap: nothing to recover, the blocking schedule is not slower than the unsharded one\n";
  }
  // The overlapped schedule's price of running side by side, where a
  // prediction priced it: its slowest-losing rank's sums.
  double kernels = 0, collectives = 0;
  for (const RankReport& rank : overlapped.ranks) {
    kernels = std::max(kernels, rank.stats.compute_interference_s);
    collectives = std::max(collectives, rank.stats.comm_interference_s);
  }
  if (kernels > 0 || collectives > 0)
    os << std::setprecision(3) << "lost to interference in the overlapped schedule (a rank's most): kernels " << kernels * 1e6 << " us, collectives " << collectives * 1e6
       << " us (thunky-sim --no-interference prices them solo)\n";
  os.flags(flags);
}

}  // namespace thunky
