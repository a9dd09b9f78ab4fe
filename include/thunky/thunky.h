// thunky's C++ API, as installed by `cmake --install` and found with
// find_package(thunky): predict a schedule (thunky.sched/1) with a machine
// model, as thunky-sim does, or run it on a backend, as thunky-exec does.
//
//   #include <thunky/thunky.h>
//   auto predicted = thunky::api::simulate("sched.json", {.machine = "h100-8gpu"});
//   if (!predicted) for (auto& e : predicted.errors) std::cerr << e << "\n";
//   auto measured = thunky::api::execute("sched.json");
//   std::cout << predicted.makespan_s << " " << measured.makespan_s << "\n";
//
// Nothing here exits or throws for bad input: an Outcome carries the exit
// code the tools would give and their one-line messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace thunky::api {

struct Outcome {
  int exit_code = 0;                // 0; 1 a wrong schedule (race, deadlock); 2 bad input; 3 a collective past its timeout
  std::vector<std::string> errors;  // "file:/json/pointer: message", one a line, as the tools print them
  double makespan_s = 0;            // the predicted or measured (median iteration) makespan
  std::string table;                // the per-rank table the tools print
  std::string report_json;          // the report (thunky.report/1), as --report writes it
  explicit operator bool() const { return exit_code == 0; }
};

struct SimulateOptions {
  std::string machine;     // a model's name or file; empty: the schedule's "machine"
  // Where named models are: this folder when given; else THUNKY_MODELS
  // when set; else the installed <prefix>/share/thunky/models, which
  // find_package(thunky) passes as THUNKY_MODELS_DIR; else the models
  // beside the running program.
  std::string models_dir;
#ifdef THUNKY_MODELS_DIR
  std::string installed_models_dir = THUNKY_MODELS_DIR;
#else
  std::string installed_models_dir;
#endif
  bool every_rank = false;  // simulate every rank even when all provably have the same timeline
};

struct ExecuteOptions {
  std::string backend = "cpu";  // "cpu" (reference) or "cuda"
  int iters = 1;                // timed iterations: the report shows the median one
  int warmup = 0;               // untimed iterations before them
  int64_t max_trip_count = 1'000'000;  // a while loop past this many iterations fails the run
  int host_cores = 0;           // cpu: the cores compute runs on (0: this process's)
};

// Loads, validates and predicts the schedule at `schedule_path`.
Outcome simulate(const std::string& schedule_path, const SimulateOptions& options = {});

// Loads, validates and runs the schedule at `schedule_path`.
Outcome execute(const std::string& schedule_path, const ExecuteOptions& options = {});

// Loads and validates the schedule, every rank, races and deadlocks included.
Outcome check(const std::string& schedule_path);

}  // namespace thunky::api
