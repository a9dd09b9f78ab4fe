#include "sim/machine.h"

#include "core/files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

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

// One protocol's figures ("ring": {"LL": {...}}); each key optional.
void parse_protocols(Obj& o, std::string_view key, NcclProtocol (&protos)[kNcclProtos]) {
  std::optional<Value> v = o.get(key);
  if (!v) return;
  Obj po(*v, o.at(key));
  for (int p = 0; p < kNcclProtos; ++p) {
    const std::string_view name = nccl_proto_name(static_cast<NcclProto>(p));
    std::optional<Value> pv = po.get(name);
    if (!pv) continue;
    Obj f(*pv, po.at(name));
    NcclProtocol& x = protos[p];
    x.base_latency_s = positive(f, "base_latency_s", false, x.base_latency_s);
    x.step_latency_s = positive(f, "step_latency_s", false, x.step_latency_s);
    x.efficiency = positive(f, "efficiency", false, x.efficiency);
    if (x.efficiency <= 0 || x.efficiency > 1) fail(f.at("efficiency"), "must be in (0, 1]");
    x.max_bandwidth = positive(f, "max_bandwidth", false, x.max_bandwidth);
    f.done();
  }
  po.done();
}

// A non-empty list of names ("algorithms", "protocols") as bits: names[k]
// is bit k; `what` names one ("algorithm").
uint8_t parse_name_set(Obj& o, const char* key, const char* what, const std::vector<std::string_view>& names, uint8_t all) {
  std::optional<Value> list = o.get(key);
  if (!list) return all;
  std::string expected;
  for (auto n : names) expected += (expected.empty() ? "" : ", ") + std::string(n);
  if (!list->is_array() || list->empty()) fail(o.at(key), "expected a non-empty list of " + expected);
  uint8_t bits = 0;
  list->each_element([&](size_t i, Value e) {
    const auto it = e.is_string() ? std::find(names.begin(), names.end(), e.str()) : names.end();
    if (it == names.end()) fail(child(o.at(key), i), std::string("unknown ") + what + " (expected one of " + expected + ")");
    bits |= static_cast<uint8_t>(1u << (it - names.begin()));
  });
  return bits;
}

// The collective model of an axis: "collective_model", "algorithms",
// "protocols" and the "nccl" figures (docs/machines.md).
void parse_collective_model(Obj& o, AxisLinks& a) {
  const std::string model = o.str_or("collective_model", a.topology == AxisLinks::Topology::ring ? "ideal" : "nccl");
  if (model != "ideal" && model != "nccl") fail(o.at("collective_model"), "expected ideal or nccl");
  a.nccl = model == "nccl";
  std::vector<std::string_view> algos, protos;
  for (int k = 0; k < kNcclAlgos; ++k) algos.push_back(nccl_algo_name(static_cast<NcclAlgo>(k)));
  for (int k = 0; k < kNcclProtos; ++k) protos.push_back(nccl_proto_name(static_cast<NcclProto>(k)));
  a.algorithms = parse_name_set(o, "algorithms", "algorithm", algos, a.algorithms);
  a.protocols = parse_name_set(o, "protocols", "protocol", protos, a.protocols);
  std::optional<Value> nv = o.get("nccl");
  if (!nv) return;
  if (!a.nccl) fail(o.at("nccl"), "NCCL figures need \"collective_model\": \"nccl\"");
  Obj n(*nv, o.at("nccl"));
  NcclParams& q = a.nccl_params;
  q.overhead_s = positive(n, "overhead_s", false, q.overhead_s);
  parse_protocols(n, "ring", q.ring);
  parse_protocols(n, "tree", q.tree);
  parse_protocols(n, "network", q.network);
  q.nvls_bandwidth = positive(n, "nvls_bandwidth", false, q.nvls_bandwidth);
  q.nvls_latency_s = positive(n, "nvls_latency_s", false, q.nvls_latency_s);
  q.nvls_tuner_bandwidth = positive(n, "nvls_tuner_bandwidth", false, q.nvls_tuner_bandwidth);
  if (std::optional<Value> m = n.get("nvls_min_ranks")) q.nvls_min_ranks = as_int(*m, n.at("nvls_min_ranks"));
  q.multinode_simple_factor = positive(n, "multinode_simple_factor", false, q.multinode_simple_factor);
  q.copy_factor = positive(n, "copy_factor", false, q.copy_factor);
  if (q.copy_factor <= 0) fail(n.at("copy_factor"), "must be positive");
  q.host_launch_s = positive(n, "host_launch_s", false, q.host_launch_s);
  for (auto [key, field] : {std::pair{"channels", &q.channels}, {"nvls_channels", &q.nvls_channels}, {"p2p_channels", &q.p2p_channels}}) {
    if (std::optional<Value> c = n.get(key)) *field = as_int(*c, n.at(key));
    if (*field < 1 || *field > 1024) fail(n.at(key), "expected a count of channels (CTAs) from 1 to 1024");
  }
  n.done();
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
  parse_collective_model(o, a);
  o.done();
  return a;
}

}  // namespace

