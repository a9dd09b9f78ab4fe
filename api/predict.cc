#include "api/predict.h"

#include "exec/backend.h"

namespace thunky {

namespace {

bool unhinted_control_flow(const Block& b) {
  return any_command(b, [](const Command& c) {
    return (c.op == Op::cond && !c.rare().sim.taken) || (c.op == Op::switch_ && !c.rare().sim.branch) ||
           (c.op == Op::while_ && !c.rare().sim.trip_count);
  });
}

}  // namespace

Expected<sim::SimResult> predict(const Program& p, const sim::Machine& m, const sim::SimOptions& options) {
  if (!unhinted_control_flow(p.program)) return sim::simulate(p, m, nullptr, options);
  ExecOptions functional;
  functional.max_trip_count = options.max_trip_count;
  if (options.progress)
    functional.progress = [&](const ExecProgress& e) { options.progress({e.done, 0, e.elapsed_s, true}); };
  auto run = make_cpu_backend()->run(p, functional);
  if (!run) return run.errors();
  return sim::simulate(p, m, &run->decisions, options);
}

}  // namespace thunky
