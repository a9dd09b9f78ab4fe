// Collectives priced as NCCL prices and picks them (docs/decisions.md): for
// every algorithm (ring, tree, NVLS, NVLS-tree) and protocol (LL, LL128,
// Simple) that applies, a latency (overhead, base, and a latency per step
// of the algorithm, steps across nodes at the network's) plus the bytes
// over an achievable bus bandwidth (link rate x protocol efficiency, the
// NICs' across nodes). NCCL's tuner picks the one its own constants make
// fastest (NcclParams' defaults on the axis' links); the pick is priced
// with the machine's figures, which thunky-calibrate fits to measurements.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/schedule.h"
#include "sim/machine.h"

namespace thunky::sim {

struct NcclChoice {
  double latency_s = 0, transfer_s = 0;
  NcclAlgo algo = NcclAlgo::ring;
  NcclProto proto = NcclProto::simple;
  double seconds() const { return latency_s + transfer_s; }
};

// One collective over `n` ranks of axis `a` (switch, hierarchical, or a
// ring axis whose two directions count as its link rate). `bytes` is V of
// the ideal formulas: the gathered result (all_gather), the unreduced input
// (reduce_scatter), the array (all_reduce, all_to_all), per device. Only
// the algorithms and protocols allowed on the axis are considered; none
// left is ring/Simple.
// The choice does not depend on the machine's fitted figures.
// `gpus_per_thread`: the GPUs whose part the host thread issuing it
// launches (one in thunky, where each rank has its own; nccl-tests' nGpus;
// 0 under CUDA graphs); it takes at least that many times the axis'
// host_launch_s.
NcclChoice nccl_collective(Op op, const AxisLinks& a, int64_t n, double bytes, int64_t gpus_per_thread = 1);

// `c` lengthened to the host's floor: a thread that drives
// `gpus_per_thread` GPUs issues a collective at most every
// gpus_per_thread x q.host_launch_s, so back-to-back ones take no less.
NcclChoice with_host_floor(NcclChoice c, const NcclParams& q, int64_t gpus_per_thread);

// One send/receive pair of a collective_permute, as ncclSend/ncclRecv run
// it: one protocol over one link (LL up to 16 KiB, NCCL's p2p LL
// threshold, where the axis allows LL; Simple above), paying the overhead, the protocol's base
// latency and one step; within a node over the GPU's NVLink (the ring
// figures), across nodes through its own NIC (the network figures). Alone
// on idle links.
NcclChoice nccl_p2p(const AxisLinks& a, bool across_nodes, double bytes);

// The CTAs (one SM each) NCCL's kernel for a collective of `op` over `n`
// ranks holds, as NCCL sizes them (src/enqueue.cc, topoGetAlgoInfo): NVLS
// and NVLS-tree take q.nvls_channels, a send or receive q.p2p_channels;
// ring and tree start from q.channels and give one up while NCCL's byte
// count (the array; all_gather and reduce_scatter: one rank's part, V/n)
// is below channels x threads x threshold: 512 threads for LL and
// Simple, 640 for LL128 (NCCL_*_MAX_NTHREADS); 8 bytes a thread for LL
// and LL128, 64 for Simple, the ring's LL times n (src/graph/tuning.cc,
// threadThresholds).
int64_t nccl_ctas(Op op, NcclAlgo algo, NcclProto proto, const NcclParams& q, int64_t n, double bytes);

// The bytes a collective moves through each of its GPUs' HBM per byte
// that GPU sends on its links: a reducing ring or tree step reads what
// arrived and the GPU's own part and writes the sum (3); a copy (all_gather,
// all_to_all), a send/receive pair and NVLS, whose switch reduces, read
// once and write once (2).
double nccl_hbm_per_link_byte(Op op, NcclAlgo algo);

// The algorithms an NCCL_ALGO value leaves all_reduce (the one collective
// with a choice here), as bits of AxisLinks::algorithms. NCCL's syntax:
// "Ring,NVLS", "^NVLS", "ring;allreduce:tree" (a first list for every
// collective, then lists for named ones); names in any case, NVLSTree
// and nvls_tree alike; NCCL's algorithms thunky does not model
// (CollNetDirect, CollNetChain, PAT) are dropped. nullopt, with `error`
// set, for a word NCCL does not know or a value that leaves none.
std::optional<uint8_t> nccl_algo_setting(const std::string& value, std::string& error);

// The protocols an NCCL_PROTO value leaves (LL, LL128, Simple), as bits
// of AxisLinks::protocols: one list, or "^" and those left out; lists by
// collective are an error here, since an axis has one set.
std::optional<uint8_t> nccl_proto_setting(const std::string& value, std::string& error);

}  // namespace thunky::sim
