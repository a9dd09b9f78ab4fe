// thunky-gen matmul: C = A . B from a mesh and two PartitionSpecs, as JAX
// shards it. The plan names which of the four cases of a sharded matmul
// applies, the collectives it needs (with their bytes per device) and the
// local GEMM, and holds the schedule that runs it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace thunky::gen {

struct MeshAxes {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  int64_t devices() const;
  int64_t size_of(const std::vector<std::string>& axes) const;  // product of the named axes' sizes
};

// The mesh axes that shard one dimension, major first (JAX's ("X", "Y")).
using DimAxes = std::vector<std::string>;
// One entry per dimension; an empty entry is a replicated dimension (None).
using PartitionSpec = std::vector<DimAxes>;

// "X=4,Y=2" or JAX's "{'X': 4, 'Y': 2}". Throws std::invalid_argument.
MeshAxes parse_mesh(const std::string& text);
// "X,Y", "None,X+Y", "(X,Y),None", "P('X', None)": one entry per dimension
// of a `rank`-D operand, checked against the mesh (unknown axis, an axis
// used twice). Throws std::invalid_argument naming `what`.
PartitionSpec parse_spec(const std::string& text, const MeshAxes& mesh, size_t rank, const std::string& what);
// "8192x28672". Throws std::invalid_argument naming `what`.
std::vector<int64_t> parse_shape(const std::string& text, const std::string& what);

// A[I, J] notation of a sharded operand: "A[I_X, J_{XY}]", "C[I, K]{U_Y}".
std::string spec_notation(const std::string& array, const std::string& dims, const PartitionSpec& spec, const DimAxes& unreduced = {});

// Case 2 with one operand replicated on the contracting dimension J and the
// other sharded on it over S: AllGather the sharded one (`gather`), or
// slice the replicated one along J over S (free: it is replicated), multiply
// and AllReduce (or ReduceScatter into a sharded output) (`reduce`).
enum class Strategy { gather, reduce };

struct MatmulProblem {
  MeshAxes mesh;
  std::vector<int64_t> lhs, rhs;  // A [I, J], B [J, K]
  PartitionSpec lhs_spec, rhs_spec;
  std::optional<PartitionSpec> out_spec;  // default: as the product leaves C, reduced
  std::string dtype = "bf16";
  Strategy strategy = Strategy::gather;
};

struct PlannedCollective {
  std::string op;       // all_gather, reduce_scatter, all_reduce
  std::string name;     // the command's name in the schedule
  std::string what;     // "A along I", "C"
  DimAxes axes;
  int64_t bytes = 0;    // V of the cost formulas: gathered result, unreduced input, or the array, per device
};

struct MatmulPlan {
  MatmulProblem problem;
  int case_number = 1;  // 1-4 of the scaling vocabulary (4 is resolved by a gather first)
  std::string case_text;
  // Which strategy case 2 can take: false when the other operand cannot be
  // sliced along J (it already uses the axes elsewhere) or it is not case 2.
  bool reduce_possible = false;
  bool is_case2_single = false;  // exactly one operand sharded on J
  PartitionSpec a_spec, b_spec, c_spec;  // as the schedule declares them
  DimAxes unreduced;                     // axes C is a partial sum over after the local GEMM
  std::vector<PlannedCollective> collectives;
  std::vector<int64_t> gemm_shape;  // the local product, [m, k, n] summed over its blocks
  double flops_per_device = 0;
  nlohmann::ordered_json schedule;
};

// Throws std::invalid_argument with a one-line message on an invalid problem.
MatmulPlan plan_matmul(const MatmulProblem& p);

// What a sharding sandbox shows: each operand's sharding, shard shape and
// bytes per device, copies and which devices hold which block; the case,
// its collectives and the local GEMM, with each command's seconds when
// `seconds` (by command name) has them.
void describe_plan(const MatmulPlan& plan, std::ostream& out, const std::map<std::string, double>& seconds = {});

}  // namespace thunky::gen
