#include <span>

#include "core/control_flow.h"
#include "sim/engine_internal.h"

namespace thunky::sim {

namespace {

// The dtype whose peak rate bounds a command's flops: a GEMM's operands',
// a kernel's first read's (a fused kernel, as FlashAttention's, computes
// in its inputs' type), f64 for a map into f64, f32 otherwise (a map of
// narrower types computes in f32).
DType flop_dtype(const Program& p, const Command& c) {
  if (const Gemm* g = c.get_if<Gemm>()) return ref_dtype(p, g->a);
  if (const Kernel* k = c.get_if<Kernel>(); k && !k->reads.empty()) return ref_dtype(p, k->reads.front());
  if (const Map* m = c.get_if<Map>(); m && ref_dtype(p, m->out) == DType::f64) return DType::f64;
  return DType::f32;
}

// The two sides of a compute command's roofline, with the machine's peak
// for a dtype given by `peak`: its flops at that rate (a GEMM's by shape,
// at the machine's efficiency; transcendentals count several) and its
// bytes at HBM bandwidth.
template <typename Peak>
internal::KernelNeeds roofline(const Program& p, const Machine& m, const Command& c, const Work& w, Peak peak) {
  internal::KernelNeeds n;
  if (w.flops > 0) {
    // A GEMM, or a kernel of tensor-core work (flops in a type narrower
    // than f32), runs at the machine's GEMM efficiency.
    const bool tensor_kernel = c.op() == Op::kernel && dtype_size(flop_dtype(p, c)) < 4 && is_float(flop_dtype(p, c));
    const double eff = c.op() == Op::gemm || tensor_kernel ? m.gemm_efficiency : 1.0;
    if (is_flop_bound(c.op())) n.compute_s = (c.op() == Op::gemm ? gemm_flops_by_shape(m, w) : w.flops) / (peak(flop_dtype(p, c)) * eff);
  }
  n.memory_s = static_cast<double>(w.bytes) / m.hbm_bandwidth;
  if (c.op() == Op::gemm && m.sm_count > 0 && w.gemm_m > 0 && w.gemm_n > 0) {
    auto up = [](int64_t x, int64_t q) { return (x + q - 1) / std::max<int64_t>(1, q); };
    n.tiles = up(w.gemm_m, m.gemm_tile_m) * up(w.gemm_n, m.gemm_tile_n) * std::max<int64_t>(1, w.gemm_batch);
  }
  return n;
}

// compute_seconds with the machine's peak for a dtype given by `peak`.
template <typename Peak>
double seconds_with(const Program& p, const Machine& m, const Command& c, const Work& w, Peak peak) {
  if (c.cost && c.cost->seconds) return *c.cost->seconds;
  const internal::KernelNeeds n = roofline(p, m, c, w, peak);
  return std::max(n.compute_s, n.memory_s) + m.launch_overhead_s;
}

}  // namespace

double gemm_flops_by_shape(const Machine& m, const Work& w) {
  if (m.sm_count <= 0 || w.gemm_m <= 0 || w.gemm_n <= 0 || w.gemm_k <= 0) return w.flops;
  auto up = [](int64_t x, int64_t q) { return (x + q - 1) / q; };
  struct Tile {
    int64_t tm, tn;
    double rate;
  };
  Tile tiles[4] = {{m.gemm_tile_m, m.gemm_tile_n, 1.0},
                   {m.gemm_tile_m, std::max<int64_t>(1, m.gemm_tile_n / 2), 0.9},
                   {std::max<int64_t>(1, m.gemm_tile_m / 2), std::max<int64_t>(1, m.gemm_tile_n / 2), 0.75},
                   {}};
  // A skinny problem (a GEMV, or a side of C of at most kSkinny) is what a
  // library gives a GEMV kernel or thin tiles with split-K: tiles 8 wide
  // along the thin side, and K cut into slices for the SMs the tiles leave
  // idle. Such a problem is bound by its bytes, as on the GPU.
  constexpr int64_t kSkinny = 64, kThin = 8;
  const bool skinny = std::min(w.gemm_m, w.gemm_n) <= kSkinny;
  if (skinny) tiles[3] = w.gemm_m <= w.gemm_n ? Tile{kThin, m.gemm_tile_n, 1.0} : Tile{m.gemm_tile_m, kThin, 1.0};
  double best = std::numeric_limits<double>::infinity();
  for (const Tile& t : std::span(tiles, skinny ? 4 : 3)) {
    const int64_t count = up(w.gemm_m, t.tm) * up(w.gemm_n, t.tn) * std::max<int64_t>(1, w.gemm_batch);
    // Split-K: as many slices of K as the idle SMs take, each at least one k-tile deep.
    const int64_t slices = skinny && count < m.sm_count ? std::max<int64_t>(1, std::min(m.sm_count / count, up(w.gemm_k, m.gemm_tile_k))) : 1;
    const double k = static_cast<double>(up(up(w.gemm_k, slices), m.gemm_tile_k) * m.gemm_tile_k + m.gemm_k_overhead);
    const double waves = std::ceil(static_cast<double>(count * slices) / static_cast<double>(m.sm_count));
    best = std::min(best, 2.0 * waves * static_cast<double>(m.sm_count) * static_cast<double>(t.tm * t.tn) * k / t.rate);
  }
  return best;
}

double compute_seconds(const Program& p, const Machine& m, const Command& c, const Work& w) {
  return seconds_with(p, m, c, w, [&](DType t) { return m.peak(t); });
}

namespace internal {

Engine::Engine(const Program& p, const Machine& m, const Decisions* d, bool fold, const SimOptions& options)
    : p_(p), m_(m), decisions_(d), options_(options) {
  const int64_t n = p.mesh.size();
  ctx_.resize(static_cast<size_t>(n));  // filled as ranks are met (ctx)
  for (const auto& name : p.mesh.axis_names) links_by_dim_.push_back(m.axis(name));
  strides_.assign(p.mesh.shape.size(), 1);
  for (int i = static_cast<int>(p.mesh.shape.size()) - 2; i >= 0; --i) strides_[i] = strides_[i + 1] * p.mesh.shape[i + 1];
  infos_.reserve(static_cast<size_t>(p.command_count));
  number_commands(p.program, infos_, block_starts_);
  // Ranks that share a host's cores (chip.host_cores) queue for them
  // together: no rank's timeline stands for the others'.
  classes_ = fold && n > 1 ? rank_classes(p, m, d) : RankClasses::none(p.mesh, "every rank is simulated (--every-rank)");
  fold_ = classes_.count() < n;
  one_class_ = fold_ && classes_.count() == 1;
  if (fold_) {
    representative_.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) representative_[static_cast<size_t>(r)] = static_cast<int32_t>(classes_.representative(r));
  }
  peak_.fill(-1);  // looked up on first use
  // A device's SMs and HBM, which collectives take from its kernels; a
  // host's cores are shared otherwise (ComputeShares).
  interference_ = options.interference && m.host_cores == 0 && (m.sm_count > 0 || m.hbm_bandwidth > 0);
  if (interference_) compute_.set_device(m.sm_count, m.hbm_bandwidth);
}

Expected<SimResult> Engine::run(bool timelines) {
  if (auto e = simulate_all(timelines ? Keep::records : Keep::stats); !e.empty()) return e;
  return timelines ? result() : stats_result();
}

Expected<SimSummary> Engine::run_summary() {
  if (auto e = simulate_all(Keep::count); !e.empty()) return e;
  SimSummary s;
  s.rank_commands = recorder_.counted() * classes_.class_size();
  s.makespan_s = recorder_.last_end();
  return s;
}

int64_t Engine::expected_commands(const Block& b) {
  static constexpr int64_t kSaturated = int64_t{1} << 62;
  auto add = [](int64_t a, int64_t b) { return std::min(kSaturated, a + b); };
  auto mul = [](int64_t a, int64_t b) { return b != 0 && a > kSaturated / b ? kSaturated : a * b; };
  // The mean of rank 0's decisions for a command, if the functional model made any.
  auto decided = [&](const Command& c) -> std::optional<int64_t> {
    if (!decisions_ || decisions_->empty()) return std::nullopt;
    auto it = (*decisions_)[0].find(c.id());
    if (it == (*decisions_)[0].end() || it->second.empty()) return std::nullopt;
    double sum = 0;
    for (int64_t v : it->second) sum += static_cast<double>(v);
    return static_cast<int64_t>(sum / static_cast<double>(it->second.size()) + 0.5);
  };
  // What is recorded: each compute command and collective, each member of
  // a group; control flow, streams and calls only for what they hold.
  int64_t n = 0;
  for (const Command& c : b) {
    switch (op_family(c.op())) {
      case OpFamily::control: {
        if (const While* w = c.get_if<While>()) {
          const int64_t trips = w->trip_count ? *w->trip_count : decided(c).value_or(0);
          const int64_t loop = add(expected_commands(w->cond), mul(std::max<int64_t>(trips, 0), add(expected_commands(w->body), expected_commands(w->cond))));
          if (loop > heaviest_loop_commands_) heaviest_loop_commands_ = loop, heaviest_loop_ = &c;
          n = add(n, loop);
          break;
        }
        std::optional<int64_t> k = hinted_branch(c);
        if (!k) k = decided(c);
        if (k) {
          n = add(n, expected_commands(*take_branch(c, *k).block));
        } else {
          int64_t most = 0;
          for_each_sub_block(c, [&](const Block& sub) { most = std::max(most, expected_commands(sub)); });
          n = add(n, most);
        }
        break;
      }
      case OpFamily::compute:
      case OpFamily::collective: n = add(n, 1); break;
      case OpFamily::group:
      case OpFamily::stream:
      case OpFamily::call: for_each_sub_block(c, [&](const Block& sub) { n = add(n, expected_commands(sub)); }); break;
    }
  }
  return n;
}

void Engine::start_recording(Keep keep) {
  const int64_t ranks = classes_.count();
  const int64_t one = expected_commands(p_.program);
  const int64_t expected = one > (int64_t{1} << 62) / ranks ? int64_t{1} << 62 : one * ranks;
  recorder_.start(keep, p_.mesh.size(), expected);
  network_.sample(keep == Keep::records);  // the report's link tracks
  if (expected <= recorder_.limit()) return;
  // Named by the loop that weighs most, where there is one.
  const Command* loop = heaviest_loop_;
  const std::string where = !loop ? "" : loop->as<While>().trip_count ? loop->pointer + "/sim/trip_count" : loop->pointer;
  const std::string about = std::to_string(expected) + " in all: loop trips times commands, on every rank simulated";
  if (keep != Keep::records)
    throw ThunkyError(where, std::string(loop ? "this loop takes" : "the schedule takes") + " the simulation past " + std::to_string(recorder_.limit()) +
                                 " commands (about " + about + "), the most thunky-sim " + recorder_.limit_verb());
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f GiB", static_cast<double>(expected) * kBytesPerRecord / (1 << 30));
  throw ThunkyError(where, std::string(loop ? "this loop takes" : "the schedule takes") + " the report past " + std::to_string(options_.max_records) +
                               " commands, --max-records (about " + about + "; about " + gib +
                               " while simulating, as much again for each file); raise it, lower the trip counts, or simulate without --report, --trace and --svg");
}

std::vector<Diagnostic> Engine::simulate_all(Keep keep) {
  try {
    start_recording(keep);
    // Folded, only each class's representative runs.
    compute_.set_ranks(p_.mesh.size());
    issuer_.start(fold_ ? classes_.representatives() : std::vector<int64_t>(), p_.mesh.size(), recorder_.limit(), recorder_.limit_verb());
    advance();
    while (auto e = queue_.pop()) {
      now_ = e->time.s;
      // Past 10^7 s (116 days) a double's step is a microsecond's tenth
      // and events of short commands stop advancing time: such figures
      // (a kernel's cost, a latency, a tiny bandwidth) are out of range.
      if (!(now_ <= kMaxSimulatedSeconds))
        throw ThunkyError("", "the simulated time passed " + std::to_string(static_cast<int64_t>(kMaxSimulatedSeconds)) +
                                  " s: a cost, latency or bandwidth of the schedule or machine model is out of range");
      handle(SimEvent::unpack(e->payload));
      advance();
    }
  } catch (const MachineError& e) {
    return std::vector<Diagnostic>{machine_error(m_, e)};
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{e.kind(), p_.file, e.pointer(), e.what()}};
  }
  std::vector<std::string> blocked;
  for (const auto& s : streams_) {
    if (s.state == Stream::State::done) continue;
    const Task& t = s.tasks[s.pc];
    blocked.push_back(rank_label(p_.mesh, s.rank) + " " + s.sid.str() + " at " + infos_[t.info].cmd->id() +
                      (s.state == Stream::State::waiting_collective ? " (waiting for the other ranks of a collective)" : " (waiting for a token)"));
  }
  if (!blocked.empty()) {
    std::string msg = "deadlock: nothing can progress;";
    for (size_t i = 0; i < blocked.size() && i < 16; ++i) msg += " " + blocked[i] + ";";
    msg.pop_back();
    return std::vector<Diagnostic>{{ErrorKind::schedule, p_.file, "", msg}};
  }
  return {};
}

