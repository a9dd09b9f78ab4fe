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
  // `structural`: report what is the same on every rank (tokens, map
  // names), which rank 0's walk does. `races`: track races, on the buffers
  // `race_buffers` marks (every buffer when null). `sequences`: keep each
  // communicator's collective sequence for the collective-order check.
  RankWalker(const Program& p, int64_t rank, bool structural, bool races, const std::vector<char>* race_buffers, bool sequences)
      : p_(&p), ctx_(rank_ctx(p.mesh, rank)), structural_(structural), races_(races), sequences_(sequences), race_buffers_(race_buffers), detector_(p.buffers.size()) {}

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
    size_t es = dtype_size(p_->buffers[v.buffer].dtype);
    Access a;
    a.buffer = v.buffer;
    a.lo = static_cast<uint64_t>(v.offset) * es;
    a.hi = a.lo + static_cast<uint64_t>(v.count()) * es;
    a.write = u.write;
    a.slot = slot;
    a.seq = seq;
    a.command = static_cast<int>(commands.size()) - 1;
    a.branch = branch;
    detector_.access(a, hb_, branches_, races, 64);
  }

  // A ref resolved only to check it (a PTX kernel's CPU fallback).
  View checked(const Ref& r, bool writable) { return writable ? need_writable(r) : resolve(*p_, r, ctx_); }

  View need_writable(const Ref& r) {
    const Buffer& b = p_->buffers[r.buffer];
    if (b.role == Role::input)
      throw ThunkyError(std::string(r.pointer), "writes buffer '" + b.name + "', which has role input (read-only); declare it inout to mutate it");
    return resolve(*p_, r, ctx_);
  }

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
      uint32_t seq = hb_.tick(slot);
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
        uint32_t seq = hb_.tick(slot);
        if (c.op == Op::ptx_kernel && c.rare().cpu) check_map(*c.rare().cpu);
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
        collective(c, s, d);
        leaf({{&*c.src, s, false}, {&*c.dst, d, true}});
        break;
      }
      case Op::collective_group: {
        check_collective_group(c);
        // One launch: every member is issued at once on this stream.
        uint32_t seq = hb_.tick(slot);
        for (const auto& m : c.body) {
          commands.push_back(&m);
          command_token.push_back(cur_token_);
          View s = R(*m.src), d = need_writable(*m.dst);
          collective(m, s, d);
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
        hb_.join(target, hb_.clock(slot));
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
        hb_.join(slot, it->second.clock);
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
    for (size_t i = 0; i < std::max(cur.size(), n.size()); ++i) hb_.set_component(slot, static_cast<int>(i), i < n.size() ? n[i] : 0);
  }

  // Checks a map's names and views (also a PTX kernel's CPU fallback, whose
  // refs are checked but not accessed).
  void check_map(const Command& m) {
    if (structural_) check_map_names(*p_, m, *m.expr);
    View out = checked(*m.out, true);
    for (const auto& [k, r] : m.in) {
      View v = checked(r, false);
      if (v.count() != out.count() && v.count() != 1)
        throw ThunkyError(std::string(r.pointer), "map input '" + k + "' is " + view_str(*p_, v) + "; inputs must be scalars or have out's " + std::to_string(out.count()) + " elements (out is " + view_str(*p_, out) + ")");
    }
  }

  void map_command(const Command& c, const Command& m, int slot, int branch) {
    check_map(m);
    uint32_t seq = hb_.tick(slot);
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

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return s;
}

// A race as the user reads it: both commands, their streams, what each
// does, and the join that is missing.
std::string race_message(const Program& p, const RankWalker& w, const RaceReport& rr) {
  const Command& a = *w.commands[rr.first.command];
  const Command& b = *w.commands[rr.second.command];
  const Buffer& buf = p.buffers[rr.first.buffer];
  uint64_t lo = std::max(rr.first.lo, rr.second.lo), hi = std::min(rr.first.hi, rr.second.hi);
  const std::string& ta = *w.command_token[rr.first.command];
  const std::string& tb = *w.command_token[rr.second.command];
  std::ostringstream msg;
  msg << "race on buffer '" << buf.name << "' bytes [" << lo << ", " << hi << "): " << a.id() << " (" << op_name(a.op)
      << (a.rare().name.empty() ? "" : " '" + a.rare().name + "'") << ", " << (rr.first.write ? "writes" : "reads") << ", on "
      << w.slot_names_[rr.first.slot] << ") and " << b.id() << " (" << op_name(b.op)
      << (b.rare().name.empty() ? "" : " '" + b.rare().name + "'") << ", " << (rr.second.write ? "writes" : "reads") << ", on "
      << w.slot_names_[rr.second.slot] << ") are not ordered by stream order or any token; missing join: ";
  if (!ta.empty())
    msg << "an async_done of token '" << display_token(ta) << "' on " << w.slot_names_[rr.second.slot] << " before " << b.id();
  else
    msg << "the async_start of token '" << display_token(tb) << "' must come after " << a.id()
        << " on its stream, or after an async_done that joins it";
  return msg.str();
}

// What one rank's walk found, kept once its walker is gone.
struct RankFindings {
  struct Race {
    std::string message, pointer;
    int buffer;
  };
  std::vector<Race> races;
  std::map<std::vector<int>, std::vector<CollectiveSig>> collectives;
  std::vector<ThunkyError> unawaited;
  std::exception_ptr error;  // the walk stopped here
};

RankFindings walk_rank(const Program& p, int64_t rank, bool structural, bool races, const std::vector<char>* race_buffers, bool sequences) {
  RankFindings f;
  try {
    RankWalker w(p, rank, structural, races, race_buffers, sequences);
    w.run();
    for (const auto& rr : w.races) f.races.push_back({race_message(p, w, rr), w.commands[rr.second.command]->id(), rr.first.buffer});
    f.collectives = std::move(w.collectives);
    f.unawaited = std::move(w.unawaited);
  } catch (...) {
    f.error = std::current_exception();
  }
  return f;
}

// Walks ranks 1..n-1, on up to 8 threads, each a contiguous run of ranks.
// A run stops at its first error: the lowest failing rank's is the one
// a walk of the ranks in order would meet.
std::vector<RankFindings> walk_other_ranks(const Program& p, int64_t ranks, bool races, const std::vector<char>* race_buffers, bool sequences) {
  const size_t n = static_cast<size_t>(ranks - 1);
  std::vector<RankFindings> found(n);
  const size_t chunks = std::min<size_t>({hardware_threads(), n, 8});
  run_chunks(chunks, [&](size_t k) {
    for (size_t i = n * k / chunks, hi = n * (k + 1) / chunks; i < hi; ++i) {
      found[i] = walk_rank(p, static_cast<int64_t>(i) + 1, false, races, race_buffers, sequences);
      if (found[i].error) break;
    }
  });
  return found;
}

// Every member of a communicator must issue the same collective sequence;
// the first communicator where two differ is a deadlock.
std::optional<Diagnostic> collective_order(const Program& p, const std::map<std::vector<int>, std::vector<std::pair<int64_t, std::vector<CollectiveSig>>>>& comm_seqs) {
  for (const auto& [comm, seqs] : comm_seqs) {
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
      return Diagnostic{ErrorKind::schedule, p.file, at->id(), msg.str()};
    }
  }
  return std::nullopt;
}

