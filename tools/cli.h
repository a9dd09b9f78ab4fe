// What every thunky command-line program does alike: parse with CLI11
// (usage errors exit 2), and map an exception that escapes to exit 2.
#pragma once

#include <CLI/CLI.hpp>

#include "core/files.h"
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

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

// "0,1,2" as integers from 0 to 1023; nullopt on anything else.
inline std::optional<std::vector<int>> parse_int_list(const std::string& text) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const int v = std::stoi(item);
    if (v > 1023) return std::nullopt;
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

// Exit 2 (with one line) when an output would overwrite an input: each
// output is (option, path), empty paths skipped.
inline std::optional<int> refuse_overwrite(const std::string& tool, const std::vector<std::pair<std::string, std::string>>& outputs,
                                           const std::vector<std::string>& inputs) {
  for (const auto& [option, path] : outputs)
    if (!path.empty() && thunky::overwrites_input(path, inputs)) {
      std::cerr << tool << ": " << option << " " << path << " would overwrite an input of the run; choose another path\n";
      return 2;
    }
  return std::nullopt;
}

// main() of a tool: the library reports errors as values, this is a last resort.
template <typename Run>
int guarded_main(const std::string& tool, Run run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << tool << ": out of memory\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << tool << ": internal error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace thunky::cli
