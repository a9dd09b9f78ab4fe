// Schedule generators: the collective matmuls for any number of ranks,
// sizes and dtype (AllGather + matmul as a unidirectional or bidirectional
// ring, and the matmul whose output is reduce-scattered), with the two
// baselines overlap is measured against: `blocking` (the collective, then
// one GEMM) and `unsharded` (one device's GEMM with no communication).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace thunky::gen {

struct RingMatmulOptions {
  int64_t ranks = 4;
  int64_t m_block = 64;
  int64_t k = 128;
  int64_t n_block = 64;
  std::string dtype = "f32";
  // Bidirectional only: reproduce the original, literal workspace sizing
  // (min(2, num_pairs) buffers), which races at N = 4.
  bool literal = false;
};

// C = AllGather(A) x B with A sharded by rows and B by columns over mesh
// axis x: A is [N m_block, k], B [k, N n_block], C [N m_block, N n_block].
nlohmann::ordered_json ring_matmul(const RingMatmulOptions& o);
nlohmann::ordered_json bidirectional_ring_matmul(const RingMatmulOptions& o);
nlohmann::ordered_json blocking_matmul(const RingMatmulOptions& o);
// One device: the GEMM every rank of the AllGather variants does, on the
// gathered A ([N m_block, k] x [k, n_block]), with no communication.
nlohmann::ordered_json unsharded_matmul(const RingMatmulOptions& o);

// C = ReduceScatter(A x B) over x with the contraction sharded: A is
// [N m_block, N k] (each rank holds its k columns), B [N k, n_block] (its k
// rows), C [N m_block, n_block] scattered by rows. `k` is per rank here.
// The ring passes a partial sum one rank back per step while the next
// block's GEMM runs; the blocking baseline multiplies, then reduce-scatters.
nlohmann::ordered_json ring_reduce_scatter_matmul(const RingMatmulOptions& o);
// Each row block's two halves travel opposite ways round the ring (m_block >= 2).
nlohmann::ordered_json bidirectional_ring_reduce_scatter_matmul(const RingMatmulOptions& o);
nlohmann::ordered_json blocking_reduce_scatter_matmul(const RingMatmulOptions& o);
// One device: a rank's partial product [N m_block, k] x [k, n_block].
nlohmann::ordered_json unsharded_reduce_scatter_matmul(const RingMatmulOptions& o);

}  // namespace thunky::gen
