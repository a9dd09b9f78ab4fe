// The cuda backend: the schedule on NVIDIA GPUs, measured command by
// command (docs/decisions.md, "CUDA backend").
//
// Every rank has a host thread that issues its program in order, as a CUDA
// program would: commands go asynchronously onto the rank's CUDA streams,
// tokens are events, and only a data-dependent branch (eager mode) makes
// the thread wait, for the predicate. Every leaf command is bracketed by
// two timing events on its stream; times are read against one base event
// per GPU after the iteration.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/accounting.h"
#include "core/init.h"
#include "core/mesh.h"
#include "core/validate.h"
#include "exec/backend.h"
#include "exec/communicator.h"
#include "exec/cuda/device.h"
#include "exec/cuda/kernel_source.h"
#include "exec/cuda/loopback.h"
#include "exec/monitor.h"
#include "exec/workers.h"

namespace thunky {

namespace cuda {
namespace {

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
  Scratch loop_guards;  // [counter u64, overflow u64] per loop
  std::vector<std::string> loop_ids;
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

// Why a schedule cannot be captured into one graph, or "". Control flow
// becomes conditional nodes, whose bodies may hold only kernels, copies,
// fills and further conditionals: no events (so no tokens and no timing),
// no collectives (they join other ranks' streams) and no cuSOLVER call.
std::string capture_obstacle(const Block& b, bool in_body) {
  for (const auto& c : b) {
    const Command::Rare& x = c.rare();
    if (in_body) {
      const char* why = c.op == Op::async_start || c.op == Op::async_done ? "tokens (events)"
                        : is_collective(c.op) || c.op == Op::collective_group ? "a collective"
                        : c.op == Op::custom_call                              ? "a cuSOLVER call"
                                                                               : nullptr;
      if (why) return "the " + std::string(op_name(c.op)) + " at " + c.id() + " is inside a cond, switch or while, and a conditional graph node cannot hold " + why;
    }
    // Every block of a cond, switch or while is a conditional body.
    const bool body = in_body || c.op == Op::cond || c.op == Op::switch_ || c.op == Op::while_;
    for (const Block* sub : {&c.body, &x.then_, &x.else_, &x.cond})
      if (auto why = capture_obstacle(*sub, body); !why.empty()) return why;
    for (const auto& br : x.branches)
      if (auto why = capture_obstacle(br, body); !why.empty()) return why;
  }
  return "";
}

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override { release(); }
  std::string name() const override { return "cuda"; }

  std::vector<Diagnostic> plan(const Program& p, const ExecOptions& opts) override {
    p_ = &p;
    opts_ = &opts;
    try {
      int count = 0;
      const cudaError_t e = cudaGetDeviceCount(&count);
      if (e != cudaSuccess || count == 0)
        return {{ErrorKind::input, p.file, "", std::string("no CUDA device (") + (e == cudaSuccess ? "the driver reports no GPU" : cudaGetErrorString(e)) + "); use --backend cpu"}};
      const int64_t ranks = p.mesh.size();
      if (auto errors = place(opts, count, ranks); !errors.empty()) return errors;
      npy_ = load_npy_inits(p);
      std::vector<Diagnostic> errors;
      plan_block(p.program, errors);
      if (!errors.empty()) return errors;
      if (opts.graph) {
        graph_obstacle_ = capture_obstacle(p.program, false);
        if (!graph_obstacle_.empty()) std::cerr << "thunky-exec: --graph: running eagerly: " << graph_obstacle_ << "\n";
      }
    } catch (const ThunkyError& e) {
      return {{ErrorKind::input, p.file, e.pointer(), e.what()}};
    }
    return {};
  }

  std::vector<Diagnostic> initialise() override {
    return guarded([&] {
      const Program& p = *p_;
      const int64_t nranks = p.mesh.size();
      std::set<int> used(devices_.begin(), devices_.end());
      int arch = 1000;
      for (int d : used) {
        cudaDeviceProp prop{};
        THUNKY_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
        arch = std::min(arch, prop.major * 10 + prop.minor);
        DeviceState ds;
        ds.device = d;
        ds.sms = prop.multiProcessorCount;
        THUNKY_CUDA_CHECK(cudaSetDevice(d));
        THUNKY_CUDA_CHECK(cudaStreamCreateWithFlags(&ds.origin, cudaStreamNonBlocking));
        THUNKY_CUDA_CHECK(cudaEventCreate(&ds.base));
        devices_state_[d] = ds;
        gemms_[d] = std::make_unique<Gemm>();  // a cuBLASLt handle serves the device current at its creation
      }
      kernels_ = std::make_unique<KernelCache>(arch);
      support_ = support_kernels();
      ranks_.clear();
      for (int64_t r = 0; r < nranks; ++r) {
        auto s = std::make_unique<RankState>();
        s->rank = r;
        s->device = devices_[static_cast<size_t>(r)];
        s->ctx = rank_ctx(p.mesh, r);
        s->axis_values = s->ctx.coords;
        THUNKY_CUDA_CHECK(cudaSetDevice(s->device));
        for (size_t b = 0; b < p.buffers.size(); ++b)
          s->buffers.push_back(static_cast<uint8_t*>(device_alloc(p.buffers[b].bytes(), "buffer '" + p.buffers[b].name + "' of rank " + std::to_string(r), s->device)));
        for (const StreamId& id : streams_) THUNKY_CUDA_CHECK(cudaStreamCreateWithFlags(&s->streams[id].stream, cudaStreamNonBlocking));
        THUNKY_CUSOLVER_CHECK(cusolverDnCreate(&s->solver));
        THUNKY_CUDA_CHECK(cudaMallocHost(&s->host_scalar, 8));
        ranks_.push_back(std::move(s));
      }
      // Every generated kernel is compiled now, not while the run is timed.
      for (auto& s : ranks_) compile_block(*s, p.program);
      for (const auto& name : {"thunky_fill", "thunky_touch", "thunky_spin"}) kernels_->get(support_, name);
      if (shared_) comm_ = make_loopback_communicator(monitor_, static_cast<int>(nranks), *kernels_, devices_state_.begin()->second.sms, capture_turn_);
      else connect_nccl();
      measure_timing_overhead();
      // One warm-up run: workspaces, staging and cuBLASLt plans are sized by it.
      run_iteration();
      if (opts_->graph && graph_obstacle_.empty()) capture();
    });
  }

