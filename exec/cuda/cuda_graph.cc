// The cuda backend: --graph, one CUDA graph captured from the schedule
// (conditional nodes for cond, switch and while) and launched.
#include "exec/cuda/cuda_backend.h"

#include <iostream>

#include "core/control_flow.h"

namespace thunky::cuda {

// Why a schedule cannot be captured into one graph, or "". Control flow
// becomes conditional nodes, whose bodies may hold only kernels, copies,
// fills and further conditionals: no events (so no tokens and no timing),
// no collectives (they join other ranks' streams). A cuSOLVER call is
// kept out of any capture: cuSOLVER does not document its potrf as
// capturable (it may allocate or synchronise inside).
std::string capture_obstacle(const Block& b, bool in_body) {
  for (const auto& c : b) {
    if (c.op() == Op::custom_call)
      return "the " + std::string(op_name(c.op())) + " at " + c.id() + " is a cuSOLVER call, which cuSOLVER does not document as capturable";
    if (in_body) {
      const char* why = c.op() == Op::async_start || c.op() == Op::async_done ? "tokens (events)"
                        : is_collective(c.op()) || c.op() == Op::collective_group ? "a collective"
                                                                               : nullptr;
      if (why) return "the " + std::string(op_name(c.op())) + " at " + c.id() + " is inside a cond, switch or while, and a conditional graph node cannot hold " + why;
    }
    // Every block of a cond, switch or while is a conditional body.
    const bool body = in_body || c.op() == Op::cond || c.op() == Op::switch_ || c.op() == Op::while_;
    std::string why;
    for_each_sub_block(c, [&](const Block& sub) {
      if (why.empty()) why = capture_obstacle(sub, body);
    });
    if (!why.empty()) return why;
  }
  return "";
}

// --graph: control flow as conditional nodes. A kernel on the stream sets
// the node's handle from the predicate on the device; each body is
// captured into the node's body graph through a helper stream that
// stands in for the current one meanwhile. A while loop's body ends by
// evaluating its cond block again, and its trip count is guarded on the
// device: past --max-trip-count the loop stops and a flag is raised,
// which the run reports as on the eager path.
void CudaBackend::capture_control_flow(RankState& s, const Command& c, const StreamId& cur) {
  cudaKernel_t set_if = kernels_->get(support_, "thunky_set_if"), set_switch = kernels_->get(support_, "thunky_set_switch"),
               set_while = kernels_->get(support_, "thunky_set_while");
  auto view_ptr = [&](const Ref& r) { return ptr(s, resolve(*p_, r, s.ctx)); };
  if (const Cond* x = c.get_if<Cond>()) {
    const uint8_t* pred = view_ptr(x->pred);
    std::vector<const Block*> bodies = {&x->then_};
    if (!x->else_.empty()) bodies.push_back(&x->else_);
    conditional_node(s, cur, cudaGraphCondTypeIf, bodies, [&](cudaGraphConditionalHandle h, cudaStream_t st) { launch_one(set_if, pack_params({h, ptr_bits(pred)}), st); });
  } else if (const Switch* x = c.get_if<Switch>()) {
    const uint8_t* index = view_ptr(x->index);
    std::vector<const Block*> bodies;
    for (const auto& br : x->branches) bodies.push_back(&br);
    const uint64_t n = bodies.size();
    conditional_node(s, cur, cudaGraphCondTypeSwitch, bodies, [&](cudaGraphConditionalHandle h, cudaStream_t st) { launch_one(set_switch, pack_params({h, ptr_bits(index), n}), st); });
  } else {
    const While& w = c.as<While>();
    const uint8_t* pred = view_ptr(w.cond_buf);
    const size_t slot = s.loops.size();
    if (slot >= captured_loops_) throw DeviceError("internal: plan() counted " + std::to_string(captured_loops_) + " while loops, the capture met more");
    s.loops.push_back(&c);
    uint8_t* counter = s.loop_guards + slot * 16;
    THUNKY_CUDA_CHECK(cudaMemsetAsync(counter, 0, 8, stream(s, cur)));
    issue_block(s, w.cond, cur, true);
    const uint64_t max = static_cast<uint64_t>(opts_->max_trip_count);
    auto set = [&](cudaGraphConditionalHandle h, cudaStream_t st) { launch_one(set_while, pack_params({h, ptr_bits(pred), ptr_bits(counter), max, ptr_bits(counter + 8)}), st); };
    // The handle is set before the node from the first evaluation, and
    // again at the end of every iteration.
    conditional_node(s, cur, cudaGraphCondTypeWhile, {&w.body}, set, [&](cudaGraphConditionalHandle h) {
      issue_block(s, w.cond, cur, true);
      set(h, stream(s, cur));
    });
  }
}

void CudaBackend::conditional_node(RankState& s, const StreamId& cur, cudaGraphConditionalNodeType type, const std::vector<const Block*>& bodies,
                      const std::function<void(cudaGraphConditionalHandle, cudaStream_t)>& set,
                      const std::function<void(cudaGraphConditionalHandle)>& tail) {
  StreamState& ss = s.streams.at(cur);
  cudaStreamCaptureStatus status;
  cudaGraph_t g = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  // The edges' data is asked for and passed on: a query without it fails
  // (cudaErrorLossyQuery) when a library call left edges with data, such
  // as programmatic launches.
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  THUNKY_CUDA_CHECK(cudaStreamGetCaptureInfo(ss.stream, &status, nullptr, &g, &deps, &edges, &n));
  cudaGraphConditionalHandle h;
  THUNKY_CUDA_CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
  set(h, ss.stream);
  THUNKY_CUDA_CHECK(cudaStreamGetCaptureInfo(ss.stream, &status, nullptr, &g, &deps, &edges, &n));
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = h;
  params.conditional.type = type;
  params.conditional.size = static_cast<unsigned>(bodies.size());
  cudaGraphNode_t node;
  THUNKY_CUDA_CHECK(cudaGraphAddNode(&node, g, deps, edges, n, &params));
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
void CudaBackend::launch_one(cudaKernel_t k, const std::vector<uint8_t>& params, cudaStream_t st) {
  void* args[] = {const_cast<uint8_t*>(params.data())};
  THUNKY_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(1), dim3(1), args, 0, st));
}

