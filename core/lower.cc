#include "core/lower.h"

#include <map>
#include <set>

namespace thunky {

namespace {

struct Scope {
  std::map<std::string, Ref> bindings;  // param or scratch name -> ref of the outer program
  std::string token_suffix;             // appended to token names inside this call instance
  std::vector<std::string> call_stack;  // function names, for recursion checks
};

class Lowerer {
 public:
  explicit Lowerer(Program& p) : p_(p) {}

  void run() {
    std::map<std::string, int> index;
    for (size_t i = 0; i < p_.buffers.size(); ++i) index[p_.buffers[i].name] = static_cast<int>(i);
    index_ = std::move(index);
    Scope top;
    p_.command_count = 0;
    p_.fixed_views.clear();
    lower_block(p_.program, "/program", top);
    p_.functions.clear();
    use_.moving_buffers.resize(p_.buffers.size(), 0);
    p_.rank_use = use_;
  }

 private:
  void bind(Ref& r, const Scope& s) {
    auto it = s.bindings.find(r.syntax->buffer);
    if (it != s.bindings.end()) {
      const Ref& outer = it->second;
      auto composed = std::make_shared<RefSyntax>(*outer.syntax);
      composed->groups.insert(composed->groups.end(), r.syntax->groups.begin(), r.syntax->groups.end());
      composed->classify();
      r.syntax = std::move(composed);
      r.buffer = outer.buffer;
    } else {
      auto b = index_.find(r.syntax->buffer);
      if (b == index_.end()) throw ThunkyError(std::string(r.pointer), "unknown buffer '" + r.syntax->buffer + "'");
      r.buffer = b->second;
    }
    // A call's argument counts too, used or not: the flags may only err
    // towards walking every rank.
    use_.add(r);
    fix(r);
  }

  // Resolves a view that names no mesh axis once, for every rank; one out
  // of bounds is left to the validator, which says where.
  void fix(Ref& r) {
    if (r.syntax->moves_with_rank) return;
    const std::pair key{r.syntax, r.buffer};
    if (auto it = fixed_.find(key); it != fixed_.end()) {
      r.fixed = it->second;
      return;
    }
    try {
      auto no_names = [](std::string_view) { return std::optional<int64_t>(); };
      const Buffer& b = p_.buffers[static_cast<size_t>(r.buffer)];
      p_.fixed_views.push_back(resolve_view(r.buffer, b.shape, b.dtype, *r.syntax, no_names));
      r.fixed = fixed_[key] = static_cast<int>(p_.fixed_views.size()) - 1;
    } catch (const ThunkyError&) {
      r.fixed = -1;
    }
  }
  void bind(OptRef& r, const Scope& s) {
    if (r) bind(*r, s);
  }

  // A block's commands get ids only inside a call: elsewhere a command's
  // id is its source pointer (Command::id), so no id text is built.
  void lower_block(Block& block, const std::string& id, const Scope& s) {
    const bool inlined = !s.call_stack.empty();
    for (size_t i = 0; i < block.size(); ++i) lower_command(block[i], inlined ? id + "/" + std::to_string(i) : std::string(), s);
  }

  // Commands a block lowers to, calls expanded; stops counting past the
  // limit. `depth` is how many calls deep the block is: a chain of calls
  // past kMaxCallDepth is refused here, before it is followed further (so
  // a chain of 100,000 functions costs 33 frames, not 100,000).
  int64_t expanded(const Block& b, int depth) {
    int64_t n = 0;
    for (const auto& c : b) {
      if (n > kMaxLoweredCommands) break;
      n += 1;
      for_each_sub_block(c, [&](const Block& sub) { n += expanded(sub, depth); });
      if (c.op() != Op::call) continue;
      if (depth >= kMaxCallDepth) throw call_too_deep(c);
      n += function_size(c.as<Call>().fn, depth + 1);
    }
    return n;
  }
  int64_t function_size(const std::string& fn, int depth) {
    if (auto it = sizes_.find(fn); it != sizes_.end()) return it->second;
    auto f = p_.functions.find(fn);
    if (f == p_.functions.end()) return 0;  // reported where the call is lowered
    sizes_[fn] = 0;                          // a recursive call counts nothing (it is an error)
    return sizes_[fn] = expanded(f->second.program, depth);
  }
  static ThunkyError call_too_deep(const Command& c) {
    return ThunkyError(c.pointer, "calls nested more than " + std::to_string(kMaxCallDepth) + " deep");
  }

