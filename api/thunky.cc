// The C++ API (include/thunky/thunky.h): the tools' pipelines, returning
// what they would print instead of printing it.
#include "thunky/thunky.h"

#include <cstdlib>
#include <sstream>

#include "api/predict.h"
#include "core/load.h"
#include "exec/backend.h"
#include "sim/machine.h"
#include "sim/models_dir.h"
#include "traces/report.h"

namespace thunky::api {

namespace {

Outcome failed(const std::vector<Diagnostic>& errors, int code, const std::string& file = "") {
  Outcome o;
  o.exit_code = code;
  for (auto e : errors) {
    if (e.file.empty()) e.file = file;
    o.errors.push_back(e.str());
  }
  return o;
}

template <typename T>
Outcome failed(const Expected<T>& r, const std::string& file = "") {
  return failed(r.errors(), r.exit_code(), file);
}

Outcome reported(const Report& r) {
  Outcome o;
  o.makespan_s = r.makespan_s;
  std::ostringstream table, json;
  print_table(r, table);
  write_report(r, json);
  o.table = table.str();
  o.report_json = json.str();
  return o;
}

std::string models_dir(const SimulateOptions& o) {
  if (!o.models_dir.empty()) return o.models_dir;
  if (const char* env = std::getenv("THUNKY_MODELS"); env && *env) return env;
  if (!o.installed_models_dir.empty()) return o.installed_models_dir;
  return sim::models_dir();
}

}  // namespace

Outcome check(const std::string& schedule_path) {
  auto prog = load_schedule_file(schedule_path);
  return prog ? Outcome{} : failed(prog);
}

Outcome simulate(const std::string& schedule_path, const SimulateOptions& options) {
  auto prog = load_schedule_file(schedule_path);
  if (!prog) return failed(prog);
  const std::string machine = options.machine.empty() ? prog->machine : options.machine;
  if (machine.empty())
    return failed({Diagnostic{ErrorKind::input, schedule_path, "/machine", "no machine model: give SimulateOptions::machine or set \"machine\" in the schedule"}}, 2);
  auto m = sim::load_machine(machine, models_dir(options));
  if (!m) return failed(m.errors(), 2);
  sim::SimOptions so;
  so.fold_symmetric_ranks = !options.every_rank;
  auto r = predict(*prog, *m, so);
  if (!r) return failed(r, schedule_path);
  return reported(r->report);
}

Outcome execute(const std::string& schedule_path, const ExecuteOptions& options) {
  auto prog = load_schedule_file(schedule_path);
  if (!prog) return failed(prog);
  auto backend = make_backend(options.backend);
  if (!backend) return failed(backend.errors(), 2);
  if (options.iters < 1 || options.warmup < 0 || options.max_trip_count < 1 || options.host_cores < 0)
    return failed({Diagnostic{ErrorKind::input, schedule_path, "", "ExecuteOptions: iters and max_trip_count are at least 1, warmup and host_cores at least 0"}}, 2);
  ExecOptions eo;
  eo.iters = options.iters;
  eo.warmup = options.warmup;
  eo.max_trip_count = options.max_trip_count;
  eo.host_cores = options.host_cores;
  auto r = (*backend)->run(*prog, eo);
  if (!r) return failed(r, schedule_path);
  return reported(r->report);
}

}  // namespace thunky::api