namespace {

constexpr size_t kNumberAhead = 8;

int number(const Block& b, std::pmr::vector<CmdInfo>& infos, std::pmr::vector<int>& starts) {
  const int first = static_cast<int>(infos.size());
  for (const auto& c : b) {
    // A long block's commands are far apart (a Command is four cache
    // lines): their first lines are asked for some commands ahead.
    if (&c + kNumberAhead < b.data() + b.size()) __builtin_prefetch(&c + kNumberAhead);
    const int i = static_cast<int>(infos.size());
    infos.emplace_back();
    infos[i].cmd = &c;
    // Compute commands and collectives hold no blocks: testing the op
    // first spares a leaf the cache misses of visiting its description.
    const OpFamily family = op_family(c.op());
    int k = 0, filled = 0;
    if (family != OpFamily::compute && family != OpFamily::collective)
      for_each_sub_block(c, [&](const Block& sub) { ++k, filled += sub.empty() ? 0 : 1; });
    if (filled > 0) {
      const int at = static_cast<int>(starts.size());
      starts.resize(starts.size() + static_cast<size_t>(k));
      infos[i].blocks = at;
      k = 0;
      // The blocks in the order of the op's description (block_start
      // finds them by that position).
      for_each_sub_block(c, [&](const Block& sub) { starts[at + k++] = number(sub, infos, starts); });
    }
    infos[i].subtree = static_cast<int>(infos.size()) - i;
  }
  return first;
}

}  // namespace

