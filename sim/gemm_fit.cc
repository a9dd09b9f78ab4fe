#include "sim/gemm_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/accounting.h"
#include "sim/engine.h"

namespace thunky::sim {

namespace {

Work work_of(const GemmRow& r) {
  Work w;
  w.gemm_m = r.m;
  w.gemm_n = r.n;
  w.gemm_k = r.k;
  w.gemm_batch = 1;
  w.flops = 2.0 * static_cast<double>(r.m) * static_cast<double>(r.n) * static_cast<double>(r.k);
  w.bytes = static_cast<int64_t>(dtype_size(r.dtype)) * (r.m * r.k + r.k * r.n + r.m * r.n);
  return w;
}

// Output tiles [m, n, k] of cuBLAS's tensor-core kernels on Ampere (k 32)
// and Hopper (k 64), and the K overheads tried (prologue and epilogue).
constexpr int64_t kTiles[][3] = {{128, 256, 64}, {256, 128, 64}, {128, 128, 64}, {64, 256, 64}, {256, 64, 64}, {128, 64, 64},
                                 {128, 256, 32}, {256, 128, 32}, {128, 128, 32}, {64, 128, 32}};
constexpr int64_t kKOverheads[] = {0, 32, 64, 128, 192, 256};

struct Scored {
  double mean = 0, max = 0;
};

Scored score(const Machine& m, const std::vector<GemmRow>& rows) {
  Scored s;
  for (const auto& r : rows) {
    const double e = std::abs(gemm_row_seconds(m, r) / r.seconds - 1);
    s.mean += e / static_cast<double>(rows.size());
    s.max = std::max(s.max, e);
  }
  return s;
}

// Sets the peak of one dtype to the one that meets its rows best, the
// other figures held: a scan in log steps around the highest rate a row
// implies, then finer ones around the best.
void fit_peak(Machine& m, const std::string& dtype, const std::vector<GemmRow>& rows) {
  double guess = 0;
  for (const auto& r : rows) guess = std::max(guess, gemm_flops_by_shape(m, work_of(r)) / std::max(r.seconds - m.launch_overhead_s, 1e-12));
  double best = guess, best_err = std::numeric_limits<double>::infinity();
  for (double span : {4.0, 1.1, 1.005}) {
    const double centre = best;
    for (int i = -40; i <= 40; ++i) {
      const double p = centre * std::pow(span, i / 40.0);
      m.peak_flops[dtype] = p;
      const double e = score(m, rows).mean;
      if (e < best_err) best_err = e, best = p;
    }
  }
  m.peak_flops[dtype] = best;
}

}  // namespace

std::vector<std::array<int64_t, 3>> gemm_calibration_shapes() {
  return {{8192, 8192, 8192}, {4096, 4096, 4096}, {2048, 2048, 2048}, {1024, 1024, 1024}, {8192, 8192, 1024}, {4096, 4096, 250},
          {384, 8192, 8192},  {8192, 384, 8192},  {1536, 4096, 4000}, {4096, 1536, 4000}, {640, 640, 8192}};
}

double gemm_row_seconds(const Machine& m, const GemmRow& r) {
  const Work w = work_of(r);
  const double flops_time = gemm_flops_by_shape(m, w) / (m.peak(r.dtype) * m.gemm_efficiency);
  return std::max(flops_time, static_cast<double>(w.bytes) / m.hbm_bandwidth) + m.launch_overhead_s;
}

GemmFit fit_gemm_shapes(const std::vector<GemmRow>& rows, int64_t sm_count, double hbm_bandwidth, double launch_s) {
  std::vector<GemmRow> timed;  // the rows with a time
  std::map<std::string, std::vector<GemmRow>> by_dtype;
  for (const auto& r : rows)
    if (r.seconds > 0) {
      timed.push_back(r);
      by_dtype[std::string(dtype_name(r.dtype))].push_back(r);
    }
  Machine m;
  m.sm_count = sm_count;
  m.hbm_bandwidth = hbm_bandwidth;
  m.launch_overhead_s = launch_s;
  // The tile is the tensor-core kernels': chosen on the 16- and 8-bit
  // float GEMMs where there are any (f32 and f64 run other kernels, whose
  // rates their peaks then absorb).
  std::vector<GemmRow> tiled;
  for (const auto& r : timed)
    if (is_float(r.dtype) && dtype_size(r.dtype) <= 2) tiled.push_back(r);
  if (tiled.empty()) tiled = timed;
  GemmFit best;
  double best_err = std::numeric_limits<double>::infinity();
  for (const auto& tile : kTiles)
    for (int64_t k0 : kKOverheads) {
      m.gemm_tile_m = tile[0];
      m.gemm_tile_n = tile[1];
      m.gemm_tile_k = tile[2];
      m.gemm_k_overhead = k0;
      for (const auto& [dtype, mine] : by_dtype) fit_peak(m, dtype, mine);
      const double err = score(m, tiled).mean;
      if (err < best_err - 1e-12) {
        best_err = err;
        const Scored all = score(m, timed);
        best = {tile[0], tile[1], tile[2], k0, {m.peak_flops.begin(), m.peak_flops.end()}, all.mean, all.max};
      }
    }
  return best;
}

}  // namespace thunky::sim
