#include "tools/sharding_cost.h"

#include <stdexcept>

#include "core/dtype.h"
#include "core/load.h"
#include "core/validate.h"
#include "sim/collective_cost.h"
#include "sim/engine.h"

namespace thunky::gen {

StepCost price_plan(const MatmulPlan& plan, const sim::Machine& machine) {
  auto program = load_schedule_text(plan.schedule.dump(), "<thunky-gen matmul>");
  if (!program) throw std::logic_error("the generated schedule does not load: " + program.errors().front().str());
  auto result = sim::simulate(program.value(), machine, nullptr);
  if (!result) throw std::invalid_argument("machine " + machine.name + ": " + result.errors().front().message);
  StepCost cost;
  for (const OpRecord& op : result.value().report.ranks.at(0).ops) {
    const double s = op.end_s - op.start_s;
    (op.collective ? cost.comm_s : cost.compute_s) += s;
    cost.seconds[op.op == "gemm" ? "GEMM" : op.name] += s;
  }
  return cost;
}

namespace {

// The problem with its batch dimension set to `batch`.
MatmulProblem with_batch(MatmulProblem p, bool batch_is_i, int64_t batch) {
  (batch_is_i ? p.lhs[0] : p.rhs[1]) = batch;
  return p;
}

StepCost price(MatmulProblem p, Strategy s, const sim::Machine& machine) {
  p.strategy = s;
  return price_plan(plan_matmul(p), machine);
}

}  // namespace

StrategyComparison compare_strategies(const MatmulProblem& problem, const sim::Machine& machine) {
  const MatmulPlan reduce_plan = [&] {
    MatmulProblem p = problem;
    p.strategy = Strategy::reduce;
    return plan_matmul(p);
  }();
  StrategyComparison c;
  const bool batch_is_i = problem.lhs_spec[1].empty();  // A replicated on J: A is the activations
  c.batch_name = batch_is_i ? "I" : "K";
  c.batch = batch_is_i ? problem.lhs[0] : problem.rhs[1];
  c.gather = price(problem, Strategy::gather, machine);
  c.reduce = price(problem, Strategy::reduce, machine);

  // The closed form's constants.
  const DimAxes& s_axes = batch_is_i ? problem.rhs_spec[0] : problem.lhs_spec[1];
  const DimAxes& batch_axes = batch_is_i ? problem.lhs_spec[0] : problem.rhs_spec[1];
  const MeshAxes& mesh = problem.mesh;
  const double n = static_cast<double>(mesh.size_of(s_axes));
  const DType dt = *parse_dtype(problem.dtype);
  const double es = static_cast<double>(dtype_size(dt));
  c.c_flops = machine.peak(dt) * machine.gemm_efficiency;
  std::vector<sim::AxisSpan> spans;
  for (const auto& a : s_axes) {
    const sim::AxisLinks* links = machine.axis(a);
    if (!links) throw std::invalid_argument("machine " + machine.name + " does not model mesh axis " + a);
    spans.push_back({links, mesh.size_of({a})});
  }
  const double big = 1e12;
  c.w_ici = big / sim::collective_cost(Op::all_gather, spans, big).transfer_s;
  const double d = static_cast<double>(problem.lhs[1]);
  const double k = reduce_plan.collectives.back().op == "all_reduce" ? 2 : 1;
  const double denominator = k * es - 2 * (1 - 1 / n) * d * c.w_ici / c.c_flops;
  if (denominator > 0) c.closed_form_batch = es * d / denominator * static_cast<double>(mesh.size_of(batch_axes));

  // The simulated change of sides, in steps of the device count.
  const int64_t step = mesh.devices();
  auto reduce_wins = [&](int64_t b) {
    MatmulProblem p = with_batch(problem, batch_is_i, b);
    return price(p, Strategy::reduce, machine).total_s() <= price(p, Strategy::gather, machine).total_s();
  };
  int64_t lo = 0, hi = step;  // lo: reduce wins (0 = none tried), hi: gather wins
  for (;;) {
    bool reduce_cheaper;
    try {
      reduce_cheaper = reduce_wins(hi);
    } catch (const std::invalid_argument&) {
      return c;  // the operands grew past the limit on one array: no change of sides below it
    }
    if (!reduce_cheaper) break;
    lo = hi;
    if (hi > (int64_t{1} << 31) / 2) return c;
    hi *= 2;
  }
  while (hi - lo > step) {
    const int64_t mid = lo + (hi - lo) / 2 / step * step;
    (reduce_wins(mid) ? lo : hi) = mid;
  }
  if (lo > 0) c.flip_low = lo;
  c.flip_high = hi;
  return c;
}

}  // namespace thunky::gen
