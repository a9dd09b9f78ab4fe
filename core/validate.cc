#include "core/validate.h"

#include "core/parallel.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "core/accounting.h"
#include "core/command_facts.h"
#include "core/files.h"
#include "core/init.h"
#include "core/lower.h"
#include "core/mesh.h"
#include "core/race.h"

namespace thunky {

RankCtx rank_ctx(const Mesh& m, int64_t rank) { return RankCtx{rank, rank_coords(m, rank)}; }

View resolve(const Program& p, const Ref& r, const RankCtx& ctx) {
  const Buffer& b = p.buffers[r.buffer];
  auto lookup = [&](std::string_view name) -> std::optional<int64_t> {
    auto ax = p.mesh.axis(name);
    if (!ax) return std::nullopt;
    return ctx.coords[*ax];
  };
  try {
    return resolve_view(r.buffer, b.shape, *r.syntax, lookup);
  } catch (const ThunkyError& e) {
    std::string where = p.mesh.size() > 1 ? " (on " + rank_label(p.mesh, ctx.rank) + ")" : "";
    throw ThunkyError(std::string(r.pointer), "ref '" + r.syntax->text() + "' of buffer '" + b.name + "' " + shape_str(b.shape) + ": " + e.what() + where);
  }
}

namespace {

const std::set<std::string>& map_functions() {
  static const std::set<std::string> f = {"where", "sin", "cos", "tan", "exp", "log", "log1p", "sqrt", "rsqrt", "tanh",
                                          "abs", "neg", "floor", "ceil", "round", "min", "max", "f64", "f32", "f16",
                                          "bf16", "f8e4m3", "f8e5m2", "s64", "s32", "s16", "s8", "u32", "u8", "bool"};
  return f;
}

void check_map_names(const Program& p, const Command& c, const Expr& e) {
  if (e.kind == Expr::Kind::name) {
    for (const auto& [k, r] : c.in)
      if (k == e.text) return;
    if (p.mesh.axis(e.text)) return;
    throw ThunkyError(c.pointer + "/expr", "unknown name '" + e.text + "' in map expression (inputs are the keys of 'in'; mesh axis names give this rank's index)");
  }
  if (e.kind == Expr::Kind::call) {
    if (!map_functions().count(e.text)) throw ThunkyError(c.pointer + "/expr", "unknown function '" + e.text + "' in map expression");
    size_t want = e.text == "where" ? 3 : (e.text == "min" || e.text == "max") ? 2 : 1;
    if (e.args.size() != want)
      throw ThunkyError(c.pointer + "/expr", e.text + "() takes " + std::to_string(want) + " argument" + (want > 1 ? "s" : "") + ", got " + std::to_string(e.args.size()));
  }
  for (const auto& a : e.args) check_map_names(p, c, *a);
}

std::string view_str(const Program& p, const View& v) {
  return std::string(dtype_name(p.buffers[v.buffer].dtype)) + shape_str(v.shape);
}

// What must match across the members of a communicator. The text form is
// built only when two entries are not trivially equal (same command, same
// shapes), which is the common SPMD case.
struct CollectiveSig {
  const Command* cmd;
  View src, dst;
  int n;
};

std::string sig_text(const Program& p, const CollectiveSig& g) {
  return collective_signature(p, *g.cmd, g.src, g.dst, g.n);
}

bool same_sig(const Program& p, const CollectiveSig& a, const CollectiveSig& b) {
  if (a.cmd == b.cmd && a.src.shape == b.src.shape && a.dst.shape == b.dst.shape) return true;
  return sig_text(p, a) == sig_text(p, b);
}

// A token as the schedule wrote it (inside a call, lowering appends
// "$<instance>").
std::string display_token(std::string_view token) {
  return std::string(token.substr(0, token.find('$')));
}

// What rank 0's walk did, for the other ranks to replay: every
// happens-before operation, the accesses to buffers some moving view
// touches (with the ref when its view moves with the rank) and the
// collectives whose rules read the rank. The walk's structure (streams,
// tokens, both sides of every branch) is the same on every rank; only
// views and communicators differ, so a replay re-resolves just those.
// A step is 16 bytes: most are ticks, and what an access or a collective
// needs lives beside the steps.
struct Tape {
  struct Step {
    enum class Kind : uint8_t { new_slot, tick, join, set, access, collective, resolve };
    Kind kind;
    int slot = 0;
    int arg = 0;         // join: offset into clocks; set: component; access: into accesses;
                         // collective: into collectives; resolve: into resolves
    uint32_t value = 0;  // set: the value; join: the clock's length
  };
  struct TapedAccess {
    Access access;
    const Ref* ref;  // the rank-dependent ref, else null
    int moving;      // its flattened view (into movings), else -1
  };
  std::vector<TapedAccess> accesses;
  std::vector<const Ref*> resolves;
  struct Collective {
    const Command* cmd;
    const Ref *src, *dst;
    View src_view, dst_view;
    bool src_moves, dst_moves;
  };
  std::vector<Step> steps;
  std::vector<uint32_t> clocks;  // the joined clocks, end to end
  std::vector<Collective> collectives;
  std::vector<char> buffer_moves;  // per buffer: some access to it moves with the rank

  // A moving ref in the form most take (one index group of ds() and plain
  // indices, every bound but the starts fixed), flattened by rank 0's walk
  // so that a replay reads a few adjacent entries instead of the ref's
  // parse, and does not touch the ref unless the view is wrong.
  struct MovingItem {
    int64_t n, stride;  // the dimension's size and row-major stride
    int64_t start;      // where it does not move
    int64_t len;        // ds: its size; an index: 1
    int32_t code;       // into `code` when the start moves, else -1
    bool ds, negated;
  };
  struct Moving {
    uint32_t first, count;  // into moving_items
  };
  std::vector<MovingItem> moving_items;
  std::vector<Moving> movings;
  std::vector<IndexStep> code;  // the starts' code, names as mesh axis numbers
};

// Where a flattened view starts on the rank of `coords`, in elements;
// false where the view is out of bounds or not one range there (the
// caller resolves the ref whole, which says why).
bool moving_offset(const Tape& t, const Tape::Moving& m, const std::vector<int64_t>& coords, int64_t& offset) {
  auto coord = [&](int64_t axis) -> std::optional<int64_t> { return coords[static_cast<size_t>(axis)]; };
  offset = 0;
  bool sliced = false;  // as resolve_view: after a kept dimension, only whole ones
  for (uint32_t k = 0; k < m.count; ++k) {
    const Tape::MovingItem& it = t.moving_items[m.first + k];
    int64_t start = it.start;
    if (it.code >= 0) {
      if (!run_index_code(t.code.data() + it.code, coord, start)) return false;
      if (!it.ds && start < 0 && it.negated) start += it.n;
    }
    if (it.ds ? (start < 0 || start > it.n || it.len > it.n - start) : (start < 0 || start >= it.n)) return false;
    if (sliced && (start != 0 || it.len != it.n)) return false;
    if (it.ds) sliced = true;
    offset += start * it.stride;
  }
  return true;
}

// One access a command makes: the ref it came from, its view on this rank
// and whether it writes.
struct Use {
  const Ref* ref;
  View view;
  bool write;
};

// Walks the program for one rank.
class RankWalker {
 public:
  // `sequences`: keep each communicator's collective sequence for the
  // collective-order check.
  RankWalker(const Program& p, int64_t rank, bool structural, bool races, bool sequences)
      : p_(&p), ctx_(rank_ctx(p.mesh, rank)), structural_(structural), races_(races), sequences_(sequences), detector_(p.buffers.size()) {}

