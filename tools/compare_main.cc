// thunky-compare PREDICTED.json MEASURED.json: predicted against measured,
// command by command. thunky-compare --blocking B --overlapped O
// --unsharded U: the fraction of communication cost an overlap recovers.
#include "tools/cli.h"
#include <fstream>
#include <iostream>

#include "core/files.h"
#include "traces/compare.h"
#include "traces/report.h"
#include "traces/svg.h"

namespace {

// Reads one report; on failure prints `file:pointer: message` and returns false.
bool read_report(const std::string& path, thunky::Report& out) {
  std::string error;
  // With room for the JSON parser's padding past the text, so that it
  // reads the text in place instead of copying it.
  const std::string text = thunky::read_input_file(path, error, 64);
  if (!error.empty()) {
    std::cerr << path << ": the report " << error << "\n";
    return false;
  }
  try {
    out = thunky::parse_report(text);
  } catch (const thunky::ThunkyError& e) {
    std::cerr << path << ":" << (e.pointer().empty() ? "/" : e.pointer()) << ": " << e.what() << "\n";
    return false;
  }
  return true;
}

int run_main(int argc, char** argv) {
  std::string predicted_path, measured_path, blocking_path, overlapped_path, unsharded_path;
  CLI::App app{"thunky-compare: a predicted report (thunky-sim) against a measured one (thunky-exec), or the overlap a schedule recovers"};
  auto* pred = app.add_option("PREDICTED", predicted_path, "report.json written by thunky-sim");
  auto* meas = app.add_option("MEASURED", measured_path, "report.json written by thunky-exec");
  auto* blocking = app.add_option("--blocking", blocking_path, "report of the blocking schedule (the collective, then the GEMM)");
  auto* overlapped = app.add_option("--overlapped", overlapped_path, "report of the overlapped schedule");
  auto* unsharded = app.add_option("--unsharded", unsharded_path, "report of the unsharded schedule (no communication)");
  bool all_commands = false;
  app.add_flag("--all-commands", all_commands, "print every command of rank 0, not the first 60");
  std::string svg_path;
  auto* svg = app.add_option("--svg", svg_path, "write both timelines on one time axis as SVG: per rank and stream a predicted lane above a measured one");
  blocking->needs(overlapped, unsharded)->excludes(pred, meas, svg);
  overlapped->needs(blocking);
  unsharded->needs(blocking);
  if (auto code = thunky::cli::parse(app, "thunky-compare", argc, argv)) return *code;
  if (!blocking_path.empty()) {
    thunky::Report b, o, u;
    if (!read_report(blocking_path, b) || !read_report(overlapped_path, o) || !read_report(unsharded_path, u)) return 2;
    thunky::print_recovery(b, o, u, thunky::recovered_fraction(b, o, u), std::cout);
    return 0;
  }
  if (predicted_path.empty() || measured_path.empty()) {
    std::cerr << "thunky-compare: give PREDICTED and MEASURED reports, or --blocking, --overlapped and --unsharded\nrun 'thunky-compare --help' for usage\n";
    return 2;
  }
  if (auto code = thunky::cli::refuse_overwrite("thunky-compare", {{"--svg", svg_path}}, {predicted_path, measured_path})) return *code;
  thunky::Report predicted, measured;
  if (!read_report(predicted_path, predicted) || !read_report(measured_path, measured)) return 2;
  try {
    if (measured.source == "exec" && measured.iteration_makespans_s.size() == 1 && measured.warmup_iterations.value_or(0) == 0)
      std::cerr << "thunky-compare: warning: " << measured_path << " measured a single cold iteration: it counts first-run costs (allocation, "
                   "thread start, caches) that a warm run does not pay; measure with thunky-exec --warmup 1 --iters 3\n";
    const thunky::Comparison c = thunky::compare_reports(predicted, measured);
    thunky::print_comparison(predicted, measured, c, std::cout, all_commands ? SIZE_MAX : 60);
    if (!svg_path.empty()) {
      auto err = thunky::write_output_file(svg_path, [&](std::ostream& os) { os << thunky::comparison_svg(predicted, measured); });
      if (!err.empty()) return std::cerr << svg_path << ": " << err << "\n", 2;
      std::cout << "both timelines: " << svg_path << "\n";
    }
  } catch (const thunky::ThunkyError& e) {
    std::cerr << measured_path << ":" << (e.pointer().empty() ? "/" : e.pointer()) << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-compare", run_main, argc, argv); }
