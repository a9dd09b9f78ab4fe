// thunky-compare PREDICTED.json MEASURED.json: predicted against measured,
// command by command.
#include "tools/cli.h"
#include <fstream>
#include <iostream>

#include "core/files.h"
#include "traces/compare.h"
#include "traces/report.h"

namespace {

// Reads one report; on failure prints `file:pointer: message` and returns false.
bool read_report(const std::string& path, thunky::Report& out) {
  std::string error;
  const std::string text = thunky::read_input_file(path, error);
  if (!error.empty()) {
    std::cerr << path << ": the report " << error << "\n";
    return false;
  }
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    std::cerr << path << ": malformed JSON: " << e.what() << "\n";
    return false;
  }
  try {
    out = thunky::report_from_json(j);
  } catch (const thunky::ThunkyError& e) {
    std::cerr << path << ":" << e.pointer() << ": " << e.what() << "\n";
    return false;
  }
  return true;
}

int run_main(int argc, char** argv) {
  std::string predicted_path, measured_path;
  CLI::App app{"thunky-compare: a predicted report (thunky-sim) against a measured one (thunky-exec)"};
  app.add_option("PREDICTED", predicted_path, "report.json written by thunky-sim")->required();
  app.add_option("MEASURED", measured_path, "report.json written by thunky-exec")->required();
  if (auto code = thunky::cli::parse(app, "thunky-compare", argc, argv)) return *code;
  thunky::Report predicted, measured;
  if (!read_report(predicted_path, predicted) || !read_report(measured_path, measured)) return 2;
  try {
    const thunky::Comparison c = thunky::compare_reports(predicted, measured);
    thunky::print_comparison(predicted, measured, c, std::cout);
  } catch (const thunky::ThunkyError& e) {
    std::cerr << measured_path << ":" << e.pointer() << ": " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-compare", run_main, argc, argv); }