void number_commands(const Block& program, std::pmr::vector<CmdInfo>& infos, std::pmr::vector<int>& block_starts) { number(program, infos, block_starts); }

const RankCtx& Engine::ctx(int64_t rank) {
  RankCtx& c = ctx_[rank];
  if (c.coords.size() != p_.mesh.shape.size()) c = rank_ctx(p_.mesh, rank);
  return c;
}

const Work& Engine::work(int info, int64_t rank, Work& scratch) {
  CmdInfo& in = infos_[info];
  if (in.per_rank == 1) return scratch = command_work(p_, *in.cmd, ctx(rank), &shapes_);
  if (in.per_rank < 0) {
    bool sized = false;
    in.work = command_work(p_, *in.cmd, ctx(rank), &shapes_, &sized);
    in.per_rank = sized ? 1 : 0;
  }
  return in.work;
}

double Engine::seconds(int info, int64_t rank) {
  CmdInfo& in = infos_[info];
  if (in.have_seconds) return in.seconds;
  // A command priced before with the same inputs (views, flags,
  // expression) is priced alike: long schedules repeat their layers.
  WorkMemo::Slot* slot = in.per_rank < 0 ? work_memo_.find(*in.cmd) : nullptr;
  if (slot && slot->full) {
    in.work = slot->work;
    in.seconds = slot->seconds;
    in.per_rank = 0;
    in.have_seconds = true;
    return in.seconds;
  }
  Work scratch;
  auto peak = [&](DType t) {
    double& v = peak_[static_cast<size_t>(t)];
    if (v < 0) v = m_.peak(t);
    return v;
  };
  const double s = needing(*in.cmd, [&] { return seconds_with(p_, m_, *in.cmd, work(info, rank, scratch), peak); });
  if (in.per_rank == 0) {
    in.seconds = s;
    in.have_seconds = true;
    if (slot) {
      slot->full = true;
      slot->work = in.work;
      slot->seconds = s;
    }
  }
  return s;
}