std::string_view nccl_algo_name(NcclAlgo a) {
  constexpr std::string_view kNames[] = {"ring", "tree", "nvls", "nvls_tree", "p2p"};
  return kNames[static_cast<int>(a)];
}
std::string_view nccl_proto_name(NcclProto p) {
  constexpr std::string_view kNames[] = {"LL", "LL128", "Simple"};
  return kNames[static_cast<int>(p)];
}
std::string nccl_pick_name(NcclAlgo a, NcclProto p) { return std::string(nccl_algo_name(a)) + "/" + std::string(nccl_proto_name(p)); }

// NCCL's tuning figures (src/graph/tuning.cc, NCCL 2.2x): base latency
// {LL, LL128, Simple} Ring {6.6, 14, 8.4} us, Tree {6.8, 14, 8.4} us;
// NVLink step latency Ring {0.6, 1.9, 3.4} us, Tree {0.6, 1.25, 4.0} us;
// network step latency Ring {2.7, 4.0, 14} us, Tree {5.0, 8.5, 14} us;
// bandwidth: Simple near 80% of the link rate, LL128 at 0.92 of Simple,
// LL at half (and at most 141 GB/s on Hopper), Tree LL128 x 7/9, Tree LL / 3.8.
NcclParams::NcclParams() {
  const double ring_base[] = {6.6e-6, 14e-6, 8.4e-6}, ring_step[] = {0.6e-6, 1.9e-6, 3.4e-6};
  const double tree_base[] = {6.8e-6, 14e-6, 8.4e-6}, tree_step[] = {0.6e-6, 1.25e-6, 4.0e-6};
  const double net_ring[] = {2.7e-6, 4.0e-6, 14e-6};
  const double eff_simple = 0.8, eff[] = {0.5 * eff_simple, 0.92 * eff_simple, eff_simple};
  for (int p = 0; p < kNcclProtos; ++p) {
    ring[p] = {ring_base[p], ring_step[p], eff[p], p == 0 ? 141e9 : 0};
    tree[p] = {tree_base[p], tree_step[p], p == 0 ? 0.92 * eff_simple / 3.8 : p == 1 ? 0.92 * eff_simple * 7 / 9 : 0.92 * eff_simple, 0};
    network[p] = {0, net_ring[p], 0.92, 0};
  }
}

const AxisLinks* Machine::axis(std::string_view n) const {
  auto it = axes.find(std::string(n));
  if (it != axes.end()) return &it->second;
  it = axes.find("*");
  return it == axes.end() ? nullptr : &it->second;
}

