// What every thunky command-line program does alike: parse with CLI11
// (usage errors exit 2), and map an exception that escapes to exit 2.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/files.h"

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

// What a check that passed prints (thunky-check, and --check on
// thunky-sim and thunky-exec): every rank was checked, with no race and
// no deadlock, and nothing ran.
inline std::string valid_line(const std::string& schedule, int64_t ranks) {
  return schedule + ": valid on every one of its " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + ": no race, no deadlock\n";
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

// --trace-ranks: "all", or ranks and ranges "0-7,12" below `ranks`;
// nullopt on anything else.
inline std::optional<std::vector<int64_t>> parse_rank_list(const std::string& text, int64_t ranks) {
  std::vector<int64_t> out;
  if (text == "all") {
    for (int64_t r = 0; r < ranks; ++r) out.push_back(r);
    return out;
  }
  auto number = [&](const std::string& t) -> std::optional<int64_t> {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const int64_t v = std::stoll(t);
    if (v >= ranks) return std::nullopt;
    return v;
  };
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    const size_t dash = item.find('-');
    auto lo = number(item.substr(0, dash));
    auto hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) return std::nullopt;
    for (int64_t r = *lo; r <= *hi; ++r) out.push_back(r);
    i = j + 1;
  }
  return out;
}

// The ranks a trace or picture shows: --trace-ranks, or every rank up to 32
// and the first 16 beyond (said on stderr). nullopt (after a message) on a
// bad list.
inline std::optional<std::vector<int64_t>> traced_ranks(const std::string& tool, const std::string& option, int64_t ranks) {
  if (!option.empty()) {
    auto list = parse_rank_list(option, ranks);
    if (!list) std::cerr << tool << ": --trace-ranks: '" << option << "' is not 'all' or a list of ranks below " << ranks << " such as 0-7,12\n";
    return list;
  }
  const int64_t shown = ranks <= 32 ? ranks : 16;
  if (shown < ranks)
    std::cerr << tool << ": the trace and picture show ranks 0-" << shown - 1 << " of " << ranks << " (--trace-ranks all, or a list, for others)\n";
  return parse_rank_list("all", shown);
}

// The ranks of a folded run's trace and picture: a class's representative
// each, the first 32 classes.
inline std::optional<std::vector<int64_t>> traced_classes(const std::string& tool, std::vector<int64_t> representatives) {
  const size_t shown = std::min<size_t>(representatives.size(), 32);
  if (shown < representatives.size())
    std::cerr << tool << ": the trace and picture show the first " << shown << " of " << representatives.size() << " classes of ranks (--trace-ranks all, or a list, for ranks)\n";
  representatives.resize(shown);
  return representatives;
}

// The ranks whose collectives the table lists (--ranks): rank 0 unless
// given; none (after one line) when the option is malformed.
inline std::optional<std::vector<int64_t>> table_ranks(const std::string& tool, const std::string& option, int64_t ranks) {
  if (option.empty()) return std::vector<int64_t>{0};
  auto list = parse_rank_list(option, ranks);
  if (!list) std::cerr << tool << ": --ranks: '" << option << "' is not 'all' or a list of ranks below " << ranks << " such as 0-3,12\n";
  return list;
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
// A signal handler: one line on stderr, the partial output removed, and
// exit 128 + the signal, with only async-signal-safe calls.
template <const char* Tool>
void stop_on_signal(int sig) {
  remove_partial_output();
  const char* what = sig == SIGINT ? ": interrupted (SIGINT); no output written\n" : ": terminated (SIGTERM); no output written\n";
  auto put = [](const char* s) {
    size_t n = 0;
    while (s[n]) ++n;
    if (::write(2, s, n) < 0) return;
  };
  put(Tool);
  put(what);
  ::_exit(128 + sig);
}

// A progress line on stderr for a long run, as a long build prints one:
// "thunky-sim: 3276800 of about 20000001 commands simulated (16%), 4 s
// elapsed, about 20 s left".
template <typename P>
void progress_line(const std::string& tool, const char* verb, const P& p) {
  std::cerr << tool << ": " << p.done;
  if (p.expected > 0) std::cerr << " of about " << p.expected;
  std::cerr << " commands " << verb;
  if (p.expected >= p.done && p.done > 0) {
    const double fraction = static_cast<double>(p.done) / static_cast<double>(p.expected);
    std::cerr << " (" << static_cast<int>(fraction * 100) << "%), " << static_cast<int64_t>(p.elapsed_s) << " s elapsed, about "
              << static_cast<int64_t>(p.elapsed_s / fraction - p.elapsed_s + 0.5) << " s left\n";
  } else {
    std::cerr << ", " << static_cast<int64_t>(p.elapsed_s) << " s elapsed\n";
  }
}
inline auto print_progress(const std::string& tool, const char* verb) {
  return [tool, verb](const auto& p) { progress_line(tool, p.functional ? "run on the cpu backend to decide control flow" : verb, p); };
}

// The running tool's name, for the signal handler (which may not allocate).
inline char g_tool_name[64] = "thunky";

// A signal handler: one line on stderr, the partial output removed, and
// exit 128 + the signal, with only async-signal-safe calls.
inline void stop_on_signal(int sig) {
  remove_partial_output();
  const char* what = sig == SIGINT ? ": interrupted (SIGINT); no output written\n" : ": terminated (SIGTERM); no output written\n";
  for (const char* s : {static_cast<const char*>(g_tool_name), what}) {
    size_t n = 0;
    while (s[n]) ++n;
    if (::write(2, s, n) < 0) break;
  }
  ::_exit(128 + sig);
}

template <typename Run>
int guarded_main(const std::string& tool, Run run, int argc, char** argv) {
  // A write past a file-size limit (ulimit -f) or to a closed pipe is a
  // failed write that the tool reports (exit 2), not a signal that kills it.
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  // SIGINT and SIGTERM stop the tool at once (exit 130 or 143), leaving no
  // output: every file is written under a temporary name and renamed when
  // whole, and the one being written, if any, is removed.
  std::snprintf(g_tool_name, sizeof g_tool_name, "%s", tool.c_str());
  std::signal(SIGINT, stop_on_signal);
  std::signal(SIGTERM, stop_on_signal);
  try {
    const int code = run(argc, argv);
    // What the tool printed must have reached its destination: a full disk
    // or a closed pipe on standard output is a failed run, not exit 0.
    std::cout.flush();
    // (A tool that failed already said why, and keeps its exit code.)
    if ((!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) && code == 0) {
      std::cerr << tool << ": cannot write to standard output" << (errno ? std::string(": ") + std::strerror(errno) : std::string()) << "\n";
      return 2;
    }
    return code;
  } catch (const std::bad_alloc&) {
    std::cerr << tool << ": out of memory\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << tool << ": internal error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace thunky::cli
