// thunky-calibrate nccl-tests FILE... --machine BASE -o OUT.json: the NCCL
// model of a machine fitted to nccl-tests runs; prints measured against
// fitted per size and writes the calibrated machine model. With --check
// instead of -o: the machine's model against the runs, nothing fitted.
#include "tools/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/files.h"
#include "sim/calibrate.h"
#include "tools/calibrate_exec.h"
#include "sim/machine.h"
#include "sim/nccl_model.h"
#include "traces/report.h"
#include "sim/models_dir.h"

namespace {

using ojson = nlohmann::ordered_json;

ojson protocols_json(const thunky::sim::NcclProtocol (&p)[thunky::sim::kNcclProtos]) {
  ojson j = ojson::object();
  for (int k = 0; k < thunky::sim::kNcclProtos; ++k)
    j[std::string(thunky::sim::nccl_proto_name(static_cast<thunky::sim::NcclProto>(k)))] = {
        {"base_latency_s", p[k].base_latency_s}, {"step_latency_s", p[k].step_latency_s}, {"efficiency", p[k].efficiency}, {"max_bandwidth", p[k].max_bandwidth}};
  return j;
}

// Measured against the model, per size, then each collective's mean and
// largest error and the whole's.
void print_errors(const thunky::sim::AxisLinks& axis, const std::vector<thunky::sim::NcclTestRow>& rows, const char* model_column, const char* verb) {
  // Where the runs' logs say what NCCL picked (NCCL_DEBUG=INFO), the
  // model's pick beside it.
  const bool picks = std::any_of(rows.begin(), rows.end(), [](const thunky::sim::NcclTestRow& r) { return !r.nccl_pick.empty(); });
  size_t picked = 0, same = 0;
  // Each row's file and line, as wide as the longest needs (up to 64
  // bytes; a longer one keeps its end, where the name and line are, from
  // a whole UTF-8 character on).
  std::vector<std::string> where;
  size_t width = 9;
  for (const auto& r : rows) {
    std::string at = std::filesystem::path(r.file).filename().string() + ":" + (r.pointer.empty() ? std::to_string(r.line) : r.pointer);
    if (at.size() > 64) {
      size_t from = at.size() - 61;
      while (from < at.size() && (static_cast<unsigned char>(at[from]) & 0xC0) == 0x80) ++from;  // not inside a UTF-8 character
      at = "..." + at.substr(from);
    }
    width = std::max(width, at.size());
    where.push_back(std::move(at));
  }
  const int w = static_cast<int>(width);
  char line[320];
  std::snprintf(line, sizeof line, "%-*s %-15s %5s %14s %12s %12s %8s%s\n", w, "file:line", "op", "ranks", "size_B", "measured_us", model_column, "error",
                picks ? "  model_pick      nccl_pick" : "");
  std::cout << line;
  struct Sum {
    double total = 0, max = 0;
    size_t n = 0;
    void add(double e) { total += e, max = std::max(max, e), ++n; }
  };
  std::map<std::string, Sum> by_op;
  Sum all;
  for (size_t i = 0; i < rows.size(); ++i) {
    const thunky::sim::NcclTestRow& r = rows[i];
    const thunky::sim::NcclChoice choice = thunky::sim::model_choice(axis, r);
    const double m = choice.seconds();
    std::string pick_columns;
    if (picks) {
      const std::string mine = thunky::sim::nccl_pick_name(choice.algo, choice.proto);
      char cols[96];
      std::snprintf(cols, sizeof cols, "  %-14s  %s", mine.c_str(), r.nccl_pick.empty() ? "-" : r.nccl_pick.c_str());
      pick_columns = cols;
      if (!r.nccl_pick.empty()) {
        ++picked;
        same += r.nccl_pick == mine;
      }
    }
    const std::string op(thunky::op_name(r.op));
    std::snprintf(line, sizeof line, "%-*s %-15s %5lld %14.0f %12.2f %12.2f %+7.1f%%%s\n", w, where[i].c_str(), op.c_str(), static_cast<long long>(r.ranks), r.bytes,
                  r.seconds() * 1e6, m * 1e6, 100 * (m - r.seconds()) / r.seconds(), pick_columns.c_str());
    std::cout << line;
    const double e = std::fabs(m - r.seconds()) / r.seconds();
    by_op[op].add(e);
    all.add(e);
  }
  if (by_op.size() > 1)
    for (const auto& [op, s] : by_op) {
      std::snprintf(line, sizeof line, "%s: mean |error| %.1f%%, max %.1f%% over %zu sizes\n", op.c_str(), 100 * s.total / s.n, 100 * s.max, s.n);
      std::cout << line;
    }
  std::snprintf(line, sizeof line, "%s %zu sizes: mean |error| %.1f%%, max %.1f%%\n", verb, all.n, 100 * all.total / std::max<size_t>(1, all.n), 100 * all.max);
  std::cout << line;
  if (picked > 0) std::cout << "NCCL's picks (from its log): the model picks the same algorithm and protocol at " << same << " of " << picked << " sizes\n";
}

// What NCCL_ALGO and NCCL_PROTO the runs were made with ("" = NCCL's choice).
struct RunSettings {
  std::string algorithms, protocols;
};

// Every file's rows, or nullopt after naming the file and line it cannot read.
std::optional<std::vector<thunky::sim::NcclTestRow>> read_runs(const std::vector<std::string>& files) {
  std::vector<thunky::sim::NcclTestRow> rows;
  for (const auto& f : files) {
    std::string error;
    const std::string text = thunky::read_input_file(f, error);
    if (!error.empty()) {
      std::cerr << f << ": the nccl-tests output " << error << "\n";
      return std::nullopt;
    }
    try {
      auto got = thunky::sim::read_nccl_tests(text, f);
      rows.insert(rows.end(), got.begin(), got.end());
    } catch (const thunky::ThunkyError& e) {
      std::cerr << f << (e.pointer().empty() ? "" : ":" + e.pointer()) << ": " << e.what() << "\n";
      return std::nullopt;
    }
  }
  return rows;
}

// The axis as the runs ran on it: restricted to the NCCL_ALGO and
// NCCL_PROTO they were made with (the model written keeps the base's own
// choice). nullopt after naming a setting it cannot read.
std::optional<thunky::sim::AxisLinks> axis_as_run(const thunky::sim::AxisLinks& base, const RunSettings& settings) {
  thunky::sim::AxisLinks axis = base;
  std::string error;
  if (!settings.algorithms.empty()) {
    auto bits = thunky::sim::nccl_algo_setting(settings.algorithms, error);
    if (!bits) return std::cerr << "thunky-calibrate nccl-tests: --algorithms: " << error << "\n", std::nullopt;
    axis.algorithms = *bits;
  }
  if (!settings.protocols.empty()) {
    auto bits = thunky::sim::nccl_proto_setting(settings.protocols, error);
    if (!bits) return std::cerr << "thunky-calibrate nccl-tests: --protocols: " << error << "\n", std::nullopt;
    axis.protocols = *bits;
  }
  return axis;
}

// What the fit cannot see in the runs, said once per file:
// - a run the axis cannot stand for (two nodes priced as one) is priced as
//   the axis says, into figures that may describe no machine. Not refused:
//   hosts can be containers of one node, which the "#  Rank" lines cannot
//   tell from nodes;
// - a blocking run (-z) holds the host's wait in its times;
// - a run that grouped several collectives an iteration (-m) overlaps
//   their latencies;
// - a run split into groups (NCCL_TESTS_SPLIT) is priced as one group's
//   collective alone: the others' traffic on shared links is not.
void warn_of_runs(const thunky::sim::AxisLinks& axis, const std::vector<thunky::sim::NcclTestRow>& rows, const std::string& machine, const std::string& axis_name) {
  std::set<std::string> warned;
  for (const auto& r : rows) {
    auto warn = [&](const std::string& what, const std::string& text) {
      if (warned.insert(r.file + "\n" + what).second) std::cerr << "thunky-calibrate: warning: " << r.file << ":" << r.where() << ": " << text << "\n";
    };
    if (const std::string why = thunky::sim::machine_mismatch(axis, r); !why.empty())
      warn(why, why + " (machine " + machine + ", axis '" + axis_name + "'); priced as the axis says");
    if (r.blocking)
      warn("-z", "the run waited for the GPUs after every iteration (nccl-tests -z), so its times hold the host's wait, which a fit takes for the "
                 "collectives' latency; runs without -z show the GPUs' own");
    if (r.grouped > 1)
      warn("-m", "the run launched " + std::to_string(r.grouped) +
                     " collectives as one NCCL group each iteration (nccl-tests -m), so their latencies overlap and small sizes read faster than one collective alone");
    if (r.groups > 1)
      warn("split", "the run's ranks are in " + std::to_string(r.groups) +
                        " groups, each running its own collective at the same time (NCCL_TESTS_SPLIT); a row is priced as one group's collective of " +
                        std::to_string(r.ranks) + " ranks, alone on the links");
  }
}

// all_reduce, all_gather and reduce_scatter share the ring's figures, but
// measured nodes run them at different rates: after a fit, the ones its
// runs left out are named, so that the model written is not taken for a
// measurement of them.
void say_what_was_not_measured(const std::vector<thunky::sim::NcclTestRow>& rows, const thunky::sim::AxisLinks& fitted) {
  std::set<thunky::Op> measured;
  for (const auto& r : rows) measured.insert(r.op);
  std::vector<std::string_view> missing;
  for (thunky::Op op : {thunky::Op::all_reduce, thunky::Op::all_gather, thunky::Op::reduce_scatter})
    if (!measured.count(op)) missing.push_back(thunky::op_name(op));
  if (missing.empty() || missing.size() == 3) return;
  std::string names(missing[0]);
  if (missing.size() == 2) names += ", " + std::string(missing[1]);
  char kept[64] = "";
  if (!measured.count(thunky::Op::all_gather) && !measured.count(thunky::Op::all_to_all))
    std::snprintf(kept, sizeof kept, " (copy_factor %.2f, the base's)", fitted.nccl_params.copy_factor);
  std::cout << "not measured: " << names << ", priced with the figures fitted to these runs" << kept
            << "; measured nodes run all_gather and reduce_scatter at 0.82 to 1.10 of all_reduce's bus bandwidth (docs/machines.md): add their runs where you have them\n";
}

// The base model's file with the axis' NCCL figures replaced by the fit's, written to `out`.
int write_calibrated(const std::string& machine, const std::string& axis_name, const thunky::sim::FitResult& fit, const std::vector<std::string>& files,
                     const std::string& out) {
  std::string error;
  ojson doc = ojson::parse(thunky::read_input_file(std::filesystem::exists(machine) ? machine : thunky::sim::models_dir() + "/" + machine +
                                                                                          (machine.size() > 5 && machine.substr(machine.size() - 5) == ".json" ? "" : ".json"),
                                                   error));
  const std::string key = doc["axes"].contains(axis_name) ? axis_name : "*";
  ojson& ax = doc["axes"][key];
  const thunky::sim::NcclParams& q = fit.axis.nccl_params;
  ax["collective_model"] = "nccl";
  ojson n = {{"overhead_s", q.overhead_s}, {"ring", protocols_json(q.ring)}, {"tree", protocols_json(q.tree)}, {"network", protocols_json(q.network)},
             {"nvls_bandwidth", q.nvls_bandwidth}, {"nvls_tuner_bandwidth", q.nvls_tuner_bandwidth}, {"nvls_latency_s", q.nvls_latency_s}, {"nvls_min_ranks", q.nvls_min_ranks},
             {"multinode_simple_factor", q.multinode_simple_factor}, {"copy_factor", q.copy_factor}};
  if (q.host_launch_s > 0) n["host_launch_s"] = q.host_launch_s;
  ax["nccl"] = n;
  doc["name"] = doc["name"].get<std::string>() + "-calibrated";
  std::string files_list;
  for (const auto& f : files) files_list += (files_list.empty() ? "" : ", ") + std::filesystem::path(f).filename().string();
  char line[32];
  std::snprintf(line, sizeof line, "%.1f", 100 * fit.mean_abs_error);
  doc["chip"]["source"] = doc["chip"]["source"].get<std::string>() + "; collectives of axis '" + key + "' fitted by thunky-calibrate nccl-tests to " + files_list +
                          " (mean |error| " + line + "%)";
  const std::string err = thunky::write_json_file(out, doc);
  if (!err.empty()) return std::cerr << out << ": " << err << "\n", 2;
  std::cout << "wrote " << out << "\n";
  return 0;
}

int nccl_tests(const std::vector<std::string>& files, const std::string& machine, const std::string& axis_name, const std::string& out, bool check,
               const RunSettings& settings) {
  if (check == !out.empty()) {
    std::cerr << "thunky-calibrate nccl-tests: give -o OUT.json (fit and write a model) or --check (the model against the runs), one of the two\n";
    return 2;
  }
  auto base = thunky::sim::load_machine(machine, thunky::sim::models_dir());
  if (!base) {
    for (const auto& e : base.errors()) std::cerr << e.str() << "\n";
    return 2;
  }
  std::vector<std::string> inputs = files;
  inputs.push_back(machine);
  if (!check)
    if (auto code = thunky::cli::refuse_overwrite("thunky-calibrate", {{"-o", out}}, inputs)) return *code;
  const auto rows = read_runs(files);
  if (!rows) return 2;
  const thunky::sim::AxisLinks* base_axis = base->axis(axis_name);
  if (!base_axis) {
    std::cerr << machine << ":/axes: no axis '" << axis_name << "' (and no \"*\")\n";
    return 2;
  }
  if (base_axis->topology == thunky::sim::AxisLinks::Topology::ring) {
    std::cerr << machine << ":/axes/" << axis_name << ": a ring axis; the NCCL model is for switch and hierarchical axes\n";
    return 2;
  }
  const auto axis = axis_as_run(*base_axis, settings);
  if (!axis) return 2;
  warn_of_runs(*axis, *rows, machine, axis_name);
  if (check) {
    if (!axis->nccl) {
      std::cerr << machine << ":/axes/" << axis_name << ": collectives priced by the ideal formulas; --check compares the NCCL model\n";
      return 2;
    }
    print_errors(*axis, *rows, "model_us", "model over");
    return 0;
  }
  if (rows->size() > thunky::sim::kMaxFittedRows) {
    std::cerr << files.front() << ": " << rows->size() << " result rows in all; a fit takes at most " << thunky::sim::kMaxFittedRows
              << " (--check takes any number)\n";
    return 2;
  }
  const thunky::sim::FitResult fit = thunky::sim::fit_nccl(*axis, *rows);
  print_errors(fit.axis, *rows, "fitted_us", "fit over");
  int64_t most_gpus = 1;
  for (const auto& r : *rows) most_gpus = std::max(most_gpus, r.gpus_per_thread);
  if (most_gpus > 1) {
    char line[192];
    const double host_us = fit.axis.nccl_params.host_launch_s * 1e6;
    std::snprintf(line, sizeof line, "host floor: one thread drove up to %lld GPUs (nGpus), and issues a collective at most every %lld x %.2f us (host_launch_s) = %.1f us\n",
                  static_cast<long long>(most_gpus), static_cast<long long>(most_gpus), host_us, static_cast<double>(most_gpus) * host_us);
    std::cout << line;
  }
  say_what_was_not_measured(*rows, fit.axis);
  return write_calibrated(machine, axis_name, fit, files, out);
}

}  // namespace

