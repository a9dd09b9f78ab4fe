// report.json (thunky.report/1), written by thunky-sim and thunky-exec
// alike, its summary statistics, the Chrome trace and the summary table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "traces/name.h"

namespace thunky {

struct OpRecord {
  Name id;  // lowered JSON pointer, plus #k for the k-th instance inside a loop
  Name op;
  Name name;
  Name stream;
  double start_s = 0, end_s = 0;
  int64_t bytes = 0;
  double flops = 0;
  bool collective = false;  // derived from op, not serialised
  Name algorithm = {};  // sim, NCCL model: the algorithm and protocol a collective got ("nvls/Simple")
  // A collective: when its data began to move, once every member had
  // arrived. start_s is when this rank arrived; [start_s, transfer_start_s)
  // is waiting for the others, [transfer_start_s, end_s] the transfer.
  // Absent where the backend cannot tell them apart (all transfer).
  std::optional<double> transfer_start_s = std::nullopt;
  double transfer_start() const { return transfer_start_s.value_or(start_s); }
  // sim: of end_s - start_s, the seconds lost to interference (a kernel
  // slowed by a collective's CTAs and HBM traffic beside it); solo, it
  // would have taken the rest.
  double interference_s = 0;
};

// A fork or join edge between two streams of one rank (async_start / async_done).
struct FlowEdge {
  Name from_stream, to_stream;
  double from_s = 0, to_s = 0;
  Name token;
  bool join = false;
};

// Communication is waiting (arrived, the others not yet) and transfer;
// comm_s = wait_s + transfer_s, and of the exposed part (not under
// compute) exposed_comm_s = exposed_wait_s + exposed_transfer_s.
struct RankStats {
  double compute_s = 0, comm_s = 0, exposed_comm_s = 0, overlap_fraction = 0;
  double wait_s = 0, transfer_s = 0, exposed_wait_s = 0, exposed_transfer_s = 0;
  // Seconds of the rank's compute ops, and of its collectives, lost to
  // interference (OpRecord::interference_s, summed).
  double compute_interference_s = 0, comm_interference_s = 0;
  int64_t ops = 0;  // ops in the rank's timeline (not written: the ops are)
};

// One rank's statistics gathered op by op, without keeping the ops: the
// unions of its compute and of its communication intervals, merged as the
// ops come. Ops in order of end time (as a simulation finishes them) or of
// start time merge in constant time; any other order merges correctly,
// more slowly.
class TimelineTally {
 public:
  // A collective's transfer starts at `transfer_start_s` (its wait before).
  void add(double start_s, double end_s, bool collective, std::optional<double> transfer_start_s = std::nullopt, double interference_s = 0);
  // When no op added later starts before `horizon`, what lies before it
  // is final: its lengths are summed and only what lies after is kept, so
  // that a long run's tally stays small.
  void fold(double horizon);
  size_t held() const { return compute_.size() + comm_.size() + transfer_.size(); }
  RankStats stats() const;
  double last_end_s() const { return last_end_s_; }

 private:
  std::vector<std::pair<double, double>> compute_, comm_, transfer_;  // disjoint, in order
  // Folded: the lengths of compute, communication and transfer, and of
  // communication and transfer outside compute.
  double compute_s_ = 0, comm_s_ = 0, transfer_s_ = 0, exposed_comm_s_ = 0, exposed_transfer_s_ = 0;
  double compute_interference_s_ = 0, comm_interference_s_ = 0;
  int64_t ops_ = 0;
  double last_end_s_ = 0;
};

struct RankReport {
  int64_t rank = 0;
  std::vector<int64_t> coords;
  std::vector<OpRecord> ops;
  std::vector<FlowEdge> flows;
  RankStats stats;
  // How the trace and picture name it where not by its coordinates (not
  // written): a class of ranks it stands for, "pp=3, dp=* (1024 ranks)".
  std::string label;
  // A folded rank: its timeline is that rank's (listed before it), and its
  // own ops and flows stay empty. Read a rank's ops through
  // Report::timeline, which follows this.
  std::optional<int64_t> same_as;
};

// Utilisation of one directed link over time (sim): (time, fraction of capacity) steps.
struct LinkSeries {
  std::string name;
  int64_t rank = 0;  // the rank the link leaves
  std::vector<std::pair<double, double>> samples;
};

struct Report {
  std::string source;  // "sim" or "exec"
  std::string schedule;
  std::optional<std::string> machine, backend;
  std::vector<std::string> axis_names;
  std::vector<int64_t> mesh_shape;
  double makespan_s = 0;
  std::vector<RankReport> ranks;
  RankStats summary;  // mean over ranks
  std::vector<std::string> critical_path;
  std::vector<double> iteration_makespans_s;  // exec: every timed iteration
  // exec: the untimed iterations run before them (--warmup). A single timed
  // iteration without one is a cold run: thunky-compare warns of it.
  std::optional<int64_t> warmup_iterations;
  // exec, cuda backend: "shared-device" (every rank on one GPU, so the
  // timings are not those of N GPUs) or "device-per-rank"; the device time
  // one pair of timing events adds to every measured command; the host
  // time to issue one compute command eagerly, over every rank's thread
  // (median over iterations), or the host time of one CUDA graph launch
  // (--graph).
  std::optional<std::string> placement;
  std::optional<double> timing_overhead_s, dispatch_s_per_command, graph_launch_s;
  // exec, cpu backend: the cores its compute commands ran on (--host-cores).
  std::optional<int64_t> host_cores;
  // exec across processes (mpirun, srun): how many ran the ranks, each a
  // block, and how far apart their clocks may be: the ranks of every
  // process start each iteration on leaving one barrier, whose measured
  // duration bounds how far apart they left it.
  std::optional<int64_t> processes;
  std::optional<double> clock_uncertainty_s;
  std::vector<LinkSeries> links;              // sim: one counter track per link in the trace

  // The rank whose ops and flows `r` has: r itself, or the rank it is the same as.
  const RankReport& timeline(const RankReport& r) const;
};

bool is_collective_op(const std::string& op);

// Fills per-rank and summary statistics and the critical path from the ops.
void summarize(Report& r);
// What summarize does once each timeline's stats are known (a report built
// without its ops): folded ranks take their source's stats, and the
// summary is the mean over ranks.
void summarize_stats(Report& r);

// report.json and the Chrome trace, written as they go (compact JSON, no
// tree in memory: a report of millions of ops costs its text, not a
// document of it).
void write_report(const Report& r, std::ostream& os);
void write_chrome_trace(const Report& r, std::ostream& os);
// Reads report.json strictly (unknown or repeated keys are errors), with
// simdjson and no tree of the document; expands "same_as" ranks. Throws
// ThunkyError naming the JSON pointer.
Report parse_report(const std::string& text);

// The report with only the listed ranks (and their links), for traces and
// pictures of large meshes. Ranks not in the report are skipped.
Report select_ranks(const Report& r, const std::vector<int64_t>& ranks);

// Seconds as microseconds with three decimals, as the tables print them.
std::string us(double seconds);

// The summary table printed on stdout.
void print_table(const Report& r, std::ostream& os);

// Writes JSON whole or not at all (write_output_file, core/files.h);
// returns an error message or "".
std::string write_json_file(const std::string& path, const nlohmann::ordered_json& j);

}  // namespace thunky
