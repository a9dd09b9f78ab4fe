// GEMM pricing by shape fitted to measured GEMMs (thunky-calibrate exec
// --backend cuda): the chip's tile, its K overhead and every dtype's peak,
// as thunky-sim prices GEMMs (gemm_flops_by_shape).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "sim/machine.h"

namespace thunky::sim {

// One measured GEMM: [m, k] x [k, n] of one dtype.
struct GemmRow {
  DType dtype = DType::bf16;
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
};

// The [m, n, k] shapes thunky-calibrate exec times on a GPU: large squares
// (the peak), short K (the K overhead), and products skinny in M or in N
// and K off the tile's multiples (which tile and how it is rounded).
std::vector<std::array<int64_t, 3>> gemm_calibration_shapes();

// thunky-sim's time for a row on machine `m`: the GEMM by shape at its
// dtype's peak and gemm_efficiency, or its bytes (a, b and c once) at
// hbm_bandwidth where that takes longer, plus the launch overhead.
double gemm_row_seconds(const Machine& m, const GemmRow& r);

struct GemmFit {
  int64_t tile_m = 0, tile_n = 0, tile_k = 0, k_overhead = 0;
  std::map<std::string, double> peak_flops;      // by dtype name, at gemm_efficiency 1
  double mean_abs_error = 0, max_abs_error = 0;  // relative, over the rows
};

// The tile (among those cuBLAS takes on Ampere and Hopper), the K overhead
// and each dtype's peak that make thunky-sim's GEMM times meet the rows
// with the least mean relative error (the tile and K overhead on the 16-
// and 8-bit float rows where there are any: the tensor-core kernels'), on a GPU of `sm_count`
// multiprocessors whose memory moves `hbm_bandwidth` bytes/s and whose
// commands cost `launch_s` more. Each dtype of the rows gets its peak.
GemmFit fit_gemm_shapes(const std::vector<GemmRow>& rows, int64_t sm_count, double hbm_bandwidth, double launch_s);

}  // namespace thunky::sim