  Expected<ExecResult> execute() override {
    ExecResult result;
    std::vector<Report> timelines;
    std::vector<double> dispatch;
    const int total = std::max(0, opts_->warmup) + std::max(1, opts_->iters);
    auto errors = guarded([&] {
      for (int it = 0; it < total; ++it) {
        run_iteration();
        if (it >= std::max(0, opts_->warmup)) {
          timelines.push_back(read_timeline());
          double issue_s = 0;
          int64_t issued = 0;
          for (auto& s : ranks_) issue_s += s->issue_s, issued += s->issued;
          if (issued) dispatch.push_back(issue_s / static_cast<double>(issued));
        }
        if (it == total - 1) {
          for (auto& s : ranks_) result.decisions.push_back(s->decisions);
          result.memory = read_memory();
        }
      }
    });
    if (!errors.empty()) return errors;
    result.report = median_timeline(std::move(timelines));
    Report& r = result.report;
    r.source = "exec";
    r.backend = "cuda";
    r.schedule = p_->name.empty() ? p_->file : p_->name;
    r.axis_names = p_->mesh.axis_names;
    r.mesh_shape = p_->mesh.shape;
    r.placement = shared_ ? "shared-device" : "device-per-rank";
    result.sm_count = devices_state_.begin()->second.sms;
    r.timing_overhead_s = timing_overhead_s_;
    if (graph_exec_) r.graph_launch_s = graph_launch_s_;
    else if (!dispatch.empty()) {
      std::sort(dispatch.begin(), dispatch.end());
      r.dispatch_s_per_command = dispatch[dispatch.size() / 2];
    }
    return result;
  }

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

  // Placement: one GPU per rank through NCCL when there are enough GPUs
  // (or --devices names one per rank), else every rank on one GPU.
  std::vector<Diagnostic> place(const ExecOptions& opts, int count, int64_t ranks) {
    std::vector<int> devs = opts.devices;
    for (int d : devs)
      if (d < 0 || d >= count)
        return {{ErrorKind::input, p_->file, "", "--devices names GPU " + std::to_string(d) + ", but this machine has " + std::to_string(count) + " (0 to " + std::to_string(count - 1) + ")"}};
    if (devs.empty()) {
      if (ranks > 1 && count >= ranks && have_nccl())
        for (int64_t r = 0; r < ranks; ++r) devs.push_back(static_cast<int>(r));
      else devs = {0};
    }
    if (devs.size() == 1) {
      shared_ = true;
      devices_.assign(static_cast<size_t>(ranks), devs[0]);
      return {};
    }
    if (static_cast<int64_t>(devs.size()) != ranks)
      return {{ErrorKind::input, p_->file, "", "--devices lists " + std::to_string(devs.size()) + " GPUs for " + std::to_string(ranks) + " ranks: list one per rank, or one for all"}};
    if (std::set<int>(devs.begin(), devs.end()).size() != devs.size())
      return {{ErrorKind::input, p_->file, "", "--devices lists a GPU twice: one GPU per rank, or one for all"}};
    if (!have_nccl())
      return {{ErrorKind::input, p_->file, "", "this build has no NCCL: one GPU per rank is not available; pass --devices 0 to run every rank on one GPU"}};
    shared_ = false;
    devices_ = devs;
    return {};
  }

  // Streams, communicators, PTX files; what this backend cannot run.
  void plan_block(const Block& b, std::vector<Diagnostic>& errors) {
    const Program& p = *p_;
    streams_.insert(StreamId{});
    for (const auto& c : b) {
      const Command::Rare& x = c.rare();
      if (c.op == Op::async_start) streams_.insert(c.stream);
      if (c.op == Op::ptx_kernel && !ptx_.count(&c)) {
        const PtxLaunch& l = *x.launch;
        std::string text = l.ptx;
        if (!l.ptx_file.empty()) {
          namespace fs = std::filesystem;
          fs::path path = fs::path(p.file).parent_path() / l.ptx_file;
          std::error_code ec;
          if (!fs::is_regular_file(path, ec)) {
            errors.push_back({ErrorKind::input, p.file, c.pointer + "/ptx_file", "cannot read PTX file '" + path.string() + "'"});
            continue;
          }
          std::ifstream in(path, std::ios::binary);
          std::ostringstream ss;
          ss << in.rdbuf();
          text = ss.str();
        }
        ptx_[&c] = text;
      }
      if (is_collective(c.op)) {
        for (int64_t r = 0; r < p.mesh.size(); ++r) {
          Participants part = participants(p.mesh, r, c.axis, x.groups);
          if (shared_ && part.ranks.size() > static_cast<size_t>(kMaxCombine))
            errors.push_back({ErrorKind::input, p.file, c.pointer, "a collective of " + std::to_string(part.ranks.size()) + " ranks on one GPU: the shared-device placement joins at most " + std::to_string(kMaxCombine)});
          if (!shared_) member_sets_.insert(part.ranks);
          if (!shared_ && (c.op == Op::all_reduce || c.op == Op::reduce_scatter)) {
            DType t = p.buffers[c.src->buffer].dtype;
            if (t == DType::s16 || (t == DType::boolean && (x.reduction == "sum" || x.reduction == "prod")))
              errors.push_back({ErrorKind::input, p.file, c.pointer, "NCCL cannot reduce " + std::string(dtype_name(t)) + " with " + x.reduction + " exactly as thunky defines it; pass --devices 0 to run on one GPU"});
          }
        }
      }
      for (const Block* sub : {&c.body, &x.then_, &x.else_, &x.cond}) plan_block(*sub, errors);
      for (const auto& br : x.branches) plan_block(br, errors);
    }
  }

  void compile_block(RankState& s, const Block& b) {
    for (const auto& c : b) {
      const Command::Rare& x = c.rare();
      if (c.op == Op::map) s.kernels[&c] = kernels_->get(map_source(s, c));
      if (c.op == Op::reduce) {
        const View in = resolve(*p_, *c.src, s.ctx), out = resolve(*p_, *c.out, s.ctx);
        s.kernels[&c] = kernels_->get(reduce_kernel(dtype_of(in), dtype_of(out), x.fn));
      }
      if (c.op == Op::ptx_kernel) s.kernels[&c] = kernels_->get_ptx(ptx_.at(&c), x.launch->kernel_name);
      if (is_collective(c.op) && shared_ && (c.op == Op::all_reduce || c.op == Op::reduce_scatter))
        kernels_->get(combine_kernel(dtype_of(resolve(*p_, *c.src, s.ctx)), x.reduction));
      if (c.op == Op::gemm) {
        const View a = resolve(*p_, *c.a, s.ctx), bv = resolve(*p_, *c.b, s.ctx), cv = resolve(*p_, *c.c, s.ctx);
        if (!gemm_direct(a, bv, cv)) {
          // Through f32 (f64): widening and narrowing maps.
          const DType acc = dtype_of(a) == DType::f64 ? DType::f64 : DType::f32;
          for (DType t : {dtype_of(a), dtype_of(bv), dtype_of(cv)}) {
            kernels_->get(convert_source(t, acc));
            kernels_->get(convert_source(acc, t));
          }
        }
      }
      for (const Block* sub : {&c.body, &x.then_, &x.else_, &x.cond}) compile_block(s, *sub);
      for (const auto& br : x.branches) compile_block(s, br);
    }
  }

