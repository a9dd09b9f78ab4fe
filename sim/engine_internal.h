// The simulator's engine, shared by its parts (not part of the public
// interface: sim/engine.h is). The engine is an event loop over every
// rank's streams; its parts live in files of their own:
//   sim/engine.cc              construction, the event loop, issuing each rank's
//                              program to its streams, compute sharing, events
//   sim/engine_collectives.cc  a collective's flows, once its ranks have met
//   sim/engine_links.cc        links as the machine lays them out, and when a
//                              collective's flows next change
//   sim/network.h              links and flows, shared by max-min (a part with
//                              its own state)
//   sim/compute_shares.h       kernels sharing each rank's throughput (a part)
//   sim/issuer.h               each rank's program turned into its streams'
//                              tasks (a part)
//   sim/rendezvous.h           where a collective's ranks meet (a part with its
//                              own state)
//   sim/recorder.h             what is kept of each finished command (a part
//                              with its own state)
//   sim/engine_report.cc       the report built from the records at the end
#pragma once

#include "core/command_facts.h"
#include "sim/engine.h"

#include <chrono>
#include <algorithm>
#include <map>
#include <vector>
#include <array>
#include <cmath>
#include <deque>
#include <optional>
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
#include "sim/compute_shares.h"
#include "sim/event_queue.h"
#include "sim/issuer.h"
#include "sim/network.h"
#include "sim/recorder.h"
#include "sim/rendezvous.h"
#include "sim/sim_event.h"
#include "sim/symmetry.h"

namespace thunky::sim::internal {

// A machine model's error as a diagnostic of its file (or, built in
// memory, of its name).
inline Diagnostic machine_error(const Machine& m, const MachineError& e) {
  return {ErrorKind::input, m.file.empty() ? "machine '" + m.name + "'" : m.file, e.pointer(), e.what()};
}

// Facts about one lowered command that hold on every rank, computed once.
// Commands are numbered in preorder; `blocks` gives where each child block's
// commands start (body, then, else, branches..., while cond).
struct CmdInfo {
  const Command* cmd = nullptr;
  int subtree = 1;
  int blocks = -1;  // into Engine::block_starts_; -1: no sub-blocks
  int8_t per_rank = -1;  // work differs between ranks (1), or not (0); -1: not yet computed
  bool have_seconds = false;
  bool have_needs = false;  // needs, once computed for a command alike on every rank
  Work work;
  double seconds = 0;
  KernelNeeds needs;
  int32_t sets = -1;  // collectives: into Engine::set_of_rank_
};

// Where the k-th sub-block of command `info` starts, in the order of its
// op's description (for_each_sub_block). A command whose sub-blocks are
// all empty has none recorded: any start serves, as nothing is issued from
// an empty block.
inline int block_start(const std::pmr::vector<CmdInfo>& infos, const std::pmr::vector<int>& starts, int info, size_t k) {
  return infos[info].blocks < 0 ? 0 : starts[infos[info].blocks + k];
}
// Numbers the program's commands in preorder (each command, then its
// blocks' commands, taken or not): each one's CmdInfo (command, subtree,
// blocks), and where each command's sub-blocks start (block_start). Which
// async_start an async_done joins is the program walk's to find.
void number_commands(const Block& program, std::pmr::vector<CmdInfo>& infos, std::pmr::vector<int>& block_starts);

// A collective_group's members are numbered from its first block's start
// to this.
inline int members_end(const std::pmr::vector<CmdInfo>& infos, const std::pmr::vector<int>& starts, int info) {
  return block_start(infos, starts, info, 0) + static_cast<int>(infos[info].cmd->as<CollectiveGroup>().body.size());
}

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
  // A compute command's key: its op, its gemm flags or map expression, and
  // the views it reads and writes (for_each_use), which are all that
  // command_work reads. Collectives and control flow are never memoised.
  static bool key(const Command& c, Key& k) {
    if (c.cost || op_family(c.op()) != OpFamily::compute) return false;
    k.op = c.op();
    if (const Gemm* g = c.get_if<Gemm>()) k.flags = static_cast<uint8_t>(g->transpose_a + 2 * g->transpose_b + 4 * (g->beta != 0));
    if (const Map* m = c.get_if<Map>()) k.expr = m->expr.get();
    bool fits = true;
    for_each_use(c, [&](RefUse u) { fits = fits && add(k, *u.ref); });
    return fits;
  }
  uint64_t used_ = 0;
  std::array<Slot, kSlots> slots_;
};