  void lower_command(Command& c, std::string inlined_id, const Scope& s) {
    if (++p_.command_count > kMaxLoweredCommands)
      throw ThunkyError(c.pointer, "the program lowers to more than " + std::to_string(kMaxLoweredCommands) + " commands, the most thunky takes");
    const bool inlined = !s.call_stack.empty();
    if (inlined) c.set_id(std::move(inlined_id));
    const std::string& id = c.id();
    // The op's own refs (the command is not const: the cast is sound; a
    // ref read and written is bound twice, alike).
    for_each_use(c, [&](RefUse u) { bind(const_cast<Ref&>(*u.ref), s); });
    if (PtxKernel* k = c.get_if<PtxKernel>(); k && k->cpu)
      k->cpu->uses( [&](RefUse u) { bind(const_cast<Ref&>(*u.ref), s); });
    if ((c.op() == Op::all_gather || c.op() == Op::reduce_scatter) && collective_of(c).src.buffer == collective_of(c).dst.buffer) use_.positional = true;
    if (is_collective(c.op()) && collective_of(c).groups) use_.moves = true;  // group membership differs by rank
    if (AsyncStart* a = c.get_if<AsyncStart>()) a->token += s.token_suffix;
    if (AsyncDone* d = c.get_if<AsyncDone>()) d->token += s.token_suffix;
    for_each_sub_block(c, [&](Block& b, SubBlock which) {
      if (!b.empty()) lower_block(b, inlined ? id + which.suffix() : std::string(), s);
    });
    if (c.op() == Op::call) inline_call(c, id, s);
  }

  void inline_call(Command& c, const std::string& id, const Scope& outer) {
    Call& x = c.as<Call>();
    auto fit = p_.functions.find(x.fn);
    if (fit == p_.functions.end()) throw ThunkyError(c.pointer + "/fn", "unknown function '" + x.fn + "'");
    const Function& f = fit->second;
    for (const auto& name : outer.call_stack)
      if (name == x.fn) throw ThunkyError(c.pointer + "/fn", "recursive call of function '" + x.fn + "'");
    if (outer.call_stack.size() >= static_cast<size_t>(kMaxCallDepth)) throw call_too_deep(c);
    Scope inner;
    inner.call_stack = outer.call_stack;
    inner.call_stack.push_back(x.fn);
    const int instance = ++calls_;
    inner.token_suffix = outer.token_suffix + "$" + std::to_string(instance);
    std::set<std::string> params(f.params.begin(), f.params.end());
    for (auto& [k, r] : x.args) {
      if (!params.count(k)) throw ThunkyError(c.pointer + "/args/" + k, "function '" + x.fn + "' has no parameter '" + k + "'");
      bind(r, outer);
      inner.bindings[k] = r;
    }
    for (const auto& pname : f.params)
      if (!inner.bindings.count(pname)) throw ThunkyError(c.pointer + "/args", "missing argument for parameter '" + pname + "' of function '" + x.fn + "'");
    for (const auto& [sname, sb] : f.scratch) {
      if (params.count(sname)) throw ThunkyError(sb.pointer, "scratch '" + sname + "' has the name of a parameter");
      Buffer b = sb;
      b.name = x.fn + "." + sname + "$" + std::to_string(instance);
      b.role = Role::scratch;
      int idx = static_cast<int>(p_.buffers.size());
      p_.buffers.push_back(b);
      index_[b.name] = idx;
      Ref r;
      auto syntax = std::make_shared<RefSyntax>();
      syntax->buffer = b.name;
      r.syntax = std::move(syntax);
      r.buffer = idx;  // a binding: the refs bound to it keep their own pointers
      inner.bindings[sname] = r;
    }
    // The copies a call makes are counted before they are made.
    if (p_.command_count + function_size(x.fn, static_cast<int>(inner.call_stack.size())) > kMaxLoweredCommands)
      throw ThunkyError(c.pointer, "calls of function '" + x.fn + "' expand the program past " + std::to_string(kMaxLoweredCommands) +
                                       " commands, the most thunky takes");
    x.body = f.program;
    lower_block(x.body, id + "/body", inner);
  }

  Program& p_;
  std::map<std::string, int> index_;
  std::map<std::string, int64_t> sizes_;  // commands a function expands to
  // (syntax, buffer) -> index into Program::fixed_views; holding the syntax
  // keeps its address from being reused for another.
  std::map<std::pair<std::shared_ptr<const RefSyntax>, int>, int> fixed_;
  int calls_ = 0;
  Program::RankUse use_;
};

}  // namespace

void lower(Program& p) { Lowerer(p).run(); }

}  // namespace thunky
