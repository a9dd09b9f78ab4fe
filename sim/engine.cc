#include "sim/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory_resource>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/accounting.h"
#include "core/command_facts.h"
#include "core/mesh.h"
#include "core/validate.h"
#include "sim/collective_cost.h"
#include "sim/event_queue.h"
#include "sim/maxmin.h"
#include "sim/symmetry.h"

namespace thunky::sim {

namespace {

// The dtype whose peak rate bounds a command's flops: a GEMM's operands', f32 otherwise.
DType flop_dtype(const Program& p, const Command& c) { return c.op == Op::gemm ? p.buffers[c.a->buffer].dtype : DType::f32; }

// The flops a GEMM costs as the GPU runs it: whole tiles in whole waves,
// each tile's K rounded up and paying its overhead (Machine::sm_count).
// Small problems fill the GPU better with smaller tiles, which cuBLAS's
// heuristics pick at a lower rate per tile: the machine's tile, half as
// wide (at 0.9 of its rate) and half in both (at 0.75) are priced, and the
// cheapest taken. Its own flops where the machine prices GEMMs by
// efficiency alone.
double gemm_flops_by_shape(const Machine& m, const Work& w) {
  if (m.sm_count <= 0 || w.gemm_m <= 0 || w.gemm_n <= 0 || w.gemm_k <= 0) return w.flops;
  auto up = [](int64_t x, int64_t q) { return (x + q - 1) / q; };
  const double k = static_cast<double>(up(w.gemm_k, m.gemm_tile_k) * m.gemm_tile_k + m.gemm_k_overhead);
  struct Tile {
    int64_t tm, tn;
    double rate;
  };
  const Tile tiles[] = {{m.gemm_tile_m, m.gemm_tile_n, 1.0},
                        {m.gemm_tile_m, std::max<int64_t>(1, m.gemm_tile_n / 2), 0.9},
                        {std::max<int64_t>(1, m.gemm_tile_m / 2), std::max<int64_t>(1, m.gemm_tile_n / 2), 0.75}};
  double best = std::numeric_limits<double>::infinity();
  for (const Tile& t : tiles) {
    const double count = static_cast<double>(up(w.gemm_m, t.tm) * up(w.gemm_n, t.tn)) * static_cast<double>(std::max<int64_t>(1, w.gemm_batch));
    const double waves = std::ceil(count / static_cast<double>(m.sm_count));
    best = std::min(best, 2.0 * waves * static_cast<double>(m.sm_count) * static_cast<double>(t.tm * t.tn) * k / t.rate);
  }
  return best;
}

// compute_seconds with the machine's peak for a dtype given by `peak`.
template <typename Peak>
double seconds_with(const Program& p, const Machine& m, const Command& c, const Work& w, Peak peak) {
  if (c.cost && c.cost->seconds) return *c.cost->seconds;
  double flops_time = 0;
  if (w.flops > 0) {
    const double eff = c.op == Op::gemm ? m.gemm_efficiency : 1.0;
    const bool flop_bound = c.op == Op::gemm || c.op == Op::custom_call || c.op == Op::kernel || c.op == Op::ptx_kernel;
    if (flop_bound) flops_time = (c.op == Op::gemm ? gemm_flops_by_shape(m, w) : w.flops) / (peak(flop_dtype(p, c)) * eff);
  }
  return std::max(flops_time, static_cast<double>(w.bytes) / m.hbm_bandwidth) + m.launch_overhead_s;
}

}  // namespace

double compute_seconds(const Program& p, const Machine& m, const Command& c, const Work& w) {
  return seconds_with(p, m, c, w, [&](DType t) { return m.peak(t); });
}

namespace {

// Facts about one lowered command that hold on every rank, computed once.
// Commands are numbered in preorder; `blocks` gives where each child block's
// commands start (body, then, else, branches..., while cond).
struct CmdInfo {
  const Command* cmd = nullptr;
  int subtree = 1;
  int blocks = -1;  // into Engine::block_starts_; -1: no sub-blocks
  int8_t per_rank = -1;  // work differs between ranks (1), or not (0); -1: not yet computed
  bool have_seconds = false;
  Work work;
  double seconds = 0;
  int partner = -1;                  // async_done: its async_start
  int32_t sets = -1;  // collectives: into Engine::set_of_rank_
};

// The work and time of compute commands, by what command_work computes them
// from: the op, each view it reads (ref syntax, shared by equal ref texts,
// and buffer), the transposes, whether beta is 0, and a map's expression.
// A command with a cost override, a view sized by rank or more than 8
// views is not remembered. Direct-mapped: a slot holds the last command
// priced there.
class WorkMemo {
 public:
  struct Key {
    const Expr* expr = nullptr;
    Op op = Op::memzero;
    uint8_t flags = 0;  // transpose_a, transpose_b, beta != 0
    uint8_t n = 0;
    const RefSyntax* syntax[8];
    int32_t buffer[8];
    bool operator==(const Key& o) const {
      if (expr != o.expr || op != o.op || flags != o.flags || n != o.n) return false;
      for (int i = 0; i < n; ++i)
        if (syntax[i] != o.syntax[i] || buffer[i] != o.buffer[i]) return false;
      return true;
    }
  };
  struct Slot {
    bool full;
    Key key;
    Work work;
    double seconds;
  };
  // The slot for `c` when it can be remembered (full when remembered), else
  // null. A slot that holds another command is emptied for the caller.
  Slot* find(const Command& c) {
    Key k;
    if (!key(c, k)) return nullptr;
    // A sum of the inputs, mixed once: slots need spreading, not strength
    // (the key is compared whole).
    uint64_t h = static_cast<uint64_t>(k.op) ^ reinterpret_cast<uintptr_t>(k.expr) ^ static_cast<uint64_t>(k.flags) << 8;
    for (int i = 0; i < k.n; ++i) h += (reinterpret_cast<uintptr_t>(k.syntax[i]) >> i) + static_cast<uint64_t>(k.buffer[i]) * 0x9E37;
    h *= 0x9E3779B97F4A7C15ull;
    const size_t i = h >> 58;  // the top 6 bits: one of kSlots
    Slot& s = slots_[i];
    // Slots are not initialised (a short simulation would pay for clearing
    // them all); `used_` says which were ever written.
    if (!(used_ >> i & 1) || !s.full || !(s.key == k)) {
      used_ |= uint64_t{1} << i;
      s.full = false;
      s.key = k;
    }
    return &s;
  }

