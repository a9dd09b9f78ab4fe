// Machine models (thunky.machine/1): chip throughput and the interconnect
// of every mesh axis, loaded strictly (unknown keys are errors).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"

namespace thunky::sim {

// NCCL's algorithms and protocols, as its tuning model prices them; the
// first kNcclAlgos are the collectives' ("algorithms" on an axis picks
// among them), p2p is a collective_permute's send/receive.
enum class NcclAlgo : uint8_t { ring, tree, nvls, nvls_tree, p2p };
enum class NcclProto : uint8_t { ll, ll128, simple };
constexpr int kNcclAlgos = 4, kNcclProtos = 3;
std::string_view nccl_algo_name(NcclAlgo a);    // "ring", "tree", "nvls", "nvls_tree", "p2p"
std::string_view nccl_proto_name(NcclProto p);  // "LL", "LL128", "Simple"
std::string nccl_pick_name(NcclAlgo a, NcclProto p);  // "ring/LL128"

// One protocol of one algorithm: a latency (base, plus per step of the
// algorithm) and an achievable bus bandwidth, a fraction of the link rate
// (the protocol's efficiency), capped where NCCL caps it.
struct NcclProtocol {
  double base_latency_s = 0, step_latency_s = 0;
  double efficiency = 1;    // of the axis' link rate (egress, or the NICs across nodes)
  double max_bandwidth = 0;  // bytes/s; 0 = no cap
};

// The NCCL cost model of an axis (docs/decisions.md, "Collectives as NCCL
// runs them"). Defaults are NCCL's own tuning figures (src/graph/tuning.cc)
// for NVLink and InfiniBand; machine files calibrate them from nccl-tests
// runs (thunky-calibrate).
struct NcclParams {
  double overhead_s = 0;  // per collective: launch and synchronisation the tuning tables leave out
  NcclProtocol ring[kNcclProtos], tree[kNcclProtos];
  NcclProtocol network[kNcclProtos];  // a step across nodes (hierarchical): latency, and efficiency of the NICs
  double nvls_bandwidth = 0;           // bus bandwidth of NVLS all_reduce (NVLink SHARP); 0 = no NVLS
  double nvls_latency_s = 25e-6;
  // The NVLS bus bandwidth NCCL's tuner expects when it picks (its own
  // constants: about 476 GB/s on 8 H100s); 0 = nvls_bandwidth. A fit moves
  // what NVLS achieves, not what NCCL expects of it.
  double nvls_tuner_bandwidth = 0;
  int64_t nvls_min_ranks = 5;  // NCCL enables NVLS from this many GPUs of a node (Hopper)
  double multinode_simple_factor = 1.4;  // NCCL's latency factor of multi-node Ring/Simple all_reduce
  // The collectives that only move data (all_gather, all_to_all) run the
  // node's links at this multiple of the ring figures, which the reducing
  // ones (all_reduce, reduce_scatter) run at: NCCL's copy and reduce
  // kernels differ by up to 10% either way, by machine.
  double copy_factor = 1.0;
  // The host's time to issue one GPU's part of a collective. A thread that
  // drives k GPUs (nccl-tests -g k, or one process for a node) issues one
  // collective at most every k x this, and back-to-back collectives take
  // no less: the GPUs' work hides behind the launches, not after them.
  // thunky's ranks each have their own thread (k = 1). 0 = no floor.
  double host_launch_s = 0;
  // The CTAs an NCCL kernel holds, one SM each, as NCCL sizes them
  // (src/enqueue.cc, topoGetAlgoInfo): ring and tree start from the
  // communicator's `channels` (NCCL's topology search sets them; 24 is
  // what an 8-GPU H100 node's AllGather holds, as published) and give one
  // up while the bytes are fewer than channels x threads x the protocol's
  // threshold; NVLS takes `nvls_channels` (NVLS_NCHANNELS_SM90 = 16, "NVLS
  // should not need more than 16 channels to get peak BW"); each send or
  // receive of a collective_permute `p2p_channels` (ncclTopoComputeP2pChannels
  // gives a peer a power of two of them). Each default reaches the link
  // rate the protocols are fitted to; fewer move proportionally less.
  int64_t channels = 24, nvls_channels = 16, p2p_channels = 8;
  NcclParams();
};

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
  // How collectives are priced: the ideal formulas (docs/machines.md), or as
  // NCCL runs them (the default for switch and hierarchical axes).
  bool nccl = false;
  uint8_t algorithms = 0xf;  // allowed NcclAlgo bits ("algorithms", as NCCL_ALGO)
  uint8_t protocols = 0x7;   // allowed NcclProto bits ("protocols", as NCCL_PROTO)
  NcclParams nccl_params;
};

// An error in a machine model, its pointer into the model's file (a field
// a command needs and the model lacks).
class MachineError : public ThunkyError {
 public:
  using ThunkyError::ThunkyError;
};

struct Machine {
  std::string name;
  std::string source;
  std::string file;  // the file it was read from (empty: built in memory)
  std::map<std::string, double, std::less<>> peak_flops;  // by dtype name
  double hbm_bandwidth = 0;
  double hbm_bytes = 0;  // the memory a device holds (0: not modelled); thunky-gen transformer refuses layouts past it
  double launch_overhead_s = 0;
  // From an event's record to the next command of a stream that waits for
  // it (async_start's fork, async_done's join): a host thread's wake-up on
  // the cpu backend, the device's cross-stream dependency on a GPU.
  double event_latency_s = 0;
  // The ranks are threads of one host of this many cores (the cpu
  // backend): a command of any rank runs on a free core at the full rate,
  // or waits for one, first come first served. 0: every rank is a device
  // of its own, whose concurrent kernels share it.
  int64_t host_cores = 0;
  double gemm_efficiency = 1;
  // GEMMs priced by shape (all three set) or at gemm_efficiency of peak
  // (none set): the output is cut into tiles of gemm_tile [m, n], which
  // the sm_count streaming multiprocessors take in waves, each tile's K
  // loop rounded up to gemm_tile's k and paying gemm_k_overhead more
  // (its prologue and epilogue, in units of K).
  int64_t sm_count = 0;
  int64_t gemm_tile_m = 0, gemm_tile_n = 0, gemm_tile_k = 0;
  int64_t gemm_k_overhead = 0;
  bool additive_latency = false;  // latency_model: floor (false) or additive
  std::map<std::string, AxisLinks> axes;  // "*" serves every axis not named

  // The links of a mesh axis, or nullptr when neither it nor "*" is modelled.
  const AxisLinks* axis(std::string_view name) const;
  // Peak flop/s for a dtype; throws ThunkyError when the model gives none.
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
