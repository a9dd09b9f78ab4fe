#include "sim/symmetry.h"

#include "core/accounting.h"

namespace thunky::sim {

bool ranks_symmetric(const Program& p, const Machine& m, const Decisions* decisions) {
  // Axes whose shifts cross nodes at some ranks only (hierarchical, past
  // one group): a shift along them is not the same at every rank.
  std::vector<std::string> spans_nodes;
  for (size_t d = 0; d < p.mesh.axis_names.size(); ++d) {
    const AxisLinks* a = m.axis(p.mesh.axis_names[d]);
    if (!a || (a->topology == AxisLinks::Topology::ring && !a->wraparound)) return false;
    if (a->topology == AxisLinks::Topology::hierarchical && p.mesh.shape[d] > a->group_size) spans_nodes.push_back(p.mesh.axis_names[d]);
  }
  const bool asymmetric = any_command(p.program, [&](const Command& c) {
    if (work_depends_on_rank(c)) return true;
    if (is_collective(c.op) && collective_of(c).groups) return true;
    const CollectivePermute* permute = c.get_if<CollectivePermute>();
    if (!permute) return false;
    return permute->pairs || permute->axis.size() != 1 || std::find(spans_nodes.begin(), spans_nodes.end(), permute->axis[0]) != spans_nodes.end();
  });
  if (asymmetric) return false;
  if (decisions)
    for (const auto& per : *decisions)
      if (per != decisions->front()) return false;
  return true;
}

}  // namespace thunky::sim