  DType dtype_of(const View& v) const { return p_->buffers[v.buffer].dtype; }
  uint8_t* ptr(RankState& s, const View& v) const { return s.buffers[v.buffer] + v.offset * dtype_size(dtype_of(v)); }
  size_t bytes(const View& v) const { return static_cast<size_t>(v.count()) * dtype_size(dtype_of(v)); }
  static bool overlap(const uint8_t* a, size_t an, const uint8_t* b, size_t bn) { return an && bn && a < b + bn && b < a + an; }

  KernelSource map_source(RankState& s, const Command& m) {
    const View out = resolve(*p_, *m.out, s.ctx);
    std::vector<MapOperand> ops;
    for (const auto& [name, r] : m.in) {
      const View v = resolve(*p_, r, s.ctx);
      ops.push_back({name, dtype_of(v), v.count() == 1 && out.count() != 1});
    }
    return map_kernel(*m.expr, ops, p_->mesh.axis_names, dtype_of(out));
  }

  static KernelSource convert_source(DType from, DType to) {
    static const ExprPtr identity = parse_expr("x");
    return map_kernel(*identity, {{"x", from, false}}, {}, to);
  }

  void connect_nccl() {
    ids_ = make_inprocess_id_exchange();
    nccl_ = make_nccl_transport(static_cast<int>(p_->mesh.size()), *ids_, opts_->timeout_s);
    const std::vector<std::vector<int>> sets(member_sets_.begin(), member_sets_.end());
    std::vector<std::thread> threads;
    std::vector<std::string> failures(ranks_.size());
    for (size_t r = 0; r < ranks_.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          nccl_->connect(static_cast<int>(r), ranks_[r]->device, sets);
        } catch (const std::exception& e) {
          failures[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& f : failures)
      if (!f.empty()) throw DeviceError("creating the NCCL communicators: " + f);
  }

  // The device time of one timing-event pair with nothing between, the
  // cost every measured command carries.
  void measure_timing_overhead() {
    RankState& s = *ranks_.front();
    THUNKY_CUDA_CHECK(cudaSetDevice(s.device));
    cudaStream_t st = s.streams.at(StreamId{}).stream;
    constexpr int kPairs = 200;
    s.timing.rewind();
    const size_t first = s.timing.used();
    for (int i = 0; i < 2 * kPairs; ++i) THUNKY_CUDA_CHECK(cudaEventRecord(s.timing.next(), st));
    THUNKY_CUDA_CHECK(cudaStreamSynchronize(st));
    float ms = 0;
    THUNKY_CUDA_CHECK(cudaEventElapsedTime(&ms, s.timing.at(first), s.timing.at(first + 2 * kPairs - 1)));
    timing_overhead_s_ = ms * 1e-3 / kPairs;
    s.timing.rewind();
  }

  // Inputs afresh (as the cpu backend: every iteration starts alike),
  // from host copies made once.
  void set_inputs() {
    const Program& p = *p_;
    if (initial_.empty()) {
      initial_.resize(ranks_.size());
      for (auto& s : ranks_) {
        auto& mine = initial_[static_cast<size_t>(s->rank)];
        mine.resize(p.buffers.size());
        for (size_t b = 0; b < p.buffers.size(); ++b) {
          const Buffer& buf = p.buffers[b];
          if (!buf.bytes() || (buf.role != Role::input && buf.role != Role::inout)) continue;
          mine[b].resize(buf.bytes());
          init_buffer(p, buf, s->rank, npy_, mine[b].data());
        }
      }
    }
    for (auto& s : ranks_) {
      THUNKY_CUDA_CHECK(cudaSetDevice(s->device));
      for (size_t b = 0; b < p.buffers.size(); ++b) {
        const Buffer& buf = p.buffers[b];
        if (!buf.bytes()) continue;
        if (buf.role == Role::input || buf.role == Role::inout) {
          const auto& host = initial_[static_cast<size_t>(s->rank)][b];
          THUNKY_CUDA_CHECK(cudaMemcpy(s->buffers[b], host.data(), host.size(), cudaMemcpyHostToDevice));
        } else {
          THUNKY_CUDA_CHECK(cudaMemset(s->buffers[b], buf.dtype == DType::boolean ? 0 : 0xff, buf.bytes()));
        }
      }
    }
    for (auto& [d, ds] : devices_state_) {
      THUNKY_CUDA_CHECK(cudaSetDevice(d));
      THUNKY_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }

  // One run of the schedule.
  void run_iteration() {
    set_inputs();
    for (auto& s : ranks_) s->start_iteration();
    if (graph_exec_) {
      launch_graph();
      return;
    }
    // No stream of a GPU starts before its base event.
    for (auto& [d, ds] : devices_state_) {
      THUNKY_CUDA_CHECK(cudaSetDevice(d));
      THUNKY_CUDA_CHECK(cudaEventRecord(ds.base, ds.origin));
    }
    for (auto& s : ranks_)
      for (auto& [id, st] : s->streams) THUNKY_CUDA_CHECK(cudaStreamWaitEvent(st.stream, devices_state_.at(s->device).base, 0));
    issue_all_ranks();
    for (auto& s : ranks_) wait_rank(*s, "the end of the iteration");
  }

  // Every rank's thread issues its program; the monitor turns a host
  // deadlock (ranks waiting in different collectives) into an error.
  void issue_all_ranks() {
    std::vector<Workers::Worker*> threads;
    std::vector<std::exception_ptr> failures(ranks_.size());
    for (size_t i = 0; i < ranks_.size(); ++i) monitor_.thread_started();
    for (size_t i = 0; i < ranks_.size(); ++i)
      threads.push_back(workers_.start([&, i] {
        try {
          RankState& s = *ranks_[i];
          std::unique_lock<std::mutex> turn(capture_turn_, std::defer_lock);
          if (capturing_) turn.lock();
          s.turn = &turn;
          THUNKY_CUDA_CHECK(cudaSetDevice(s.device));
          issue_block(s, p_->program, StreamId{}, false);
          join_streams(s);
        } catch (const Aborted&) {
          failures[i] = std::current_exception();
        } catch (const std::exception& e) {
          failures[i] = std::current_exception();
          std::unique_lock<std::mutex> l(monitor_.mutex());
          monitor_.abort(l, e.what(), false);
        }
        ranks_[i]->turn = nullptr;  // the turn itself ended with the try block
        monitor_.thread_finished();
      }));
    for (auto* t : threads) workers_.wait(t);
    // The first real failure, not the aborts it caused.
    for (auto& f : failures) {
      if (!f) continue;
      try {
        std::rethrow_exception(f);
      } catch (const Aborted&) {
      }
    }
    if (monitor_.aborted()) throw Aborted(monitor_.reason());
  }

  // At the end of the program every stream of the rank is joined into computation:0.
  void join_streams(RankState& s) {
    cudaStream_t main = s.streams.at(StreamId{}).stream;
    for (auto& [id, st] : s.streams) {
      if (id == StreamId{}) continue;
      cudaEvent_t e = s.joins.next();
      THUNKY_CUDA_CHECK(cudaEventRecord(e, st.stream));
      THUNKY_CUDA_CHECK(cudaStreamWaitEvent(main, e, 0));
    }
  }

  void wait_rank(RankState& s, const std::string& what) {
    THUNKY_CUDA_CHECK(cudaSetDevice(s.device));
    wait_stream(s, s.streams.at(StreamId{}).stream, what);
  }

  // Waits for a stream; with --timeout, at most that long (NCCL also
  // watches its communicators' errors and aborts them). Past it the run
  // stops with exit 3, naming the rank's last collective.
  void wait_stream(RankState& s, cudaStream_t st, const std::string& what) {
    const std::string pending = s.last_collective.empty() ? what : "the collective " + s.last_collective + " (or work after it, before " + what + ")";
    if (nccl_) return nccl_->wait(static_cast<int>(s.rank), st, pending);
    if (opts_->timeout_s <= 0) {
      THUNKY_CUDA_CHECK(cudaStreamSynchronize(st));
      return;
    }
    const auto start = Clock::now();
    for (;;) {
      const cudaError_t e = cudaStreamQuery(st);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) THUNKY_CUDA_CHECK(e);
      if (std::chrono::duration<double>(Clock::now() - start).count() > opts_->timeout_s)
        throw CollectiveTimeout("rank " + std::to_string(s.rank) + ": " + pending + " did not finish within " + std::to_string(opts_->timeout_s) + " s");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Records a timing event on the stream; returns its index in the pool.
  size_t timestamp(RankState& s, const StreamId& id) {
    const size_t i = s.timing.used();
    THUNKY_CUDA_CHECK(record(s.timing.next(), stream(s, id)));
    return i;
  }

  void issue_block(RankState& s, const Block& b, const StreamId& cur, bool in_loop) {
    for (const auto& c : b) {
      switch (c.op) {
        case Op::async_start: {
          // A dependency event (plain) and timing events (for the flow arrows).
          const size_t fork_t = timestamp(s, cur);
          cudaEvent_t fork = s.joins.next();
          THUNKY_CUDA_CHECK(cudaEventRecord(fork, stream(s, cur)));
          THUNKY_CUDA_CHECK(cudaStreamWaitEvent(stream(s, c.stream), fork, 0));
          const size_t started_t = timestamp(s, c.stream);
          s.flows.push_back({cur.str(), c.stream.str(), c.token, fork_t, started_t, false});
          issue_block(s, c.body, c.stream, in_loop);
          const size_t end_t = timestamp(s, c.stream);
          cudaEvent_t done = s.joins.next();
          THUNKY_CUDA_CHECK(cudaEventRecord(done, stream(s, c.stream)));
          s.tokens[c.token] = done;
          s.token_end[c.token] = {c.stream.str(), end_t};
          break;
        }
        case Op::async_done: {
          THUNKY_CUDA_CHECK(cudaStreamWaitEvent(stream(s, cur), s.tokens.at(c.token), 0));
          const size_t joined_t = timestamp(s, cur);
          auto [from, from_t] = s.token_end.at(c.token);
          s.flows.push_back({from, cur.str(), c.token, from_t, joined_t, true});
          break;
        }
        case Op::call: issue_block(s, c.body, cur, in_loop); break;
        case Op::cond:
        case Op::switch_:
        case Op::while_:
          if (capturing_) {
            capture_control_flow(s, c, cur);
            break;
          }
          issue_control_flow(s, c, cur, in_loop);
          break;
        default: timed_command(s, c, cur, in_loop);
      }
    }
  }

  // Eager control flow: the predicate to the host, then the branch taken.
  void issue_control_flow(RankState& s, const Command& c, const StreamId& cur, bool in_loop) {
      switch (c.op) {
        case Op::cond: {
          const bool taken = read_scalar(s, *c.pred, cur) != 0;
          s.decisions[c.id()].push_back(taken ? 1 : 0);
          issue_block(s, taken ? c.rare().then_ : c.rare().else_, cur, in_loop);
          break;
        }
        case Op::switch_: {
          int64_t k = static_cast<int64_t>(read_scalar(s, *c.index, cur));
          k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(c.rare().branches.size()) - 1);
          s.decisions[c.id()].push_back(k);
          issue_block(s, c.rare().branches[static_cast<size_t>(k)], cur, in_loop);
          break;
        }
        case Op::while_: {
          for (int64_t trips = 0;; ++trips) {
            issue_block(s, c.rare().cond, cur, true);
            if (read_scalar(s, *c.cond_buf, cur) == 0) {
              s.decisions[c.id()].push_back(trips);
              break;
            }
            if (trips >= opts_->max_trip_count)
              throw ThunkyError("", "rank " + std::to_string(s.rank) + ": the while loop at " + c.id() + " ran more than " + std::to_string(opts_->max_trip_count) + " iterations", ErrorKind::schedule);
            issue_block(s, c.body, cur, true);
          }
          break;
        }
        default: break;
      }
  }

  // --graph: control flow as conditional nodes. A kernel on the stream sets
  // the node's handle from the predicate on the device; each body is
  // captured into the node's body graph through a helper stream that
  // stands in for the current one meanwhile. A while loop's body ends by
  // evaluating its cond block again, and its trip count is guarded on the
  // device: past --max-trip-count the loop stops and a flag is raised,
  // which the run reports as on the eager path.
  void capture_control_flow(RankState& s, const Command& c, const StreamId& cur) {
    const Command::Rare& x = c.rare();
    cudaKernel_t set_if = kernels_->get(support_, "thunky_set_if"), set_switch = kernels_->get(support_, "thunky_set_switch"),
                 set_while = kernels_->get(support_, "thunky_set_while");
    auto view_ptr = [&](const Ref& r) { return ptr(s, resolve(*p_, r, s.ctx)); };
    if (c.op == Op::cond) {
      const uint8_t* pred = view_ptr(*c.pred);
      std::vector<const Block*> bodies = {&x.then_};
      if (!x.else_.empty()) bodies.push_back(&x.else_);
      conditional_node(s, cur, cudaGraphCondTypeIf, bodies, [&](cudaGraphConditionalHandle h, cudaStream_t st) { launch_one(set_if, pack_params({h, ptr_bits(pred)}), st); });
    } else if (c.op == Op::switch_) {
      const uint8_t* index = view_ptr(*c.index);
      std::vector<const Block*> bodies;
      for (const auto& br : x.branches) bodies.push_back(&br);
      const uint64_t n = bodies.size();
      conditional_node(s, cur, cudaGraphCondTypeSwitch, bodies, [&](cudaGraphConditionalHandle h, cudaStream_t st) { launch_one(set_switch, pack_params({h, ptr_bits(index), n}), st); });
    } else {
      const uint8_t* pred = view_ptr(*c.cond_buf);
      const size_t slot = s.loop_ids.size();
      s.loop_ids.push_back(c.id());
      uint8_t* guards = s.loop_guards.get((slot + 1) * 16, "the while-loop guards", s.device);
      uint8_t* counter = guards + slot * 16;
      THUNKY_CUDA_CHECK(cudaMemsetAsync(counter, 0, 8, stream(s, cur)));
      issue_block(s, x.cond, cur, true);
      const uint64_t max = static_cast<uint64_t>(opts_->max_trip_count);
      auto set = [&](cudaGraphConditionalHandle h, cudaStream_t st) { launch_one(set_while, pack_params({h, ptr_bits(pred), ptr_bits(counter), max, ptr_bits(counter + 8)}), st); };
      // The handle is set before the node from the first evaluation, and
      // again at the end of every iteration.
      conditional_node(s, cur, cudaGraphCondTypeWhile, {&c.body}, set, [&](cudaGraphConditionalHandle h) {
        issue_block(s, x.cond, cur, true);
        set(h, stream(s, cur));
      });
    }
  }

  void conditional_node(RankState& s, const StreamId& cur, cudaGraphConditionalNodeType type, const std::vector<const Block*>& bodies,
                        const std::function<void(cudaGraphConditionalHandle, cudaStream_t)>& set,
                        const std::function<void(cudaGraphConditionalHandle)>& tail = {}) {
    StreamState& ss = s.streams.at(cur);
    cudaStreamCaptureStatus status;
    cudaGraph_t g = nullptr;
    const cudaGraphNode_t* deps = nullptr;
    size_t n = 0;
    THUNKY_CUDA_CHECK(cudaStreamGetCaptureInfo(ss.stream, &status, nullptr, &g, &deps, nullptr, &n));
    cudaGraphConditionalHandle h;
    THUNKY_CUDA_CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    set(h, ss.stream);
    THUNKY_CUDA_CHECK(cudaStreamGetCaptureInfo(ss.stream, &status, nullptr, &g, &deps, nullptr, &n));
    cudaGraphNodeParams params{};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = h;
    params.conditional.type = type;
    params.conditional.size = static_cast<unsigned>(bodies.size());
    cudaGraphNode_t node;
    THUNKY_CUDA_CHECK(cudaGraphAddNode(&node, g, deps, nullptr, n, &params));
    THUNKY_CUDA_CHECK(cudaStreamUpdateCaptureDependencies(ss.stream, &node, nullptr, 1, cudaStreamSetCaptureDependencies));
    for (size_t i = 0; i < bodies.size(); ++i) {
      cudaStream_t helper;
      THUNKY_CUDA_CHECK(cudaStreamCreateWithFlags(&helper, cudaStreamNonBlocking));
      THUNKY_CUDA_CHECK(cudaStreamBeginCaptureToGraph(helper, params.conditional.phGraph_out[i], nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed));
      const cudaStream_t outer = ss.stream;
      ss.stream = helper;
      ++s.conditional_depth;
      std::exception_ptr failure;
      try {
        issue_block(s, *bodies[i], cur, true);
        if (tail) tail(h);
      } catch (...) {
        failure = std::current_exception();
      }
      --s.conditional_depth;
      ss.stream = outer;
      cudaGraph_t body;
      const cudaError_t ended = cudaStreamEndCapture(helper, &body);
      cudaStreamDestroy(helper);
      if (failure) std::rethrow_exception(failure);
      THUNKY_CUDA_CHECK(ended);
    }
  }

  // One thread: the kernels that set a conditional handle.
  static void launch_one(cudaKernel_t k, const std::vector<uint8_t>& params, cudaStream_t st) {
    void* args[] = {const_cast<uint8_t*>(params.data())};
    THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(1), dim3(1), args, 0, st));
  }

