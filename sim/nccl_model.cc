#include "sim/nccl_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace thunky::sim {

namespace {

// What an axis offers: the link rate within a node (egress of a device),
// the NICs' rate of a node across nodes, and how the ranks split.
struct Shape {
  double intra_bw = 0, inter_bw = 0;
  int64_t per_node = 1, nodes = 1;
};

Shape shape_of(const AxisLinks& a, int64_t n) {
  Shape s;
  if (a.topology == AxisLinks::Topology::ring) {
    s.intra_bw = 2 * a.link_bandwidth;
    s.per_node = n;
    return s;
  }
  s.intra_bw = a.egress_bandwidth;
  if (a.topology == AxisLinks::Topology::hierarchical) {
    s.per_node = std::min(a.group_size, n);
    s.nodes = (n + s.per_node - 1) / s.per_node;
    // One NIC per GPU of a node, as on DGX and HGX systems (rail-optimised).
    s.inter_bw = a.nic_bandwidth * static_cast<double>(s.per_node);
  } else {
    s.per_node = n;
  }
  return s;
}

bool allowed(const AxisLinks& a, NcclAlgo algo) { return (a.algorithms >> static_cast<int>(algo)) & 1u; }
bool allowed(const AxisLinks& a, NcclProto proto) { return (a.protocols >> static_cast<int>(proto)) & 1u; }

// The node's link rate as a collective's ring uses it: copy collectives
// (all_gather, all_to_all) at copy_factor of it.
double intra_rate(Op op, const NcclParams& q, const Shape& s) {
  return op == Op::all_gather || op == Op::all_to_all ? q.copy_factor * s.intra_bw : s.intra_bw;
}

double bandwidth(const NcclProtocol& p, double link) {
  double bw = p.efficiency * link;
  if (p.max_bandwidth > 0) bw = std::min(bw, p.max_bandwidth);
  return bw;
}

// Ring: nsteps = 2(n-1) for all_reduce, n-1 otherwise; of them, the steps
// that cross nodes pay the network's latency; the bus bandwidth is the
// slower of the node's links and its NICs. algBw = busBw * n / nsteps.
NcclChoice ring(Op op, const NcclParams& q, const Shape& s, int64_t n, double bytes, NcclProto proto) {
  const int pi = static_cast<int>(proto);
  const double nsteps = op == Op::all_reduce ? 2.0 * static_cast<double>(n - 1) : static_cast<double>(n - 1);
  const double ninter = s.nodes > 1 ? (op == Op::all_reduce ? 2.0 : 1.0) * static_cast<double>(s.nodes - 1) : 0;
  double latency = q.overhead_s + q.ring[pi].base_latency_s + (nsteps - ninter) * q.ring[pi].step_latency_s + ninter * q.network[pi].step_latency_s;
  if (s.nodes > 1 && op == Op::all_reduce && proto == NcclProto::simple) latency *= q.multinode_simple_factor;
  double bw = bandwidth(q.ring[pi], intra_rate(op, q, s));
  if (s.nodes > 1) bw = std::min(bw, bandwidth(q.network[pi], s.inter_bw));
  return {latency, nsteps / static_cast<double>(n) * bytes / bw, NcclAlgo::ring, proto};
}

// all_to_all, which NCCL runs point to point: every rank sends 1/n of its
// V to each other rank, to those of its node over NVLink and to the others
// through its own NIC (one per GPU), both at once. Unlike a ring, whose
// node-to-node hops share all of a node's NICs, the off-node share of each
// GPU's data leaves through that GPU's NIC alone.
NcclChoice all_to_all(const NcclParams& q, const Shape& s, int64_t n, double bytes) {
  NcclChoice c = ring(Op::all_to_all, q, s, n, bytes, NcclProto::simple);
  if (s.nodes > 1) {
    const int pi = static_cast<int>(NcclProto::simple);
    const double dn = static_cast<double>(n);
    const double on_node = static_cast<double>(s.per_node - 1) / dn * bytes / bandwidth(q.ring[pi], intra_rate(Op::all_to_all, q, s));
    const double off_node = static_cast<double>(n - s.per_node) / dn * bytes / bandwidth(q.network[pi], s.inter_bw / static_cast<double>(s.per_node));
    c.transfer_s = std::max(on_node, off_node);
  }
  return c;
}

// The array's passes through a node's NICs, each way, in NCCL's double
// binary tree across nodes (each tree takes half the array): with two
// nodes each is one tree's root and the other's leaf, so one pass; with
// more, a node inside one tree takes its two children's halves and
// passes its own on, and leaves the other tree: two passes.
double tree_passes(const Shape& s) { return s.nodes > 2 ? 2.0 : 1.0; }

// Tree (all_reduce): a reduce up and a broadcast down a chain within each
// node, so each GPU moves the array twice over its links (algBw = busBw /
// 2); across nodes the double binary tree, through the node's NICs.
NcclChoice tree(const NcclParams& q, const Shape& s, double bytes, NcclProto proto) {
  const int pi = static_cast<int>(proto);
  const double up = static_cast<double>(s.per_node - 1) * q.tree[pi].step_latency_s +
                    std::log2(static_cast<double>(s.nodes)) * q.network[pi].step_latency_s;
  const double latency = q.overhead_s + q.tree[pi].base_latency_s + 2 * up;
  double alg_bw = bandwidth(q.tree[pi], s.intra_bw) / 2;
  if (s.nodes > 1) alg_bw = std::min(alg_bw, bandwidth(q.network[pi], s.inter_bw) / tree_passes(s));
  return {latency, bytes / alg_bw, NcclAlgo::tree, proto};
}

// NVLS (all_reduce on an NVSwitch node, NVLink SHARP; Simple only): the
// switch reduces. `nvls_bandwidth` is its bus bandwidth on 8 GPUs. On n
// GPUs of one node each GPU's links carry its whole array to the switch's
// reductions and its reduced share to the switch's multicast, V (n + 1) / n
// of an array of V: the time is V (n + 1) / n over 9/14 of the 8-GPU bus
// bandwidth (the same on 8 GPUs, where (n + 1) / n x 14/9 = 2 (n - 1) / n).
// `tuned` prices as NCCL's tuner does when it picks, with the bus
// bandwidth the same on every GPU count. Across nodes (NVLS-tree) each
// GPU sends and receives its reduced share of the array through its NIC
// in the double binary tree, at the bus bandwidth over all ranks, and the
// NIC's latency adds the tree's steps.
NcclChoice nvls(const NcclParams& q, const Shape& s, int64_t n, double bytes, bool tuned) {
  const int pi = static_cast<int>(NcclProto::simple);
  const double ranks = static_cast<double>(n);
  double latency = q.overhead_s + q.nvls_latency_s;
  double transfer = 2 * (ranks - 1) / ranks * bytes / q.nvls_bandwidth;
  if (s.nodes == 1 && !tuned) transfer = (ranks + 1) / ranks * bytes * 14 / (9 * q.nvls_bandwidth);
  NcclAlgo algo = NcclAlgo::nvls;
  if (s.nodes > 1) {
    latency += 2 * std::log2(static_cast<double>(s.nodes)) * q.network[pi].step_latency_s;
    transfer = std::max(transfer, tree_passes(s) * bytes / bandwidth(q.network[pi], s.inter_bw));
    algo = NcclAlgo::nvls_tree;
  }
  return {latency, transfer, algo, NcclProto::simple};
}

// Every algorithm and protocol allowed on the axis priced with `q` (NCCL's
// tuning figures), and the fastest taken; none allowed is ring/Simple.
NcclChoice fastest(Op op, const AxisLinks& a, const Shape& s, const NcclParams& q, int64_t n, double bytes) {
  NcclChoice best;
  double best_t = std::numeric_limits<double>::infinity();
  auto consider = [&](const NcclChoice& c) {
    if (c.seconds() < best_t) {
      best_t = c.seconds();
      best = c;
    }
  };
  const bool reduce_all = op == Op::all_reduce;
  for (int p = 0; p < kNcclProtos; ++p) {
    const auto proto = static_cast<NcclProto>(p);
    if (!allowed(a, proto)) continue;
    if (allowed(a, NcclAlgo::ring)) consider(ring(op, q, s, n, bytes, proto));
    if (reduce_all && allowed(a, NcclAlgo::tree) && s.nodes > 1) consider(tree(q, s, bytes, proto));
  }
  const bool nvls_node = a.topology != AxisLinks::Topology::ring && q.nvls_bandwidth > 0 && s.per_node >= q.nvls_min_ranks && allowed(a, NcclProto::simple);
  if (reduce_all && nvls_node && allowed(a, s.nodes > 1 ? NcclAlgo::nvls_tree : NcclAlgo::nvls)) consider(nvls(q, s, n, bytes, /*tuned=*/true));
  if (!std::isfinite(best_t)) return ring(op, q, s, n, bytes, NcclProto::simple);
  return best;
}

// NCCL's own figures for its choice: its tuning constants (NcclParams'
// defaults) on the axis' links, NVLS at the bandwidth NCCL's tuner expects
// and the machine's NVLS latency.
NcclParams tuner_params(const NcclParams& machine, const Shape& s) {
  NcclParams t;
  // NCCL caps LL's bus bandwidth: on one node per architecture, at about
  // 0.31 of the NVLink egress (Ampere 87.7 GB/s of 300, Hopper 141 of 450,
  // Blackwell 282 of 900); across nodes by the hosts' CPUs, 39 GB/s on two
  // nodes and 20.4 on more (Intel's, as DGX and HGX nodes have), for the
  // ring and the tree alike.
  const int ll = static_cast<int>(NcclProto::ll);
  if (s.nodes == 1) t.ring[ll].max_bandwidth = 0.313 * s.intra_bw;
  else t.ring[ll].max_bandwidth = t.tree[ll].max_bandwidth = s.nodes == 2 ? 39e9 : 20.4e9;
  t.nvls_bandwidth = machine.nvls_tuner_bandwidth > 0 ? machine.nvls_tuner_bandwidth : machine.nvls_bandwidth;
  t.nvls_latency_s = machine.nvls_latency_s;
  t.nvls_min_ranks = machine.nvls_min_ranks;
  t.multinode_simple_factor = machine.multinode_simple_factor;
  return t;
}

}  // namespace

