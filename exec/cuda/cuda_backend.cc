// The cuda backend: plan and initialise (cuda_backend.h says where the
// other stages are).
#include "exec/cuda/cuda_backend.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/op_rules.h"
#include "core/validate.h"

namespace thunky::cuda {

std::vector<Diagnostic> CudaBackend::plan(const Program& p, const ExecOptions& opts) {
  p_ = &p;
  opts_ = &opts;
  try {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      return {{ErrorKind::input, p.file, "", std::string("no CUDA device (") + (e == cudaSuccess ? "the driver reports no GPU" : cudaGetErrorString(e)) + "); use --backend cpu"}};
    const int64_t ranks = p.mesh.size();
    block_ = opts.processes ? rank_block(ranks, opts.processes->place().index, opts.processes->place().count) : RankBlock{0, ranks};
    if (auto errors = opts.processes ? place_across_processes(opts, count) : place(opts, count, ranks); !errors.empty()) return errors;
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

std::vector<Diagnostic> CudaBackend::initialise() {
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
    for (int64_t r = block_.first; r < block_.first + block_.n; ++r) {
      auto s = std::make_unique<RankState>();
      s->rank = r;
      s->device = devices_[static_cast<size_t>(r - block_.first)];
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
    for (const auto& name : {"thunky_fill", "thunky_touch", "thunky_spin", "thunky_set_if", "thunky_set_switch", "thunky_set_while"})
      kernels_->get(support_, name);
    // Loaded into every GPU's context now: a lazily loaded kernel would
    // load at its first launch, inside a timed iteration or a capture.
    for (int d : used) kernels_->load_on(d);
    if (opts_->graph && graph_obstacle_.empty() && captured_loops_ > 0)
      for (auto& s : ranks_) {
        THUNKY_CUDA_CHECK(cudaSetDevice(s->device));
        s->loop_guards = static_cast<uint8_t*>(device_alloc(captured_loops_ * 16, "the while-loop guards of rank " + std::to_string(s->rank), s->device));
      }
    if (shared_) comm_ = make_loopback_communicator(monitor_, static_cast<int>(nranks), *kernels_, devices_state_.begin()->second.sms, capture_turn_);
    else connect_nccl();
    measure_timing_overhead();
    // One warm-up run: workspaces, staging and cuBLASLt plans are sized by it.
    run_iteration();
    if (opts_->graph && graph_obstacle_.empty()) capture();
  });
}

Expected<ExecResult> CudaBackend::execute() {
  ExecResult result;
  MedianTimeline timelines;
  std::vector<double> dispatch;
  const int total = std::max(0, opts_->warmup) + std::max(1, opts_->iters);
  auto errors = guarded([&] {
    for (int it = 0; it < total; ++it) {
      run_iteration();
      if (it >= std::max(0, opts_->warmup)) {
        timelines.add(read_timeline());
        double issue_s = 0;
        int64_t issued = 0;
        for (auto& s : ranks_) issue_s += s->issue_s, issued += s->issued;
        if (issued) dispatch.push_back(issue_s / static_cast<double>(issued));
      }
      if (it == total - 1) {
        result.decisions.resize(static_cast<size_t>(p_->mesh.size()));  // across processes, this one's ranks' only
        for (auto& s : ranks_) result.decisions[static_cast<size_t>(s->rank)] = s->decisions;
        result.memory = read_memory();
      }
    }
  });
  if (!errors.empty()) {
    if (opts_->processes) opts_->processes->fail(errors.front().message, errors.front().kind == ErrorKind::timeout ? 3 : 1);
    return errors;
  }
  result.report = timelines.take();
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

// Placement: one GPU per rank through NCCL when there are enough GPUs
// (or --devices names one per rank), else every rank on one GPU.
std::vector<Diagnostic> CudaBackend::place(const ExecOptions& opts, int count, int64_t ranks) {
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

// Across processes: one GPU per rank, through NCCL. A process's ranks
// take the GPUs after those of the processes before it on its node: with
// one rank per process, the GPU is the local rank (as nccl-tests and
// torchrun jobs choose it); --devices lists this process's ranks' GPUs.
std::vector<Diagnostic> CudaBackend::place_across_processes(const ExecOptions& opts, int count) {
  const ProcessPlace& place = opts.processes->place();
  if (!have_nccl())
    return {{ErrorKind::input, p_->file, "", "this build has no NCCL, which the cuda backend needs across processes; run in one process, or use --backend cpu"}};
  std::vector<int> devs = opts.devices;
  if (devs.empty())
    for (int64_t i = 0; i < block_.n; ++i) devs.push_back(static_cast<int>(place.local * block_.n + i));
  if (static_cast<int64_t>(devs.size()) != block_.n)
    return {{ErrorKind::input, p_->file, "", "--devices lists " + std::to_string(devs.size()) + " GPUs, but process " + std::to_string(place.index) + " runs " +
                                                 std::to_string(block_.n) + " ranks: across processes, list one GPU per rank of the process"}};
  for (int d : devs)
    if (d < 0 || d >= count)
      return {{ErrorKind::input, p_->file, "", "process " + std::to_string(place.index) + " (local rank " + std::to_string(place.local) + " of its node) runs ranks " +
                                                   std::to_string(block_.first) + " to " + std::to_string(block_.first + block_.n - 1) + " and needs GPU " + std::to_string(d) +
                                                   ", but this node has " + std::to_string(count) + ": launch at most " + std::to_string(count / std::max<int64_t>(1, block_.n)) +
                                                   " processes a node, or name the GPUs with --devices"}};
  if (std::set<int>(devs.begin(), devs.end()).size() != devs.size())
    return {{ErrorKind::input, p_->file, "", "--devices lists a GPU twice: one GPU per rank"}};
  shared_ = false;
  devices_ = devs;
  return {};
}

// Streams, communicators, PTX files; what this backend cannot run.
void CudaBackend::plan_block(const Block& b, std::vector<Diagnostic>& errors) {
  const Program& p = *p_;
  streams_.insert(StreamId{});
  for (const auto& c : b) {
    if (const AsyncStart* a = c.get_if<AsyncStart>()) streams_.insert(a->stream);
    if (c.op() == Op::while_) ++captured_loops_;
    if (const Reduce* x = c.get_if<Reduce>()) {
      const size_t dims = resolve(p, x->in, rank_ctx(p.mesh, 0)).shape.size();
      if (dims > static_cast<size_t>(kMaxRank))
        errors.push_back({ErrorKind::input, p.file, c.pointer + "/in",
                          "a reduce over " + std::to_string(dims) + " dimensions: the cuda backend reduces views of at most " + std::to_string(kMaxRank)});
    }
    if (c.op() == Op::ptx_kernel && !ptx_.count(&c)) {
      const PtxLaunch& l = *c.as<PtxKernel>().launch;
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
    if (is_collective(c.op())) {
      for (int64_t r = 0; r < p.mesh.size(); ++r) {
        Participants part = participants(p.mesh, r, collective_of(c).axis, collective_of(c).groups.get());
        if (shared_ && part.ranks.size() > static_cast<size_t>(kMaxCombine))
          errors.push_back({ErrorKind::input, p.file, c.pointer, "a collective of " + std::to_string(part.ranks.size()) + " ranks on one GPU: the shared-device placement joins at most " + std::to_string(kMaxCombine)});
        if (!shared_) member_sets_.insert(part.ranks);
        if (!shared_ && (c.op() == Op::all_reduce || c.op() == Op::reduce_scatter)) {
          DType t = ref_dtype(p, collective_of(c).src);
          const Reduction red = reduction_of(c);
          if (t == DType::s16 || (t == DType::boolean && (red == Reduction::sum || red == Reduction::prod)))
            errors.push_back({ErrorKind::input, p.file, c.pointer, "NCCL cannot reduce " + std::string(dtype_name(t)) + " with " + std::string(reduction_name(red)) + " exactly as thunky defines it; pass --devices 0 to run on one GPU"});
        }
      }
    }
    for_each_sub_block(c, [&](const Block& sub) { plan_block(sub, errors); });
  }
}

// A PTX kernel's dynamic shared memory past the default 48 KiB needs the
// kernel's opt-in attribute, up to what the GPU allows a block.
void CudaBackend::allow_shared_memory(cudaKernel_t k, int64_t bytes, int device, const Command& c) {
  constexpr int64_t kDefault = 48 * 1024;
  if (bytes <= kDefault) return;
  int most = 0;
  THUNKY_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > most)
    throw ThunkyError(c.pointer + "/shmem_bytes", "shmem_bytes " + std::to_string(bytes) + " is more than GPU " + std::to_string(device) +
                                                       " gives a block (" + std::to_string(most) + " bytes)");
  THUNKY_CUDA_CHECK(cudaKernelSetAttributeForDevice(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes), device));
}

void CudaBackend::compile_block(RankState& s, const Block& b) {
  for (const auto& c : b) {
    // The kernels each compute op launches, compiled before the run.
    std::visit(Overload{
        [&](const Map& m) {
          s.kernels[&c] = kernels_->get(map_source(s, m));
          // The gather that stages a broadcast input expanded (CudaBackend::map).
          const int64_t out = resolve(*p_, m.out, s.ctx).count();
          for (const auto& [name, r] : m.in) {
            const View v = resolve(*p_, r, s.ctx);
            if (v.count() != out && v.count() != 1) kernels_->get(transpose_kernel(dtype_size(v.dtype)));
          }
        },
        [&](const Reduce& x) {
          const View in = resolve(*p_, x.in, s.ctx), out = resolve(*p_, x.out, s.ctx);
          s.kernels[&c] = kernels_->get(reduce_kernel(in.dtype, out.dtype, x.fn, x.arg));
        },
        [&](const Transpose& x) { s.kernels[&c] = kernels_->get(transpose_kernel(dtype_size(resolve(*p_, x.src, s.ctx).dtype))); },
        [&](const PtxKernel& x) {
          cudaKernel_t k = s.kernels[&c] = kernels_->get_ptx(ptx_.at(&c), x.launch->kernel_name);
          allow_shared_memory(k, x.launch->shmem_bytes, s.device, c);
        },
        [&](const thunky::Gemm& g) {
          const View a = resolve(*p_, g.a, s.ctx), bv = resolve(*p_, g.b, s.ctx), cv = resolve(*p_, g.c, s.ctx);
          const DType acc = gemm_accumulator(a.dtype);
          const int64_t k = a.shape[a.shape.size() - (g.transpose_a ? 2 : 1)];
          if (k == 0 && g.beta != 0) kernels_->get(beta_source(cv.dtype, acc, g.beta));
          if (!gemm_direct(a, bv, cv)) {
            // Through f32 (f64): widening and narrowing maps.
            for (DType t : {a.dtype, bv.dtype, cv.dtype}) {
              kernels_->get(convert_source(t, acc));
              kernels_->get(convert_source(acc, t));
            }
          }
        },
        // Runtime calls and library calls (and a kernel's stand-in, compiled once for all).
        [](const OneOf<Memzero, Memset, Copy, Kernel, CustomCall> auto&) {},
        [&](const CollectiveSpec auto& x) {
          // On one shared GPU, reducing collectives combine with a kernel.
          if (shared_ && (c.op() == Op::all_reduce || c.op() == Op::reduce_scatter))
            kernels_->get(combine_kernel(resolve(*p_, x.src, s.ctx).dtype, reduction_of(c)));
        },
        [](const OfFamily<OpFamily::group, OpFamily::stream, OpFamily::control, OpFamily::call> auto&) {},
    }, c.spec);
    for_each_sub_block(c, [&](const Block& sub) { compile_block(s, sub); });
  }
}

KernelSource CudaBackend::map_source(RankState& s, const Map& m) {
  const View out = resolve(*p_, m.out, s.ctx);
  std::vector<MapOperand> ops;
  for (const auto& [name, r] : m.in) {
    const View v = resolve(*p_, r, s.ctx);
    ops.push_back({name, v.dtype, v.count() == 1 && out.count() != 1});
  }
  return map_kernel(*m.expr, ops, p_->mesh.axis_names, out.dtype);
}

KernelSource CudaBackend::convert_source(DType from, DType to) {
  static const ExprPtr identity = parse_expr("x");
  return map_kernel(*identity, {{"x", from, false}}, {}, to);
}

// c · beta for a GEMM with K = 0: the product in f32 (f64 for f64
// operands) with beta as that type, rounded once into c's dtype.
KernelSource CudaBackend::beta_source(DType c, DType acc, double beta) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", acc == DType::f64 ? beta : static_cast<double>(static_cast<float>(beta)));
  const ExprPtr e = parse_expr(std::string(acc == DType::f64 ? "x * (" : "f32(x * (") + text + (acc == DType::f64 ? ")" : "))"));
  return map_kernel(*e, {{"x", c, false}}, {}, c);
}

void CudaBackend::connect_nccl() {
  ids_ = opts_->processes ? make_process_id_exchange(*opts_->processes, p_->mesh.size(), opts_->timeout_s) : make_inprocess_id_exchange();
  nccl_ = make_nccl_transport(static_cast<int>(p_->mesh.size()), *ids_, opts_->timeout_s);
  const std::vector<std::vector<int>> sets(member_sets_.begin(), member_sets_.end());
  std::vector<std::thread> threads;
  std::vector<std::string> failures(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        nccl_->connect(static_cast<int>(ranks_[r]->rank), ranks_[r]->device, sets);
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
void CudaBackend::measure_timing_overhead() {
  RankState& s = *ranks_.front();
  THUNKY_CUDA_CHECK(cudaSetDevice(s.device));
  cudaStream_t st = s.streams.at(StreamId{}).stream;
  constexpr int kPairs = 200;
  cudaKernel_t spin = kernels_->get(support_, "thunky_spin");
  // The stream is held busy by a spin kernel while the events are issued,
  // so that they run back to back on the device: on an idle stream each
  // would run as soon as the host issued it, and the figure would be the
  // host's call rate. The hold doubles until it outlasts the issuing.
  for (uint64_t hold_ns = 2'000'000;; hold_ns *= 2) {
    s.timing.rewind();
    launch_one(spin, pack_params({hold_ns}), st);
    const size_t first = s.timing.used();
    for (int i = 0; i < 2 * kPairs; ++i) THUNKY_CUDA_CHECK(cudaEventRecord(s.timing.next(), st));
    const cudaError_t busy = cudaStreamQuery(st);  // still spinning: the events were queued behind it
    if (busy != cudaErrorNotReady) THUNKY_CUDA_CHECK(busy);
    THUNKY_CUDA_CHECK(cudaStreamSynchronize(st));
    float ms = 0;
    THUNKY_CUDA_CHECK(cudaEventElapsedTime(&ms, s.timing.at(first), s.timing.at(first + 2 * kPairs - 1)));
    timing_overhead_s_ = ms * 1e-3 / kPairs;
    if (busy == cudaErrorNotReady || hold_ns >= 256'000'000) break;
  }
  s.timing.rewind();
}

void CudaBackend::release() {
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
    if (s->loop_guards) cudaFree(s->loop_guards);
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

}  // namespace thunky::cuda

namespace thunky {

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }

}  // namespace thunky