KernelNeeds Engine::needs(int info, int64_t rank) {
  CmdInfo& in = infos_[info];
  if (!interference_ || (in.cmd->cost && in.cmd->cost->seconds)) return {};
  if (in.have_needs) return in.needs;
  Work scratch;
  const Work& w = in.per_rank == 0 ? in.work : work(info, rank, scratch);
  const KernelNeeds n = roofline(p_, m_, *in.cmd, w, [&](DType t) {
    double& v = peak_[static_cast<size_t>(t)];
    if (v < 0) v = m_.peak(t);
    return v;
  });
  if (in.per_rank == 0) {  // the same on every rank: computed once
    in.needs = n;
    in.have_needs = true;
  }
  return n;
}

void Engine::grant_core_to_collective() {
  Comm act = std::move(waiting_for_core_.front());
  waiting_for_core_.pop_front();
  act.holds_core = true;
  start_collective(std::move(act));
}

bool Engine::flows_done(const Comm& act) const {
  for (FlowId f : act.flows)
    if (!network_.flow(f).done) return false;
  return true;
}

void Engine::handle(SimEvent e) {
  const int a = e.id;
  switch (e.kind) {
    case SimEvent::Kind::compute:
      if (const auto ended = compute_.end(KernelId(a), e.version)) finish_compute(*ended);
      return;
    case SimEvent::Kind::wake:
      streams_[a].state = Stream::State::ready;
      ready_.push_back(a);
      return;
    case SimEvent::Kind::flow_start:
      if (comms_[a].finished) return;
      if (flows_done(comms_[a])) finish_comm(a);
      else activate(a);
      return;
    case SimEvent::Kind::latency:
      if (!comms_[a].finished && flows_done(comms_[a])) finish_comm(a);
      return;
    case SimEvent::Kind::comm: break;
  }
  Comm& act = comms_[a];
  if (act.finished) return;
  if (act.version != e.version) return;  // a stale prediction
  // Flows with nothing left are done.
  retired_.clear();
  for (FlowId f : act.flows) {
    const Flow& fl = network_.flow(f);
    if (!fl.active || fl.done) continue;
    const double left = fl.remaining - fl.rate * (now_ - fl.last);
    if (left <= 1e-9 * std::max(1.0, fl.rate)) network_.retire(f, retired_);
  }
  if (flows_done(act) && now_ >= act.latency_end) finish_comm(a, false);
  else solve_links(retired_, a);
}

