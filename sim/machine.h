// Machine models (thunky.machine/1): chip throughput and the interconnect
// of every mesh axis, loaded strictly (unknown keys are errors).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"

namespace thunky::sim {

struct AxisLinks {
  enum class Topology { ring, switch_, hierarchical };
  Topology topology = Topology::ring;
  // ring
  bool wraparound = true;
  double link_bandwidth = 0;  // bytes/s in one direction of one link
  double hop_latency_s = 0;
  // switch, and the inner switch of hierarchical
  double egress_bandwidth = 0;  // bytes/s out of one device
  double latency_s = 0;
  // hierarchical
  int64_t group_size = 1;
  double nic_bandwidth = 0;
  double nic_latency_s = 0;
};

struct Machine {
  std::string name;
  std::string source;
  std::map<std::string, double, std::less<>> peak_flops;  // by dtype name
  double hbm_bandwidth = 0;
  double launch_overhead_s = 0;
  double gemm_efficiency = 1;
  bool additive_latency = false;  // latency_model: floor (false) or additive
  std::map<std::string, AxisLinks> axes;  // "*" serves every axis not named

  // The links of a mesh axis, or nullptr when neither it nor "*" is modelled.
  const AxisLinks* axis(std::string_view name) const;
  // Peak flop/s for a dtype (falls back to f32's, then to the largest figure).
  double peak(DType t) const;
};

// Reads a thunky.machine/1 document from its text; throws ThunkyError
// naming the JSON pointer.
Machine parse_machine_text(const std::string& text);
// The same for a document held as a JSON tree.
Machine parse_machine(const nlohmann::ordered_json& j);
// `name_or_path` is a file, or the name of one under `models_dir` (with or
// without .json). Errors name the file.
Expected<Machine> load_machine(const std::string& name_or_path, const std::string& models_dir);

}  // namespace thunky::sim