  cudaError_t record(cudaEvent_t e, cudaStream_t st) {
    // Captured into a graph, an event that is read afterwards must be an external node.
    return capturing_ ? cudaEventRecordWithFlags(e, st, cudaEventRecordExternal) : cudaEventRecord(e, st);
  }

  cudaStream_t stream(RankState& s, const StreamId& id) { return s.streams.at(id).stream; }

  // An eager predicate: to the host, as XLA does without command buffers.
  double read_scalar(RankState& s, const Ref& r, const StreamId& cur) {
    const View v = resolve(*p_, r, s.ctx);
    cudaStream_t st = stream(s, cur);
    THUNKY_CUDA_CHECK(cudaMemcpyAsync(s.host_scalar, ptr(s, v), dtype_size(dtype_of(v)), cudaMemcpyDeviceToHost, st));
    wait_stream(s, st, "the predicate at " + std::string(r.pointer));
    return load_as_double(s.host_scalar, dtype_of(v), 0);
  }

  void timed_command(RankState& s, const Command& c, const StreamId& cur, bool in_loop) {
    if (s.conditional_depth > 0) {  // inside a captured conditional body: no events
      compute(s, c, cur);
      return;
    }
    const auto t0 = Clock::now();
    const size_t start = timestamp(s, cur);
    std::vector<const Command*> members;
    if (c.op == Op::collective_group)
      for (const auto& m : c.body) members.push_back(&m);
    else if (is_collective(c.op))
      members.push_back(&c);
    if (!members.empty()) collective(s, c, members, cur);
    else compute(s, c, cur);
    const size_t end = timestamp(s, cur);
    if (members.empty()) {
      s.issue_s += std::chrono::duration<double>(Clock::now() - t0).count();
      ++s.issued;
    }
    ++s.commands;
    if (members.empty()) members.push_back(&c);
    for (const Command* m : members) s.timed.push_back({m, in_loop ? s.instances[m]++ : -1, cur, start, end});
  }