 private:
  static constexpr size_t kSlots = 64;  // one bit each in used_; find takes 6 bits of hash
  // A view sized by rank needs no test here: its command's work differs
  // by rank, and such work is never stored (Engine::seconds), so equal
  // keys never meet one.
  static bool add(Key& k, const Ref& r) {
    if (k.n == 8) return false;
    k.syntax[k.n] = r.syntax.get();
    k.buffer[k.n++] = r.buffer;
    return true;
  }
  static bool add(Key& k, const std::vector<Ref>& refs) {
    for (const Ref& r : refs)
      if (!add(k, r)) return false;
    return true;
  }
  // The views command_work reads for each compute op.
  static bool key(const Command& c, Key& k) {
    if (c.cost) return false;
    k.op = c.op;
    switch (c.op) {
      case Op::memzero:
      case Op::memset: return add(k, *c.dst);
      case Op::copy: return add(k, *c.src) && add(k, *c.dst);
      case Op::gemm:
        k.flags = static_cast<uint8_t>(c.transpose_a + 2 * c.transpose_b + 4 * (c.beta != 0));
        return add(k, *c.a) && add(k, *c.b) && add(k, *c.c);
      case Op::map:
        k.expr = c.expr.get();
        if (!add(k, *c.out)) return false;
        for (const auto& [name, r] : c.in)
          if (!add(k, r)) return false;
        return true;
      case Op::reduce: return add(k, *c.src) && add(k, *c.out);
      case Op::kernel:
      case Op::ptx_kernel:
      case Op::custom_call: return add(k, c.refs) && add(k, c.refs2);
      default: return false;
    }
  }
  uint64_t used_ = 0;
  std::array<Slot, kSlots> slots_;
};

struct Task {
  enum class Kind : uint8_t { op, record, wait };
  Kind kind = Kind::op;
  bool join = false;
  int32_t info = -1;
  int32_t instance = -1;  // k-th run inside a loop, -1 outside loops
  int32_t event = -1;     // record / wait
};

struct Stream {
  int64_t rank = 0;
  StreamId sid;
  std::vector<Task> tasks;
  size_t pc = 0;
  enum class State : uint8_t { ready, running, waiting_event, waiting_collective, done } state = State::ready;
};

struct Event {
  double t = 0;
  int32_t stream = -1;  // the stream that recorded it
  int32_t waiter = -1;  // the stream waiting for it
  bool done = false;
};

// What the report will say of one finished command: kept compact while the
// simulation runs and turned into OpRecords at the end.
struct Rec {
  double start = 0, end = 0;
  int32_t info = -1;
  int32_t instance = -1;
  int32_t stream = -1;
};

struct Edge {
  double from_s = 0, to_s = 0;
  int32_t from_stream = -1, to_stream = -1;
  int32_t info = -1;  // the async_start / async_done that names the token
  bool join = false;
};

// A kernel running on one rank's compute, at a share of its throughput.
struct Compute {
  int64_t rank = 0;
  int32_t stream = -1;
  double remaining = 0;  // seconds of work at full rate
  double rate = 0;
  double last = 0;
  double start = 0;
  uint32_t version = 0;  // never reset, so stale predictions are recognised after reuse
};

struct Flow {
  explicit Flow(std::pmr::memory_resource* m) : links(m) {}
  int activity = -1;
  std::pmr::vector<int> links;
  double remaining = 0;  // bytes
  double rate = 0;
  double last = 0;
  bool active = false;  // moving bytes (after the additive latency)
  bool done = false;
};

// A running collective (or collective_group) on all its ranks.
struct Comm {
  explicit Comm(std::pmr::memory_resource* m) : streams(m), since(m), flows(m), stats(m) {}
  std::pmr::vector<int> streams;  // in rank order
  std::pmr::vector<double> since;  // when each stream reached it (it holds the stream from then)
  std::pmr::vector<int> flows;
  std::pmr::vector<int> stats;  // rows of the collective table it fills
  double start = 0, latency_end = 0;
  uint32_t version = 0;
  bool finished = false;
};

struct Rendezvous {
  size_t need = 0;
  std::vector<std::pair<int64_t, int>> arrived;  // (rank, stream)
  std::vector<double> since;
};

struct LinkKey {
  enum Kind : uint64_t { ring = 0, egress = 1, ingress = 2, nic = 3 };
  static uint64_t make(Kind k, int64_t from, int64_t to) {
    return (static_cast<uint64_t>(k) << 60) | (static_cast<uint64_t>(from) << 30) | static_cast<uint64_t>(to);
  }
  static std::string name(uint64_t key) {
    const auto kind = key >> 60;
    const auto from = std::to_string((key >> 30) & 0x3fffffff), to = std::to_string(key & 0x3fffffff);
    switch (kind) {
      case ring: return "ring " + from + ">" + to;
      case egress: return "egress " + from;
      case ingress: return "ingress " + to;
      default: return "nic " + from;
    }
  }
};

class Engine {
  // The arena's first chunk: what a small schedule's engine needs in all.
  static constexpr size_t kArenaChunk = 16 * 1024;

 public:
  Engine(const Program& p, const Machine& m, const Decisions* d, bool fold) : p_(p), m_(m), decisions_(d) {
    const int64_t n = p.mesh.size();
    ctx_.resize(static_cast<size_t>(n));  // filled as ranks are met (ctx)
    for (const auto& name : p.mesh.axis_names) links_by_dim_.push_back(m.axis(name));
    strides_.assign(p.mesh.shape.size(), 1);
    for (int i = static_cast<int>(p.mesh.shape.size()) - 2; i >= 0; --i) strides_[i] = strides_[i + 1] * p.mesh.shape[i + 1];
    std::pmr::vector<Scope> scopes(&arena_);
    scopes.emplace_back();
    infos_.reserve(static_cast<size_t>(p.command_count));
    number(p.program, scopes);
    fold_ = fold && n > 1 && ranks_symmetric(p, m, d);
    peak_.fill(-1);  // looked up on first use
  }

  // Rank 0 stands for every rank (ranks_symmetric): only its streams run,
  // a collective starts as soon as it arrives, and links are their classes
  // under translation, each flow crossing a class as often as its path does.
  bool folded() const { return fold_; }

  Expected<SimResult> run() {
    if (auto e = simulate_all(); !e.empty()) return e;
    return result();
  }

  // The engine alone: the makespan and how many commands finished, counted
  // as they finish rather than recorded.
  Expected<SimSummary> run_summary() {
    keep_records_ = false;
    if (auto e = simulate_all(); !e.empty()) return e;
    SimSummary s;
    s.rank_commands = finished_ * (fold_ ? p_.mesh.size() : 1);
    s.makespan_s = last_end_;
    return s;
  }

