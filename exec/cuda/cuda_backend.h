// The cuda backend's state and stages, shared by its four files (only
// exec/cuda/ includes this):
//  - cuda_backend.cc: plan (placement, streams, what cannot run) and
//    initialise (memory, streams, kernels compiled and loaded, NCCL);
//  - cuda_eager.cc: one iteration issued eagerly by every rank's thread,
//    its timeline and memory read back;
//  - cuda_ops.cc: the leaf commands (copies, fills, maps, reduces, GEMMs,
//    cholesky, PTX kernels and the `kernel` stand-in);
//  - cuda_graph.cc: --graph, the schedule captured once into a CUDA graph
//    with conditional nodes, and its launches.
//
// Every rank has a host thread that issues its program in order, as a CUDA
// program would: commands go asynchronously onto the rank's CUDA streams,
// tokens are events, and only a data-dependent branch (eager mode) makes
// the thread wait, for the predicate. Every leaf command is bracketed by
// two timing events on its stream; times are read against one base event
// per GPU after the iteration (docs/decisions.md, "CUDA backend").
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/init.h"
#include "core/mesh.h"
#include "exec/backend.h"
#include "exec/communicator.h"
#include "exec/cuda/device.h"
#include "exec/cuda/kernel_source.h"
#include "exec/cuda/loopback.h"
#include "exec/monitor.h"
#include "exec/workers.h"

namespace thunky::cuda {

using Clock = std::chrono::steady_clock;

// A device buffer that grows. A buffer it outgrows is kept until release:
// a captured graph may still refer to it.
struct Scratch {
  uint8_t* ptr = nullptr;
  size_t capacity = 0;
  std::vector<uint8_t*> retired;
  uint8_t* get(size_t bytes, const std::string& what, int device) {
    if (bytes > capacity) {
      if (ptr) retired.push_back(ptr);
      ptr = static_cast<uint8_t*>(device_alloc(bytes, what, device));
      capacity = bytes;
    }
    return ptr;
  }
  void release() {
    retired.push_back(ptr);
    for (auto* p : retired)
      if (p) cudaFree(p);
    retired.clear();
    ptr = nullptr;
    capacity = 0;
  }
};

struct StreamState {
  cudaStream_t stream = nullptr;
  Scratch temp;         // operands staged aside (overlaps), gemm temporaries
  Scratch workspace;    // cuBLASLt's
  Scratch solver_work;  // cuSOLVER's
};

// One timed command of an iteration: its events index the rank's pool.
// Its id, names and work are made when the timeline is read, not while
// the command is issued (the host time of issuing is measured).
struct Timed {
  const Command* cmd;
  int64_t instance;  // the k-th run of it inside a loop, else -1
  StreamId stream;
  size_t start, end;
};
struct TimedFlow {
  std::string from, to, token;
  size_t from_event, to_event;
  bool join;
};

struct RankState {
  int64_t rank = 0;
  int device = 0;
  RankCtx ctx;
  std::vector<int64_t> axis_values;
  std::vector<uint8_t*> buffers;  // device memory, by buffer
  std::map<StreamId, StreamState> streams;
  EventPool timing{cudaEventDefault};
  EventPool joins{cudaEventDisableTiming};
  cusolverDnHandle_t solver = nullptr;
  int* host_scalar = nullptr;  // pinned: eager predicates
  std::unordered_map<const Command*, cudaKernel_t> kernels;  // map, reduce and ptx kernels of this rank
  // Per iteration:
  std::vector<Timed> timed;
  std::vector<TimedFlow> flows;
  std::unordered_map<const Command*, int64_t> instances;
  std::map<std::string, std::vector<int64_t>> decisions;
  int64_t commands = 0;
  // Host time spent issuing the compute commands (kernels, copies, fills,
  // GEMMs) and how many: the eager dispatch cost, without the waits of
  // collectives and predicates.
  double issue_s = 0;
  int64_t issued = 0;
  std::string last_collective;
  // Tokens of the current iteration: the event to wait on, and the stream
  // and timing event of the body's end (for the flow arrow).
  std::map<std::string, cudaEvent_t> tokens;
  std::map<std::string, std::pair<std::string, size_t>> token_end;
  // --graph: how deep inside conditional bodies the capture is (no events
  // there), and each captured while loop's trip counter and overflow flag.
  int conditional_depth = 0;
  // [counter u64, overflow u64] per captured while loop, sized by plan()
  // before any capture (a buffer reallocated mid-capture would leave the
  // first loops' flags where nothing reads them).
  uint8_t* loop_guards = nullptr;
  std::vector<const Command*> loops;  // the captured while loops, by slot
  std::unique_lock<std::mutex>* turn = nullptr;  // the issuing thread's turn at capture_turn_