// A running collective (or collective_group) on all its ranks.
struct Comm {
  explicit Comm(std::pmr::memory_resource* m) : streams(m), since(m), flows(m), stats(m) {}
  std::pmr::vector<int> streams;  // in rank order
  std::pmr::vector<double> since;  // when each stream reached it (it holds the stream from then)
  std::pmr::vector<FlowId> flows;
  std::pmr::vector<int> stats;  // rows of the collective table it fills
  double start = 0, latency_end = 0;
  uint32_t version = 0;
  bool finished = false;
  bool holds_core = false;  // on a shared host (chip.host_cores)
  // What it takes of each of its ranks' devices while it runs (a
  // collective's own loss to interference is not priced yet: docs/machines.md).
  int64_t ctas = 0;
  double hbm = 0;
};

struct LinkKey {
  // nic_out and nic_in: one GPU's own NIC, each way (one NIC per GPU, as
  // on rail-optimised clusters), which collectives and sends across nodes
  // share.
  enum Kind : uint64_t { ring = 0, egress = 1, ingress = 2, nic_out = 3, nic_in = 4 };
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
      case nic_out: return "nic out " + from;
      default: return "nic in " + to;
    }
  }
};

class Engine {
  // The arena's first chunk: what a small schedule's engine needs in all.
  static constexpr size_t kArenaChunk = 16 * 1024;

 public:
  Engine(const Program& p, const Machine& m, const Decisions* d, bool fold, const SimOptions& options = {});

  // Each class of ranks (rank_classes) is simulated on one rank, its
  // representative, which stands for the others: only the representatives'
  // streams run, a collective's ranks meet as their representatives (a
  // collective within one class starts as soon as it arrives), and links
  // are their classes under the classes' translations, each flow crossing
  // a class as often as its path does.
  bool folded() const { return fold_; }
  const RankClasses& classes() const { return classes_; }

  // The report: with every rank's ops (`timelines`), or with each rank's
  // statistics only, gathered as commands finish (thunky-sim's table).
  Expected<SimResult> run(bool timelines);

  // The engine alone: the makespan and how many commands finished, counted
  // as they finish rather than recorded.
  Expected<SimSummary> run_summary();

 private:
  using Keep = Recorder::Keep;
  // Runs every stream to its end, keeping `keep` of each command that
  // finishes; returns the deadlock, if any.
  std::vector<Diagnostic> simulate_all(Keep keep);

  // ---- the rank-independent facts ----
  static constexpr double kMaxSimulatedSeconds = Recorder::kMaxSimulatedSeconds;
  // Rank-commands one rank runs in `b`, from the sim hints (or, where a
  // command has none, the functional model's decisions for rank 0: a
  // loop's mean trips; the larger branch otherwise); saturates at 2^62.
  int64_t expected_commands(const Block& b);
  // Starts the recorder, keeping `keep`; refuses, before the run, one
  // expected to finish more commands than the recorder's limit.
  void start_recording(Keep keep);

  // Where the k-th sub-block of a command starts (block_start).
  int block(int info, size_t k) const { return block_start(infos_, block_starts_, info, k); }
  int members_begin(int info) const { return block(info, 0); }
  int members_end(int info) const { return internal::members_end(infos_, block_starts_, info); }

  // A rank's coordinates, worked out when first asked for: folded, the
  // simulation asks only for rank 0's.
  const RankCtx& ctx(int64_t rank);

  // A command's work, computed once when it holds on every rank: whether
  // it does is found by the first computation (a view sized by rank).
  const Work& work(int info, int64_t rank, Work& scratch);

  double seconds(int info, int64_t rank);
  // What its kernel needs of the device beside its time (interference_).
  KernelNeeds needs(int info, int64_t rank);