  // Records the walk for replay on the other ranks.
  // `commands`: about how many the walk meets (room is made for their
  // steps up front; what is not written is never touched).
  void record_into(Tape* t, size_t commands) {
    tape_ = t;
    t->steps.reserve(commands * 3);
    t->accesses.reserve(commands * 2);
    t->buffer_moves.assign(p_->buffers.size(), 0);
  }

  // Whether a step of rank 0's walk only moves the clocks. Those move
  // alike on every rank that replays the walk, so replays share one
  // happens-before state, which apply_clock() advances.
  static bool clock_step(const Tape::Step& st) {
    using K = Tape::Step::Kind;
    return st.kind == K::new_slot || st.kind == K::tick || st.kind == K::join || st.kind == K::set;
  }
  static void apply_clock(HappensBefore& hb, const Tape& t, const Tape::Step& st) {
    switch (st.kind) {
      case Tape::Step::Kind::new_slot: hb.new_slot(); break;
      case Tape::Step::Kind::tick: hb.tick(st.slot); break;
      case Tape::Step::Kind::join: hb.join(st.slot, t.clocks.data() + st.arg, st.value); break;
      case Tape::Step::Kind::set: hb.set_component(st.slot, st.arg, st.value); break;
      default: break;
    }
  }

  // Replays one step of rank 0's walk that is not a clock step on this
  // rank, with `hb` the replays' clocks: races only on buffers some
  // rank-dependent access touches, every collective.
  void replay(const Tape& t, const Tape::Step& st, const HappensBefore& hb) {
    switch (st.kind) {
      case Tape::Step::Kind::new_slot:
      case Tape::Step::Kind::tick:
      case Tape::Step::Kind::join:
      case Tape::Step::Kind::set: break;
      case Tape::Step::Kind::resolve: resolve(*p_, *t.resolves[static_cast<size_t>(st.arg)], ctx_); break;
      case Tape::Step::Kind::access: {
        const Tape::TapedAccess& ta = t.accesses[static_cast<size_t>(st.arg)];
        Access a = ta.access;
        // A moving ref is resolved on every rank (its bounds), raced only
        // where race tracking is on.
        if (ta.ref) {
          // Sizes do not move in a replay: only where the range starts.
          const uint64_t bytes = ta.access.hi - ta.access.lo;
          const size_t es = dtype_size(p_->buffers[ta.access.buffer].dtype);
          int64_t offset;
          if (ta.moving < 0 || !moving_offset(t, t.movings[static_cast<size_t>(ta.moving)], ctx_.coords, offset)) offset = resolve(*p_, *ta.ref, ctx_).offset;
          a.lo = static_cast<uint64_t>(offset) * es;
          a.hi = a.lo + bytes;
        }
        if (!races_ || !t.buffer_moves[ta.access.buffer]) break;
        detector_.access(a, hb, branches_, races, 64);
        break;
      }
      case Tape::Step::Kind::collective: {
        const Tape::Collective& c = t.collectives[st.arg];
        const View s = c.src_moves ? resolve(*p_, *c.src, ctx_) : c.src_view;
        const View d = c.dst_moves ? resolve(*p_, *c.dst, ctx_) : c.dst_view;
        collective(*c.cmd, s, d);
        break;
      }
    }
  }

  // The walk goes on reading `p`, a move of the program walked so far
  // (whose commands therefore stay where they were).
  void rebind(const Program& p) { p_ = &p; }

  // rank 0's branch nodes, which a replay shares.
  void share_branches(const std::vector<BranchNode>& b) { branches_ = b; }
  const std::vector<BranchNode>& branch_nodes() const { return branches_; }

  // Thrown by run() when the parse it follows stopped at an error.
  struct ParseStopped {};