 private:
  // Runs every stream to its end; returns the deadlock, if any.
  std::vector<Diagnostic> simulate_all() {
    try {
      start_issuing();
      advance();
      while (auto e = queue_.pop()) {
        now_ = e->time.s;
        // Past 10^7 s (116 days) a double's step is a microsecond's tenth
        // and events of short commands stop advancing time: such figures
        // (a kernel's cost, a latency, a tiny bandwidth) are out of range.
        if (!(now_ <= kMaxSimulatedSeconds))
          throw ThunkyError("", "the simulated time passed " + std::to_string(static_cast<int64_t>(kMaxSimulatedSeconds)) +
                                    " s: a cost, latency or bandwidth of the schedule or machine model is out of range");
        handle(e->payload);
        advance();
      }
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

  // ---- the rank-independent facts ----
  // The tokens live in a region of control flow: async_start number by name.
  using Scope = std::pmr::unordered_map<std::string_view, int>;

  static constexpr size_t kNumberAhead = 8;
  static constexpr double kMaxSimulatedSeconds = 1e7;
  // Commands simulated (each rank simulated counts its own): 2^25 when
  // each is kept for the report (about 1.3 GB of records), 2^30 when they
  // are only counted (simulate_summary: a few minutes).
  static constexpr int64_t kMaxRecordedCommands = int64_t{1} << 25;
  static constexpr int64_t kMaxSimulatedCommands = int64_t{1} << 30;
  int64_t command_limit() const { return keep_records_ ? kMaxRecordedCommands : kMaxSimulatedCommands; }

  int number(const Block& b, std::pmr::vector<Scope>& scopes) {
    const int first = static_cast<int>(infos_.size());
    for (const auto& c : b) {
      // A long block's commands are far apart (a Command is most of a
      // kilobyte): their first lines are asked for some commands ahead.
      if (&c + kNumberAhead < b.data() + b.size()) __builtin_prefetch(&c + kNumberAhead);
      const int i = static_cast<int>(infos_.size());
      infos_.emplace_back();
      infos_[i].cmd = &c;
      if (c.op == Op::async_start) scopes.back()[c.token] = i;
      if (c.op == Op::async_done) {
        for (auto s = scopes.rbegin(); s != scopes.rend(); ++s)
          if (auto it = s->find(c.token); it != s->end()) {
            infos_[i].partner = it->second;
            break;
          }
        if (infos_[i].partner < 0) throw ThunkyError(c.pointer, "async_done of unknown token '" + c.token + "'");
      }
      // Only these ops have sub-blocks: testing the op first spares a leaf
      // the cache misses of reading its five block vectors.
      const bool nests = c.op == Op::async_start || c.op == Op::collective_group || c.op == Op::cond || c.op == Op::switch_ ||
                         c.op == Op::while_ || c.op == Op::call;
      const bool leaf = !nests || (c.body.empty() && c.rare().then_.empty() && c.rare().else_.empty() && c.rare().branches.empty() && c.rare().cond.empty());
      if (!leaf) {
        const int at = static_cast<int>(block_starts_.size());
        block_starts_.resize(block_starts_.size() + 4 + c.rare().branches.size());
        infos_[i].blocks = at;
        int k = 0;
        auto child = [&](const Block& sub, bool scope) {
          if (scope && !sub.empty()) scopes.emplace_back();
          block_starts_[at + k++] = number(sub, scopes);
          if (scope && !sub.empty()) scopes.pop_back();
        };
        // An async_start's body and a call share their issuer's tokens; the
        // regions of control flow have their own.
        child(c.body, c.op == Op::while_);
        child(c.rare().then_, true);
        child(c.rare().else_, true);
        for (const auto& br : c.rare().branches) child(br, true);
        child(c.rare().cond, true);
      }
      infos_[i].subtree = static_cast<int>(infos_.size()) - i;
    }
    return first;
  }

  // Where the k-th sub-block of a command starts (body, then, else,
  // branches..., while cond last).
  // A command whose sub-blocks are all empty has none recorded: any start
  // serves, as nothing is issued from an empty block.
  int block(int info, size_t k) const { return infos_[info].blocks < 0 ? 0 : block_starts_[infos_[info].blocks + k]; }
  int members_begin(int info) const { return block(info, 0); }
  int members_end(int info) const { return block(info, 0) + static_cast<int>(infos_[info].cmd->body.size()); }

  // A rank's coordinates, worked out when first asked for: folded, the
  // simulation asks only for rank 0's.
  const RankCtx& ctx(int64_t rank) {
    RankCtx& c = ctx_[rank];
    if (c.coords.size() != p_.mesh.shape.size()) c = rank_ctx(p_.mesh, rank);
    return c;
  }

  // A command's work, computed once when it holds on every rank: whether
  // it does is found by the first computation (a view sized by rank).
  const Work& work(int info, int64_t rank, Work& scratch) {
    CmdInfo& in = infos_[info];
    if (in.per_rank == 1) return scratch = command_work(p_, *in.cmd, ctx(rank), &shapes_);
    if (in.per_rank < 0) {
      bool sized = false;
      in.work = command_work(p_, *in.cmd, ctx(rank), &shapes_, &sized);
      in.per_rank = sized ? 1 : 0;
    }
    return in.work;
  }

  double seconds(int info, int64_t rank) {
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
    const double s = seconds_with(p_, m_, *in.cmd, work(info, rank, scratch), peak);
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

  // ---- issuing: each rank's program is turned into per-stream tasks on
  // demand, as a host thread would enqueue it, so only the tasks between
  // what a stream runs and what the issuer has reached are held ----
  struct Frame {
    enum class Kind : uint8_t { block, async_end, loop } kind;
    int stream = 0;
    bool in_loop = false;
    const Block* block = nullptr;  // block: the commands, the next one and its number
    size_t pos = 0;
    int info = 0;                  // block: next command's number; async_end, loop: the command's
    int64_t trips = 0, trip = 0;   // loop
    bool body_next = false;        // loop: the body (not the cond) comes next
  };

  struct Issuer {
    explicit Issuer(std::pmr::memory_resource* m) : stack(m), streams(m), tokens(m), cursors(m), instances(m) {}
    std::pmr::vector<Frame> stack;
    std::pmr::vector<std::pair<StreamId, int>> streams;
    std::pmr::vector<std::pair<int, int>> tokens;  // live tokens: async_start number -> its done event
    std::pmr::unordered_map<const Command*, size_t> cursors;
    std::pmr::unordered_map<int, int32_t> instances;  // commands inside loops -> runs so far
  };

  int stream_index(int64_t rank, const StreamId& sid) {
    auto& mine = issuers_[rank].streams;
    for (const auto& [id, s] : mine)
      if (id == sid) return s;
    Stream s;
    s.rank = rank;
    s.sid = sid;
    streams_.push_back(std::move(s));
    const int idx = static_cast<int>(streams_.size()) - 1;
    mine.emplace_back(sid, idx);
    ready_.push_back(idx);
    return idx;
  }

  int64_t decision(int64_t rank, const Command& c) {
    if (decisions_) {
      const auto& per = (*decisions_)[rank];
      auto it = per.find(c.id());
      size_t& cursor = issuers_[rank].cursors[&c];
      if (it != per.end() && cursor < it->second.size()) return it->second[cursor++];
      if (it != per.end()) throw ThunkyError(c.pointer, "the functional model ran " + c.id() + " fewer times than the timing model expands it");
    }
    if (c.op == Op::cond && c.rare().sim.taken) return *c.rare().sim.taken ? 1 : 0;
    if (c.op == Op::switch_ && c.rare().sim.branch) return *c.rare().sim.branch;
    if (c.op == Op::while_ && c.rare().sim.trip_count) {
      const int64_t trips = *c.rare().sim.trip_count;
      const int64_t limit = command_limit();
      if (trips > limit)
        throw ThunkyError(c.pointer + "/sim/trip_count", "a trip count of " + std::to_string(trips) + " passes the " + std::to_string(limit) +
                                                              " commands thunky-sim " + (keep_records_ ? "reports on" : "runs"));
      return trips;
    }
    if (!decisions_) throw ThunkyError(c.pointer, std::string(op_name(c.op)) + " " + c.id() + " needs a sim hint (" +
                                                      (c.op == Op::cond ? "\"sim\": {\"taken\": true}" : c.op == Op::switch_ ? "\"sim\": {\"branch\": k}" : "\"sim\": {\"trip_count\": n}") +
                                                      ") or inputs for the functional model");
    // The functional model never reached this command (it sits in a branch not taken).
    return 0;
  }

  int32_t instance(int64_t rank, int info, bool in_loop) { return in_loop ? issuers_[rank].instances[info]++ : -1; }

  void push(int stream, Task t) { streams_[stream].tasks.push_back(t); }

  void enter(int64_t rank, const Block& b, int base, int stream, bool in_loop) {
    if (!b.empty()) issuers_[rank].stack.push_back({Frame::Kind::block, stream, in_loop, &b, 0, base});
  }

  // Issues until stream `si` has a task to run; false when the rank's
  // program is exhausted first.
  bool issue_until(int si) {
    const int64_t rank = streams_[si].rank;
    auto& stack = issuers_[rank].stack;
    // Indexed each time: issuing may add streams (and move them).
    while (streams_[si].pc >= streams_[si].tasks.size()) {
      if (stack.empty()) return false;
      Frame& f = stack.back();
      if (f.kind == Frame::Kind::async_end) {
        const int done = new_event(), target = f.stream, i = f.info;
        stack.pop_back();
        push(target, {Task::Kind::record, true, i, -1, done});
        auto& tokens = issuers_[rank].tokens;
        auto it = std::find_if(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == i; });
        if (it != tokens.end()) it->second = done;
        else tokens.emplace_back(i, done);
        continue;
      }
      if (f.kind == Frame::Kind::loop) {
        const Command& c = *infos_[f.info].cmd;
        const int i = f.info, cur = f.stream;
        if (!f.body_next) {
          f.body_next = true;
          enter(rank, c.rare().cond, block(i, 3 + c.rare().branches.size()), cur, true);
        } else if (f.trip < f.trips) {
          f.body_next = false;
          ++f.trip;
          enter(rank, c.body, block(i, 0), cur, true);
        } else {
          stack.pop_back();
        }
        continue;
      }
      if (f.pos == f.block->size()) {
        stack.pop_back();
        continue;
      }
      prefetch_ahead(*f.block, f.pos);
      const Command& c = (*f.block)[f.pos++];
      const int i = f.info, cur = f.stream;
      const bool in_loop = f.in_loop;
      f.info += infos_[i].subtree;
      // `f` may dangle from here on: the cases below push frames.
      switch (c.op) {
        case Op::async_start: {
          const int fork = new_event(), target = stream_index(rank, c.stream);
          push(cur, {Task::Kind::record, false, i, -1, fork});
          push(target, {Task::Kind::wait, false, i, -1, fork});
          stack.push_back({Frame::Kind::async_end, target, in_loop, nullptr, 0, i});
          enter(rank, c.body, block(i, 0), target, in_loop);
          break;
        }
        case Op::async_done: {
          auto& tokens = issuers_[rank].tokens;
          const int start = infos_[i].partner;
          auto it = std::find_if(tokens.begin(), tokens.end(), [&](const auto& t) { return t.first == start; });
          push(cur, {Task::Kind::wait, true, i, -1, it->second});
          *it = tokens.back();
          tokens.pop_back();
          break;
        }
        case Op::call: enter(rank, c.body, block(i, 0), cur, in_loop); break;
        case Op::cond: {
          const bool taken = decision(rank, c) != 0;
          enter(rank, taken ? c.rare().then_ : c.rare().else_, block(i, taken ? 1 : 2), cur, in_loop);
          break;
        }
        case Op::switch_: {
          const int64_t k = std::clamp<int64_t>(decision(rank, c), 0, static_cast<int64_t>(c.rare().branches.size()) - 1);
          enter(rank, c.rare().branches[k], block(i, 3 + static_cast<size_t>(k)), cur, in_loop);
          break;
        }
        case Op::while_: {
          Frame loop{Frame::Kind::loop, cur, true, nullptr, 0, i};
          loop.trips = decision(rank, c);
          stack.push_back(loop);
          break;
        }
        default:
          push(cur, {Task::Kind::op, false, i, instance(rank, i, in_loop), -1});
          // A group's members run exactly as often as the group.
          if (c.op == Op::collective_group)
            for (int m = members_begin(i); m < members_end(i); ++m) instance(rank, m, in_loop);
      }
    }
    return true;
  }

  void start_issuing() {
    // Folded, only rank 0 runs.
    const int64_t n = fold_ ? 1 : p_.mesh.size();
    ops_.resize(static_cast<size_t>(n));
    edges_.resize(static_cast<size_t>(n));
    live_compute_.resize(static_cast<size_t>(n));
    issuers_.reserve(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) issuers_.emplace_back(&arena_);
    for (int64_t r = 0; r < n; ++r) {
      const int main = stream_index(r, StreamId{});
      enter(r, p_.program, 0, main, false);
    }
  }

  int new_event() {
    if (!free_events_.empty()) {
      const int e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    events_.emplace_back();
    return static_cast<int>(events_.size()) - 1;
  }

  // ---- links ----
  int link(uint64_t key, double capacity) {
    if (fold_) key = link_class(key);
    auto [it, fresh] = link_ids_.try_emplace(key, static_cast<int>(capacity_.size()));
    if (fresh) {
      capacity_.push_back(capacity);
      link_keys_.push_back(key);
      link_flows_.emplace_back();
      link_series_.emplace_back();
      link_stamp_.push_back(0);
    }
    return it->second;
  }

  const AxisLinks& axis_links(const std::string& axis) const {
    const auto dim = p_.mesh.axis(axis);
    const AxisLinks* a = dim ? links_by_dim_[*dim] : m_.axis(axis);
    if (!a) throw ThunkyError("", "machine '" + m_.name + "' models no axis '" + axis + "' (and has no \"*\" entry)");
    return *a;
  }

  int64_t coord(int64_t rank, int dim) const { return (rank / strides_[dim]) % p_.mesh.shape[dim]; }

  // The rank at `rank`'s coordinates plus (sign +1) or minus (-1) `by`'s, round every axis.
  int64_t translate(int64_t rank, int64_t by, int sign) const {
    int64_t r = 0;
    for (size_t d = 0; d < strides_.size(); ++d) r += floor_mod(coord(rank, static_cast<int>(d)) + sign * coord(by, static_cast<int>(d)), p_.mesh.shape[d]) * strides_[d];
    return r;
  }

  // A link's class under translation: the link moved so that it leaves
  // (or, for ingress, enters) rank 0.
  uint64_t link_class(uint64_t key) const {
    const auto kind = static_cast<LinkKey::Kind>(key >> 60);
    const int64_t from = static_cast<int64_t>((key >> 30) & 0x3fffffff), to = static_cast<int64_t>(key & 0x3fffffff);
    if (kind == LinkKey::ring) return LinkKey::make(kind, 0, translate(to, from, -1));
    return LinkKey::make(kind, 0, 0);
  }

  // The real link of class `key` at rank `rank` (the inverse of link_class).
  uint64_t link_at(uint64_t key, int64_t rank) const {
    const auto kind = static_cast<LinkKey::Kind>(key >> 60);
    if (kind == LinkKey::ring) return LinkKey::make(kind, rank, translate(static_cast<int64_t>(key & 0x3fffffff), rank, 1));
    if (kind == LinkKey::ingress) return LinkKey::make(kind, 0, rank);
    return LinkKey::make(kind, rank, 0);
  }

  // The rank one step from `rank` along mesh dimension `dim` (dir +1 or -1), round the ring.
  int64_t neighbour(int64_t rank, int dim, int dir) const {
    const int64_t n = p_.mesh.shape[dim], c = coord(rank, dim);
    return rank + ((c + dir + n) % n - c) * strides_[dim];
  }

  int ring_link(int64_t from, int dim, int dir, const AxisLinks& a) {
    return link(LinkKey::make(LinkKey::ring, from, neighbour(from, dim, dir)), a.link_bandwidth);
  }

  // ---- rendezvous ----
  int intern(std::vector<int> members) {
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    auto [it, fresh] = sets_.try_emplace(std::move(members), static_cast<int>(set_sizes_.size()));
    if (fresh) set_sizes_.push_back(it->first.size());
    return it->second;
  }

  // The member set a collective's rank waits with (launch_members). It is
  // the same from each of its ranks, so one pass fills it for all of them.
  int member_set(int info, int64_t rank) {
    CmdInfo& in = infos_[info];
    if (in.sets < 0) {
      in.sets = static_cast<int32_t>(set_of_rank_.size());
      set_of_rank_.emplace_back(static_cast<size_t>(p_.mesh.size()), -1);
    }
    std::pmr::vector<int32_t>& set_of_rank = set_of_rank_[in.sets];
    if (set_of_rank[rank] >= 0) return set_of_rank[rank];
    std::vector<const Command*> members;
    if (in.cmd->op == Op::collective_group)
      for (int m = members_begin(info); m < members_end(info); ++m) members.push_back(infos_[m].cmd);
    else
      members.push_back(in.cmd);
    std::vector<int> set = launch_members(p_.mesh, rank, members);
    const int id = intern(set);
    for (int q : set) set_of_rank[q] = id;
    return id;
  }

  void arrive(int si, const Task& t) {
    Stream& s = streams_[si];
    if (fold_) {
      // Every rank reaches it now.
      s.state = Stream::State::running;
      Comm act = new_comm();
      act.streams.push_back(si);
      act.since.push_back(now_);
      start_collective(std::move(act));
      return;
    }
    s.state = Stream::State::waiting_collective;
    const int set = member_set(t.info, s.rank);
    const uint64_t seq = seq_[(static_cast<uint64_t>(set) << 32) | static_cast<uint64_t>(s.rank)]++;
    const uint64_t key = (static_cast<uint64_t>(set) << 32) | seq;
    Rendezvous& rv = rendezvous_[key];
    if (rv.arrived.empty()) {
      rv.need = set_sizes_[set];
      rv.arrived.reserve(rv.need);
      rv.since.reserve(rv.need);
    }
    rv.arrived.emplace_back(s.rank, si);
    rv.since.push_back(now_);
    if (rv.arrived.size() < rv.need) return;
    std::vector<size_t> order(rv.arrived.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rv.arrived[a].first < rv.arrived[b].first; });
    Comm act = new_comm();
    for (size_t k : order) {
      act.streams.push_back(rv.arrived[k].second);
      act.since.push_back(rv.since[k]);
    }
    rendezvous_.erase(key);
    for (int st : act.streams) streams_[st].state = Stream::State::running;
    start_collective(std::move(act));
  }

  // ---- collectives ----
  int new_flow(int activity, double bytes) {
    int f;
    if (!free_flows_.empty()) {
      f = free_flows_.back();
      free_flows_.pop_back();
      flows_[f].links.clear();
    } else {
      f = static_cast<int>(flows_.size());
      flows_.emplace_back(&arena_);
    }
    Flow& fl = flows_[f];
    fl.activity = activity;
    fl.remaining = bytes;
    fl.rate = 0;
    fl.last = now_;
    fl.active = fl.done = false;
    return f;
  }

  // Adds the flows of one instance of collective `mi` (the one `rank` takes
  // part in, with participants `part`) to activity `a`; raises `latency` to
  // its latency; returns its payload bytes.
  double member_flows(Comm& act, int a, int mi, int64_t rank, const Participants& part, double& latency) {
    const Command& c = *infos_[mi].cmd;
    Work scratch;
    const int64_t n = static_cast<int64_t>(part.ranks.size());
    const double bytes = static_cast<double>(work(mi, rank, scratch).bytes);
    std::vector<AxisSpan>& spans = scratch_spans_;
    spans.clear();
    for (const auto& ax : c.axis) spans.push_back({&axis_links(ax), p_.mesh.shape[*p_.mesh.axis(ax)]});
    if (c.rare().groups) {  // one axis of the group's size
      spans.resize(1);
      spans.front().ranks = n;
    }
    const AxisLinks& first = *spans.front().links;
    if (c.op == Op::collective_permute) {
      // The pairs: explicit, or every i to (i + shift) mod n; folded, rank
      // 0's flow stands for its translates.
      const size_t npairs = c.rare().pairs ? c.rare().pairs->size() : fold_ ? 1 : static_cast<size_t>(n);
      const bool ring = first.topology == AxisLinks::Topology::ring && c.axis.size() == 1 && !c.rare().groups;
      const int dim = ring ? *p_.mesh.axis(c.axis[0]) : 0;
      for (size_t k = 0; k < npairs; ++k) {
        const int64_t s = c.rare().pairs ? (*c.rare().pairs)[k].first : fold_ ? part.position : static_cast<int64_t>(k);
        const int64_t t = c.rare().pairs ? (*c.rare().pairs)[k].second : shift_target(c, s, n);
        if (s == t || (fold_ && s != part.position)) continue;
        const int f = new_flow(a, bytes);
        std::pmr::vector<int>& links = flows_[f].links;
        const int64_t from = part.ranks[s], to = part.ranks[t];
        int64_t hops = 1;
        if (ring) {
          const int64_t cw = floor_mod(t - s, n), ccw = floor_mod(s - t, n);
          // Shortest way round (ties clockwise); a line has only the direct way.
          const int dir = first.wraparound ? (cw <= ccw ? 1 : -1) : (t > s ? 1 : -1);
          hops = dir > 0 ? (first.wraparound ? cw : t - s) : (first.wraparound ? ccw : s - t);
          int64_t at = from;
          for (int64_t h = 0; h < hops; ++h) {
            links.push_back(ring_link(at, dim, dir, first));
            at = neighbour(at, dim, dir);
          }
        } else {
          const double egress = first.topology == AxisLinks::Topology::ring ? first.link_bandwidth : first.egress_bandwidth;
          links.push_back(link(LinkKey::make(LinkKey::egress, from, 0), egress));
          links.push_back(link(LinkKey::make(LinkKey::ingress, 0, to), egress));
        }
        latency = std::max(latency, permute_seconds(first, hops, 0, false));
        act.flows.push_back(f);
      }
      return bytes;
    }
    const CollectiveCost cost = collective_cost(c.op, spans, bytes);
    const double transfer = cost.transfer_s;
    latency = std::max(latency, cost.latency_s);
    if (cost.nccl) algorithm_of(mi) = cost;
    // One flow over every link the collective drives, sized so that alone
    // it takes the closed-form transfer time at the slowest link's rate.
    const int f = new_flow(a, 0);
    std::pmr::vector<int>& links = flows_[f].links;
    double cap = std::numeric_limits<double>::infinity();
    for (int r : part.ranks) {
      // Folded, every rank's links fall in rank 0's classes.
      if (fold_ && r != rank) continue;
      if (first.topology == AxisLinks::Topology::ring) {
        for (const auto& ax : c.axis) {
          const int dim = *p_.mesh.axis(ax);
          const AxisLinks& al = axis_links(ax);
          const int64_t co = coord(r, dim);
          if (al.wraparound || co + 1 < p_.mesh.shape[dim]) links.push_back(ring_link(r, dim, 1, al));
          if (al.wraparound || co > 0) links.push_back(ring_link(r, dim, -1, al));
          cap = std::min(cap, al.link_bandwidth);
        }
      } else {
        links.push_back(link(LinkKey::make(LinkKey::egress, r, 0), first.egress_bandwidth));
        cap = std::min(cap, first.egress_bandwidth);
        if (first.topology == AxisLinks::Topology::hierarchical && n > first.group_size)
          links.push_back(link(LinkKey::make(LinkKey::nic, r, 0), first.nic_bandwidth * static_cast<double>(first.group_size)));
      }
    }
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());
    // Alone, the flow runs at its slowest link's capacity.
    for (int l : links) cap = std::min(cap, capacity_[l]);
    flows_[f].remaining = transfer * cap;
    if (flows_[f].remaining > 0 && !links.empty()) act.flows.push_back(f);
    else free_flows_.push_back(f);
    return bytes;
  }

  // A collective's vectors come from one that finished: collectives come
  // and go all through a run, and the arena takes no memory back.
  Comm new_comm() {
    if (spare_comms_.empty()) return Comm(&arena_);
    Comm c = std::move(spare_comms_.back());
    spare_comms_.pop_back();
    c.streams.clear();
    c.since.clear();
    c.flows.clear();
    c.stats.clear();
    c.version = 0;
    c.finished = false;
    return c;
  }

  void start_collective(Comm act) {
    const int a = static_cast<int>(comms_.size());
    act.start = now_;
    const Stream& s0 = streams_[act.streams[0]];
    const Task& t0 = s0.tasks[s0.pc];
    // The members: a group's body, or the collective itself.
    const bool group = infos_[t0.info].cmd->op == Op::collective_group;
    const int first_member = group ? members_begin(t0.info) : t0.info, end_member = group ? members_end(t0.info) : t0.info + 1;
    double latency = 0;
    if (rank_stamp_.size() < static_cast<size_t>(p_.mesh.size())) rank_stamp_.resize(static_cast<size_t>(p_.mesh.size()), 0);
    for (int mi = first_member; mi < end_member; ++mi) {
      const Command& c = *infos_[mi].cmd;
      // Every instance of the member among the launched ranks moves data: a
      // group whose members span several communicators (a row shift beside
      // a column reduction) drives them all. Folded, rank 0's stands for all.
      ++rank_stamp_now_;
      for (int st : act.streams) {
        const int64_t rank = streams_[st].rank;
        if (rank_stamp_[rank] == rank_stamp_now_) continue;
        const Participants part = participants(p_.mesh, rank, c.axis, c.rare().groups);
        for (int q : part.ranks) rank_stamp_[q] = rank_stamp_now_;
        const double bytes = member_flows(act, a, mi, rank, part, latency);
        // Ranks are in order, so rank 0's instance comes first.
        if (rank == 0 && keep_records_) add_stat(act, mi, t0.instance, static_cast<int64_t>(part.ranks.size()), bytes);
        if (fold_) break;
      }
    }
    act.latency_end = now_ + latency;
    comms_.push_back(std::move(act));
    Comm& ref = comms_[a];
    if (m_.additive_latency && latency > 0) {
      queue_.push({ref.latency_end}, encode(kFlowStart, a));
      return;
    }
    if (latency > 0) queue_.push({ref.latency_end}, encode(kLatency, a));
    if (latency <= 0 && ref.flows.empty()) {
      finish_comm(a);
      return;
    }
    activate(a);
  }

  // The collective table: rank 0's collectives; seconds are filled in at the end.
  void add_stat(Comm& act, int info, int32_t inst, int64_t n, double bytes) {
    const Command& c = *infos_[info].cmd;
    auto [it, fresh] = stats_seen_.try_emplace(std::pair{info, inst}, static_cast<int>(stats_.size()));
    if (!fresh) return;
    stats_.push_back({op_id(info, inst), std::string(op_name(c.op)), n, bytes, 0, 0, 0, algorithm_at(info)});
    act.stats.push_back(it->second);
  }

  // ---- link shares ----
  // The flows of activity `a` start moving bytes.
  void activate(int a) {
    std::vector<int>& seeds = scratch_seeds_;
    seeds.clear();
    for (int f : comms_[a].flows) {
      Flow& fl = flows_[f];
      fl.active = true;
      fl.last = now_;
      for (int l : fl.links) {
        link_flows_[l].push_back(f);
        seeds.push_back(l);
      }
    }
    solve_links(seeds, a);
  }

  void retire_flow(int f, std::vector<int>& seeds) {
    Flow& fl = flows_[f];
    if (fl.done) return;
    fl.done = true;
    if (!fl.active) return;
    for (int l : fl.links) {
      auto& on = link_flows_[l];
      auto it = std::find(on.begin(), on.end(), f);
      *it = on.back();
      on.pop_back();
      seeds.push_back(l);
    }
  }

  // Re-solves the max-min shares of the flows connected (through shared
  // links) to the `seeds` links, brings them up to now, samples those
  // links' utilisation and re-predicts the activities whose rates changed
  // (and `also`).
  void solve_links(const std::vector<int>& seeds, int also) {
    ++stamp_;
    std::vector<int>& links = scratch_links_;
    std::vector<int>& flows = scratch_flows_;
    links.clear();
    flows.clear();
    for (int l : seeds)
      if (link_stamp_[l] != stamp_) {
        link_stamp_[l] = stamp_;
        links.push_back(l);
      }
    if (flow_stamp_.size() < flows_.size()) flow_stamp_.resize(flows_.size(), 0);
    for (size_t k = 0; k < links.size(); ++k)
      for (int f : link_flows_[links[k]]) {
        if (flow_stamp_[f] == stamp_) continue;
        flow_stamp_[f] = stamp_;
        flows.push_back(f);
        for (int l : flows_[f].links)
          if (link_stamp_[l] != stamp_) {
            link_stamp_[l] = stamp_;
            links.push_back(l);
          }
      }
    // When no link carries two flows, each flow runs at its slowest link's
    // capacity; otherwise progressive filling over the component.
    bool shared = false;
    for (int l : links) shared = shared || link_flows_[l].size() > 1;
    std::vector<double>& rates = scratch_rates_;
    rates.assign(flows.size(), std::numeric_limits<double>::infinity());
    if (!shared) {
      for (size_t k = 0; k < flows.size(); ++k)
        for (int l : flows_[flows[k]].links) rates[k] = std::min(rates[k], capacity_[l]);
    } else {
      if (local_.size() < capacity_.size()) local_.resize(capacity_.size(), -1);
      std::vector<double> cap(links.size());
      for (size_t k = 0; k < links.size(); ++k) {
        local_[links[k]] = static_cast<int>(k);
        cap[k] = capacity_[links[k]];
      }
      std::vector<MaxMinFlow> mm(flows.size());
      for (size_t k = 0; k < flows.size(); ++k)
        for (int l : flows_[flows[k]].links) mm[k].links.push_back(local_[l]);
      rates = max_min_rates(cap, mm);
      for (int l : links) local_[l] = -1;
    }
    std::vector<int>& dirty = scratch_dirty_;
    dirty.clear();
    if (also >= 0) dirty.push_back(also);
    for (size_t k = 0; k < flows.size(); ++k) {
      Flow& fl = flows_[flows[k]];
      fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now_ - fl.last));
      fl.last = now_;
      if (fl.rate != rates[k]) {
        fl.rate = rates[k];
        dirty.push_back(fl.activity);
      }
    }
    if (keep_records_) sample_links(links);
    std::sort(dirty.begin(), dirty.end());
    dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
    for (int a : dirty) reschedule_comm(a);
  }

