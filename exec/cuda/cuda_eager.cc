// The cuda backend: one iteration issued eagerly, and its timeline and
// memory read back.
#include "exec/cuda/cuda_backend.h"

#include <algorithm>
#include <thread>

#include "core/accounting.h"
#include "core/control_flow.h"
#include "core/program_walk.h"

namespace thunky::cuda {

// Inputs afresh (as the cpu backend: every iteration starts alike),
// from host copies made once.
void CudaBackend::set_inputs() {
  const Program& p = *p_;
  if (initial_.empty()) {
    initial_.resize(ranks_.size());
    for (auto& s : ranks_) {
      auto& mine = initial_[static_cast<size_t>(s->rank - block_.first)];
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
        const auto& host = initial_[static_cast<size_t>(s->rank - block_.first)][b];
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
void CudaBackend::run_iteration() {
  set_inputs();
  for (auto& s : ranks_) s->start_iteration();
  if (graph_exec_) {
    launch_graph();
    return;
  }
  // Across processes, every process records its base events as it leaves
  // one barrier: the timelines share an origin, within the barrier's spread
  // (the report's clock_uncertainty_s).
  if (opts_->processes) opts_->processes->barrier();
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
void CudaBackend::issue_all_ranks() {
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
void CudaBackend::join_streams(RankState& s) {
  cudaStream_t main = s.streams.at(StreamId{}).stream;
  for (auto& [id, st] : s.streams) {
    if (id == StreamId{}) continue;
    cudaEvent_t e = s.joins.next();
    THUNKY_CUDA_CHECK(cudaEventRecord(e, st.stream));
    THUNKY_CUDA_CHECK(cudaStreamWaitEvent(main, e, 0));
  }
}

void CudaBackend::wait_rank(RankState& s, const std::string& what) {
  THUNKY_CUDA_CHECK(cudaSetDevice(s.device));
  wait_stream(s, s.streams.at(StreamId{}).stream, what);
}

// Waits for a stream; with --timeout, at most that long (NCCL also
// watches its communicators' errors and aborts them). Past it the run
// stops with exit 3, naming the rank's last collective.
void CudaBackend::wait_stream(RankState& s, cudaStream_t st, const std::string& what) {
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
size_t CudaBackend::timestamp(RankState& s, const StreamId& id) {
  const size_t i = s.timing.used();
  THUNKY_CUDA_CHECK(record(s.timing.next(), stream(s, id)));
  return i;
}

void CudaBackend::issue_block(RankState& s, const Block& b, const StreamId& main, bool in_loop) {
  ProgramWalk walk(b, main, in_loop);
  while (const std::optional<ProgramWalk::Step> step = walk.next()) {
    const Command& c = *step->cmd;
    const StreamId& cur = step->stream;
    switch (step->kind) {
      case ProgramWalk::Step::Kind::fork: {
        // A dependency event (plain) and timing events (for the flow arrows).
        const size_t fork_t = timestamp(s, cur);
        cudaEvent_t fork = s.joins.next();
        THUNKY_CUDA_CHECK(cudaEventRecord(fork, stream(s, cur)));
        THUNKY_CUDA_CHECK(cudaStreamWaitEvent(stream(s, step->target), fork, 0));
        const size_t started_t = timestamp(s, step->target);
        s.flows.push_back({cur.str(), step->target.str(), c.as<AsyncStart>().token, fork_t, started_t, false});
        break;
      }
      case ProgramWalk::Step::Kind::fork_end: {
        const std::string& token = c.as<AsyncStart>().token;
        const size_t end_t = timestamp(s, cur);
        cudaEvent_t done = s.joins.next();
        THUNKY_CUDA_CHECK(cudaEventRecord(done, stream(s, cur)));
        s.tokens[token] = done;
        s.token_end[token] = {cur.str(), end_t};
        break;
      }
      case ProgramWalk::Step::Kind::join: {
        const std::string& token = c.as<AsyncDone>().token;
        THUNKY_CUDA_CHECK(cudaStreamWaitEvent(stream(s, cur), s.tokens.at(token), 0));
        const size_t joined_t = timestamp(s, cur);
        auto [from, from_t] = s.token_end.at(token);
        s.flows.push_back({from, cur.str(), token, from_t, joined_t, true});
        break;
      }
      case ProgramWalk::Step::Kind::command:
        if (op_family(c.op()) != OpFamily::control) timed_command(s, c, cur, step->in_loop);  // one timed launch
        else if (capturing_) capture_control_flow(s, c, cur);
        else issue_control_flow(s, c, cur, step->in_loop);
        break;
    }
  }
}

// Eager control flow: the predicate to the host, then the branch taken.
void CudaBackend::issue_control_flow(RankState& s, const Command& c, const StreamId& cur, bool in_loop) {
  run_control_flow(
      c, s.rank, opts_->max_trip_count, in_loop, [&](const Ref& r) { return read_scalar(s, r, cur); },
      [&](const Block& b, bool loop) { issue_block(s, b, cur, loop); }, [&](int64_t v) { s.decisions[c.id()].push_back(v); });
}

// An eager predicate: to the host, as XLA does without command buffers.
double CudaBackend::read_scalar(RankState& s, const Ref& r, const StreamId& cur) {
  const View v = resolve(*p_, r, s.ctx);
  cudaStream_t st = stream(s, cur);
  THUNKY_CUDA_CHECK(cudaMemcpyAsync(s.host_scalar, ptr(s, v), dtype_size(v.dtype), cudaMemcpyDeviceToHost, st));
  wait_stream(s, st, "the predicate at " + std::string(r.pointer));
  return load_as_double(s.host_scalar, v.dtype, 0);
}

void CudaBackend::timed_command(RankState& s, const Command& c, const StreamId& cur, bool in_loop) {
  if (s.conditional_depth > 0) {  // inside a captured conditional body: no events
    compute(s, c, cur);
    return;
  }
  const auto t0 = Clock::now();
  const size_t start = timestamp(s, cur);
  std::vector<const Command*> members;
  if (c.op() == Op::collective_group)
    for (const auto& m : c.as<CollectiveGroup>().body) members.push_back(&m);
  else if (is_collective(c.op()))
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

void CudaBackend::collective(RankState& s, const Command& c, const std::vector<const Command*>& members, const StreamId& cur) {
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

Report CudaBackend::read_timeline() {
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
      rr.ops.push_back({id, std::string(op_name(t.cmd->op())), t.cmd->name, t.stream.str(), at(t.start), at(t.end), w.bytes, w.flops});
    }
    std::stable_sort(rr.ops.begin(), rr.ops.end(), [](const OpRecord& a, const OpRecord& b) { return a.start_s < b.start_s; });
    for (const auto& f : s->flows) rr.flows.push_back({f.from, f.to, at(f.from_event), at(f.to_event), f.token, f.join});
    r.ranks.push_back(std::move(rr));
  }
  summarize(r);
  return r;
}

std::vector<std::vector<std::vector<uint8_t>>> CudaBackend::read_memory() {
  std::vector<std::vector<std::vector<uint8_t>>> mem(static_cast<size_t>(p_->mesh.size()));  // across processes, this one's ranks' only
  for (auto& s : ranks_) {
    THUNKY_CUDA_CHECK(cudaSetDevice(s->device));
    auto& m = mem[static_cast<size_t>(s->rank)];
    for (size_t b = 0; b < p_->buffers.size(); ++b) {
      auto& bytes = m.emplace_back(p_->buffers[b].bytes());
      if (!bytes.empty()) THUNKY_CUDA_CHECK(cudaMemcpy(bytes.data(), s->buffers[b], bytes.size(), cudaMemcpyDeviceToHost));
    }
  }
  return mem;
}

}  // namespace thunky::cuda
