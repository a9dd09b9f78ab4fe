// Calibration from measurements: the standard stdout of nccl-tests
// (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
// sendrecv_perf), or the JSON report of its -J, read into rows, and the
// NCCL model of an axis fitted to them (thunky-calibrate nccl-tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "sim/machine.h"
#include "sim/nccl_model.h"

namespace thunky::sim {

// One size of one nccl-tests run.
struct NcclTestRow {
  Op op = Op::all_reduce;  // collective_permute for sendrecv_perf
  int64_t ranks = 0;
  double bytes = 0;                      // the "size" column
  double out_of_place_s = 0, in_place_s = 0;  // 0 where the column reads N/A
  // The hosts its "#  Rank" lines name, and the ranks on each (0 where
  // they differ); 0 and 0 where the run lists no ranks.
  int64_t hosts = 0, ranks_per_host = 0;
  // The groups that NCCL_TESTS_SPLIT made of the run's ranks, each running
  // its own collective at the same time ("#  Rank k Group g" lines); ranks,
  // hosts and ranks_per_host are the first rank's group's.
  int64_t groups = 1;
  // The run waited for the GPUs after every iteration ("# Blocking
  // Enabled", nccl-tests -z): its times hold that wait.
  bool blocking = false;
  // The collectives each iteration launched as one NCCL group ("agg iters:
  // k", nccl-tests -m k); the time is per collective, their latencies
  // overlapped.
  int64_t grouped = 1;
  // The GPUs whose part of each collective one thread of the run launches
  // (the "# nThread" line's nGpus, -g k); 1 where no header says, 0 under
  // CUDA graphs ("graph: 1"), where the thread launches a graph instead.
  int64_t gpus_per_thread = 1;
  // What NCCL picked for it where its log says ("ring/Simple", from
  // NCCL_DEBUG=INFO output in the file), else "".
  std::string nccl_pick;
  std::string file;
  int line = 0;          // where the row is in a text file
  std::string pointer;   // where it is in a JSON one (nccl-tests -J): "/results/3"
  // "line 12" or "/results/3".
  std::string where() const { return pointer.empty() ? "line " + std::to_string(line) : pointer; }
  // The measured time (out-of-place, else in-place).
  double seconds() const { return out_of_place_s > 0 ? out_of_place_s : in_place_s; }
};

// Reads one nccl-tests output, or several put one after the other, or the
// JSON file that nccl-tests -J writes (text starting with '{' or '['). The
// collective comes from a "# Collective test starting: X_perf" line, else
// from the file name (all_reduce_perf...); the ranks of each run (from its
// "Collective test starting" line or "# nThread" header on) from its
// "#  Rank k" lines, or nThread x nGpus; the GPUs each thread drives from
// nGpus.
// Throws ThunkyError whose pointer is "line N" (a JSON pointer for JSON) on
// anything it cannot read.
std::vector<NcclTestRow> read_nccl_tests(const std::string& text, const std::string& file);

// V of the ideal formulas (docs/machines.md) for a row (what the engine prices): the size column
// is the gathered result for all_gather, the unreduced input for
// reduce_scatter and the array for the others, as nccl-tests reports it.
double model_bytes(const NcclTestRow& r);

// Why axis `a` cannot stand for the machine a row ran on, or "": a run
// over several hosts on a one-node (switch) axis, a run on one host that
// the axis would split into nodes, or hosts of another size than the
// axis' nodes (group_size), or of different sizes.
std::string machine_mismatch(const AxisLinks& a, const NcclTestRow& r);

// The NCCL model's time for a row on axis `a`, and its pick.
double model_seconds(const AxisLinks& a, const NcclTestRow& r);
NcclChoice model_choice(const AxisLinks& a, const NcclTestRow& r);

struct FitResult {
  AxisLinks axis;                // the fitted axis
  double mean_abs_error = 0;     // over the rows, relative
  double max_abs_error = 0;
};

// Fits the axis' NCCL figures to the rows (least mean relative error of the
// times): the overhead, the host's launch time where a thread drives
// several GPUs, every ring protocol's step latency and efficiency,
// NVLS' bandwidth and latency where the axis has NVLS and the rows hold an
// all_reduce that uses it, and the network's figures where the rows span
// nodes. Deterministic.
FitResult fit_nccl(const AxisLinks& base, const std::vector<NcclTestRow>& rows);

// The most rows a fit takes: it prices every row about 120,000 times
// (some 20 s at this many); nccl-tests runs have tens to hundreds.
inline constexpr size_t kMaxFittedRows = 4096;

}  // namespace thunky::sim
