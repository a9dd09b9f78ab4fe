// Classes of ranks that share one timeline (sim/symmetry.h finds them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/mesh.h"

namespace thunky::sim {

// Along each mesh axis, the smallest translation (a step, round the axis)
// that maps every rank's timeline onto another rank's: the links onto
// links, and every command, collective, pairs list, group and control-flow
// decision onto itself. Ranks whose coordinates agree modulo every axis's
// step have one timeline: their class's representative, whose coordinates
// are those residues, is simulated for all of them.
struct RankClasses {
  std::vector<int64_t> shape;  // the mesh's
  std::vector<int64_t> step;   // per axis, dividing its size: 1 folds the axis whole, its size not at all
  // Per axis, why its step is not 1 (empty where it is): the first command
  // or link that a smaller translation breaks.
  std::vector<std::string> why;

  // Every rank its own class: nothing folds.
  static RankClasses none(const Mesh& mesh, const std::string& why);
  int64_t count() const;  // how many classes (the product of the steps)
  int64_t ranks() const;  // how many ranks (the product of the sizes)
  int64_t class_size() const { return ranks() / count(); }
  // The representative of `rank`'s class: its coordinates modulo the steps.
  int64_t representative(int64_t rank) const;
  // The representatives, in increasing order.
  std::vector<int64_t> representatives() const;
  // A class as a user reads it: "pp=3, dp=*" (an axis folded whole is *,
  // one folded in part gives the residue: "x=1 mod 4").
  std::string label(int64_t representative, const std::vector<std::string>& axis_names) const;
  // What folded and what did not, and why: a line for the whole, then one
  // per axis (thunky-sim --explain-folding).
  std::string explain(const std::vector<std::string>& axis_names) const;
};

}  // namespace thunky::sim