int run_main(int argc, char** argv) {
  CLI::App app{"thunky-calibrate: fit a machine model to measurements"};
  app.require_subcommand(1);
  std::vector<std::string> files;
  std::string machine, axis = "*", out;
  CLI::App* nt = app.add_subcommand("nccl-tests", "fit the NCCL model of an axis to nccl-tests stdout (all_reduce_perf, all_gather_perf, ...)");
  nt->add_option("FILE", files, "nccl-tests output files")->required();
  nt->add_option("--machine", machine, "the machine model to start from: a file, or a name under models/")->required();
  nt->add_option("--axis", axis, "the axis to fit (default \"*\", every axis not named)");
  nt->add_option("-o", out, "write the calibrated machine model here");
  bool check = false;
  nt->add_flag("--check", check, "fit nothing: print the machine's model against the runs, per size and per collective");
  RunSettings settings;
  nt->add_option("--algorithms", settings.algorithms, "NCCL_ALGO as the runs were made with it (Ring, ^NVLS, ring;allreduce:tree): they are priced and fitted so; the model written keeps the base's choice");
  nt->add_option("--protocols", settings.protocols, "NCCL_PROTO as the runs were made with it (Simple, ^LL): likewise");
  std::string backend = "cpu", exec_out;
  int ranks = 4;
  CLI::App* ex = app.add_subcommand("exec", "run micro-benchmarks on a backend and fit the machine model of the machine they ran on");
  ex->add_option("--backend", backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  ex->add_option("--ranks", ranks, "ranks of the collective benchmark, and of the runs the model is for (default 4)")->check(CLI::Range(1, 64));
  ex->add_option("-o", exec_out, "write the machine model here")->required();
  bool quick = false;
  ex->add_flag("--quick", quick, "one small shape and size of each benchmark (seconds, for tests; the figures are rougher)");
  if (auto code = thunky::cli::parse(app, "thunky-calibrate", argc, argv)) return *code;
  if (ex->parsed()) {
    int step = 0;
    auto m = thunky::calibrate::calibrate_backend(backend, ranks, quick, [&](const std::string& what) { std::cerr << "calibrate [" << ++step << "] " << what << "\n"; });
    if (!m) {
      for (const auto& e : m.errors()) std::cerr << "thunky-calibrate exec: " << e.message << "\n";
      return m.exit_code();
    }
    const std::string err = thunky::write_json_file(exec_out, *m);
    if (!err.empty()) return std::cerr << exec_out << ": " << err << "\n", 2;
    std::cout << m->dump(1) << "\nwrote " << exec_out << "\n";
    return 0;
  }
  return nccl_tests(files, machine, axis, out, check, settings);
}

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-calibrate", run_main, argc, argv); }
