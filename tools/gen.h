// Schedule generators: the ring collective matmul of the user guide
// (unidirectional and bidirectional) and its blocking baseline, for any
// number of ranks.
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
  // Bidirectional only: reproduce the guide's literal workspace sizing
  // (min(2, num_pairs) buffers), which races at N = 4.
  bool literal = false;
};

// C = AllGather(A) x B with A sharded by rows and B by columns over mesh axis x.
nlohmann::ordered_json ring_matmul(const RingMatmulOptions& o);
nlohmann::ordered_json bidirectional_ring_matmul(const RingMatmulOptions& o);
nlohmann::ordered_json blocking_matmul(const RingMatmulOptions& o);

}  // namespace thunky::gen