  // Forgets what one iteration (or one capture) recorded.
  void start_iteration() {
    timing.rewind();
    joins.rewind();
    timed.clear();
    flows.clear();
    instances.clear();
    decisions.clear();
    tokens.clear();
    token_end.clear();
    commands = 0;
    issue_s = 0;
    issued = 0;
  }
};

struct DeviceState {
  int device = 0;
  int sms = 1;
  cudaStream_t origin = nullptr;
  cudaEvent_t base = nullptr;
};

// Why a schedule cannot be captured into one graph, or "" (cuda_graph.cc).
std::string capture_obstacle(const Block& b, bool in_body);

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override { release(); }
  std::string name() const override { return "cuda"; }
  std::vector<Diagnostic> plan(const Program& p, const ExecOptions& opts) override;
  std::vector<Diagnostic> initialise() override;
  Expected<ExecResult> execute() override;

 private:
  // Runs `f`, turning device faults into diagnostics: a timed-out
  // collective exits 3, a wrong schedule (host deadlock) 1, anything else 2.
  template <typename F>
  std::vector<Diagnostic> guarded(F f) {
    try {
      f();
    } catch (const CollectiveTimeout& e) {
      return {{ErrorKind::timeout, p_->file, "", e.what()}};
    } catch (const Aborted& e) {
      return {{monitor_.deadlocked() ? ErrorKind::schedule : ErrorKind::input, p_->file, "", e.what()}};
    } catch (const ThunkyError& e) {
      return {{e.kind(), p_->file, e.pointer(), e.what()}};
    } catch (const std::exception& e) {
      return {{ErrorKind::input, p_->file, "", e.what()}};
    }
    return {};
  }

  uint8_t* ptr(RankState& s, const View& v) const { return s.buffers[v.buffer] + v.byte_offset(); }
  size_t bytes(const View& v) const { return static_cast<size_t>(v.bytes()); }
  static bool overlap(const uint8_t* a, size_t an, const uint8_t* b, size_t bn) { return an && bn && a < b + bn && b < a + an; }
  cudaStream_t stream(RankState& s, const StreamId& id) { return s.streams.at(id).stream; }
  int sms(const RankState& s) const { return devices_state_.at(s.device).sms; }

  // ---- plan and initialise (cuda_backend.cc)

  // Placement: one GPU per rank through NCCL when there are enough GPUs
  // (or --devices names one per rank), else every rank on one GPU.
  std::vector<Diagnostic> place(const ExecOptions& opts, int count, int64_t ranks);
  std::vector<Diagnostic> place_across_processes(const ExecOptions& opts, int count);
  // Streams, communicators, PTX files; what this backend cannot run.
  void plan_block(const Block& b, std::vector<Diagnostic>& errors);
  void compile_block(RankState& s, const Block& b);
  void allow_shared_memory(cudaKernel_t k, int64_t bytes, int device, const Command& c);
  KernelSource map_source(RankState& s, const Map& m);
  static KernelSource convert_source(DType from, DType to);
  static KernelSource beta_source(DType c, DType acc, double beta);
  void connect_nccl();
  // The device time of one timing-event pair with nothing between, the
  // cost every measured command carries.
  void measure_timing_overhead();
  void release();

  // ---- one iteration, eagerly (cuda_eager.cc)

  // Inputs afresh (as the cpu backend: every iteration starts alike),
  // from host copies made once.
  void set_inputs();
  // One run of the schedule.
  void run_iteration();
  // Every rank's thread issues its program; the monitor turns a host
  // deadlock (ranks waiting in different collectives) into an error.
  void issue_all_ranks();
  // At the end of the program every stream of the rank is joined into computation:0.
  void join_streams(RankState& s);
  void wait_rank(RankState& s, const std::string& what);
  // Waits for a stream; with --timeout, at most that long (NCCL also
  // watches its communicators' errors and aborts them). Past it the run
  // stops with exit 3, naming the rank's last collective.
  void wait_stream(RankState& s, cudaStream_t st, const std::string& what);
  // Records a timing event on the stream; returns its index in the pool.
  size_t timestamp(RankState& s, const StreamId& id);
  void issue_block(RankState& s, const Block& b, const StreamId& cur, bool in_loop);
  // Eager control flow: the predicate to the host, then the branch taken.
  void issue_control_flow(RankState& s, const Command& c, const StreamId& cur, bool in_loop);
  // An eager predicate: to the host, as XLA does without command buffers.
  double read_scalar(RankState& s, const Ref& r, const StreamId& cur);
  void timed_command(RankState& s, const Command& c, const StreamId& cur, bool in_loop);
  void collective(RankState& s, const Command& c, const std::vector<const Command*>& members, const StreamId& cur);
  Report read_timeline();
  std::vector<std::vector<std::vector<uint8_t>>> read_memory();

