#include "sim/symmetry.h"

#include "core/accounting.h"

namespace thunky::sim {

bool ranks_symmetric(const Program& p, const Machine& m, const Decisions* decisions) {
  for (const auto& name : p.mesh.axis_names) {
    const AxisLinks* a = m.axis(name);
    if (!a || (a->topology == AxisLinks::Topology::ring && !a->wraparound)) return false;
  }
  const bool asymmetric = any_command(p.program, [](const Command& c) {
    if (work_depends_on_rank(c)) return true;
    if (is_collective(c.op) && c.rare().groups) return true;
    return c.op == Op::collective_permute && (c.rare().pairs || c.axis.size() != 1);
  });
  if (asymmetric) return false;
  if (decisions)
    for (const auto& per : *decisions)
      if (per != decisions->front()) return false;
  return true;
}

}  // namespace thunky::sim