  // The report's utilisation tracks: each link's share in use from now on.
  void sample_links(const std::vector<int>& links) {
    for (int l : links) {
      double load = 0;
      for (int f : link_flows_[l]) load += flows_[f].rate;
      const double u = capacity_[l] > 0 ? std::min(1.0, load / capacity_[l]) : 0.0;
      auto& s = link_series_[l];
      // Shares that differ only by rounding (the same load summed in
      // another order) are no change.
      if (s.empty() ? u > 1e-12 : std::abs(s.back().second - u) > 1e-9) {
        if (!s.empty() && s.back().first == now_) {
          // Changed twice at one instant: back to what it was is no change.
          s.back().second = u;
          if (s.size() > 1 && std::abs(s[s.size() - 2].second - u) <= 1e-9) s.pop_back();
        } else {
          s.emplace_back(now_, u);
        }
      }
    }
  }

  // A collective's next change: the earliest end of one of its flows.
  void reschedule_comm(int a) {
    Comm& act = comms_[a];
    if (act.finished) return;
    ++act.version;
    double end = INFINITY;
    for (int f : act.flows) {
      Flow& fl = flows_[f];
      if (fl.done || !fl.active || fl.rate <= 0) continue;
      end = std::min(end, fl.last + fl.remaining / fl.rate);
    }
    if (end < INFINITY) queue_.push({end}, encode(kComm, a, act.version));
  }

