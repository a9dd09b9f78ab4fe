// thunky-sim SCHED: predicts the timeline of every rank, stream and link.
#include "tools/cli.h"
#include <cstdio>
#include <iostream>

#include "api/predict.h"
#include "core/load.h"
#include "core/validate.h"
#include "sim/collective_table.h"
#include "sim/engine.h"
#include "sim/machine.h"
#include "traces/report.h"
#include "traces/svg.h"
#include "tools/dump.h"
#include "sim/models_dir.h"
#include <fstream>

namespace {

int fail(const std::vector<thunky::Diagnostic>& errors, int code) {
  for (const auto& e : errors) std::cerr << e.str() << "\n";
  return code;
}

int run_main(int argc, char** argv) {
  std::string schedule, machine, report, trace, svg;
  CLI::App app{"thunky-sim: predict the timeline of a thunky schedule"};
  app.add_option("SCHED", schedule, "schedule file (thunky.sched/1)")->required();
  app.add_option("--machine", machine, "machine model: a file, or a name under models/");
  app.add_option("--report", report, "write report.json (thunky.report/1)");
  app.add_option("--trace", trace, "write a Chrome trace");
  app.add_option("--svg", svg, "write an SVG timeline (one lane per stream, rank rows)");
  std::string trace_ranks;
  app.add_option("--trace-ranks", trace_ranks, "ranks in the trace and SVG: all, or a list such as 0-7,12 (default: all up to 32 ranks, else 0-15)");
  bool per_instance = false;
  app.add_flag("--per-instance", per_instance, "one collective row per instance instead of one per kind");
  std::string table_ranks;
  app.add_option("--ranks", table_ranks, "ranks whose collectives the table lists, a table each: all, or a list such as 0-3,12 (default 0)");
  bool every_rank = false;
  app.add_flag("--every-rank", every_rank, "simulate every rank, even those whose timeline provably equals another's (ranks folded into classes)");
  bool explain_folding = false;
  app.add_flag("--explain-folding", explain_folding, "say on stderr how the ranks folded into classes simulated once each, and for each axis that did not fold whole, the command or link that broke its symmetry");
  int64_t max_trip_count = 1'000'000;
  app.add_option("--max-trip-count", max_trip_count, "a while loop without a sim hint is run on the cpu backend to count its trips; past this many it stops the run (exit 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  int64_t max_records = thunky::sim::SimOptions{}.max_records;
  app.add_option("--max-records", max_records, "the most commands (loop trips times commands, on every rank simulated) kept for --report, --trace and --svg (default 4194304, about 450 bytes each)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  bool no_interference = false;
  app.add_flag("--no-interference", no_interference, "price each collective and kernel as if it ran alone: a collective's CTAs take no SMs and its HBM traffic no bandwidth from the kernels beside it (docs/machines.md)");
  int64_t nccl_max_ctas = 0;
  app.add_option("--nccl-max-ctas", nccl_max_ctas, "at most this many CTAs (SMs) for any collective, as NCCL_MAX_CTAS: fewer than NCCL takes leave SMs to kernels and move data slower")
      ->check(CLI::Range(int64_t{1}, thunky::Collective::kMaxCtas));
  std::string dump_inputs;
  app.add_option("--dump-inputs", dump_inputs, "write every input and inout buffer as its init makes it (seeded random values included) as .npy into this directory, to check a run's results against");
  bool check = false;
  app.add_flag("--check", check, "only validate the schedule for every rank (races, deadlocks), as thunky-check: no machine model is needed, nothing is simulated");
  if (auto code = thunky::cli::parse(app, "thunky-sim", argc, argv)) return *code;
  auto prog = thunky::load_schedule_file(schedule);
  if (!prog) return fail(prog.errors(), prog.exit_code());
  if (check) return std::cout << thunky::cli::valid_line(schedule, prog->mesh.size()), 0;
  if (!dump_inputs.empty())
    if (int code = thunky::cli::dump_inputs(*prog, dump_inputs)) return code;
  if (machine.empty()) machine = prog->machine;
  if (machine.empty()) {
    std::cerr << schedule << ":/machine: no machine model: pass --machine NAME (see models/) or set \"machine\" in the schedule\n";
    return 2;
  }
  auto m = thunky::sim::load_machine(machine, thunky::sim::models_dir());
  if (!m) return fail(m.errors(), 2);
  if (auto code = thunky::cli::refuse_overwrite("thunky-sim", {{"--report", report}, {"--trace", trace}, {"--svg", svg}}, {schedule, machine}))
    return *code;
  // Without output files only the table is printed: each rank's statistics
  // are gathered as the simulation runs instead of its every op.
  const auto shown_collectives = thunky::cli::table_ranks("thunky-sim", table_ranks, prog->mesh.size());
  if (!shown_collectives) return 2;
  // Other ranks' collectives are read from their timelines.
  const bool timelines = !report.empty() || !trace.empty() || !svg.empty() || !table_ranks.empty();
  thunky::sim::SimOptions options;
  options.fold_symmetric_ranks = !every_rank;
  options.timelines = timelines;
  options.max_trip_count = max_trip_count;
  options.max_records = max_records;
  options.interference = !no_interference;
  options.nccl_max_ctas = nccl_max_ctas;
  options.progress = thunky::cli::print_progress("thunky-sim", "simulated");
  auto r = thunky::predict(*prog, *m, options);
  if (!r) return fail(r.errors(), r.exit_code());
  for (const auto& note : r->notes) std::cerr << note.str() + "\n";
  if (explain_folding) std::cerr << "thunky-sim: folding: " << r->classes.explain(prog->mesh.axis_names);
  thunky::print_table(r->report, std::cout);
  if (table_ranks.empty()) {
    thunky::sim::print_collective_table(r->collectives, per_instance, std::cout);
  } else {
    std::vector<thunky::sim::CollectiveStat> stats;
    for (int64_t rank : *shown_collectives)
      for (auto& s : thunky::sim::collective_stats(*prog, r->report, rank)) stats.push_back(std::move(s));
    thunky::sim::print_collective_table(stats, per_instance, std::cout);
  }
  if (!report.empty()) {
    auto err = thunky::write_output_file(report, [&](std::ostream& os) { thunky::write_report(r->report, os); });
    if (!err.empty()) return std::cerr << report << ": " << err << "\n", 2;
  }
  if (!trace.empty() || !svg.empty()) {
    // Folded, a lane group a class (its representative's), named by the
    // class, unless --trace-ranks asks for ranks.
    const thunky::sim::RankClasses& classes = r->classes;
    const bool by_class = trace_ranks.empty() && classes.count() < classes.ranks();
    auto ranks = by_class ? thunky::cli::traced_classes("thunky-sim", classes.representatives())
                          : thunky::cli::traced_ranks("thunky-sim", trace_ranks, static_cast<int64_t>(r->report.ranks.size()));
    if (!ranks) return 2;
    thunky::Report shown = thunky::select_ranks(r->report, *ranks);
    if (by_class)
      for (auto& rank : shown.ranks)
        if (classes.class_size() > 1) rank.label = classes.label(rank.rank, prog->mesh.axis_names) + " (" + std::to_string(classes.class_size()) + " ranks)";
    if (!trace.empty()) {
      auto err = thunky::write_output_file(trace, [&](std::ostream& os) { thunky::write_chrome_trace(shown, os); });
      if (!err.empty()) return std::cerr << trace << ": " << err << "\n", 2;
    }
    if (!svg.empty()) {
      auto err = thunky::write_output_file(svg, [&](std::ostream& os) { os << thunky::timeline_svg(shown); });
      if (!err.empty()) return std::cerr << svg << ": " << err << "\n", 2;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-sim", run_main, argc, argv); }