NcclChoice nccl_p2p(const AxisLinks& a, bool across_nodes, double bytes) {
  const NcclParams& q = a.nccl_params;
  const NcclProto proto = bytes <= 16384 && allowed(a, NcclProto::ll) ? NcclProto::ll : NcclProto::simple;
  const int pi = static_cast<int>(proto);
  const NcclProtocol& hop = across_nodes ? q.network[pi] : q.ring[pi];
  const double link = across_nodes ? a.nic_bandwidth : a.topology == AxisLinks::Topology::ring ? a.link_bandwidth : a.egress_bandwidth;
  return {q.overhead_s + q.ring[pi].base_latency_s + hop.step_latency_s, bytes / bandwidth(hop, link), NcclAlgo::p2p, proto};
}

NcclChoice with_host_floor(NcclChoice c, const NcclParams& q, int64_t gpus_per_thread) {
  const double floor = static_cast<double>(std::max<int64_t>(gpus_per_thread, 0)) * q.host_launch_s;
  if (c.seconds() < floor) c.latency_s += floor - c.seconds();
  return c;
}

namespace {

// NCCL picks by its tuning model, and the pick then runs at what the
// machine achieves: where the two disagree (a protocol that NCCL's
// constants favour but that runs slower here), measured curves show a
// plateau, and so does the model.
NcclChoice on_the_gpus(Op op, const AxisLinks& a, int64_t n, double bytes) {
  const Shape s = shape_of(a, n);
  const NcclParams& q = a.nccl_params;
  if (op == Op::all_to_all) return all_to_all(q, s, n, bytes);
  const NcclChoice pick = fastest(op, a, s, tuner_params(q, s), n, bytes);
  switch (pick.algo) {
    case NcclAlgo::ring: return ring(op, q, s, n, bytes, pick.proto);
    case NcclAlgo::tree: return tree(q, s, bytes, pick.proto);
    default: return nvls(q, s, n, bytes, /*tuned=*/false);
  }
}

}  // namespace