// Buffers and global layouts: init values, axes, shard shapes, npy files.
void check_buffers(const Program& p) {
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
}

}  // namespace

std::vector<Diagnostic> validate(const Program& p, const ValidateOptions& opts) {
  std::vector<Diagnostic> out;
  auto input_error = [&](const ThunkyError& e) { out.push_back({e.kind(), p.file, e.pointer(), e.what()}); };
  try {
    check_buffers(p);
  } catch (const ThunkyError& e) {
    input_error(e);
    return out;
  }

  // Every rank is walked. Rank 0's walk also checks what is the same on
  // every rank (tokens, names) and tracks races on every buffer. The other
  // ranks track races only where a view moves with the rank: on a buffer no
  // view of which moves, every rank makes rank 0's accesses, so rank 0's
  // races there are every rank's.
  const int64_t ranks = p.mesh.size();
  const Program::RankUse& use = p.rank_use;
  const bool dependent = ranks > 1 && use.moves;
  // Where no view's size moves with the rank, every rank issues the same
  // collectives, of the same sizes, and each communicator's members all
  // meet each of them (its members are one class of the axes' or groups'
  // partition): the sequences cannot differ, and are not compared.
  const bool check_order = opts.collective_order && ranks > 1 && use.sized;
  RankFindings first = walk_rank(p, 0, true, opts.races, nullptr, check_order);
  std::vector<RankFindings> others;
  if (!first.error && ranks > 1) others = walk_other_ranks(p, ranks, opts.races && dependent, &use.moving_buffers, check_order);
  auto findings = [&](int64_t r) -> RankFindings& { return r == 0 ? first : others[static_cast<size_t>(r - 1)]; };

  for (const auto& e : first.unawaited) input_error(e);
  for (int64_t r = 0; r < static_cast<int64_t>(others.size()) + 1; ++r) {
    if (!findings(r).error) continue;
    try {
      std::rethrow_exception(findings(r).error);
    } catch (const ThunkyError& e) {
      input_error(e);
    }
    return out;
  }

  // Races, each message once, with the ranks it holds on.
  std::map<std::string, std::vector<int64_t>> race_ranks;
  std::map<std::string, std::string> race_pointer;  // message -> the later command's id
  std::vector<std::string> race_order;
  for (int64_t r = 0; r < ranks; ++r) {
    for (const auto& race : findings(r).races) {
      if (!race_ranks.count(race.message)) {
        race_order.push_back(race.message);
        race_pointer[race.message] = race.pointer;
      }
      std::vector<int64_t>& on = race_ranks[race.message];
      if (r == 0 && dependent && !use.moving_buffers[static_cast<size_t>(race.buffer)])
        for (int64_t q = 0; q < ranks; ++q) on.push_back(q);
      else
        on.push_back(r);
    }
  }
  for (const auto& key : race_order) {
    if (out.size() >= opts.max_errors) break;
    const auto& rs = race_ranks[key];
    std::string where = ranks > 1 ? (static_cast<int64_t>(rs.size()) == ranks || !dependent ? " (on every rank)" : " (on ranks " + rank_list(rs) + ")") : "";
    out.push_back({ErrorKind::schedule, p.file, race_pointer[key], key + where});
  }

  if (check_order && out.size() < opts.max_errors) {
    // Communicator -> (rank -> sequence)
    std::map<std::vector<int>, std::vector<std::pair<int64_t, std::vector<CollectiveSig>>>> comm_seqs;
    for (int64_t r = 0; r < ranks; ++r)
      for (auto& [comm, seq] : findings(r).collectives) comm_seqs[comm].emplace_back(r, std::move(seq));
    if (auto d = collective_order(p, comm_seqs)) out.push_back(*d);
  }
  return out;
}

Expected<Program> load_schedule_text(const std::string& text, const std::string& file, const ValidateOptions& opts) {
  Program p;
  try {
    p = parse_program_text(text, file);
    lower(p);
  } catch (const ThunkyError& e) {
    return std::vector<Diagnostic>{{e.kind(), file, e.pointer(), e.what()}};
  } catch (const std::exception& e) {  // a safety net: never let a library exception escape
    return std::vector<Diagnostic>{{ErrorKind::input, file, "", std::string("cannot read the schedule: ") + e.what()}};
  }
  std::vector<Diagnostic> errors;
  try {
    errors = validate(p, opts);
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