  // Runs `f`, which reads the machine model for command `c`: a field the
  // model lacks is its error, said with the command that needs it.
  template <typename F>
  auto needing(const Command& c, F f) -> decltype(f()) {
    try {
      return f();
    } catch (const MachineError& e) {
      std::string what = e.what();
      what += ": needed by ";
      what += p_.file + ":" + c.pointer + " (" + std::string(op_name(c.op())) + ")";
      throw MachineError(e.pointer(), what);
    }
  }

  // ---- links (sim/network.h holds them and their flows) ----
  // The network's id of link `key` (its class, folded).
  LinkId link(uint64_t key, double capacity) { return network_.link(fold_ ? link_class(key) : key, capacity); }

  // Whether `rank` is simulated: a class's representative.
  bool simulated(int64_t rank) const { return !fold_ || representative_[static_cast<size_t>(rank)] == rank; }
  int64_t representative(int64_t rank) const { return fold_ ? representative_[static_cast<size_t>(rank)] : rank; }

  const AxisLinks& axis_links(const std::string& axis) const;

  int64_t coord(int64_t rank, int dim) const { return (rank / strides_[dim]) % p_.mesh.shape[dim]; }

  // The rank at `rank`'s coordinates plus (sign +1) or minus (-1) `by`'s, round every axis.
  int64_t translate(int64_t rank, int64_t by, int sign) const;

  // A link's class under the classes' translations: the link moved so that
  // it leaves (or, for ingress, enters) its rank's representative.
  uint64_t link_class(uint64_t key) const;

  // The real link of class `key` at rank `rank`, of the class's
  // representative's class (the inverse of link_class).
  uint64_t link_at(uint64_t key, int64_t rank) const;

  // The rank one step from `rank` along mesh dimension `dim` (dir +1 or -1), round the ring.
  int64_t neighbour(int64_t rank, int dim, int dir) const;

  LinkId ring_link(int64_t from, int dim, int dir, const AxisLinks& a);

  // ---- rendezvous ----
  // The member set a collective's rank waits with (launch_members). It is
  // the same from each of its ranks, so one pass fills it for all of them.
  SetId member_set(int info, int64_t rank);

  void arrive(int si, const Task& t);

  // ---- collectives ----
  // Adds the flows of one instance of collective `mi` (the one `rank` takes
  // part in, with participants `part`) to activity `a`; raises `latency` to
  // its latency; returns its payload bytes.
  // What one member of a collective takes of each of its GPUs: the CTAs
  // its kernel holds, and its HBM bytes/s while its data moves.
  struct MemberLoad {
    int64_t ctas = 0;
    double hbm = 0;
  };
  double member_flows(Comm& act, int a, int mi, int64_t rank, const Participants& part, double& latency, MemberLoad& load);
  // A starting collective takes its CTAs and HBM bandwidth from its ranks'
  // devices (finish_comm gives them back).
  void take_from_devices(Comm& act);
  // A collective's CTAs: its command's "ctas", or NCCL's count, at most --nccl-max-ctas.
  int64_t ctas_for(const Collective& k, int64_t nccl_count) const;

  // A collective's vectors come from one that finished: collectives come
  // and go all through a run, and the arena takes no memory back.
  Comm new_comm();

  void start_collective(Comm act);

  // The collective table: rank 0's collectives; seconds are filled in at the end.
  void add_stat(Comm& act, int info, int32_t inst, int64_t n, double bytes);

  // ---- link shares ----
  // The flows of activity `a` start moving bytes.
  void activate(int a) { reschedule(network_.start(comms_[a].flows, CommId(a), now_)); }

  // Re-solves the shares of the flows connected to the `seeds` links, and
  // re-predicts the activities whose rates changed (and `also`).
  void solve_links(const std::vector<LinkId>& seeds, int also) { reschedule(network_.solve(seeds, CommId(also), now_)); }
  void reschedule(const std::vector<CommId>& activities) {
    for (CommId a : activities) reschedule_comm(a.v);
  }

  // A collective's next change: the earliest end of one of its flows.
  void reschedule_comm(int a);

