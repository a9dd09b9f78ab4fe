// What every thunky command-line program does alike: parse with CLI11
// (usage errors exit 2), and map an exception that escapes to exit 2.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

namespace thunky::cli {

// Parses the command line: nullopt to go on, else the exit code (0 after
// --help, 2 for a usage error, with a hint to stderr).
inline std::optional<int> parse(CLI::App& app, const std::string& tool, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << tool << ": " << e.what() << "\nrun '" << tool << " --help' for usage\n";
    return 2;
  }
  return std::nullopt;
}

// main() of a tool: the library reports errors as values, this is a last resort.
template <typename Run>
int guarded_main(const std::string& tool, Run run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << tool << ": internal error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace thunky::cli
