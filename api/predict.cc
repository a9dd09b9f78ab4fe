#include "api/predict.h"

#include <algorithm>
#include <functional>

#include "core/control_flow.h"
#include "exec/backend.h"

namespace thunky {

namespace {

// Control flow that neither a sim hint nor the rank's coordinates decide.
bool unhinted_control_flow(const Program& p) {
  const std::vector<bool> written = written_buffers(p);
  return any_command(p.program, [&](const Command& c) {
    if (const While* w = c.get_if<While>()) return !w->trip_count;
    return (c.op() == Op::cond || c.op() == Op::switch_) && !hinted_branch(c) && !deciding_axis(p, c, written);
  });
}

// A note for each sim hint that rank 0's functional run contradicts: the
// run's decision is what the simulation used.
std::vector<Diagnostic> contradicted_hints(const Program& p, const std::map<std::string, std::vector<int64_t>>& rank0) {
  std::vector<Diagnostic> notes;
  std::function<void(const Block&)> walk = [&](const Block& b) {
    for (const auto& c : b) {
      std::optional<int64_t> hinted = hinted_branch(c);  // a cond's: 1 then, 0 else
      const char* field = c.op() == Op::cond ? "taken" : "branch";
      if (const While* w = c.get_if<While>()) hinted = w->trip_count, field = "trip_count";
      auto it = rank0.find(c.id());
      if (hinted && it != rank0.end()) {
        const auto differs = std::find_if(it->second.begin(), it->second.end(), [&](int64_t d) { return d != *hinted; });
        if (differs != it->second.end())
          notes.push_back({ErrorKind::schedule, p.file, c.pointer + "/sim/" + field,
                           "note: the hint says " + std::string(field) + " " + std::to_string(*hinted) + ", but rank 0's functional run gave " +
                               std::to_string(*differs) + " (execution " + std::to_string(differs - it->second.begin() + 1) + " of " +
                               std::to_string(it->second.size()) + "); the simulation follows the functional run"});
      }
      for_each_sub_block(c, walk);
    }
  };
  walk(p.program);
  return notes;
}

}  // namespace

Expected<sim::SimResult> predict(const Program& p, const sim::Machine& m, const sim::SimOptions& options) {
  if (!unhinted_control_flow(p)) return sim::simulate(p, m, nullptr, options);
  ExecOptions functional;
  functional.max_trip_count = options.max_trip_count;
  if (options.progress)
    functional.progress = [&](const ExecProgress& e) { options.progress({e.done, 0, e.elapsed_s, true}); };
  auto run = make_cpu_backend()->run(p, functional);
  if (!run) return run.errors();
  auto r = sim::simulate(p, m, &run->decisions, options);
  if (r && !run->decisions.empty()) r->notes = contradicted_hints(p, run->decisions[0]);
  return r;
}

}  // namespace thunky