  // ---- compute (sim/compute_shares.h) ----
  // A kernel ended: its stream goes on, and its rank's shares change.
  void finish_compute(const ComputeShares::Ended& k);
  // A collective whose members have all arrived gets a core (chip.host_cores).
  void grant_core_to_collective();

  bool flows_done(const Comm& act) const;

  void handle(SimEvent e);

  void release(int stream);

  // Ends collective `a`: its flows retire and the links they leave are
  // re-solved, with the links already in retired_ unless `fresh` (handle()
  // retires the flows that ran out before it calls this).
  void finish_comm(int a, bool fresh = true);

  // A finished command: kept for the report, or only counted.
  void record(int64_t rank, const Rec& r) {
    recorder_.record(rank, r, is_collective(infos_[r.info].cmd->op()));
    if (recorder_.wants_fold(rank)) recorder_.fold(rank, horizon(rank));
  }
  // The earliest start of a command of `rank` still to finish: now, or an
  // earlier start of one running or waiting in a collective.
  double horizon(int64_t rank) const {
    double h = now_;
    for (const auto& [id, si] : issuer_.streams_of(rank)) {
      const Stream& s = streams_[si];
      if (s.state == Stream::State::running || s.state == Stream::State::waiting_collective) h = std::min(h, s.since);
    }
    return h;
  }


  // ---- streams ----
  void advance();

  static constexpr size_t kCompactAfter = 64;  // tasks run before a queue is compacted

  void step(int si);

  // ---- the report ----
  std::string op_id(int info, int32_t inst) const;

  Report report_header() const;
  SimResult result();
  SimResult stats_result();

  const Program& p_;
  const Machine& m_;
  const Decisions* decisions_;
  SimOptions options_;
  bool interference_ = false;  // collectives take SMs and HBM from kernels (SimOptions::interference, on a device)
  Recorder recorder_{options_};
  const Command* heaviest_loop_ = nullptr;  // the while loop expected to run most commands
  int64_t heaviest_loop_commands_ = 0;
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
  std::pmr::vector<std::pmr::vector<SetId>> set_of_rank_{&arena_};  // per collective: the member set each rank waits with
  ShapeCache shapes_{&arena_};
  WorkMemo work_memo_;
  // streams and events
  std::pmr::vector<Stream> streams_{&arena_};
  std::pmr::vector<Event> events_{&arena_};
  std::pmr::vector<int> free_events_{&arena_};
  std::pmr::vector<int> ready_{&arena_};
  Issuer issuer_{p_, decisions_, infos_, block_starts_, {streams_, events_, free_events_, ready_}, &arena_};
  // On a shared host (chip.host_cores): the collectives whose members
  // have all arrived, waiting for a core (the cpu backend moves a
  // collective's data on one core, as a command), in the order they asked.
  std::deque<Comm> waiting_for_core_;
  // collectives and links
  Rendezvous rendezvous_;
  std::vector<Comm> comms_;
  std::vector<Comm> spare_comms_;  // finished ones' storage (new_comm)
  Network network_{&arena_};
  std::vector<LinkId> retired_;  // links that flows just left (handle, finish_comm)
  std::vector<AxisSpan> scratch_spans_;  // member_flows
  std::vector<uint32_t> rank_stamp_;  // start_collective: ranks whose instance of a member is built
  uint32_t rank_stamp_now_ = 0;
  // The algorithm and protocol each collective got under the NCCL model, by info.
  std::vector<CollectiveCost> algorithms_;
  CollectiveCost& algorithm_of(int info);
  std::string algorithm_at(int info) const;
  EventQueue queue_;
  ComputeShares compute_{queue_, m_.host_cores, [this] { grant_core_to_collective(); }};
  double now_ = 0;
  bool fold_ = false;  // fewer classes than ranks (classes_)
  bool one_class_ = false;  // folded into one class: rank 0 stands for all
  RankClasses classes_;
  std::vector<int32_t> representative_;  // folded: each rank's class's representative
  std::array<double, static_cast<size_t>(DType::boolean) + 1> peak_{};  // Machine::peak by dtype; -1: not yet asked
};

}  // namespace thunky::sim::internal