void Engine::release(int stream) {
  Stream& s = streams_[stream];
  ++s.pc;
  s.state = Stream::State::ready;
  ready_.push_back(stream);
}

void Engine::finish_comm(int a, bool fresh) {
  Comm& act = comms_[a];
  act.finished = true;
  std::vector<LinkId>& seeds = retired_;
  if (fresh) seeds.clear();
  for (FlowId f : act.flows) network_.retire(f, seeds);
  // Each stream of the collective reports each member.
  for (size_t k = 0; k < act.streams.size(); ++k) {
    const int si = act.streams[k];
    const Stream& st = streams_[si];
    const Task& t = st.tasks[st.pc];
    const CmdInfo& g = infos_[t.info];
    if (g.cmd->op() == Op::collective_group) {
      for (int m = members_begin(t.info); m < members_end(t.info); ++m)
        record(st.rank, {act.since[k], now_, m, t.instance, si, act.start});
    } else {
      record(st.rank, {act.since[k], now_, t.info, t.instance, si, act.start});
    }
    if (act.ctas > 0 || act.hbm > 0) compute_.take(st.rank, -act.ctas, -act.hbm, now_);  // its SMs and HBM come back
  }
  for (int s : act.stats)
    if (recorder_.row(s).seconds == 0) recorder_.row(s).seconds = now_ - act.start;
  for (int s : act.streams) release(s);
  for (FlowId f : act.flows) network_.free_flow(f);
  const bool held_core = act.holds_core;
  // Its vectors go to the next collective; what stays (finished, version)
  // is what late events are checked against.
  spare_comms_.push_back(std::move(act));
  if (!seeds.empty()) solve_links(seeds, -1);
  if (held_core) compute_.release_collective_core(now_);
}

void Engine::finish_compute(const ComputeShares::Ended& k) {
  const Stream& st = streams_[k.stream];
  record(st.rank, {k.start, now_, st.tasks[st.pc].info, st.tasks[st.pc].instance, k.stream, -1, k.lost});
  release(k.stream);
  compute_.share(st.rank, now_);
}

void Engine::advance() {
  while (!ready_.empty()) {
    const int s = ready_.back();
    ready_.pop_back();
    step(s);
  }
}

