#include "sim/machine.h"

#include "core/files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json_reader.h"

namespace thunky::sim {

using namespace json_reader;

namespace {

double positive(Obj& o, std::string_view key, bool required = true, double def = 0) {
  std::optional<Value> v = required ? o.need(key) : o.get(key);
  if (!v) return def;
  return non_negative(*v, o.at(key));
}

void parse_switch(Obj& o, AxisLinks& a) {
  a.egress_bandwidth = positive(o, "egress_bandwidth");
  a.latency_s = positive(o, "latency_s", false);
  if (a.egress_bandwidth <= 0) fail(o.at("egress_bandwidth"), "must be positive");
}

AxisLinks parse_axis(Value j, const std::string& ptr) {
  Obj o(j, ptr);
  AxisLinks a;
  std::string topo = o.str("topology");
  if (topo == "ring") {
    a.topology = AxisLinks::Topology::ring;
    a.wraparound = o.bool_or("wraparound", true);
    a.link_bandwidth = positive(o, "link_bandwidth");
    if (a.link_bandwidth <= 0) fail(o.at("link_bandwidth"), "must be positive");
    a.hop_latency_s = positive(o, "hop_latency_s", false);
  } else if (topo == "switch") {
    a.topology = AxisLinks::Topology::switch_;
    parse_switch(o, a);
  } else if (topo == "hierarchical") {
    a.topology = AxisLinks::Topology::hierarchical;
    a.group_size = as_int(o.need("group_size"), o.at("group_size"));
    if (a.group_size < 1) fail(o.at("group_size"), "must be at least 1");
    Obj inner(o.need("switch"), o.at("switch"));
    parse_switch(inner, a);
    inner.done();
    a.nic_bandwidth = positive(o, "nic_bandwidth");
    if (a.nic_bandwidth <= 0) fail(o.at("nic_bandwidth"), "must be positive");
    a.nic_latency_s = positive(o, "nic_latency_s", false);
  } else {
    fail(o.at("topology"), "unknown topology '" + topo + "' (expected ring, switch or hierarchical)");
  }
  o.done();
  return a;
}

}  // namespace

const AxisLinks* Machine::axis(std::string_view n) const {
  auto it = axes.find(std::string(n));
  if (it != axes.end()) return &it->second;
  it = axes.find("*");
  return it == axes.end() ? nullptr : &it->second;
}

double Machine::peak(DType t) const {
  auto it = peak_flops.find(dtype_name(t));
  if (it != peak_flops.end()) return it->second;
  it = peak_flops.find("f32");
  if (it != peak_flops.end()) return it->second;
  double best = 0;
  for (const auto& [k, v] : peak_flops) best = std::max(best, v);
  return best;
}

namespace {

Machine read_machine(Value j) {
  Obj o(j, "");
  Machine m;
  if (o.str("format") != "thunky.machine/1") fail("/format", "expected \"thunky.machine/1\"");
  m.name = o.str("name");
  Obj chip(o.need("chip"), "/chip");
  Obj peaks(chip.need("peak_flops"), "/chip/peak_flops");
  peaks.each([&](std::string_view key, Value v, std::string at) {
    if (!parse_dtype(key)) fail(at, "unknown dtype '" + std::string(key) + "'");
    m.peak_flops[std::string(key)] = non_negative(v, at);
  });
  if (m.peak_flops.empty()) fail("/chip/peak_flops", "needs at least one dtype");
  m.hbm_bandwidth = positive(chip, "hbm_bandwidth");
  if (m.hbm_bandwidth <= 0) fail("/chip/hbm_bandwidth", "must be positive");
  m.launch_overhead_s = positive(chip, "launch_overhead_s", false);
  m.gemm_efficiency = positive(chip, "gemm_efficiency", false, 1.0);
  if (m.gemm_efficiency <= 0 || m.gemm_efficiency > 1) fail("/chip/gemm_efficiency", "must be in (0, 1]");
  m.source = chip.str("source");
  chip.done();
  std::string lat = o.str_or("latency_model", "floor");
  if (lat != "floor" && lat != "additive") fail("/latency_model", "expected floor or additive");
  m.additive_latency = lat == "additive";
  Obj ao(o.need("axes"), "/axes");
  ao.each([&](std::string_view key, Value v, std::string at) { m.axes[std::string(key)] = parse_axis(v, at); });
  o.done();
  return m;
}

}  // namespace

Machine parse_machine_text(const std::string& text) {
  Document doc(text);
  return read_machine(doc.root());
}

Machine parse_machine(const nlohmann::ordered_json& j) { return parse_machine_text(j.dump()); }

Expected<Machine> load_machine(const std::string& name_or_path, const std::string& models_dir) {
  namespace fs = std::filesystem;
  fs::path path = name_or_path;
  if (!fs::exists(path)) {
    path = fs::path(models_dir) / name_or_path;
    if (!fs::exists(path)) path += ".json";
  }
  if (!fs::exists(path)) return std::vector<Diagnostic>{{ErrorKind::input, name_or_path, "", "no machine model file or name under " + models_dir}};
  std::string error;
  const std::string text = read_input_file(path.string(), error);
  if (!error.empty()) return std::vector<Diagnostic>{{ErrorKind::input, path.string(), "", "the machine model " + error}};
  try {
    return parse_machine_text(text);
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{ErrorKind::input, path.string(), e.pointer(), e.what()}};
  }
}

}  // namespace thunky::sim