  void collective(RankState& s, const Command& c, const std::vector<const Command*>& members, const StreamId& cur) {
    std::vector<CollectiveCall> calls;
    for (const Command* m : members) {
      calls.push_back(collective_call(*p_, *m, s.ctx, [&](const View& v) { return ptr(s, v); }));
      calls.back().stream = stream(s, cur);
    }
    s.last_collective = c.id();
    const std::vector<int> launch_set = launch_members(p_->mesh, s.rank, members);
    Communicator& comm = shared_ ? *comm_ : static_cast<Communicator&>(*nccl_);
    // Capturing, the other ranks take their turns while this one waits.
    const bool turn = s.turn && s.turn->owns_lock();
    if (turn) s.turn->unlock();
    comm.run(static_cast<int>(s.rank), calls, launch_set, "rank " + std::to_string(s.rank) + " " + cur.str());
    if (turn) s.turn->lock();
  }

  int sms(const RankState& s) const { return devices_state_.at(s.device).sms; }

  void compute(RankState& s, const Command& c, const StreamId& cur) {
    StreamState& ss = s.streams.at(cur);
    cudaStream_t st = ss.stream;
    auto R = [&](const Ref& r) { return resolve(*p_, r, s.ctx); };
    switch (c.op) {
      case Op::memzero: {
        const View d = R(*c.dst);
        if (bytes(d)) THUNKY_CUDA_CHECK(cudaMemsetAsync(ptr(s, d), 0, bytes(d), st));
        break;
      }
      case Op::memset: fill(s, R(*c.dst), c.rare().value, st); break;
      case Op::copy: {
        const View a = R(*c.src), d = R(*c.dst);
        const size_t n = bytes(d);
        if (!n) break;
        if (overlap(ptr(s, a), n, ptr(s, d), n) && ptr(s, a) != ptr(s, d)) {  // as memmove
          uint8_t* tmp = ss.temp.get(n, "a staged copy", s.device);
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp, ptr(s, a), n, cudaMemcpyDeviceToDevice, st));
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, d), tmp, n, cudaMemcpyDeviceToDevice, st));
        } else if (ptr(s, a) != ptr(s, d)) {
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, d), ptr(s, a), n, cudaMemcpyDeviceToDevice, st));
        }
        break;
      }
      case Op::gemm: gemm(s, c, ss); break;
      case Op::map: map(s, c, c, ss); break;
      case Op::reduce: {
        const View in = R(*c.src), out = R(*c.out);
        if (!out.count()) break;
        std::vector<bool> reduced(in.shape.size(), false);
        for (auto a : c.rare().axes_i) reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(in.shape.size()) : a)] = true;
        const uint8_t* src = ptr(s, in);
        if (overlap(src, bytes(in), ptr(s, out), bytes(out))) {
          uint8_t* tmp = ss.temp.get(bytes(in), "a staged reduce input", s.device);
          THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes(in), cudaMemcpyDeviceToDevice, st));
          src = tmp;
        }
        launch(s.kernels.at(&c), out.count(), reduce_params(src, ptr(s, out), out.count(), in.shape, reduced), st, sms(s));
        break;
      }
      case Op::kernel: stand_in(s, c, st); break;
      case Op::ptx_kernel: {
        const PtxLaunch& l = *c.rare().launch;
        std::vector<void*> values;
        for (const auto& r : c.refs) values.push_back(ptr(s, R(r)));
        std::vector<void*> args;
        for (auto& v : values) args.push_back(&v);
        auto dim = [](const std::vector<int64_t>& d) {
          return dim3(static_cast<unsigned>(d.size() > 0 ? d[0] : 1), static_cast<unsigned>(d.size() > 1 ? d[1] : 1), static_cast<unsigned>(d.size() > 2 ? d[2] : 1));
        };
        THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(s.kernels.at(&c)), dim(l.grid), dim(l.block), args.data(), static_cast<size_t>(l.shmem_bytes), st));
        break;
      }
      case Op::custom_call: cholesky(s, c, ss); break;
      default: break;
    }
  }

  void fill(RankState& s, const View& d, double value, cudaStream_t st) {
    const size_t n = bytes(d);
    if (!n) return;
    const size_t es = dtype_size(dtype_of(d));
    const uint64_t pattern = fill_pattern(dtype_of(d), value);
    bool uniform = true;  // every byte of the pattern alike: one memset
    for (size_t i = 1; i < es; ++i) uniform &= ((pattern >> (8 * i)) & 0xff) == (pattern & 0xff);
    if (uniform) {
      THUNKY_CUDA_CHECK(cudaMemsetAsync(ptr(s, d), static_cast<int>(pattern & 0xff), n, st));
      return;
    }
    launch(kernels_->get(support_, "thunky_fill"), d.count(), pack_params({ptr_bits(ptr(s, d)), static_cast<uint64_t>(d.count()), es, pattern}), st, sms(s));
  }

  void map(RankState& s, const Command& c, const Command& m, StreamState& ss) {
    const View out = resolve(*p_, *m.out, s.ctx);
    if (!out.count()) return;
    uint8_t* o = ptr(s, out);
    const size_t ob = bytes(out);
    std::vector<const void*> ins;
    size_t staged = 0;
    std::vector<std::pair<const uint8_t*, size_t>> aside;
    for (const auto& [name, r] : m.in) {
      const View v = resolve(*p_, r, s.ctx);
      const uint8_t* p = ptr(s, v);
      // An input that overlaps out other than element for element is read
      // before any write, as on the cpu backend: staged aside.
      const bool same = p == o && v.count() == out.count() && dtype_of(v) == dtype_of(out);
      if (overlap(p, bytes(v), o, ob) && !same) {
        aside.push_back({p, bytes(v)});
        staged += (bytes(v) + 255) & ~size_t{255};
      }
      ins.push_back(p);
    }
    if (!aside.empty()) {
      uint8_t* tmp = ss.temp.get(staged, "staged map inputs", s.device);
      size_t off = 0;
      for (auto& in : ins)
        for (auto [p, n] : aside)
          if (in == p) {
            THUNKY_CUDA_CHECK(cudaMemcpyAsync(tmp + off, p, n, cudaMemcpyDeviceToDevice, ss.stream));
            in = tmp + off;
            off += (n + 255) & ~size_t{255};
            break;
          }
    }
    launch(s.kernels.at(&c), out.count(), map_params(ins, o, out.count(), s.axis_values), ss.stream, sms(s));
  }

  bool gemm_direct(const View& a, const View& b, const View& c) const {
    return dtype_of(a) == dtype_of(b) && dtype_of(a) == dtype_of(c) && Gemm::supports(dtype_of(a));
  }

  void gemm(RankState& s, const Command& c, StreamState& ss) {
    const View av = resolve(*p_, *c.a, s.ctx), bv = resolve(*p_, *c.b, s.ctx), cv = resolve(*p_, *c.c, s.ctx);
    auto rc = [](const View& v) { return std::pair{v.shape[v.shape.size() - 2], v.shape[v.shape.size() - 1]}; };
    auto [ar, ac] = rc(av);
    auto [br, bc] = rc(bv);
    auto [cr, cc] = rc(cv);
    GemmShape g{dtype_of(cv), cv.shape.size() == 3 ? cv.shape[0] : 1, cr, cc, c.transpose_a ? ar : ac, c.transpose_a, c.transpose_b,
                ar, ac, br, bc, av.shape.size() == 3, bv.shape.size() == 3};
    if (!cv.count()) return;
    const DType acc = dtype_of(av) == DType::f64 ? DType::f64 : DType::f32;
    const bool direct = gemm_direct(av, bv, cv);
    if (!direct) g.dtype = acc;
    // Operands (widened where needed) and where the product goes: a
    // temporary when c overlaps a or b, or when c is narrowed afterwards.
    size_t off = 0;
    auto carve = [&](size_t n) {
      const size_t at = off;
      off += (n + 255) & ~size_t{255};
      return at;
    };
    const size_t es = dtype_size(g.dtype);
    const bool aliased = overlap(ptr(s, cv), bytes(cv), ptr(s, av), bytes(av)) || overlap(ptr(s, cv), bytes(cv), ptr(s, bv), bytes(bv));
    const size_t a_at = direct ? 0 : carve(av.count() * es), b_at = direct ? 0 : carve(bv.count() * es);
    const bool c_temp = aliased || !direct;
    const size_t c_at = c_temp ? carve(cv.count() * es) : 0;
    uint8_t* tmp = off ? ss.temp.get(off, "GEMM temporaries", s.device) : nullptr;
    const uint8_t* pa = ptr(s, av);
    const uint8_t* pb = ptr(s, bv);
    uint8_t* pc = c_temp ? tmp + c_at : ptr(s, cv);
    if (!direct) {
      convert(s, ptr(s, av), dtype_of(av), tmp + a_at, acc, av.count(), ss.stream);
      convert(s, ptr(s, bv), dtype_of(bv), tmp + b_at, acc, bv.count(), ss.stream);
      pa = tmp + a_at;
      pb = tmp + b_at;
    }
    if (c_temp && c.beta != 0) {
      if (direct) THUNKY_CUDA_CHECK(cudaMemcpyAsync(pc, ptr(s, cv), bytes(cv), cudaMemcpyDeviceToDevice, ss.stream));
      else convert(s, ptr(s, cv), dtype_of(cv), pc, acc, cv.count(), ss.stream);
    }
    void* work = ss.workspace.get(Gemm::kWorkspace, "the cuBLASLt workspace", s.device);
    g.align = g.batch > 1 ? common_alignment({pa, pb, pc, pa + ar * ac * es, pb + br * bc * es, pc + cr * cc * es}) : common_alignment({pa, pb, pc});
    if (g.batch > 1 && !(g.a_batched && g.b_batched)) {
      // A 2-D operand broadcast over the batch: one product per matrix.
      GemmShape one = g;
      one.batch = 1;
      one.align = g.align;
      for (int64_t i = 0; i < g.batch; ++i)
        gemms_.at(s.device)->run(one, pa + (g.a_batched ? i * ar * ac * es : 0), pb + (g.b_batched ? i * br * bc * es : 0), pc + i * cr * cc * es, c.alpha,
                   c.beta, work, Gemm::kWorkspace, ss.stream);
    } else {
      gemms_.at(s.device)->run(g, pa, pb, pc, c.alpha, c.beta, work, Gemm::kWorkspace, ss.stream);
    }
    if (c_temp) {
      if (direct) THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, cv), pc, bytes(cv), cudaMemcpyDeviceToDevice, ss.stream));
      else convert(s, pc, acc, ptr(s, cv), dtype_of(cv), cv.count(), ss.stream);
    }
  }

  void convert(RankState& s, const void* from, DType ft, void* to, DType tt, int64_t n, cudaStream_t st) {
    if (ft == tt) {
      if (from != to) THUNKY_CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(n) * dtype_size(ft), cudaMemcpyDeviceToDevice, st));
      return;
    }
    launch(kernels_->get(convert_source(ft, tt)), n, map_params({from}, to, n, {}), st, sms(s));
  }

  // cuSOLVER potrf on each matrix of the batch, in place on the result
  // (the operand copied there first); `lower` in cuSOLVER's column-major
  // sense, as the format defines it. info gets cuSOLVER's devInfo.
  void cholesky(RankState& s, const Command& c, StreamState& ss) {
    const bool lower = c.rare().custom->backend_config.at("lower").get<bool>();
    const View a = resolve(*p_, c.refs[0], s.ctx), r = resolve(*p_, c.refs2[0], s.ctx), info = resolve(*p_, c.refs2[1], s.ctx);
    const int n = static_cast<int>(a.shape.back());
    if (n == 0) return;
    const int64_t batch = a.count() / (int64_t{n} * n);
    if (ptr(s, a) != ptr(s, r)) THUNKY_CUDA_CHECK(cudaMemcpyAsync(ptr(s, r), ptr(s, a), bytes(a), cudaMemcpyDeviceToDevice, ss.stream));
    THUNKY_CUSOLVER_CHECK(cusolverDnSetStream(s.solver, ss.stream));
    const cublasFillMode_t uplo = lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
    const bool f64 = dtype_of(a) == DType::f64;
    int lwork = 0;
    if (f64) THUNKY_CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(s.solver, uplo, n, reinterpret_cast<double*>(ptr(s, r)), n, &lwork));
    else THUNKY_CUSOLVER_CHECK(cusolverDnSpotrf_bufferSize(s.solver, uplo, n, reinterpret_cast<float*>(ptr(s, r)), n, &lwork));
    const size_t es = f64 ? 8 : 4;
    uint8_t* work = ss.solver_work.get(static_cast<size_t>(std::max(lwork, 1)) * es, "the cuSOLVER workspace", s.device);
    for (int64_t k = 0; k < batch; ++k) {
      uint8_t* m = ptr(s, r) + k * n * n * es;
      int* dev_info = reinterpret_cast<int*>(ptr(s, info)) + k;
      if (f64) THUNKY_CUSOLVER_CHECK(cusolverDnDpotrf(s.solver, uplo, n, reinterpret_cast<double*>(m), n, reinterpret_cast<double*>(work), lwork, dev_info));
      else THUNKY_CUSOLVER_CHECK(cusolverDnSpotrf(s.solver, uplo, n, reinterpret_cast<float*>(m), n, reinterpret_cast<float*>(work), lwork, dev_info));
    }
  }

  // The `kernel` stand-in: its reads and writes touched, then the stream
  // held for cost.seconds (a `cost` in flops or bytes needs a machine
  // model, which the executor does not price: only the traffic runs).
  void stand_in(RankState& s, const Command& c, cudaStream_t st) {
    auto params = [](const void* src, int64_t sb, void* dst, int64_t db) {
      return pack_params({ptr_bits(src), static_cast<uint64_t>(sb), ptr_bits(dst), static_cast<uint64_t>(db)});
    };
    cudaKernel_t touch = kernels_->get(support_, "thunky_touch");
    for (const auto& r : c.refs) {
      const View v = resolve(*p_, r, s.ctx);
      if (bytes(v)) launch(touch, static_cast<int64_t>(bytes(v)), params(ptr(s, v), static_cast<int64_t>(bytes(v)), nullptr, 0), st, sms(s));
    }
    for (const auto& r : c.refs2) {
      const View v = resolve(*p_, r, s.ctx);
      if (bytes(v)) launch(touch, static_cast<int64_t>(bytes(v)), params(nullptr, 0, ptr(s, v), static_cast<int64_t>(bytes(v))), st, sms(s));
    }
    if (c.cost && c.cost->seconds && *c.cost->seconds > 0) {
      std::vector<uint8_t> b = pack_params({static_cast<uint64_t>(std::min(*c.cost->seconds, 3600.0) * 1e9)});
      void* args[] = {b.data()};
      THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernels_->get(support_, "thunky_spin")), dim3(static_cast<unsigned>(sms(s))), dim3(32), args, 0, st));
    }
  }

  // --graph: the whole schedule, every rank, captured into one graph from
  // an origin stream that every rank's streams fork from and join into.
  void capture() {
    DeviceState& ds = devices_state_.begin()->second;
    if (devices_state_.size() != 1) {
      std::cerr << "thunky-exec: --graph: running eagerly: a graph spans one GPU, and this placement uses " << devices_state_.size() << "\n";
      return;
    }
    THUNKY_CUDA_CHECK(cudaSetDevice(ds.device));
    for (auto& s : ranks_) {
      s->start_iteration();
      s->loop_ids.clear();
    }
    cudaEvent_t fork;
    THUNKY_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    THUNKY_CUDA_CHECK(cudaStreamBeginCapture(ds.origin, cudaStreamCaptureModeRelaxed));
    THUNKY_CUDA_CHECK(cudaEventRecord(fork, ds.origin));
    for (auto& s : ranks_)
      for (auto& [id, st] : s->streams) THUNKY_CUDA_CHECK(cudaStreamWaitEvent(st.stream, fork, 0));
    capturing_ = true;
    try {
      issue_all_ranks();
    } catch (...) {
      capturing_ = false;
      cudaGraph_t g;
      cudaStreamEndCapture(ds.origin, &g);
      cudaEventDestroy(fork);
      throw;
    }
    capturing_ = false;
    for (auto& s : ranks_) {
      cudaEvent_t e = s->joins.next();
      THUNKY_CUDA_CHECK(cudaEventRecord(e, s->streams.at(StreamId{}).stream));
      THUNKY_CUDA_CHECK(cudaStreamWaitEvent(ds.origin, e, 0));
    }
    THUNKY_CUDA_CHECK(cudaStreamEndCapture(ds.origin, &graph_));
    THUNKY_CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
    THUNKY_CUDA_CHECK(cudaEventDestroy(fork));
    // What the capture recorded is what every launch runs.
    for (auto& s : ranks_) captured_.push_back({s->timed, s->flows, s->commands});
  }

  // One launch of the captured graph; graph_launch_s_ is its host time.
  void launch_graph() {
    DeviceState& ds = devices_state_.begin()->second;
    THUNKY_CUDA_CHECK(cudaSetDevice(ds.device));
    for (size_t i = 0; i < ranks_.size(); ++i) {
      ranks_[i]->timed = captured_[i].timed;
      ranks_[i]->flows = captured_[i].flows;
      ranks_[i]->commands = captured_[i].commands;
    }
    for (auto& s : ranks_)
      if (!s->loop_ids.empty()) THUNKY_CUDA_CHECK(cudaMemsetAsync(s->loop_guards.ptr, 0, s->loop_ids.size() * 16, ds.origin));
    THUNKY_CUDA_CHECK(cudaEventRecord(ds.base, ds.origin));
    const auto t0 = Clock::now();
    THUNKY_CUDA_CHECK(cudaGraphLaunch(graph_exec_, ds.origin));
    graph_launch_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
    THUNKY_CUDA_CHECK(cudaStreamSynchronize(ds.origin));
    for (auto& s : ranks_) {
      std::vector<uint64_t> guards(s->loop_ids.size() * 2);
      if (guards.empty()) continue;
      THUNKY_CUDA_CHECK(cudaMemcpy(guards.data(), s->loop_guards.ptr, guards.size() * 8, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < s->loop_ids.size(); ++i)
        if (guards[2 * i + 1])
          throw ThunkyError("", "rank " + std::to_string(s->rank) + ": the while loop at " + s->loop_ids[i] + " ran more than " + std::to_string(opts_->max_trip_count) + " iterations", ErrorKind::schedule);
    }
  }

  Report read_timeline() {
    Report r;
    for (auto& s : ranks_) {
      THUNKY_CUDA_CHECK(cudaSetDevice(s->device));
      cudaEvent_t base = devices_state_.at(s->device).base;
      auto at = [&](size_t i) {
        float ms = 0;
        THUNKY_CUDA_CHECK(cudaEventElapsedTime(&ms, base, s->timing.at(i)));
        return static_cast<double>(ms) * 1e-3;
      };
      RankReport rr;
      rr.rank = s->rank;
      rr.coords = s->ctx.coords;
      for (const auto& t : s->timed) {
        const Work w = command_work(*p_, *t.cmd, s->ctx);
        const std::string id = t.instance < 0 ? t.cmd->id() : t.cmd->id() + "#" + std::to_string(t.instance);
        rr.ops.push_back({id, std::string(op_name(t.cmd->op)), t.cmd->rare().name, t.stream.str(), at(t.start), at(t.end), w.bytes, w.flops});
      }
      std::stable_sort(rr.ops.begin(), rr.ops.end(), [](const OpRecord& a, const OpRecord& b) { return a.start_s < b.start_s; });
      for (const auto& f : s->flows) rr.flows.push_back({f.from, f.to, at(f.from_event), at(f.to_event), f.token, f.join});
      r.ranks.push_back(std::move(rr));
    }
    summarize(r);
    return r;
  }

  std::vector<std::vector<std::vector<uint8_t>>> read_memory() {
    std::vector<std::vector<std::vector<uint8_t>>> mem;
    for (auto& s : ranks_) {
      THUNKY_CUDA_CHECK(cudaSetDevice(s->device));
      auto& m = mem.emplace_back();
      for (size_t b = 0; b < p_->buffers.size(); ++b) {
        auto& bytes = m.emplace_back(p_->buffers[b].bytes());
        if (!bytes.empty()) THUNKY_CUDA_CHECK(cudaMemcpy(bytes.data(), s->buffers[b], bytes.size(), cudaMemcpyDeviceToHost));
      }
    }
    return mem;
  }

  void release() {
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    if (graph_) cudaGraphDestroy(graph_);
    graph_exec_ = nullptr;
    graph_ = nullptr;
    comm_.reset();
    nccl_.reset();
    for (auto& s : ranks_) {
      cudaSetDevice(s->device);
      for (auto* b : s->buffers)
        if (b) cudaFree(b);
      for (auto& [id, st] : s->streams) {
        st.temp.release();
        st.workspace.release();
        st.solver_work.release();
        if (st.stream) cudaStreamDestroy(st.stream);
      }
      s->loop_guards.release();
      if (s->solver) cusolverDnDestroy(s->solver);
      if (s->host_scalar) cudaFreeHost(s->host_scalar);
    }
    ranks_.clear();
    kernels_.reset();
    for (auto& [d, ds] : devices_state_) {
      cudaSetDevice(d);
      gemms_.erase(d);
      if (ds.base) cudaEventDestroy(ds.base);
      if (ds.origin) cudaStreamDestroy(ds.origin);
    }
    devices_state_.clear();
  }

  const Program* p_ = nullptr;
  const ExecOptions* opts_ = nullptr;
  bool shared_ = true;
  std::vector<int> devices_;  // by rank
  std::map<std::string, NpyArray> npy_;
  std::vector<std::vector<std::vector<uint8_t>>> initial_;  // [rank][buffer]: inputs' first contents
  std::set<StreamId> streams_;
  std::set<std::vector<int>> member_sets_;
  std::map<const Command*, std::string> ptx_;
  std::string graph_obstacle_;

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

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }

}  // namespace thunky
