// What a sharded matmul costs on a machine model, priced by the simulator
// itself (so thunky-gen and thunky-sim never disagree), and case 2's two
// strategies compared, with the batch size where the cheaper one changes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "sim/machine.h"
#include "tools/sharding.h"

namespace thunky::gen {

// The plan's schedule simulated with nothing overlapping (it runs on one
// stream): seconds of its collectives and of its local compute.
struct StepCost {
  double comm_s = 0, compute_s = 0;
  std::map<std::string, double> seconds;  // by command name; "GEMM" sums the local GEMM's blocks
  double total_s() const { return comm_s + compute_s; }
};
// Throws std::invalid_argument when the machine cannot price it (no peak
// for the dtype, an axis it does not model).
StepCost price_plan(const MatmulPlan& plan, const sim::Machine& machine);

// Case 2, X[B, D] . W[D_S, F] (or its mirror A[I, J_S] . B[J, K], whose
// batch is K): AllGather the weight (`gather`) or slice the activations
// and AllReduce (`reduce`). With nothing overlapping, and n = |S|, s the
// element size, C the GEMM rate (peak x gemm_efficiency) and W_ici the
// bandwidth of an AllGather over S (V / T for large V), per device:
//   gather: s D F / W_ici + 2 B D F / C
//   reduce: 2 B D F / (n C) + k s B F / W_ici   (k = 2 AllReduce, 1 ReduceScatter)
// reduce is cheaper below B* = s D / (k s - 2 (1 - 1/n) D W_ici / C), gather
// above it; when the denominator is not positive reduce always wins. B and
// F here are the local (per-device) batch and free dimensions.
struct StrategyComparison {
  std::string batch_name;  // "I" or "K"
  int64_t batch = 0;       // the problem's batch (global)
  StepCost gather, reduce;
  double c_flops = 0, w_ici = 0;         // the closed form's C and W_ici
  std::optional<double> closed_form_batch;  // B* (global), none when reduce always wins
  // Where the simulated costs change sides, searched in steps of the mesh's
  // device count: the last batch where reduce is cheaper and the first where
  // gather is; none when no change below 2^31 (or below the
  // size where an operand would pass 2^40 elements).
  std::optional<int64_t> flip_low, flip_high;
};
// Requires plan.is_case2_single and plan.reduce_possible.
StrategyComparison compare_strategies(const MatmulProblem& problem, const sim::Machine& machine);

}  // namespace thunky::gen
