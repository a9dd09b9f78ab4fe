#include "core/rank_walk.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "core/command_facts.h"
#include "core/mesh.h"
#include "core/op_rules.h"
#include "core/race.h"
#include "core/validate.h"

namespace thunky {

namespace {

// A token as the schedule wrote it (inside a call, lowering appends
// "$<instance>").
std::string display_token(std::string_view token) {
  return std::string(token.substr(0, token.find('$')));
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
  RankWalker(const Program& p, int64_t rank, const WalkOptions& o)
      : p_(&p), ctx_(rank_ctx(p.mesh, rank)), structural_(o.structural), races_(o.races), sequences_(o.sequences), race_buffers_(o.race_buffers),
        detector_(p.buffers.size()) {}

  // Walks the top-level program.
  void run() {
    Namespace ns;
    int main_slot = hb_.new_slot();
    StreamId main;
    ns.slots[main] = main_slot;
    slot_names_.push_back(main.str());
    walk(p_->program, main_slot, ns, -1);
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

  void add_access(const Command& c, int slot, uint32_t seq, int branch, const Use& u) {
    const View& v = u.view;
    if (!races_ || (race_buffers_ && !(*race_buffers_)[static_cast<size_t>(v.buffer)])) return;
    Access a;
    a.buffer = v.buffer;
    a.lo = static_cast<uint64_t>(v.byte_offset());
    a.hi = a.lo + static_cast<uint64_t>(v.bytes());
    a.write = u.write;
    a.slot = slot;
    a.seq = seq;
    a.command = static_cast<int>(commands.size()) - 1;
    a.branch = branch;
    detector_.access(a, hb_, branches_, races, 64);
  }

  View need_writable(const Ref& r) { return writable_view(*p_, r, ctx_); }

  void walk(const Block& block, int slot, Namespace& ns, int branch) {
    for (size_t i = 0; i < block.size(); ++i) {
      command(block[i], slot, ns, branch);
    }
  }

  int slot_for(Namespace& ns, const StreamId& s, int current) {
    auto it = ns.slots.find(s);
    if (it != ns.slots.end()) return it->second;
    int slot = hb_.new_slot();
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

  // The communicator of a collective on this rank: its participants, and
  // the sequence of collectives issued on it.
  struct Comm {
    const Participants* part = nullptr;
    std::vector<CollectiveSig>* sigs = nullptr;
  };
  Comm communicator(const Command& c) {
    // Participants depend on the axes and groups only. Consecutive
    // collectives mostly share them, so the last one is kept at hand.
    const Collective& k = collective_of(c);
    const auto* groups = k.groups.get();
    if (last_comm_.part && groups == last_groups_ && k.axis == last_axis_) return last_comm_;
    std::string key = k.axis.size() == 1 ? k.axis[0] : std::string();
    if (k.axis.size() > 1)
      for (const auto& a : k.axis) key += a + ",";
    if (groups) {
      key += '#';
      key += std::to_string(reinterpret_cast<uintptr_t>(groups));
    }
    auto cached = participants_.find(key);
    if (cached == participants_.end()) {
      try {
        // The members are listed only where the sequences are compared.
        cached = participants_.emplace(key, participants(p_->mesh, ctx_.rank, k.axis, groups, sequences_)).first;
      } catch (const ThunkyError& e) {
        throw ThunkyError(c.pointer + (groups ? "/groups" : "/axis"), e.what());
      }
    }
    const Participants& part = cached->second;
    std::vector<CollectiveSig>* sigs = nullptr;
    if (sequences_) {
      auto it = comm_index_.find(&part);
      if (it == comm_index_.end()) it = comm_index_.emplace(&part, &collectives[part.ranks]).first;
      sigs = it->second;
    }
    last_comm_ = {&part, sigs};
    last_groups_ = groups;
    last_axis_ = k.axis;
    return last_comm_;
  }

  // Checks one collective's rules on this rank and appends it to its
  // communicator's sequence.
  void collective(const Command& c, const View& src, const View& dst) {
    const Comm comm = communicator(c);
    const Participants& part = *comm.part;
    check_collective(*p_, c, src, dst, part);
    if (sequences_) comm.sigs->push_back({&c, src, dst, static_cast<int>(part.size)});
  }

  void command(const Command& c, int slot, Namespace& ns, int branch) {
    commands.push_back(&c);
    command_token.push_back(cur_token_);
    auto scalar = [&](const Ref& r, DType want, const char* what) { return scalar_view(*p_, r, ctx_, want, what); };
    std::visit(Overload{
        [&](const ComputeSpec auto&) { compute(c, slot, branch); },
        [&](const CollectiveSpec auto& x) {
          resolve_uses(c);
          collective(c, view_of(x.src), view_of(x.dst));
          add_uses(c, slot, branch);
        },
        [&](const CollectiveGroup& g) {
          check_collective_group(c);
          // One launch: every member is issued at once on this stream.
          uint32_t seq = hb_.tick(slot);
          for (const auto& m : g.body) {
            commands.push_back(&m);
            command_token.push_back(cur_token_);
            resolve_uses(m);
            collective(m, view_of(collective_of(m).src), view_of(collective_of(m).dst));
            for (const auto& u : uses_) add_access(m, slot, seq, branch, u);
          }
        },
        [&](const AsyncStart& a) { async_start(c, a, slot, ns, branch); },
        [&](const AsyncDone& d) { async_done(c, d.token, slot); },
        [&](const Cond& x) { branches(c, x.pred, scalar(x.pred, DType::boolean, "pred"), slot, ns, branch); },
        [&](const Switch& x) { branches(c, x.index, scalar(x.index, DType::s32, "index"), slot, ns, branch); },
        [&](const While& w) { loop(c, w, slot, ns, branch); },
        [&](const Call& x) { walk(x.body, slot, ns, branch); },
    }, c.spec);
  }

  void async_start(const Command& c, const AsyncStart& a, int slot, Namespace& ns, int branch) {
    // Elements of the map keep their place while the body adds more.
    TokenState& t = tokens_[a.token];
    if (structural_ && t.live)
      throw ThunkyError(c.pointer + "/token", "token '" + display_token(a.token) + "' is started again at " + c.id() + " before the async_start at " + t.start->pointer + " was awaited");
    // The target slot first: a new one must not move the clock joined.
    const int target = slot_for(ns, a.stream, slot);
    hb_.join(target, hb_.clock(slot));
    const std::string* saved_token = cur_token_;
    cur_token_ = &a.token;
    walk(a.body, target, ns, branch);
    cur_token_ = saved_token;
    if (t.live) --live_at_depth(t.frame);
    ++live_at_depth(frame_);
    t.clock = hb_.clock(target);
    t.frame = frame_;
    t.live = true;
    t.start = &c;
  }

  void async_done(const Command& c, const std::string& token, int slot) {
    auto it = tokens_.find(token);
    if (it == tokens_.end() || !it->second.live) {
      if (!structural_) return;
      if (it == tokens_.end() || !it->second.start) throw ThunkyError(c.pointer + "/token", "async_done of token '" + display_token(token) + "', which no earlier async_start started");
      throw ThunkyError(c.pointer + "/token", "token '" + display_token(token) + "' is awaited twice (the async_start at " + it->second.start->pointer + " was already awaited)");
    }
    if (it->second.frame != frame_ && structural_)
      throw ThunkyError(c.pointer + "/token", "token '" + display_token(token) + "' is awaited inside a cond branch or loop that did not start it (its async_start is " + it->second.start->pointer + ")");
    hb_.join(slot, it->second.clock);
    it->second.live = false;
    --live_at_depth(it->second.frame);
  }

  // A cond's or switch's branches, each from the clock at entry; after
  // it, the latest of them.
  void branches(const Command& c, const Ref& r, View v, int slot, Namespace& ns, int branch) {
    add_read(c, r, std::move(v), slot, branch);
    const int id = cond_ids_++;
    const Clock entry = hb_.clock(slot);
    Clock exit = entry;
    std::vector<const Block*> blocks;
    std::vector<std::string> names;
    for_each_sub_block(c, [&](const Block& b, SubBlock which) {
      blocks.push_back(&b);
      names.push_back(c.id() + which.suffix());
    });
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
  }

  void loop(const Command& c, const While& w, int slot, Namespace& ns, int branch) {
    View v = scalar_view(*p_, w.cond_buf, ctx_, DType::boolean, "cond_buf");
    ns_stack_.push_back(&ns);
    region(w.cond, c.id() + "/cond", slot, branch);
    add_read(c, w.cond_buf, std::move(v), slot, branch);
    region(w.body, c.id() + "/body", slot, branch);
    ns_stack_.pop_back();
  }

  void reset_clock(int slot, const Clock& c, uint32_t own) {
    Clock n = c;
    if (n.size() <= static_cast<size_t>(slot)) n.resize(slot + 1, 0);
    n[slot] = own;
    // HappensBefore has no setter for a whole clock: rebuild by components.
    const Clock& cur = hb_.clock(slot);
    for (size_t i = 0; i < std::max(cur.size(), n.size()); ++i) hb_.set_component(slot, static_cast<int>(i), i < n.size() ? n[i] : 0);
  }

  // A compute command: its op's rules, then its accesses (for_each_use),
  // all at one tick of its stream's clock.
  void compute(const Command& c, int slot, int branch) {
    // Each op's rules. Rules that resolve views of their own come before
    // resolve_uses, as their messages are the more precise; the others
    // check the views of the command's refs.
    std::visit(Overload{
        [&](const Memzero&) { resolve_uses(c); },  // any view can be zeroed
        [&](const Memset& x) { resolve_uses(c); check_memset(*p_, c, view_of(x.dst)); },
        [&](const Copy& x) { resolve_uses(c); check_copy(*p_, c, view_of(x.src), view_of(x.dst)); },
        [&](const Transpose& x) { resolve_uses(c); check_transpose(*p_, c, view_of(x.src), view_of(x.dst)); },
        [&](const Gemm& x) { resolve_uses(c); check_gemm(*p_, c, view_of(x.a), view_of(x.b), view_of(x.c)); },
        [&](const Reduce& x) { resolve_uses(c); check_reduce(*p_, c, view_of(x.in), view_of(x.out)); },
        [&](const Map& m) { check_map(*p_, m, c.pointer, ctx_, structural_); resolve_uses(c); },
        [&](const PtxKernel& k) {
          if (k.cpu) check_map(*p_, *k.cpu, c.pointer + "/cpu", ctx_, structural_);
          resolve_uses(c);
        },
        [&](const CustomCall&) { check_custom_call(*p_, c, ctx_); resolve_uses(c); },
        [&](const Kernel&) { resolve_uses(c); },  // any views: it is priced, not computed
        [](const NotCompute auto&) {},
    }, c.spec);
    add_uses(c, slot, branch);
  }

  // The views of the command's own refs on this rank, as for_each_use lists
  // them: a written one through writable_view, which refuses an input.
  void resolve_uses(const Command& c) {
    uses_.clear();
    for_each_use(c, [&](RefUse u) { uses_.push_back({u.ref, u.write ? need_writable(*u.ref) : resolve(*p_, *u.ref, ctx_), u.write}); });
  }
  // The view resolve_uses gave the ref `r` (one of the command's own).
  const View& view_of(const Ref& r) const {
    const auto it = std::find_if(uses_.begin(), uses_.end(), [&](const Use& u) { return u.ref == &r; });
    return it->view;
  }
  void add_uses(const Command& c, int slot, int branch) {
    const uint32_t seq = hb_.tick(slot);
    for (const auto& u : uses_) add_access(c, slot, seq, branch, u);
  }
  // Control flow's one read, of its predicate, index or cond_buf.
  void add_read(const Command& c, const Ref& r, View v, int slot, int branch) {
    uses_.clear();
    uses_.push_back({&r, std::move(v), false});
    add_uses(c, slot, branch);
  }
  std::vector<Use> uses_;  // the current command's, kept to spare allocations

  const Program* p_;
  RankCtx ctx_;
  bool structural_;
  bool races_;
  bool sequences_;
  const std::vector<char>* race_buffers_;
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
  const std::string* cur_token_ = &kNoToken;
  static inline const std::string kNoToken;
};

// A race as the user reads it: both commands, their streams, what each
// does, and the join that is missing.
std::string race_message(const Program& p, const RankWalker& w, const RaceReport& rr) {
  const Command& a = *w.commands[rr.first.command];
  const Command& b = *w.commands[rr.second.command];
  const Buffer& buf = p.buffers[rr.first.buffer];
  uint64_t lo = std::max(rr.first.lo, rr.second.lo), hi = std::min(rr.first.hi, rr.second.hi);
  const std::string& ta = *w.command_token[rr.first.command];
  const std::string& tb = *w.command_token[rr.second.command];
  // The fix first, in one clause; then what races.
  std::ostringstream msg;
  msg << "missing join: ";
  if (!ta.empty())
    msg << "add an async_done of token '" << display_token(ta) << "' on " << w.slot_names_[rr.second.slot] << " before " << b.id();
  else
    msg << "the async_start of token '" << display_token(tb) << "' must come after " << a.id()
        << " on its stream, or after an async_done that joins it";
  // "/program/4 (gemm 'its name', reads, on computation:0)"
  auto access = [&](const Command& c, const Access& x) {
    msg << c.id() << " (" << op_name(c.op());
    if (!c.name.empty()) msg << " '" << c.name << "'";
    msg << ", " << (x.write ? "writes" : "reads") << ", on " << w.slot_names_[x.slot] << ")";
  };
  msg << "; race on buffer '" << buf.name << "' bytes [" << lo << ", " << hi << "): ";
  access(a, rr.first);
  msg << " and ";
  access(b, rr.second);
  msg << " are not ordered by stream order or any token";
  return msg.str();
}

}  // namespace

RankFindings walk_rank(const Program& p, int64_t rank, const WalkOptions& opts) {
  RankFindings f;
  try {
    RankWalker w(p, rank, opts);
    w.run();
    for (const auto& rr : w.races) f.races.push_back({race_message(p, w, rr), w.commands[rr.second.command]->id(), rr.first.buffer});
    f.collectives = std::move(w.collectives);
    f.unawaited = std::move(w.unawaited);
  } catch (...) {
    f.error = std::current_exception();
  }
  return f;
}

}  // namespace thunky