  // ---- the leaf commands (cuda_ops.cc)

  void compute(RankState& s, const Command& c, const StreamId& cur);
  // Sets every element of d to `pattern`, an element's bits (fill_pattern).
  void fill(RankState& s, const View& d, uint64_t pattern, cudaStream_t st);
  void map(RankState& s, const Command& c, const Map& m, StreamState& ss);
  // cuBLASLt multiplies a and b of one dtype into c of the same, or bf16
  // and f16 operands into an f32 c (the tensor-core path); other dtypes
  // are widened first.
  bool gemm_direct(const View& a, const View& b, const View& c) const {
    const DType t = a.dtype, out = c.dtype;
    if (t != b.dtype) return false;
    return t == out ? Gemm::supports(t) : out == DType::f32 && (t == DType::bf16 || t == DType::f16);
  }
  void gemm(RankState& s, const Command& c, StreamState& ss);
  void scale_by_beta(RankState& s, const Command& c, const View& cv, cudaStream_t st);
  void convert(RankState& s, const void* from, DType ft, void* to, DType tt, int64_t n, cudaStream_t st);
  // cuSOLVER potrf on each matrix of the batch, in place on the result
  // (the operand copied there first); `lower` in cuSOLVER's column-major
  // sense, as the format defines it. info gets cuSOLVER's devInfo.
  void cholesky(RankState& s, const Command& c, StreamState& ss);
  // The `kernel` stand-in: its reads and writes touched, then the stream
  // held for cost.seconds (a `cost` in flops or bytes needs a machine
  // model, which the executor does not price: only the traffic runs).
  void stand_in(RankState& s, const Command& c, cudaStream_t st);

  // ---- --graph (cuda_graph.cc)

  // The whole schedule, every rank, captured into one graph from an
  // origin stream that every rank's streams fork from and join into.
  void capture();
  // One launch of the captured graph; graph_launch_s_ is its host time.
  void launch_graph();
  // Control flow as conditional nodes. A kernel on the stream sets the
  // node's handle from the predicate on the device; each body is captured
  // into the node's body graph through a helper stream that stands in for
  // the current one meanwhile. A while loop's body ends by evaluating its
  // cond block again, and its trip count is guarded on the device: past
  // --max-trip-count the loop stops and a flag is raised, which the run
  // reports as on the eager path.
  void capture_control_flow(RankState& s, const Command& c, const StreamId& cur);
  void conditional_node(RankState& s, const StreamId& cur, cudaGraphConditionalNodeType type, const std::vector<const Block*>& bodies,
                        const std::function<void(cudaGraphConditionalHandle, cudaStream_t)>& set,
                        const std::function<void(cudaGraphConditionalHandle)>& tail = {});
  // One thread: the kernels that set a conditional handle.
  static void launch_one(cudaKernel_t k, const std::vector<uint8_t>& params, cudaStream_t st);
  // Captured into a graph, an event that is read afterwards must be an external node.
  cudaError_t record(cudaEvent_t e, cudaStream_t st);

  const Program* p_ = nullptr;
  const ExecOptions* opts_ = nullptr;
  bool shared_ = true;
  RankBlock block_;           // the ranks this process runs: every rank, or its block across processes
  std::vector<int> devices_;  // by rank of the block
  std::map<std::string, NpyArray> npy_;
  std::vector<std::vector<std::vector<uint8_t>>> initial_;  // [rank of the block][buffer]: inputs' first contents
  std::set<StreamId> streams_;
  std::set<std::vector<int>> member_sets_;
  std::map<const Command*, std::string> ptx_;
  std::string graph_obstacle_;
  // While loops a capture meets, counted by plan() (a function called
  // twice captures its loops twice): the guard slots each rank needs.
  size_t captured_loops_ = 0;

  std::map<int, DeviceState> devices_state_;
  std::unique_ptr<KernelCache> kernels_;
  std::map<int, std::unique_ptr<Gemm>> gemms_;  // by device
  KernelSource support_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  Monitor monitor_;
  // The ranks' issuing threads, kept between iterations: the base event is
  // recorded before they issue, so starting new ones fell on the timeline.
  Workers workers_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<IdExchange> ids_;
  std::unique_ptr<NcclTransport> nccl_;
  double timing_overhead_s_ = 0;

  bool capturing_ = false;
  // Capturing, the ranks' threads issue into one graph, whose objects CUDA
  // does not synchronise (conditional nodes are added to it directly): one
  // thread issues at a time, and lets go only while it waits in a collective.
  std::mutex capture_turn_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  double graph_launch_s_ = 0;
  struct Captured {
    std::vector<Timed> timed;
    std::vector<TimedFlow> flows;
    int64_t commands;
  };
  std::vector<Captured> captured_;
};

}  // namespace thunky::cuda