  // ---- compute shares ----
  // Concurrent kernels of a rank share its throughput equally; the shares
  // change only on the rank where a kernel starts or ends.
  void solve_compute(int64_t rank) {
    const auto& live = live_compute_[rank];
    const double r = live.empty() ? 0 : 1.0 / static_cast<double>(live.size());
    for (int i : live) {
      Compute& a = compute_[i];
      a.remaining = std::max(0.0, a.remaining - a.rate * (now_ - a.last));
      a.last = now_;
      if (r != a.rate) {
        a.rate = r;
        queue_.push({now_ + a.remaining / a.rate}, encode(kCompute, i, ++a.version));
      }
    }
  }

  static constexpr uint64_t kCompute = 0, kComm = 1, kLatency = 2, kFlowStart = 3;
  static uint64_t encode(uint64_t kind, int activity, uint32_t version = 0) {
    return (kind << 62) | (static_cast<uint64_t>(activity) << 32) | version;
  }

  bool flows_done(const Comm& act) const {
    for (int f : act.flows)
      if (!flows_[f].done) return false;
    return true;
  }

  void handle(uint64_t payload) {
    const uint64_t kind = payload >> 62;
    const int a = static_cast<int>((payload >> 32) & 0x3fffffff);
    const uint32_t version = static_cast<uint32_t>(payload & 0xffffffffu);
    if (kind == kCompute) {
      if (compute_[a].version == version && compute_[a].stream >= 0) finish_compute(a);
      return;
    }
    Comm& act = comms_[a];
    if (act.finished) return;
    if (kind == kFlowStart) {
      if (flows_done(act)) finish_comm(a);
      else activate(a);
      return;
    }
    if (kind == kLatency) {
      if (flows_done(act)) finish_comm(a);
      return;
    }
    if (act.version != version) return;  // a stale prediction
    // Flows with nothing left are done.
    retired_.clear();
    for (int f : act.flows) {
      Flow& fl = flows_[f];
      if (!fl.active || fl.done) continue;
      const double left = fl.remaining - fl.rate * (now_ - fl.last);
      if (left <= 1e-9 * std::max(1.0, fl.rate)) retire_flow(f, retired_);
    }
    if (flows_done(act) && now_ >= act.latency_end) finish_comm(a, false);
    else solve_links(retired_, a);
  }

