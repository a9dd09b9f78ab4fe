// thunky-check SCHED...: validates schedules without running or
// simulating them: every rank's views and op rules, tokens, races and the
// collective order, as every other tool does before it starts. No machine
// model is needed. Exit 0 (all valid), 1 (a wrong schedule: a race, a
// deadlock) or 2 (bad input), the worst over the files.
#include "tools/cli.h"

#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/load.h"
#include "sim/symmetry.h"

namespace {

// The rank a message is about ("... (on rank 3 (x=3))", "rank 3: ..."),
// where it names one; null for every rank or none.
nlohmann::json rank_of(const std::string& message) {
  size_t from = 0;
  if (const size_t at = message.rfind("(on rank "); at != std::string::npos) from = at + 9;
  else if (message.rfind("rank ", 0) == 0) from = 5;
  else return nullptr;
  size_t end = from;
  while (end < message.size() && end - from < 10 && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
  if (end == from) return nullptr;
  return std::stoll(message.substr(from, end - from));
}

// How the schedule's ranks fold into classes for thunky-sim by the schedule
// alone: on links that break no symmetry (a switch on every axis). A
// machine's links (a line, a shift across nodes) and control flow decided
// at run time can split them further.
std::string classes_line(const std::string& schedule, const thunky::Program& p) {
  static const thunky::sim::Machine any = thunky::sim::parse_machine(nlohmann::ordered_json::parse(R"({"format": "thunky.machine/1", "name": "any",
    "chip": {"peak_flops": {"f32": 1e12}, "hbm_bandwidth": 1e12, "source": "thunky-check"},
    "axes": {"*": {"topology": "switch", "egress_bandwidth": 1e9, "latency_s": 0}}})"));
  const thunky::sim::RankClasses c = thunky::sim::rank_classes(p, any, nullptr);
  if (c.ranks() == 1) return "";
  return schedule + ": its " + std::to_string(c.ranks()) + " ranks fold into " + std::to_string(c.count()) + (c.count() == 1 ? " class" : " classes") +
         " of " + std::to_string(c.class_size()) + " for thunky-sim, by the schedule alone (a machine's links can split them: thunky-sim --explain-folding)\n";
}

const char* kind_name(thunky::ErrorKind k) {
  switch (k) {
    case thunky::ErrorKind::input: return "input";
    case thunky::ErrorKind::schedule: return "schedule";
    case thunky::ErrorKind::timeout: return "timeout";
  }
  return "input";
}

int run_main(int argc, char** argv) {
  std::vector<std::string> schedules;
  bool json = false;
  CLI::App app{"thunky-check: validate thunky schedules for every rank (views, tokens, races, collective order) without running them"};
  app.add_option("SCHED", schedules, "schedule files (thunky.sched/1)")->required();
  app.add_flag("--json", json, "print the diagnostics on stdout as a JSON list of {file, pointer, rank, kind, message} (empty when all are valid)");
  if (auto code = thunky::cli::parse(app, "thunky-check", argc, argv)) return *code;
  int worst = 0;
  nlohmann::ordered_json found = nlohmann::ordered_json::array();
  for (const auto& schedule : schedules) {
    auto prog = thunky::load_schedule_file(schedule);
    worst = std::max(worst, prog.exit_code());
    if (prog) {
      if (!json) std::cout << thunky::cli::valid_line(schedule, prog->mesh.size()) << classes_line(schedule, *prog);
      continue;
    }
    for (const auto& e : prog.errors()) {
      if (!json) {
        std::cerr << e.str() + "\n";
        continue;
      }
      found.push_back({{"file", e.file}, {"pointer", e.pointer.empty() ? "/" : e.pointer}, {"rank", rank_of(e.message)}, {"kind", kind_name(e.kind)},
                       {"message", e.message}});
    }
  }
  if (json) std::cout << found.dump(1) << "\n";
  return worst;
}

}  // namespace

int main(int argc, char** argv) { return thunky::cli::guarded_main("thunky-check", run_main, argc, argv); }