void Engine::step(int si) {
  Stream* sp = &streams_[si];
  while (sp->state == Stream::State::ready) {
    if (sp->pc >= sp->tasks.size()) {
      // Everything issued so far has run: reuse the storage.
      sp->tasks.clear();
      sp->pc = 0;
      const bool more = issuer_.issue_until(si);
      sp = &streams_[si];  // issuing may have added streams
      if (!more) {
        sp->state = Stream::State::done;
        return;
      }
    } else if (sp->pc >= kCompactAfter && 2 * sp->pc >= sp->tasks.size()) {
      // A stream the issuer keeps ahead of never runs dry: once what it
      // has run is half its queue, that half goes, so it holds only what
      // is pending.
      sp->tasks.erase(sp->tasks.begin(), sp->tasks.begin() + static_cast<std::ptrdiff_t>(sp->pc));
      sp->pc = 0;
    }
    Stream& s = *sp;
    const Task& t = s.tasks[s.pc];
    if (t.kind == Task::Kind::record) {
      Event& e = events_[t.event];
      e.done = true;
      e.t = now_;
      e.ready = now_ + m_.event_latency_s;
      e.stream = si;
      if (e.waiter >= 0) {
        streams_[e.waiter].state = Stream::State::ready;
        ready_.push_back(e.waiter);
        e.waiter = -1;
      }
      ++s.pc;
    } else if (t.kind == Task::Kind::wait) {
      Event& e = events_[t.event];
      if (!e.done) {
        s.state = Stream::State::waiting_event;
        e.waiter = si;
        return;
      }
      if (e.ready > now_) {
        // The hand-off's latency: the stream goes on when it has passed.
        s.state = Stream::State::waiting_event;
        queue_.push({e.ready}, SimEvent{SimEvent::Kind::wake, si}.pack());
        return;
      }
      recorder_.edge(s.rank, {e.t, now_, e.stream, si, t.info, t.join});
      // One wait per event: its slot can be reused.
      e = Event{};
      free_events_.push_back(t.event);
      ++s.pc;
    } else if (const Op op = infos_[t.info].cmd->op(); is_collective(op) || op == Op::collective_group) {
      arrive(si, t);
      return;
    } else if (ready_.empty() && queue_.empty()) {
      // Alone on the machine (no other stream can move, nothing is in
      // flight, so no kernel runs either): the kernel runs at the full
      // rate and nothing can happen before it ends, so time jumps to its
      // end without the queue.
      const double start = now_;
      now_ += seconds(t.info, s.rank);
      record(s.rank, {start, now_, t.info, t.instance, si});
      ++s.pc;
    } else {
      s.state = Stream::State::running;
      s.since = now_;
      const double solo = seconds(t.info, s.rank);
      compute_.start(s.rank, si, solo, now_, needs(t.info, s.rank));
      return;
    }
  }
}

}  // namespace internal

using internal::Engine;


namespace {

// Runs `what` on an engine; a folded run that fails (a deadlock, say) is
// repeated unfolded so that its message names the real ranks.
template <typename Run>
auto run_engine(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options, Run what) -> decltype(what(std::declval<Engine&>())) {
  try {
    Engine e(p, m, decisions, options.fold_symmetric_ranks, options);
    auto r = what(e);
    if (r || !e.folded()) return r;
    Engine full(p, m, decisions, false, options);
    return what(full);
  } catch (const MachineError& e) {
    return std::vector<Diagnostic>{internal::machine_error(m, e)};
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{ErrorKind::input, p.file, e.pointer(), e.what()}};
  }
}

}  // namespace

Expected<SimSummary> simulate_summary(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options) {
  return run_engine(p, m, decisions, options, [](Engine& e) { return e.run_summary(); });
}

Expected<SimResult> simulate(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options) {
  auto r = run_engine(p, m, decisions, options, [&](Engine& e) { return e.run(options.timelines); });
  if (!r) return r;
  for (auto& s : r->collectives) {
    if (s.seconds <= 0) continue;
    s.alg_bw = s.bytes / s.seconds;
    Op op = Op::collective_permute;
    for (Op o : {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::all_to_all})
      if (s.op == op_name(o)) op = o;
    s.bus_bw = s.alg_bw * bus_factor(op, s.ranks);
  }
  return r;
}

}  // namespace thunky::sim