  void release(int stream) {
    Stream& s = streams_[stream];
    ++s.pc;
    s.state = Stream::State::ready;
    ready_.push_back(stream);
  }

  // Ends collective `a`: its flows retire and the links they leave are
  // re-solved, with the links already in retired_ unless `fresh` (handle()
  // retires the flows that ran out before it calls this).
  void finish_comm(int a, bool fresh = true) {
    Comm& act = comms_[a];
    act.finished = true;
    std::vector<int>& seeds = retired_;
    if (fresh) seeds.clear();
    for (int f : act.flows) retire_flow(f, seeds);
    // Each stream of the collective reports each member.
    for (size_t k = 0; k < act.streams.size(); ++k) {
      const int si = act.streams[k];
      const Stream& st = streams_[si];
      const Task& t = st.tasks[st.pc];
      const CmdInfo& g = infos_[t.info];
      if (g.cmd->op == Op::collective_group) {
        for (int m = members_begin(t.info); m < members_end(t.info); ++m)
          record(st.rank, {act.since[k], now_, m, t.instance, si});
      } else {
        record(st.rank, {act.since[k], now_, t.info, t.instance, si});
      }
    }
    for (int s : act.stats)
      if (stats_[s].seconds == 0) stats_[s].seconds = now_ - act.start;
    for (int s : act.streams) release(s);
    for (int f : act.flows) free_flows_.push_back(f);
    // Its vectors go to the next collective; what stays (finished, version)
    // is what late events are checked against.
    spare_comms_.push_back(std::move(act));
    if (!seeds.empty()) solve_links(seeds, -1);
  }