NcclChoice nccl_collective(Op op, const AxisLinks& a, int64_t n, double bytes, int64_t gpus_per_thread) {
  if (n <= 1) return {};
  return with_host_floor(on_the_gpus(op, a, n, bytes), a.nccl_params, gpus_per_thread);
}

namespace {

std::string lower_without_underscores(const std::string& word) {
  std::string key;
  for (char c : word)
    if (c != '_' && c != ' ') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

// What NCCL_ALGO and NCCL_PROTO name, in NCCL's spelling (matched in any
// case, '_' ignored): the modelled names (bit k is names[k]), NCCL's names
// that thunky does not model (dropped), and the collective whose own list
// counts ("" where lists by collective are not taken).
struct NcclEnvNames {
  const char* variable;
  std::vector<std::string> names, unmodelled;
  std::string collective;
};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Whether `names` holds `key` (lower case, no '_'), and where.
bool find_name(const std::vector<std::string>& names, const std::string& key, size_t& at) {
  for (at = 0; at < names.size(); ++at)
    if (lower_without_underscores(names[at]) == key) return true;
  return false;
}

// One list ("Ring,Tree" or "^NVLS") as bits.
std::optional<uint8_t> name_list(const NcclEnvNames& env, const std::string& list, std::string& error) {
  const bool exclude = !list.empty() && list[0] == '^';
  uint8_t named = 0;
  std::stringstream words(exclude ? list.substr(1) : list);
  for (std::string word; std::getline(words, word, ',');) {
    const std::string key = lower_without_underscores(word);
    size_t at = 0;
    if (find_name(env.unmodelled, key, at)) continue;
    if (!find_name(env.names, key, at)) {
      std::vector<std::string> all = env.names;
      all.insert(all.end(), env.unmodelled.begin(), env.unmodelled.end());
      error = "unknown name '" + word + "' (" + env.variable + " names " + joined(all) + ")";
      return std::nullopt;
    }
    named |= static_cast<uint8_t>(1u << at);
  }
  const uint8_t all = static_cast<uint8_t>((1u << env.names.size()) - 1);
  return exclude ? static_cast<uint8_t>(all & ~named) : named;
}

// NCCL's syntax: a first list for every collective, then "collective:list"
// entries, ';' between them.
std::optional<uint8_t> nccl_env_setting(const NcclEnvNames& env, const std::string& value, std::string& error) {
  uint8_t allowed = static_cast<uint8_t>((1u << env.names.size()) - 1);
  std::stringstream entries(value);
  bool first = true;
  for (std::string entry; std::getline(entries, entry, ';'); first = false) {
    const size_t colon = entry.find(':');
    if (colon == std::string::npos && !first) {
      error = "'" + entry + "': every list but the first names its collective (allreduce:...)";
      return std::nullopt;
    }
    const std::string collective = colon == std::string::npos ? "" : lower_without_underscores(entry.substr(0, colon));
    if (!collective.empty() && env.collective.empty()) {
      error = "'" + entry + "': " + env.variable + " lists by collective are not modelled; give one list for all";
      return std::nullopt;
    }
    auto list = name_list(env, colon == std::string::npos ? entry : entry.substr(colon + 1), error);
    if (!list) return std::nullopt;
    // The first list, then the modelled collective's own.
    if (collective.empty() || collective == lower_without_underscores(env.collective)) allowed = *list;
  }
  if (!allowed) {
    error = "'" + value + "' leaves " + (env.collective.empty() ? std::string("the collectives") : env.collective) + " none of what thunky models (" + joined(env.names) + ")";
    return std::nullopt;
  }
  return allowed;
}

}  // namespace

std::optional<uint8_t> nccl_algo_setting(const std::string& value, std::string& error) {
  // In NcclAlgo's order. Only all_reduce has more than the ring to choose from here.
  return nccl_env_setting({"NCCL_ALGO", {"Ring", "Tree", "NVLS", "NVLSTree"}, {"CollNetDirect", "CollNetChain", "PAT"}, "all_reduce"}, value, error);
}

std::optional<uint8_t> nccl_proto_setting(const std::string& value, std::string& error) {
  // In NcclProto's order.
  return nccl_env_setting({"NCCL_PROTO", {"LL", "LL128", "Simple"}, {}, ""}, value, error);
}

int64_t nccl_ctas(Op op, NcclAlgo algo, NcclProto proto, const NcclParams& q, int64_t n, double bytes) {
  switch (algo) {
    case NcclAlgo::nvls:
    case NcclAlgo::nvls_tree: return q.nvls_channels;
    case NcclAlgo::p2p: return q.p2p_channels;
    case NcclAlgo::ring:
    case NcclAlgo::tree: break;
  }
  const double threads = proto == NcclProto::ll128 ? 640 : 512;
  double threshold = proto == NcclProto::simple ? 64 : 8;
  if (algo == NcclAlgo::ring && proto == NcclProto::ll) threshold *= static_cast<double>(n);
  const bool per_rank = op == Op::all_gather || op == Op::reduce_scatter;
  const double count = per_rank && n > 0 ? bytes / static_cast<double>(n) : bytes;
  int64_t channels = q.channels;
  while (channels >= 2 && count < static_cast<double>(channels) * threads * threshold) --channels;
  return channels;
}

double nccl_hbm_per_link_byte(Op op, NcclAlgo algo) {
  const bool reduces = op == Op::all_reduce || op == Op::reduce_scatter;
  return reduces && (algo == NcclAlgo::ring || algo == NcclAlgo::tree) ? 3.0 : 2.0;
}

}  // namespace thunky::sim