cudaError_t CudaBackend::record(cudaEvent_t e, cudaStream_t st) {
  // Captured into a graph, an event that is read afterwards must be an external node.
  return capturing_ ? cudaEventRecordWithFlags(e, st, cudaEventRecordExternal) : cudaEventRecord(e, st);
}

// --graph: the whole schedule, every rank, captured into one graph from
// an origin stream that every rank's streams fork from and join into.
void CudaBackend::capture() {
  DeviceState& ds = devices_state_.begin()->second;
  if (devices_state_.size() != 1) {
    std::cerr << "thunky-exec: --graph: running eagerly: a graph spans one GPU, and this placement uses " << devices_state_.size() << "\n";
    return;
  }
  THUNKY_CUDA_CHECK(cudaSetDevice(ds.device));
  for (auto& s : ranks_) {
    s->start_iteration();
    s->loops.clear();
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
void CudaBackend::launch_graph() {
  DeviceState& ds = devices_state_.begin()->second;
  THUNKY_CUDA_CHECK(cudaSetDevice(ds.device));
  for (size_t i = 0; i < ranks_.size(); ++i) {
    ranks_[i]->timed = captured_[i].timed;
    ranks_[i]->flows = captured_[i].flows;
    ranks_[i]->commands = captured_[i].commands;
  }
  for (auto& s : ranks_)
    if (!s->loops.empty()) THUNKY_CUDA_CHECK(cudaMemsetAsync(s->loop_guards, 0, s->loops.size() * 16, ds.origin));
  if (opts_->processes) opts_->processes->barrier();  // a shared origin across processes, as eagerly
  THUNKY_CUDA_CHECK(cudaEventRecord(ds.base, ds.origin));
  const auto t0 = Clock::now();
  THUNKY_CUDA_CHECK(cudaGraphLaunch(graph_exec_, ds.origin));
  graph_launch_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  THUNKY_CUDA_CHECK(cudaStreamSynchronize(ds.origin));
  for (auto& s : ranks_) {
    std::vector<uint64_t> guards(s->loops.size() * 2);
    if (guards.empty()) continue;
    THUNKY_CUDA_CHECK(cudaMemcpy(guards.data(), s->loop_guards, guards.size() * 8, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < s->loops.size(); ++i)
      if (guards[2 * i + 1])
        throw runaway_loop(*s->loops[i], s->rank, opts_->max_trip_count);
  }
}

}  // namespace thunky::cuda