  // A finished command: kept for the report, or only counted.
  void record(int64_t rank, const Rec& r) {
    if (!(r.end <= kMaxSimulatedSeconds))
      throw ThunkyError("", "the simulated time passed " + std::to_string(static_cast<int64_t>(kMaxSimulatedSeconds)) +
                                " s: a cost, latency or bandwidth of the schedule or machine model is out of range");
    const int64_t limit = command_limit();
    if (++simulated_ > limit)
      throw ThunkyError("", "the simulation passed " + std::to_string(limit) + " commands (loop trips times commands, on every rank simulated), the most thunky-sim " +
                                (keep_records_ ? "reports on" : "runs"));
    if (keep_records_) {
      ops_[rank].push_back(r);
      return;
    }
    ++finished_;
    last_end_ = std::max(last_end_, r.end);
  }

  void finish_compute(int a) {
    Compute& act = compute_[a];
    const int si = act.stream;
    const Stream& st = streams_[si];
    record(st.rank, {act.start, now_, st.tasks[st.pc].info, st.tasks[st.pc].instance, si});
    auto& live = live_compute_[act.rank];
    *std::find(live.begin(), live.end(), a) = live.back();
    live.pop_back();
    act.stream = -1;
    free_compute_.push_back(a);
    release(si);
    solve_compute(st.rank);
  }

  // ---- streams ----
  void advance() {
    while (!ready_.empty()) {
      const int s = ready_.back();
      ready_.pop_back();
      step(s);
    }
  }

  static constexpr size_t kCompactAfter = 64;  // tasks run before a queue is compacted

  void step(int si) {
    Stream* sp = &streams_[si];
    while (sp->state == Stream::State::ready) {
      if (sp->pc >= sp->tasks.size()) {
        // Everything issued so far has run: reuse the storage.
        sp->tasks.clear();
        sp->pc = 0;
        const bool more = issue_until(si);
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
        if (keep_records_) edges_[s.rank].push_back({e.t, now_, e.stream, si, t.info, t.join});
        // One wait per event: its slot can be reused.
        e = Event{};
        free_events_.push_back(t.event);
        ++s.pc;
      } else if (const Op op = infos_[t.info].cmd->op; is_collective(op) || op == Op::collective_group) {
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
        int a;
        if (!free_compute_.empty()) {
          a = free_compute_.back();
          free_compute_.pop_back();
        } else {
          a = static_cast<int>(compute_.size());
          compute_.emplace_back();
        }
        Compute& act = compute_[a];
        act.rank = s.rank;
        act.stream = si;
        act.remaining = seconds(t.info, s.rank);
        act.rate = 0;
        act.start = act.last = now_;
        s.state = Stream::State::running;
        live_compute_[s.rank].push_back(a);
        solve_compute(s.rank);
        return;
      }
    }
  }

  // ---- the report ----
  std::string op_id(int info, int32_t inst) const {
    const std::string& id = infos_[info].cmd->id();
    return inst >= 0 ? id + "#" + std::to_string(inst) : id;
  }