  // Walks the top-level program, or, with `progress`, the one being parsed
  // (each command once the parse has counted it).
  void run(ParseProgress* progress = nullptr) {
    Namespace ns;
    int main_slot = new_slot();
    StreamId main;
    ns.slots[main] = main_slot;
    slot_names_.push_back(main.str());
    if (progress) {
      const Block& top = progress->block();
      size_t ready = 0;
      for (size_t i = 0; i < top.size(); ++i) {
        if (i >= ready && (ready = progress->wait_past(i)) <= i) throw ParseStopped{};
        // What prefetching reads ahead must be parsed already.
        if (i + 16 < ready) prefetch_ahead(top, i);
        command(top[i], main_slot, ns, -1);
      }
    } else {
      walk(p_->program, main_slot, ns, -1);
    }
    // Reported after the race check: a missing async_done usually leaves a
    // race behind, and both are worth showing.
    if (structural_) {
      std::vector<const TokenMap::value_type*> live;  // reported in name order
      for (const auto& entry : tokens_)
        if (entry.second.live) live.push_back(&entry);
      std::sort(live.begin(), live.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
      for (const auto* entry : live)
        unawaited.push_back(ThunkyError(entry->second.start->pointer + "/token", "token '" + display_token(entry->first) + "' is never awaited (every async_start needs one later async_done)"));
    }
  }

  std::vector<ThunkyError> unawaited;

  std::vector<RaceReport> races;
  std::map<std::vector<int>, std::vector<CollectiveSig>> collectives;
  std::vector<const Command*> commands;  // index -> command, for reports
  std::vector<std::string> slot_names_;
  std::vector<const std::string*> command_token;  // index -> token of the innermost async body

 private:
  struct Namespace {
    std::map<StreamId, int> slots;
    std::string where;  // "" at top level, else the region's id
  };
  struct TokenState {
    Clock clock;
    int frame = 0;
    bool live = false;
    const Command* start = nullptr;  // the async_start that last started it
  };

  // Happens-before operations, taped when recording.
  int new_slot() {
    if (tape_) tape_->steps.push_back({Tape::Step::Kind::new_slot, 0, 0, 0});
    return hb_.new_slot();
  }
  uint32_t tick(int slot) {
    if (tape_) tape_->steps.push_back({Tape::Step::Kind::tick, slot, 0, 0});
    return hb_.tick(slot);
  }
  void join(int slot, const Clock& c) {
    if (tape_) {
      tape_->steps.push_back({Tape::Step::Kind::join, slot, static_cast<int>(tape_->clocks.size()), static_cast<uint32_t>(c.size())});
      tape_->clocks.insert(tape_->clocks.end(), c.begin(), c.end());
    }
    hb_.join(slot, c);
  }
  void set_component(int slot, int component, uint32_t value) {
    if (tape_) tape_->steps.push_back({Tape::Step::Kind::set, slot, component, value});
    hb_.set_component(slot, component, value);
  }

  // Flattens a moving ref for the replays (Tape::Moving); -1 where it
  // takes another form.
  int flatten(const Ref& r) {
    const RefSyntax& x = *r.syntax;
    const Shape& shape = p_->buffers[r.buffer].shape;
    if (x.groups.size() != 1 || x.groups[0].size() > shape.size()) return -1;
    const IndexGroup& g = x.groups[0];
    Tape& t = *tape_;
    const size_t items = t.moving_items.size(), code = t.code.size();
    auto decline = [&] {
      t.moving_items.resize(items);
      t.code.resize(code);
      return -1;
    };
    int64_t stride = 1;
    for (size_t d = g.size(); d < shape.size(); ++d) stride *= shape[d];
    t.moving_items.resize(items + g.size());  // filled innermost first, for the strides
    for (size_t d = g.size(); d-- > 0;) {
      const IndexItem& it = g[d];
      if (it.kind == IndexItem::Kind::slice || it.code_a < 0 || (it.kind == IndexItem::Kind::ds && it.code_b < 0)) return decline();
      Tape::MovingItem& m = t.moving_items[items + d];
      m = {shape[d], stride, 0, 1, -1, it.kind == IndexItem::Kind::ds, it.a_negated};
      stride *= shape[d];
      // A ds size is fixed in a replay (sizes that move rule replays out).
      auto no_names = [](int64_t) { return std::optional<int64_t>(); };
      if (m.ds && !run_index_code(x.code.data() + it.code_b, no_names, m.len)) return decline();
      if (run_index_code(x.code.data() + it.code_a, no_names, m.start)) {
        if (!m.ds && m.start < 0 && m.negated) m.start += m.n;
        continue;
      }
      // The start names axes: its code, with each name as its axis number.
      m.code = static_cast<int32_t>(t.code.size());
      for (const IndexStep* s = x.code.data() + it.code_a;; ++s) {
        IndexStep step = *s;
        if (step.op == IndexStep::Op::name) {
          const auto axis = p_->mesh.axis(x.names[static_cast<size_t>(step.value)]);
          if (!axis) return decline();
          step.value = *axis;
        }
        t.code.push_back(step);
        if (step.op == IndexStep::Op::end) break;
      }
    }
    t.movings.push_back({static_cast<uint32_t>(items), static_cast<uint32_t>(g.size())});
    return static_cast<int>(t.movings.size()) - 1;
  }

  void add_access(const Command& c, int slot, uint32_t seq, int branch, const Use& u) {
    if (!races_ && !tape_) return;
    const View& v = u.view;
    const bool write = u.write;
    size_t es = dtype_size(p_->buffers[v.buffer].dtype);
    Access a;
    a.buffer = v.buffer;
    a.lo = static_cast<uint64_t>(v.offset) * es;
    a.hi = a.lo + static_cast<uint64_t>(v.count()) * es;
    a.write = write;
    a.slot = slot;
    a.seq = seq;
    a.command = static_cast<int>(commands.size()) - 1;
    a.branch = branch;
    // A replay skips buffers no view of which moves: the program knows them.
    static const std::vector<char> unknown;  // every buffer may move
    const std::vector<char>& moving = p_->rank_use ? p_->rank_use->moving_buffers : unknown;
    const bool keep = ref_moves_with_rank(*u.ref) || static_cast<size_t>(v.buffer) >= moving.size() || moving[static_cast<size_t>(v.buffer)];
    if (tape_ && keep) {
      const bool moves = ref_moves_with_rank(*u.ref);
      tape_->steps.push_back({Tape::Step::Kind::access, slot, static_cast<int>(tape_->accesses.size()), 0});
      tape_->accesses.push_back({a, moves ? u.ref : nullptr, moves ? flatten(*u.ref) : -1});
      if (moves) tape_->buffer_moves[v.buffer] = 1;
    }
    if (races_) detector_.access(a, hb_, branches_, races, 64);
  }

  // A ref resolved only to check it (a PTX kernel's CPU fallback): taped so
  // that the other ranks check its bounds too when it moves with the rank.
  View checked(const Ref& r, bool writable, bool tape) {
    View v = writable ? need_writable(r) : resolve(*p_, r, ctx_);
    if (tape && tape_ && ref_moves_with_rank(r)) {
      tape_->steps.push_back({Tape::Step::Kind::resolve, 0, static_cast<int>(tape_->resolves.size()), 0});
      tape_->resolves.push_back(&r);
    }
    return v;
  }

  View need_writable(const Ref& r) {
    const Buffer& b = p_->buffers[r.buffer];
    if (b.role == Role::input)
      throw ThunkyError(std::string(r.pointer), "writes buffer '" + b.name + "', which has role input (read-only); declare it inout to mutate it");
    return resolve(*p_, r, ctx_);
  }

  void walk(const Block& block, int slot, Namespace& ns, int branch) {
    for (size_t i = 0; i < block.size(); ++i) {
      prefetch_ahead(block, i);
      command(block[i], slot, ns, branch);
    }
  }

  int slot_for(Namespace& ns, const StreamId& s, int current) {
    auto it = ns.slots.find(s);
    if (it != ns.slots.end()) return it->second;
    int slot = new_slot();
    ns.slots[s] = slot;
    slot_names_.push_back(s.str() + (ns.where.empty() ? "" : " inside " + ns.where));
    return slot;
  }

  // A conditionally executed or repeated region: fresh sub-streams, and
  // tokens may not cross its boundary.
  void region(const Block& block, const std::string& id, int slot, int branch) {
    Namespace inner;
    inner.where = id;
    // The region's own stream stays the enclosing command's stream.
    for (const auto& [sid, s] : ns_stack_.back()->slots)
      if (s == slot) inner.slots[sid] = slot;
    ++frame_;
    ns_stack_.push_back(&inner);
    walk(block, slot, inner, branch);
    ns_stack_.pop_back();
    // Only a region that leaves a token live looks for it (by name order).
    if (structural_ && live_at_depth(frame_) > 0) {
      const TokenMap::value_type* first = nullptr;
      for (const auto& entry : tokens_)
        if (entry.second.live && entry.second.frame == frame_ && (!first || entry.first < first->first)) first = &entry;
      throw ThunkyError(first->second.start->pointer + "/token", "token '" + display_token(first->first) + "' is started inside " + id + " but not awaited there (a cond branch or loop body must join the work it forks)");
    }
    --frame_;
  }

  void check_collective_group(const Command& g) {
    for (const auto& c : g.body)
      if (!is_collective(c.op))
        throw ThunkyError(c.pointer + "/op", "a collective_group may hold only collectives, not '" + std::string(op_name(c.op)) + "'");
    if (g.body.empty()) throw ThunkyError(g.pointer + "/body", "a collective_group needs at least one collective");
  }

  // The communicator of a collective on this rank: its participants, and
  // the sequence of collectives issued on it.
  struct Comm {
    const Participants* part = nullptr;
    std::vector<CollectiveSig>* sigs = nullptr;
  };
  Comm communicator(const Command& c) {
    // Participants depend on the axes and groups only. Consecutive
    // collectives mostly share them, so the last one is kept at hand.
    const auto* groups = c.rare().groups ? &*c.rare().groups : nullptr;
    if (last_comm_.part && groups == last_groups_ && c.axis == last_axis_) return last_comm_;
    std::string key = c.axis.size() == 1 ? c.axis[0] : std::string();
    if (c.axis.size() > 1)
      for (const auto& a : c.axis) key += a + ",";
    if (groups) key += "#" + std::to_string(reinterpret_cast<uintptr_t>(groups));
    auto cached = participants_.find(key);
    if (cached == participants_.end()) {
      try {
        cached = participants_.emplace(key, participants(p_->mesh, ctx_.rank, c.axis, c.rare().groups)).first;
      } catch (const ThunkyError& e) {
        throw ThunkyError(c.pointer + (groups ? "/groups" : "/axis"), e.what());
      }
    }
    const Participants& part = cached->second;
    auto it = comm_index_.find(&part);
    if (it == comm_index_.end()) it = comm_index_.emplace(&part, &collectives[part.ranks]).first;
    last_comm_ = {&part, it->second};
    last_groups_ = groups;
    last_axis_ = c.axis;
    return last_comm_;
  }

  // Checks one collective's rules on this rank and appends it to its
  // communicator's sequence.
  void collective(const Command& c, const View& src, const View& dst) {
    const Comm comm = communicator(c);
    const Participants& part = *comm.part;
    const int64_t n = static_cast<int64_t>(part.ranks.size());
    const Buffer& sb = p_->buffers[src.buffer];
    const Buffer& db = p_->buffers[dst.buffer];
    if (sb.dtype != db.dtype)
      throw ThunkyError(c.pointer + "/dst", std::string(op_name(c.op)) + " needs src and dst of one dtype: src is " + view_str(*p_, src) + ", dst is " + view_str(*p_, dst));
    const int64_t sc = src.count(), dc = dst.count();
    auto mismatch = [&](const std::string& rule) {
      throw ThunkyError(c.pointer + "/dst", std::string(op_name(c.op)) + " over " + std::to_string(n) + " ranks needs " + rule + ": src is " + view_str(*p_, src) + " (" + std::to_string(sc) + " elements), dst is " + view_str(*p_, dst) + " (" + std::to_string(dc) + " elements)");
    };
    if (c.op == Op::all_gather && dc != n * sc) mismatch("dst to hold n x src elements");
    if (c.op == Op::reduce_scatter && sc != n * dc) mismatch("src to hold n x dst elements");
    if ((c.op == Op::all_reduce || c.op == Op::collective_permute) && sc != dc) mismatch("src and dst of equal element counts");
    if (c.op == Op::all_to_all) {
      if (sc != dc) mismatch("src and dst of equal element counts");
      if (sc % n != 0) mismatch("an element count divisible by the number of ranks");
    }
    if (src.buffer == dst.buffer) {
      const int64_t s0 = src.offset, s1 = src.offset + sc, d0 = dst.offset, d1 = dst.offset + dc;
      bool overlap = s0 < d1 && d0 < s1;
      bool identical = s0 == d0 && s1 == d1;
      bool ok = !overlap;
      if ((c.op == Op::all_reduce || c.op == Op::collective_permute) && identical) ok = true;
      if (c.op == Op::all_gather && s0 == d0 + part.position * sc && s1 == s0 + sc) ok = true;
      if (c.op == Op::reduce_scatter && d0 == s0 + part.position * dc && d1 == d0 + dc) ok = true;
      if (!ok)
        throw ThunkyError(c.pointer + "/dst", std::string(op_name(c.op)) + ": src and dst overlap in buffer '" + sb.name + "' (elements [" + std::to_string(s0) + ", " + std::to_string(s1) + ") and [" + std::to_string(d0) + ", " + std::to_string(d1) + ")); they must be disjoint or in place as the op allows");
    }
    if (c.op == Op::collective_permute && c.rare().pairs) {
      std::set<int64_t> sources, targets;
      for (size_t i = 0; i < c.rare().pairs->size(); ++i) {
        auto [s, t] = (*c.rare().pairs)[i];
        std::string ptr = c.pointer + "/pairs/" + std::to_string(i);
        if (s < 0 || s >= n || t < 0 || t >= n)
          throw ThunkyError(ptr, "pair [" + std::to_string(s) + ", " + std::to_string(t) + "] names an index outside the " + std::to_string(n) + " ranks of the collective");
        if (!sources.insert(s).second) throw ThunkyError(ptr, "source " + std::to_string(s) + " sends more than once");
        if (!targets.insert(t).second) throw ThunkyError(ptr, "target " + std::to_string(t) + " receives more than once");
      }
    }
    if (sequences_) comm.sigs->push_back({&c, src, dst, static_cast<int>(n)});
  }

  void record_collective(const Command& c, const View& src, const View& dst) {
    collective(c, src, dst);
    if (!tape_) return;
    // Whether every rule checked here holds on every rank: the views stay
    // put, the communicator has one size everywhere (no groups) and no
    // in-place rule reads the rank's position. Then no replay needs it.
    const bool src_moves = ref_moves_with_rank(*c.src), dst_moves = ref_moves_with_rank(*c.dst);
    if (!src_moves && !dst_moves && !c.rare().groups && src.buffer != dst.buffer) return;
    tape_->steps.push_back({Tape::Step::Kind::collective, 0, static_cast<int>(tape_->collectives.size()), 0});
    tape_->collectives.push_back({&c, &*c.src, &*c.dst, src, dst, src_moves, dst_moves});
  }

  void gemm_check(const Command& c, const View& a, const View& b, const View& cv) {
    auto fail = [&](const std::string& why) {
      throw ThunkyError(c.pointer, "gemm " + why + ": a is " + view_str(*p_, a) + (c.transpose_a ? " (transposed)" : "") + ", b is " + view_str(*p_, b) + (c.transpose_b ? " (transposed)" : "") + ", c is " + view_str(*p_, cv));
    };
    const DType ta = p_->buffers[a.buffer].dtype, tb = p_->buffers[b.buffer].dtype, tc = p_->buffers[cv.buffer].dtype;
    if (ta != tb) fail("needs a and b of one dtype");
    if (!is_float(ta) || !is_float(tc)) fail("works on floating-point dtypes");
    auto rank_ok = [](const View& v) { return v.shape.size() == 2 || v.shape.size() == 3; };
    if (!rank_ok(a) || !rank_ok(b) || !rank_ok(cv)) fail("takes 2-D matrices or 3-D batches");
    auto mat = [](const View& v, bool t) {
      size_t r = v.shape.size();
      int64_t rows = v.shape[r - 2], cols = v.shape[r - 1];
      return t ? std::pair{cols, rows} : std::pair{rows, cols};
    };
    auto [m, k] = mat(a, c.transpose_a);
    auto [k2, n] = mat(b, c.transpose_b);
    auto [m2, n2] = mat(cv, false);
    if (k != k2) fail("contraction dimensions differ (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
    if (m != m2 || n != n2) fail("needs c of shape [" + std::to_string(m) + ", " + std::to_string(n) + "]");
    int64_t batch = cv.shape.size() == 3 ? cv.shape[0] : 1;
    if ((a.shape.size() == 3 && a.shape[0] != batch) || (b.shape.size() == 3 && b.shape[0] != batch) ||
        (cv.shape.size() == 2 && (a.shape.size() == 3 || b.shape.size() == 3)))
      fail("needs equal batch sizes (a 2-D operand is broadcast over c's batch)");
  }

  void command(const Command& c, int slot, Namespace& ns, int branch) {
    commands.push_back(&c);
    command_token.push_back(cur_token_);
    auto R = [&](const Ref& r) { return resolve(*p_, r, ctx_); };
    auto leaf = [&](std::initializer_list<Use> acc) {
      uint32_t seq = tick(slot);
      for (const auto& u : acc) add_access(c, slot, seq, branch, u);
    };
    auto scalar = [&](const Ref& r, DType want, const char* what) {
      View v = R(r);
      const Buffer& b = p_->buffers[v.buffer];
      if (v.count() != 1 || b.dtype != want)
        throw ThunkyError(std::string(r.pointer), std::string(what) + " must be a " + std::string(dtype_name(want)) + " scalar, got " + view_str(*p_, v));
      return v;
    };
    switch (c.op) {
      case Op::memzero:
      case Op::memset: leaf({{&*c.dst, need_writable(*c.dst), true}}); break;
      case Op::copy: {
        View s = R(*c.src), d = need_writable(*c.dst);
        size_t sb = s.count() * dtype_size(p_->buffers[s.buffer].dtype), db = d.count() * dtype_size(p_->buffers[d.buffer].dtype);
        if (sb != db)
          throw ThunkyError(c.pointer + "/dst", "copy needs equal byte sizes: src " + view_str(*p_, s) + " is " + std::to_string(sb) + " bytes, dst " + view_str(*p_, d) + " is " + std::to_string(db) + " bytes");
        leaf({{&*c.src, s, false}, {&*c.dst, d, true}});
        break;
      }
      case Op::gemm: {
        View a = R(*c.a), b = R(*c.b), cv = need_writable(*c.c);
        gemm_check(c, a, b, cv);
        if (c.beta != 0) leaf({{&*c.a, a, false}, {&*c.b, b, false}, {&*c.c, cv, false}, {&*c.c, cv, true}});
        else leaf({{&*c.a, a, false}, {&*c.b, b, false}, {&*c.c, cv, true}});
        break;
      }
      case Op::map: map_command(c, c, slot, branch); break;
      case Op::reduce: {
        View in = R(*c.src), out = need_writable(*c.out);
        std::set<int64_t> axes;
        int64_t kept = 1;
        for (size_t i = 0; i < c.rare().axes_i.size(); ++i) {
          int64_t ax = c.rare().axes_i[i];
          if (ax < 0) ax += static_cast<int64_t>(in.shape.size());
          if (ax < 0 || ax >= static_cast<int64_t>(in.shape.size()))
            throw ThunkyError(c.pointer + "/axes/" + std::to_string(i), "axis " + std::to_string(c.rare().axes_i[i]) + " is out of range for input " + view_str(*p_, in));
          if (!axes.insert(ax).second) throw ThunkyError(c.pointer + "/axes/" + std::to_string(i), "axis listed twice");
        }
        for (size_t d = 0; d < in.shape.size(); ++d)
          if (!axes.count(static_cast<int64_t>(d))) kept *= in.shape[d];
        if (out.count() != kept)
          throw ThunkyError(c.pointer + "/out", "reduce of " + view_str(*p_, in) + " over the listed axes leaves " + std::to_string(kept) + " elements, out " + view_str(*p_, out) + " has " + std::to_string(out.count()));
        leaf({{&*c.src, in, false}, {&*c.out, out, true}});
        break;
      }
      case Op::kernel:
      case Op::ptx_kernel:
      case Op::custom_call: {
        uint32_t seq = tick(slot);
        if (c.op == Op::ptx_kernel && c.rare().cpu) check_map(*c.rare().cpu, true);
        if (c.op == Op::custom_call) custom_call_check(c);
        std::vector<Use> acc;
        for_each_use(c, [&](RefUse u) { acc.push_back({u.ref, u.write ? need_writable(*u.ref) : R(*u.ref), u.write}); });
        for (const auto& u : acc) add_access(c, slot, seq, branch, u);
        break;
      }
      case Op::all_reduce:
      case Op::all_gather:
      case Op::reduce_scatter:
      case Op::all_to_all:
      case Op::collective_permute: {
        View s = R(*c.src), d = need_writable(*c.dst);
        record_collective(c, s, d);
        leaf({{&*c.src, s, false}, {&*c.dst, d, true}});
        break;
      }
      case Op::collective_group: {
        check_collective_group(c);
        // One launch: every member is issued at once on this stream.
        uint32_t seq = tick(slot);
        for (const auto& m : c.body) {
          commands.push_back(&m);
          command_token.push_back(cur_token_);
          View s = R(*m.src), d = need_writable(*m.dst);
          record_collective(m, s, d);
          add_access(m, slot, seq, branch, {&*m.src, s, false});
          add_access(m, slot, seq, branch, {&*m.dst, d, true});
        }
        break;
      }
      case Op::async_start: {
        // Elements of the map keep their place while the body adds more.
        TokenState& t = tokens_[c.token];
        if (structural_ && t.live)
          throw ThunkyError(c.pointer + "/token", "token '" + display_token(c.token) + "' is started again at " + c.id() + " before the async_start at " + t.start->pointer + " was awaited");
        // The target slot first: a new one must not move the clock joined.
        const int target = slot_for(ns, c.stream, slot);
        join(target, hb_.clock(slot));
        const std::string* saved_token = cur_token_;
        cur_token_ = &c.token;
        walk(c.body, target, ns, branch);
        cur_token_ = saved_token;
        if (t.live) --live_at_depth(t.frame);
        ++live_at_depth(frame_);
        t.clock = hb_.clock(target);
        t.frame = frame_;
        t.live = true;
        t.start = &c;
        break;
      }
      case Op::async_done: {
        auto it = tokens_.find(c.token);
        if (it == tokens_.end() || !it->second.live) {
          if (!structural_) break;
          if (it == tokens_.end() || !it->second.start) throw ThunkyError(c.pointer + "/token", "async_done of token '" + display_token(c.token) + "', which no earlier async_start started");
          throw ThunkyError(c.pointer + "/token", "token '" + display_token(c.token) + "' is awaited twice (the async_start at " + it->second.start->pointer + " was already awaited)");
        }
        if (it->second.frame != frame_ && structural_)
          throw ThunkyError(c.pointer + "/token", "token '" + display_token(c.token) + "' is awaited inside a cond branch or loop that did not start it (its async_start is " + it->second.start->pointer + ")");
        join(slot, it->second.clock);
        it->second.live = false;
        --live_at_depth(it->second.frame);
        break;
      }
      case Op::cond:
      case Op::switch_: {
        const Ref& r = c.op == Op::cond ? *c.pred : *c.index;
        View v = c.op == Op::cond ? scalar(r, DType::boolean, "pred") : scalar(r, DType::s32, "index");
        leaf({{&r, v, false}});
        const int id = cond_ids_++;
        const Clock entry = hb_.clock(slot);
        Clock exit = entry;
        std::vector<const Block*> blocks;
        std::vector<std::string> names;
        if (c.op == Op::cond) {
          blocks = {&c.rare().then_, &c.rare().else_};
          names = {c.id() + "/then", c.id() + "/else"};
        } else {
          for (size_t k = 0; k < c.rare().branches.size(); ++k) {
            blocks.push_back(&c.rare().branches[k]);
            names.push_back(c.id() + "/branches/" + std::to_string(k));
          }
        }
        uint32_t own = entry.size() > static_cast<size_t>(slot) ? entry[slot] : 0;
        for (size_t k = 0; k < blocks.size(); ++k) {
          Clock start = entry;
          reset_clock(slot, start, own);
          branches_.push_back(BranchNode{branch, id, static_cast<int>(k)});
          int node = static_cast<int>(branches_.size()) - 1;
          ns_stack_.push_back(&ns);
          region(*blocks[k], names[k], slot, node);
          ns_stack_.pop_back();
          const Clock& after = hb_.clock(slot);
          own = std::max(own, after.size() > static_cast<size_t>(slot) ? after[slot] : 0u);
          if (exit.size() < after.size()) exit.resize(after.size(), 0);
          for (size_t i = 0; i < after.size(); ++i) exit[i] = std::max(exit[i], after[i]);
        }
        reset_clock(slot, exit, own);
        break;
      }
      case Op::while_: {
        View v = scalar(*c.cond_buf, DType::boolean, "cond_buf");
        ns_stack_.push_back(&ns);
        region(c.rare().cond, c.id() + "/cond", slot, branch);
        leaf({{&*c.cond_buf, v, false}});
        region(c.body, c.id() + "/body", slot, branch);
        ns_stack_.pop_back();
        break;
      }
      case Op::call: walk(c.body, slot, ns, branch); break;
    }
  }

  void reset_clock(int slot, const Clock& c, uint32_t own) {
    Clock n = c;
    if (n.size() <= static_cast<size_t>(slot)) n.resize(slot + 1, 0);
    n[slot] = own;
    // HappensBefore has no setter for a whole clock: rebuild by components.
    const Clock& cur = hb_.clock(slot);
    for (size_t i = 0; i < std::max(cur.size(), n.size()); ++i) set_component(slot, static_cast<int>(i), i < n.size() ? n[i] : 0);
  }

  // `fallback`: a PTX kernel's CPU map, whose refs are checked but not
  // accessed (a plain map's accesses are taped already).
  void check_map(const Command& m, bool fallback = false) {
    if (structural_) check_map_names(*p_, m, *m.expr);
    View out = checked(*m.out, true, fallback);
    for (const auto& [k, r] : m.in) {
      View v = checked(r, false, fallback);
      if (v.count() != out.count() && v.count() != 1)
        throw ThunkyError(std::string(r.pointer), "map input '" + k + "' is " + view_str(*p_, v) + "; inputs must be scalars or have out's " + std::to_string(out.count()) + " elements (out is " + view_str(*p_, out) + ")");
    }
  }

  void map_command(const Command& c, const Command& m, int slot, int branch) {
    check_map(m);
    uint32_t seq = tick(slot);
    for (const auto& [k, r] : m.in) add_access(c, slot, seq, branch, {&r, resolve(*p_, r, ctx_), false});
    add_access(c, slot, seq, branch, {&*m.out, resolve(*p_, *m.out, ctx_), true});
  }

  void custom_call_check(const Command& c) {
    const CustomCallSpec& spec = *c.rare().custom;
    if (spec.target != "cholesky" && spec.target != "cusolver_potrf_ffi")
      throw ThunkyError(c.pointer + "/target", "unknown custom_call target '" + spec.target + "' (registered: cholesky, cusolver_potrf_ffi)");
    for (auto it = spec.backend_config.begin(); it != spec.backend_config.end(); ++it) {
      if (it.key() != "lower") throw ThunkyError(c.pointer + "/backend_config/" + it.key(), "unknown key '" + it.key() + "' for cholesky (expected 'lower')");
      if (!it.value().is_boolean()) throw ThunkyError(c.pointer + "/backend_config/lower", "expected true or false");
    }
    if (!spec.backend_config.contains("lower"))
      throw ThunkyError(c.pointer + "/backend_config", "cholesky needs backend_config.lower (true or false, in cuSOLVER's column-major sense)");
    if (c.refs.size() != 1) throw ThunkyError(c.pointer + "/operands", "cholesky takes one operand [a]");
    if (c.refs2.size() != 2) throw ThunkyError(c.pointer + "/results", "cholesky has two results [a, info]");
    View a = resolve(*p_, c.refs[0], ctx_), r = resolve(*p_, c.refs2[0], ctx_), info = resolve(*p_, c.refs2[1], ctx_);
    DType t = p_->buffers[a.buffer].dtype;
    if (a.shape.size() < 2 || a.shape[a.shape.size() - 1] != a.shape[a.shape.size() - 2] || (t != DType::f32 && t != DType::f64))
      throw ThunkyError(std::string(c.refs[0].pointer), "cholesky needs a square f32 or f64 matrix (or a batch of them), got " + view_str(*p_, a));
    if (r.shape != a.shape || p_->buffers[r.buffer].dtype != t)
      throw ThunkyError(std::string(c.refs2[0].pointer), "result 0 must have the operand's shape and dtype " + view_str(*p_, a) + ", got " + view_str(*p_, r));
    int64_t batch = a.count() / (a.shape.back() * a.shape.back());
    if (p_->buffers[info.buffer].dtype != DType::s32 || info.count() != batch)
      throw ThunkyError(std::string(c.refs2[1].pointer), "info must be s32 with one element per matrix (" + std::to_string(batch) + "), got " + view_str(*p_, info));
  }

  const Program* p_;
  RankCtx ctx_;
  bool structural_;
  bool races_;
  bool sequences_;
  HappensBefore hb_;
  RaceDetector detector_;
  std::vector<BranchNode> branches_;
  // Keyed by the commands' own token texts (the program outlives the walk).
  using TokenMap = std::unordered_map<std::string_view, TokenState>;
  TokenMap tokens_;
  // How many live tokens were started at each region depth.
  std::vector<int> live_per_depth_;
  int& live_at_depth(int depth) {
    if (static_cast<size_t>(depth) >= live_per_depth_.size()) live_per_depth_.resize(static_cast<size_t>(depth) + 1, 0);
    return live_per_depth_[static_cast<size_t>(depth)];
  }
  std::vector<Namespace*> ns_stack_;
  std::unordered_map<std::string, Participants> participants_;
  std::unordered_map<const Participants*, std::vector<CollectiveSig>*> comm_index_;
  Comm last_comm_;
  const std::vector<std::vector<int64_t>>* last_groups_ = nullptr;
  std::vector<std::string> last_axis_;
  int frame_ = 0;
  int cond_ids_ = 0;
  Tape* tape_ = nullptr;
  const std::string* cur_token_ = &kNoToken;
  static inline const std::string kNoToken;
};

// Whether some view or communicator differs between ranks.
bool program_rank_dependent(const Block& b) {
  // Group membership differs by rank.
  return any_command(b, [](const Command& c) { return c.rare().groups || any_ref(c, ref_moves_with_rank); });
}

// Whether some view's element count differs between ranks.
bool program_sized_by_rank(const Block& b) { return any_command(b, work_depends_on_rank); }

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

// Replays below this many rank-steps run on the calling thread alone.
constexpr size_t kParallelReplay = 200000;

// Replays rank 0's tape on every other rank's walker. The walkers are split
// into contiguous chunks, one per thread when the work is large (they share
// only the program and the tape, which they read); within a chunk the tape
// runs step by step across its ranks, so each rank-dependent ref is
// evaluated for every rank while it is in cache. Throws the error that a
// single thread going step by step across all ranks would meet first: the
// earliest step, and at that step the lowest rank.
void replay_all(const Tape& tape, std::vector<std::unique_ptr<RankWalker>>& walkers) {
  const size_t n = walkers.size(), steps = tape.steps.size();
  if (n == 0) return;
  size_t chunks = std::min<size_t>({hardware_threads(), n, 8});
  if (n * steps < kParallelReplay) chunks = 1;
  struct Failure {
    size_t step = SIZE_MAX, walker = SIZE_MAX;
    std::exception_ptr error;
  };
  std::vector<Failure> failures(chunks);
  auto run_chunk = [&](size_t k) {
    const size_t lo = n * k / chunks, hi = n * (k + 1) / chunks;
    HappensBefore hb;  // the chunk's ranks' clocks
    for (size_t s = 0; s < steps; ++s) {
      const Tape::Step& st = tape.steps[s];
      size_t w = lo;
      try {
        if (RankWalker::clock_step(st)) RankWalker::apply_clock(hb, tape, st);
        else
          for (; w < hi; ++w) walkers[w]->replay(tape, st, hb);
      } catch (...) {  // a later step of this chunk cannot fail first
        failures[k] = {s, w, std::current_exception()};
        return;
      }
    }
  };
  run_chunks(chunks, run_chunk);
  const Failure* first = nullptr;
  for (const auto& f : failures)
    if (f.error && (!first || std::pair{f.step, f.walker} < std::pair{first->step, first->walker})) first = &f;
  if (first) std::rethrow_exception(first->error);
}

// Rank 0's walk, made while the program was still being parsed
// (load_schedule_text): as validate() would have made it when `replay`
// turns out as guessed, with the tape it recorded and the error it
// stopped at.
struct EarlyWalk {
  bool replay = false;
  std::unique_ptr<RankWalker> walker;
  Tape tape;
  std::exception_ptr error;
};

// The walker validate() starts rank 0 with: `replay` records its walk for
// the other ranks, which then do not compare collective sequences.
std::unique_ptr<RankWalker> first_walker(const Program& p, const ValidateOptions& opts, bool replay, Tape& tape, size_t commands) {
  auto w = std::make_unique<RankWalker>(p, 0, true, opts.races, opts.collective_order && !replay);
  if (replay) w->record_into(&tape, commands);
  return w;
}

std::vector<Diagnostic> validate_program(const Program& p, const ValidateOptions& opts, EarlyWalk* early) {
  std::vector<Diagnostic> out;
  auto input_error = [&](const ThunkyError& e) { out.push_back({e.kind(), p.file, e.pointer(), e.what()}); };
  // Buffers and global layouts.
  try {
    for (const auto& b : p.buffers) {
      if (b.init.kind == Init::Kind::values) {
        int64_t want = b.global ? 1 : b.count();
        if (b.global)
          for (auto d : b.global->shape) want *= d;
        if (static_cast<int64_t>(b.init.values.size()) != want)
          throw ThunkyError(b.pointer + "/init/values", "has " + std::to_string(b.init.values.size()) + " values for " + std::to_string(want) + " elements");
      }
      if (b.init.kind == Init::Kind::axis_index && !p.mesh.axis(b.init.axis))
        throw ThunkyError(b.pointer + "/init/axis", "unknown mesh axis '" + b.init.axis + "'");
      if (b.global) {
        if (b.global->shape.size() != b.shape.size())
          throw ThunkyError(b.pointer + "/global/shape", "global shape " + shape_str(b.global->shape) + " and local shape " + shape_str(b.shape) + " differ in rank");
        std::set<std::string> used;
        for (const auto& axes : b.global->spec)
          for (const auto& a : axes)
            if (!used.insert(a).second) throw ThunkyError(b.pointer + "/global/spec", "mesh axis '" + a + "' shards two dimensions");
        ShardLayout l;
        try {
          l = shard_layout(p.mesh, *b.global, 0);
        } catch (const ThunkyError& e) {
          throw ThunkyError(b.pointer + "/global", e.what());
        }
        if (l.local_shape != b.shape)
          throw ThunkyError(b.pointer + "/shape", "the spec splits global shape " + shape_str(b.global->shape) + " into shards of " + shape_str(l.local_shape) + ", but the buffer's shape is " + shape_str(b.shape));
      }
    }
    // npy files exist and have the declared (global) shape.
    load_npy_inits(p);
  } catch (const ThunkyError& e) {
    input_error(e);
    return out;
  }

  const int64_t ranks = p.mesh.size();
  // A lowered program knows how its views use the rank; any other is scanned.
  const Program::RankUse use = p.rank_use ? *p.rank_use : Program::RankUse{program_rank_dependent(p.program), program_sized_by_rank(p.program), {}};
  const bool dependent = ranks > 1 && use.moves;
  // Ranks other than 0 replay rank 0's walk unless some view's size moves
  // with the rank (then shapes, not just offsets, differ: walk each rank).
  const bool replay = ranks > 1 && !use.sized;
  // A replayed walk issues the same collectives, of the same sizes, on
  // every rank, and each communicator's members all meet each of them
  // (its members are one class of the axes' or groups' partition): the
  // sequences cannot differ, so only walks of every rank are compared.
  const bool check_order = opts.collective_order && !replay;
  // An early walk of rank 0 stands if it guessed `replay` right.
  if (early && early->replay != replay) early = nullptr;
  Tape own_tape;
  Tape& tape = early ? early->tape : own_tape;
  std::unique_ptr<RankWalker> first;  // rank 0's walk: names for every report
  std::map<std::string, std::vector<int64_t>> race_ranks;  // message -> ranks
  std::map<std::string, std::string> race_pointer;          // message -> the later command's id
  std::vector<std::string> race_order;
  // Communicator -> (rank -> sequence)
  std::map<std::vector<int>, std::vector<std::pair<int64_t, std::vector<CollectiveSig>>>> comm_seqs;
  // Gathers one rank's races, communicators and token problems; `names`
  // is the walk whose command and stream numbering its reports use.
  auto collect = [&](int64_t r, RankWalker& w, const RankWalker& names) {
    for (const auto& rr : w.races) {
      const Command& a = *names.commands[rr.first.command];
      const Command& b = *names.commands[rr.second.command];
      const Buffer& buf = p.buffers[rr.first.buffer];
      uint64_t lo = std::max(rr.first.lo, rr.second.lo), hi = std::min(rr.first.hi, rr.second.hi);
      const std::string& ta = *names.command_token[rr.first.command];
      const std::string& tb = *names.command_token[rr.second.command];
      std::ostringstream msg;
      msg << "race on buffer '" << buf.name << "' bytes [" << lo << ", " << hi << "): " << a.id() << " (" << op_name(a.op)
          << (a.rare().name.empty() ? "" : " '" + a.rare().name + "'") << ", " << (rr.first.write ? "writes" : "reads") << ", on "
          << names.slot_names_[rr.first.slot] << ") and " << b.id() << " (" << op_name(b.op)
          << (b.rare().name.empty() ? "" : " '" + b.rare().name + "'") << ", " << (rr.second.write ? "writes" : "reads") << ", on "
          << names.slot_names_[rr.second.slot] << ") are not ordered by stream order or any token; missing join: ";
      if (!ta.empty())
        msg << "an async_done of token '" << display_token(ta) << "' on " << names.slot_names_[rr.second.slot] << " before " << b.id();
      else
        msg << "the async_start of token '" << display_token(tb) << "' must come after " << a.id()
            << " on its stream, or after an async_done that joins it";
      std::string key = msg.str();
      if (!race_ranks.count(key)) {
        race_order.push_back(key);
        race_pointer[key] = b.id();
      }
      // A replay skips buffers no rank-dependent access touches: rank 0's
      // race there is every rank's.
      if (r == 0 && replay && !tape.buffer_moves[rr.first.buffer])
        for (int64_t q = 0; q < ranks; ++q) race_ranks[key].push_back(q);
      else
        race_ranks[key].push_back(r);
    }
    for (auto& [comm, seq] : w.collectives) comm_seqs[comm].emplace_back(r, std::move(seq));
    for (const auto& e : w.unawaited) input_error(e);
  };
  // Walks (rank 0, or every rank when replay is off) run one by one; the
  // replays run step by step across ranks (replay_all).
  std::vector<std::unique_ptr<RankWalker>> replays;
  for (int64_t r = 0; r < ranks; ++r) {
    const bool full = r == 0 || dependent;
    std::unique_ptr<RankWalker> w;
    if (r == 0) w = early ? std::move(early->walker) : first_walker(p, opts, replay, tape, static_cast<size_t>(p.command_count));
    else w = std::make_unique<RankWalker>(p, r, false, opts.races && full, check_order);
    try {
      if (r == 0 && early) {
        w->rebind(p);
        if (early->error) std::rethrow_exception(early->error);
      } else if (r == 0 || !replay) {
        w->run();
      }
      if (r == 0 || !replay) {
        // Accesses to buffers no rank-dependent ref touches replay to nothing.
        if (r == 0 && replay)
          std::erase_if(tape.steps, [&](const Tape::Step& st) {
            return st.kind == Tape::Step::Kind::access && !tape.buffer_moves[tape.accesses[static_cast<size_t>(st.arg)].access.buffer];
          });
      } else {
        // Ranks whose views equal rank 0's skip race tracking; the replay
        // still resolves their communicators.
        w->share_branches(first->branch_nodes());
        replays.push_back(std::move(w));
        if (r + 1 < ranks) continue;
        replay_all(tape, replays);
      }
    } catch (const ThunkyError& e) {
      input_error(e);
      return out;
    }
    if (r == 0 || !replay) {
      collect(r, *w, *w);
      if (r == 0) first = std::move(w);
    } else {
      for (size_t k = 0; k < replays.size(); ++k) collect(static_cast<int64_t>(k) + 1, *replays[k], *first);
    }
  }
  for (const auto& key : race_order) {
    if (out.size() >= opts.max_errors) break;
    const auto& rs = race_ranks[key];
    std::string where = ranks > 1 ? (static_cast<int64_t>(rs.size()) == ranks || !dependent ? " (on every rank)" : " (on ranks " + rank_list(rs) + ")") : "";
    out.push_back({ErrorKind::schedule, p.file, race_pointer[key], key + where});
  }
  if (check_order) {
    for (const auto& [comm, seqs] : comm_seqs) {
      if (out.size() >= opts.max_errors) break;
      // Every member of the communicator must list it with the same sequence.
      std::vector<int64_t> members(comm.begin(), comm.end());
      std::map<int64_t, const std::vector<CollectiveSig>*> by_rank;
      for (const auto& [r, s] : seqs) by_rank[r] = &s;
      const int64_t ref_rank = members.front();
      auto ref_it = by_rank.find(ref_rank);
      static const std::vector<CollectiveSig> empty;
      const auto& ref = ref_it == by_rank.end() ? empty : *ref_it->second;
      for (int64_t m : members) {
        auto it = by_rank.find(m);
        const auto& mine = it == by_rank.end() ? empty : *it->second;
        size_t k = 0;
        while (k < ref.size() && k < mine.size() && same_sig(p, ref[k], mine[k])) ++k;
        if (k == ref.size() && k == mine.size()) continue;
        std::ostringstream msg;
        msg << "deadlock: ranks " << ref_rank << " and " << m << " of communicator {" << rank_list(members)
            << "} issue different collective sequences; collective #" << k << ": rank " << ref_rank << " "
            << (k < ref.size() ? ref[k].cmd->id() + " " + sig_text(p, ref[k]) : std::string("issues none")) << ", rank " << m << " "
            << (k < mine.size() ? mine[k].cmd->id() + " " + sig_text(p, mine[k]) : std::string("issues none"));
        const Command* at = k < mine.size() ? mine[k].cmd : ref[k].cmd;
        out.push_back({ErrorKind::schedule, p.file, at->id(), msg.str()});
        break;
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Diagnostic> validate(const Program& p, const ValidateOptions& opts) { return validate_program(p, opts, nullptr); }

Expected<Program> load_schedule_text(const std::string& text, const std::string& file, const ValidateOptions& opts) {
  Program p;
  // A long program's rank 0 walk follows its parse on the parsing thread
  // (the walk is serial, the parse is not). Whether the other ranks
  // replay it is known only once every view is read: it is guessed that
  // they do (no view's size moves with the rank), and walked again if not.
  // A program with functions is walked once lowered. The walk stands when
  // its walker was made (the parse then succeeded, or its error is the
  // load's).
  EarlyWalk early;
  auto consume = [&](const Program& head, ParseProgress& progress) {
    if (!head.functions.empty()) return;
    early.replay = head.mesh.size() > 1;
    try {
      early.walker = first_walker(head, opts, early.replay, early.tape, progress.block().size());
      early.walker->run(&progress);
    } catch (const RankWalker::ParseStopped&) {
      // the parse's error is reported
    } catch (...) {
      early.error = std::current_exception();
    }
  };
  try {
    p = parse_program_text(text, file, consume);
    lower(p);
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{e.kind(), file, e.pointer(), e.what()}};
  } catch (const std::exception& e) {  // a safety net: never let a library exception escape
    return std::vector<Diagnostic>{{ErrorKind::input, file, "", std::string("cannot read the schedule: ") + e.what()}};
  }
  std::vector<Diagnostic> errors;
  try {
    errors = validate_program(p, opts, early.walker ? &early : nullptr);
  } catch (const ThunkyError& e) {
    errors = {{e.kind(), file, e.pointer(), e.what()}};
  } catch (const std::exception& e) {
    errors = {{ErrorKind::input, file, "", std::string("cannot validate the schedule: ") + e.what()}};
  }
  if (!errors.empty()) return errors;
  return p;
}

Expected<Program> load_schedule_file(const std::string& path, const ValidateOptions& opts) {
  // Read whole, with spare capacity past the text: the JSON parser reads
  // up to 64 bytes beyond it and so needs no padded copy of the file.
  std::string error;
  std::string text = read_input_file(path, error, 64);
  if (!error.empty()) return std::vector<Diagnostic>{{ErrorKind::input, path, "", "the schedule file " + error}};
  return load_schedule_text(text, path, opts);
}

}  // namespace thunky