double Machine::peak(DType t) const {
  auto it = peak_flops.find(dtype_name(t));
  if (it != peak_flops.end()) return it->second;
  // No silent stand-in: a GEMM of a dtype the model does not rate is an error.
  std::string have;
  for (const auto& [k, v] : peak_flops) have += (have.empty() ? "" : ", ") + k;
  throw MachineError("/chip/peak_flops", "machine model '" + name + "' gives no peak_flops for " + std::string(dtype_name(t)) + " (it rates " + have +
                                            ")");
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
    if (m.peak_flops[std::string(key)] <= 0) fail(at, "must be positive (flop/s)");
  });
  if (m.peak_flops.empty()) fail("/chip/peak_flops", "needs at least one dtype");
  m.hbm_bandwidth = positive(chip, "hbm_bandwidth");
  if (m.hbm_bandwidth <= 0) fail("/chip/hbm_bandwidth", "must be positive");
  m.launch_overhead_s = positive(chip, "launch_overhead_s", false);
  m.event_latency_s = positive(chip, "event_latency_s", false);
  if (std::optional<Value> cores = chip.get("host_cores")) {
    m.host_cores = as_int(*cores, "/chip/host_cores");
    if (m.host_cores < 1) fail("/chip/host_cores", "must be at least 1 (the cores that every rank's threads share)");
  }
  m.hbm_bytes = positive(chip, "hbm_bytes", false, 0.0);
  m.gemm_efficiency = positive(chip, "gemm_efficiency", false, 1.0);
  if (m.gemm_efficiency <= 0 || m.gemm_efficiency > 1) fail("/chip/gemm_efficiency", "must be in (0, 1]");
  if (std::optional<Value> sms = chip.get("sm_count")) {
    m.sm_count = as_int(*sms, "/chip/sm_count");
    if (m.sm_count < 1) fail("/chip/sm_count", "must be at least 1");
    Value tile = chip.need("gemm_tile");
    if (!tile.is_array() || tile.size() != 3) fail("/chip/gemm_tile", "expected [m, n, k] of a GEMM tile");
    int64_t* dims[] = {&m.gemm_tile_m, &m.gemm_tile_n, &m.gemm_tile_k};
    tile.each_element([&](size_t i, Value d) {
      *dims[i] = as_int(d, "/chip/gemm_tile/" + std::to_string(i));
      if (*dims[i] < 1) fail("/chip/gemm_tile/" + std::to_string(i), "must be at least 1");
    });
    if (std::optional<Value> k0 = chip.get("gemm_k_overhead")) m.gemm_k_overhead = as_int(*k0, "/chip/gemm_k_overhead");
    if (m.gemm_k_overhead < 0) fail("/chip/gemm_k_overhead", "must not be negative");
  } else if (chip.has("gemm_tile") || chip.has("gemm_k_overhead")) {
    fail("/chip/sm_count", "gemm_tile and gemm_k_overhead need sm_count");
  }
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

// Levenshtein distance: insertions, deletions and substitutions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
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
  if (!fs::exists(path)) {
    // The names there are, and the nearest by edits, so a near miss ("h100") reads as a hint.
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(models_dir, ec))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::string msg = "no machine model file or name under " + models_dir;
    if (!names.empty()) {
      std::sort(names.begin(), names.end());
      auto closest = std::min_element(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
        return edit_distance(a, name_or_path) < edit_distance(b, name_or_path);
      });
      msg += "; the closest is '" + *closest + "' (models: ";
      for (size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
      msg += ")";
    }
    return std::vector<Diagnostic>{{ErrorKind::input, name_or_path, "", msg}};
  }
  std::string error;
  const std::string text = read_input_file(path.string(), error);
  if (!error.empty()) return std::vector<Diagnostic>{{ErrorKind::input, path.string(), "", "the machine model " + error}};
  try {
    Machine m = parse_machine_text(text);
    m.file = path.string();
    return m;
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{ErrorKind::input, path.string(), e.pointer(), e.what()}};
  }
}

}  // namespace thunky::sim