  SimResult result() {
    SimResult r;
    r.report.source = "sim";
    r.report.schedule = p_.name.empty() ? p_.file : p_.name;
    r.report.machine = m_.name;
    r.report.axis_names = p_.mesh.axis_names;
    r.report.mesh_shape = p_.mesh.shape;
    std::vector<std::string> stream_names(streams_.size());
    for (size_t s = 0; s < streams_.size(); ++s) stream_names[s] = streams_[s].sid.str();
    Work scratch;
    const int64_t n = p_.mesh.size();
    for (int64_t rank = 0; rank < n; ++rank) {
      RankReport rr;
      rr.rank = rank;
      rr.coords = ctx(rank).coords;
      // Folded, rank 0's records are every rank's: the others say so.
      if (fold_ && rank > 0) {
        rr.same_as = 0;
        r.report.ranks.push_back(std::move(rr));
        continue;
      }
      const int64_t from = rank;
      auto& recs = ops_[from];
      auto by_start = [](const Rec& a, const Rec& b) { return a.start < b.start; };
      if (!std::is_sorted(recs.begin(), recs.end(), by_start)) std::stable_sort(recs.begin(), recs.end(), by_start);
      rr.ops.reserve(recs.size());
      for (const Rec& rec : recs) {
        const Command& c = *infos_[rec.info].cmd;
        const Work& w = work(rec.info, rank, scratch);
        rr.ops.push_back({op_id(rec.info, rec.instance), std::string(op_name(c.op)), c.rare().name, stream_names[rec.stream], rec.start, rec.end, w.bytes, w.flops});
        rr.ops.back().algorithm = algorithm_at(rec.info);
      }
      for (const Edge& e : edges_[from])
        rr.flows.push_back({stream_names[e.from_stream], stream_names[e.to_stream], e.from_s, e.to_s, infos_[e.info].cmd->token, e.join});
      std::vector<Rec>().swap(recs);  // each rank's records are read once
      std::vector<Edge>().swap(edges_[from]);
      r.report.ranks.push_back(std::move(rr));
    }
    summarize(r.report);
    // Folded, each link class stands for its link at every rank.
    std::vector<std::tuple<std::string, uint64_t, int>> names;  // name, key, series
    for (size_t l = 0; l < link_keys_.size(); ++l)
      for (int64_t rank = 0; rank < (fold_ ? n : 1); ++rank) {
        const uint64_t key = fold_ ? link_at(link_keys_[l], rank) : link_keys_[l];
        names.emplace_back(LinkKey::name(key), key, static_cast<int>(l));
      }
    std::sort(names.begin(), names.end());
    for (auto& [name, key, id] : names) {
      LinkSeries ls;
      ls.rank = static_cast<int64_t>((key >> 60) == LinkKey::ingress ? key & 0x3fffffff : (key >> 30) & 0x3fffffff);
      ls.name = std::move(name);
      ls.samples.assign(link_series_[id].begin(), link_series_[id].end());
      r.report.links.push_back(std::move(ls));
    }
    r.collectives = std::move(stats_);
    return r;
  }

  const Program& p_;
  const Machine& m_;
  const Decisions* decisions_;
  // The engine's many small containers (maps, per-link and per-flow lists,
  // the issuers' stacks) and the commands' facts (reserved whole) come from
  // one arena, given back all at once when the engine goes; the arrays that
  // grow with the run or churn (the tasks, the records, the collectives,
  // link samples, rendezvous) stay on the heap, which reuses the storage a
  // grown or freed array leaves. Its first chunk is part of the
  // engine, so that a small schedule's engine asks the heap for no large
  // block (glibc tidies its free lists on each one). Declared before what
  // it serves.
  alignas(std::max_align_t) std::array<std::byte, kArenaChunk> first_chunk_;
  std::pmr::monotonic_buffer_resource arena_{first_chunk_.data(), first_chunk_.size()};
  std::vector<RankCtx> ctx_;
  std::pmr::vector<int64_t> strides_{&arena_};
  std::pmr::vector<const AxisLinks*> links_by_dim_{&arena_};  // the machine's model of each mesh axis, or null
  std::pmr::vector<CmdInfo> infos_{&arena_};  // reserved whole: no regrowth
  std::pmr::vector<int> block_starts_{&arena_};
  std::pmr::vector<std::pmr::vector<int32_t>> set_of_rank_{&arena_};  // per collective: the member set each rank waits with
  ShapeCache shapes_{&arena_};
  WorkMemo work_memo_;
  std::pmr::vector<Issuer> issuers_{&arena_};  // per rank
  // streams and events
  std::pmr::vector<Stream> streams_{&arena_};
  std::pmr::vector<Event> events_{&arena_};
  std::pmr::vector<int> free_events_{&arena_};
  std::pmr::vector<int> ready_{&arena_};
  // compute
  std::pmr::vector<Compute> compute_{&arena_};
  std::pmr::vector<int> free_compute_{&arena_};
  std::pmr::vector<std::pmr::vector<int>> live_compute_{&arena_};  // per rank
  // collectives and links
  std::map<std::vector<int>, int> sets_;
  std::vector<size_t> set_sizes_;
  std::pmr::unordered_map<uint64_t, uint64_t> seq_{&arena_};
  std::unordered_map<uint64_t, Rendezvous> rendezvous_;  // on the heap: each is erased once complete
  std::vector<Comm> comms_;
  std::vector<Comm> spare_comms_;  // finished ones' storage (new_comm)
  std::vector<Flow> flows_;
  std::pmr::vector<int> free_flows_{&arena_};
  std::pmr::unordered_map<uint64_t, int> link_ids_{&arena_};
  std::pmr::vector<uint64_t> link_keys_{&arena_};
  std::pmr::vector<double> capacity_{&arena_};
  std::pmr::vector<std::pmr::vector<int>> link_flows_{&arena_};  // live flows on each link
  std::vector<std::vector<std::pair<double, double>>> link_series_;
  std::pmr::vector<uint32_t> link_stamp_{&arena_}, flow_stamp_{&arena_};
  uint32_t stamp_ = 0;
  std::vector<int> local_, scratch_links_, scratch_flows_, scratch_dirty_, scratch_seeds_, retired_;
  std::vector<AxisSpan> scratch_spans_;  // member_flows
  std::vector<uint32_t> rank_stamp_;  // start_collective: ranks whose instance of a member is built
  uint32_t rank_stamp_now_ = 0;
  std::vector<double> scratch_rates_;
  // what is reported
  std::vector<std::vector<Rec>> ops_;
  std::vector<std::vector<Edge>> edges_;
  std::vector<CollectiveStat> stats_;
  // The algorithm and protocol each collective got under the NCCL model, by info.
  std::vector<CollectiveCost> algorithms_;
  CollectiveCost& algorithm_of(int info) {
    if (algorithms_.size() <= static_cast<size_t>(info)) algorithms_.resize(infos_.size());
    return algorithms_[static_cast<size_t>(info)];
  }
  std::string algorithm_at(int info) const {
    return static_cast<size_t>(info) < algorithms_.size() ? algorithms_[static_cast<size_t>(info)].algorithm() : std::string();
  }
  // (command, instance) -> its row of stats_
  std::pmr::map<std::pair<int, int32_t>, int> stats_seen_{&arena_};
  EventQueue queue_;
  double now_ = 0;
  bool fold_ = false;
  bool keep_records_ = true;  // false: finished commands are only counted, links not sampled (run_summary)
  int64_t finished_ = 0;
  int64_t simulated_ = 0;  // commands finished, records kept or not
  double last_end_ = 0;
  std::array<double, static_cast<size_t>(DType::boolean) + 1> peak_{};  // Machine::peak by dtype; -1: not yet asked
};

}  // namespace

namespace {

// Runs `what` on an engine; a folded run that fails (a deadlock, say) is
// repeated unfolded so that its message names the real ranks.
template <typename Run>
auto run_engine(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options, Run what) -> decltype(what(std::declval<Engine&>())) {
  try {
    Engine e(p, m, decisions, options.fold_symmetric_ranks);
    auto r = what(e);
    if (r || !e.folded()) return r;
    Engine full(p, m, decisions, false);
    return what(full);
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{ErrorKind::input, p.file, e.pointer(), e.what()}};
  }
}

}  // namespace

Expected<SimSummary> simulate_summary(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options) {
  return run_engine(p, m, decisions, options, [](Engine& e) { return e.run_summary(); });
}

Expected<SimResult> simulate(const Program& p, const Machine& m, const Decisions* decisions, const SimOptions& options) {
  auto r = run_engine(p, m, decisions, options, [](Engine& e) { return e.run(); });
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
