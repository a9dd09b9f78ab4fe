// The sched.json IR (thunky.sched/1): buffers, commands and functions as
// validated value types. Parsing rejects unknown keys and names the JSON
// pointer of every error.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <variant>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/ops/base.h"
#include "core/ops/collective.h"
#include "core/ops/control.h"
#include "core/ops/stream.h"
#include "core/expr.h"
#include "core/reduction.h"
#include "core/ref.h"
#include "core/status.h"
#include "core/text_arena.h"

namespace thunky {

using json = nlohmann::ordered_json;

enum class Role { input, inout, output, scratch };
std::string_view role_name(Role r);

struct Init {
  enum class Kind { none, zeros, ones, iota, constant, values, uniform, normal, axis_index, npy };
  Kind kind = Kind::none;
  double value = 0;            // constant
  std::vector<double> values;  // values
  double low = 0, high = 1;    // uniform
  uint64_t seed = 0;           // uniform, normal
  std::string axis;            // axis_index
  std::string path;            // npy, as written (relative to the schedule file)
};

struct GlobalLayout {
  std::vector<int64_t> shape;
  // One entry per global dimension: the mesh axes it is sharded over (empty = replicated).
  std::vector<std::vector<std::string>> spec;
};

struct Buffer {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  Role role = Role::scratch;
  Init init;
  std::optional<GlobalLayout> global;
  std::string pointer;  // where it was declared, /buffers/<name>
  int64_t count() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(count()) * dtype_size(dtype); }
};

struct Cost {
  std::optional<double> seconds;
  std::optional<double> flops;
  std::optional<double> bytes;
};

struct CustomCallSpec {
  std::string target;
  json backend_config;
};

struct PtxLaunch {
  std::string kernel_name;
  std::string ptx;       // inline source, or
  std::string ptx_file;  // a file relative to the schedule
  std::vector<int64_t> grid{1, 1, 1}, block{1, 1, 1};
  int64_t shmem_bytes = 0;
};


// What a command is, one typed description per op (core/ops/): its fields,
// its JSON, the refs it reads and writes and the blocks it holds. Being
// moved there family by family: the ops not yet there hold std::monostate
// and keep their fields in Command itself.
using OpSpec = std::variant<std::monostate, AllReduce, AllGather, ReduceScatter, AllToAll, CollectivePermute, CollectiveGroup, AsyncStart, AsyncDone, Cond, Switch, While, Call>;

struct Command {
  // What the validator and the simulator read for every command comes first
  // (op, refs, sub-blocks, cost), so that a walk over a large program
  // touches few cache lines per command; names and texts come last. The
  // fields few commands have live apart, in Rare.
  struct Rare;

  Op op = Op::memzero;
  bool transpose_a = false, transpose_b = false;
  Box<Cost> cost;
  double alpha = 1, beta = 0;  // gemm

  // refs, by role
  OptRef src, dst, a, b, c, out;

  OpSpec spec;

  std::vector<std::pair<std::string, Ref>> in;  // map inputs, in declaration order
  std::vector<Ref> refs;                        // kernel reads, ptx args, custom_call operands
  std::vector<Ref> refs2;                       // kernel writes, custom_call results
  ExprPtr expr;  // map

  std::string pointer;  // source JSON pointer (for messages)
  std::string expr_text;

  // The op's description, where the command is that op (std::get: a
  // mismatch throws); get_if: null where it is not.
  template <typename T> const T& as() const { return std::get<T>(spec); }
  template <typename T> T& as() { return std::get<T>(spec); }
  template <typename T> const T* get_if() const { return std::get_if<T>(&spec); }
  template <typename T> T* get_if() { return std::get_if<T>(&spec); }
  // Makes the command the op `x`.
  template <typename T> void set(T x) {
    op = T::kind;
    spec = std::move(x);
  }

  // The command's pointer in the lowered schedule (for reports): its source
  // pointer, except inside an inlined call (set by lower()).
  const std::string& id() const { return id_.empty() ? pointer : id_; }
  void set_id(std::string id) { id_ = std::move(id); }

  // The rare fields; a command without them reads their defaults.
  const Rare& rare() const;
  // The rare fields for writing (made on first use).
  Rare& set_rare();
  bool has_rare() const { return rare_.has_value(); }

 private:
  std::string id_;  // empty where it equals `pointer`
  Box<Rare> rare_;
};

// The fields of a command that most commands leave at their defaults:
// a name, and what only one op uses
// (memset, reduce, ptx_kernel, custom_call).
struct Command::Rare {
  std::string name;
  Reduction reduce_fn = Reduction::sum;  // reduce ("fn")
  bool arg = false;  // reduce: argmax or argmin (reduction max or min): the index, along the one axis, where it is first reached
  double value = 0;               // memset: a number, NaN or an infinity
  std::optional<uint32_t> bits;   // memset: each 4-byte element set to this pattern instead
  std::vector<int64_t> axes_i;    // reduce axes
  std::vector<int64_t> perm;      // transpose: dst's dimension d is src's dimension perm[d]
  std::vector<bool> written;      // ptx_kernel
  std::shared_ptr<Command> cpu;   // ptx_kernel fallback, a map
  Box<PtxLaunch> launch;          // ptx_kernel
  Box<CustomCallSpec> custom;     // custom_call
};

// The fields every collective has (is_collective(c.op)); a mismatch throws.
inline const Collective& collective_of(const Command& c) {
  const Collective* k = std::visit([](const auto& x) -> const Collective* {
    if constexpr (std::is_base_of_v<Collective, std::decay_t<decltype(x)>>) return &x;
    else return nullptr;
  }, c.spec);
  if (!k) throw std::bad_variant_access();
  return *k;
}

// How a reduce, all_reduce or reduce_scatter combines values; sum for
// other ops.
inline Reduction reduction_of(const Command& c) {
  if (const AllReduce* x = c.get_if<AllReduce>()) return x->reduction;
  if (const ReduceScatter* x = c.get_if<ReduceScatter>()) return x->reduction;
  return c.rare().reduce_fn;
}

// The token of an async_start or async_done; empty for other ops.
inline const std::string& async_token(const Command& c) {
  static const std::string none;
  if (const AsyncStart* a = c.get_if<AsyncStart>()) return a->token;
  if (const AsyncDone* d = c.get_if<AsyncDone>()) return d->token;
  return none;
}

// Asks memory for what a front-to-back walk of a long block reads next:
// the command 16 ahead (its first two lines), and the refs of the one 8
// ahead, separate heap objects whose pointers are at hand by then.
inline void prefetch_ahead(const Block& b, size_t pos) {
  constexpr size_t kCommandAhead = 16, kRefsAhead = 8;
  if (pos + kCommandAhead < b.size()) {
    const char* next = reinterpret_cast<const char*>(&b[pos + kCommandAhead]);
    __builtin_prefetch(next);
    __builtin_prefetch(next + 64);
  }
  if (pos + kRefsAhead < b.size()) {
    const Command& c = b[pos + kRefsAhead];
    for (const OptRef* r : {&c.src, &c.dst, &c.a, &c.b, &c.c, &c.out})
      if (*r) __builtin_prefetch(&**r);
  }
}

inline const Command::Rare& Command::rare() const {
  static const Rare defaults;
  return rare_ ? *rare_ : defaults;
}
inline Command::Rare& Command::set_rare() {
  if (!rare_) rare_ = Rare{};
  return *rare_;
}

struct Function {
  std::vector<std::string> params;
  std::vector<std::pair<std::string, Buffer>> scratch;
  Block program;
  std::string pointer;
};

struct Mesh {
  std::vector<std::string> axis_names;
  std::vector<int64_t> shape;
  int64_t size() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  std::optional<int> axis(std::string_view name) const {
    for (size_t i = 0; i < axis_names.size(); ++i)
      if (axis_names[i] == name) return static_cast<int>(i);
    return std::nullopt;
  }
};

// A parsed (and, after lower(), inlined) schedule.
struct Program {
  std::string file;  // path of the schedule file, for messages and npy paths
  std::string name;
  std::string description;
  std::string machine;
  Mesh mesh;
  std::vector<Buffer> buffers;
  std::map<std::string, Function> functions;  // empty after lowering
  Block program;
  // The texts the program's refs point to (their JSON pointers); shared by
  // copies of the program.
  std::shared_ptr<TextArena> texts = std::make_shared<TextArena>();
  // The views of refs that name no mesh axis, resolved once by lower():
  // such a view is the same on every rank (Ref::fixed).
  std::vector<View> fixed_views;
  // Commands of the lowered program, nested and inlined ones included (set
  // by lower(); a capacity hint for whoever indexes every command).
  int64_t command_count = 0;
  // How the program's views depend on the rank (set by lower(), which
  // binds every ref): some view moves with it, or a communicator's groups
  // differ by it (`moves`); some view's size depends on it (`sized`).
  struct RankUse {
    bool moves = false, sized = false;
    // A collective's checks depend on the rank's place in its communicator
    // (an all_gather or reduce_scatter within one buffer, in place or not).
    bool positional = false;
    std::vector<char> moving_buffers;  // by buffer: a view of it moves with the rank
    // Counts in a ref bound to its buffer.
    void add(const Ref& r) {
      moves = moves || r.syntax->moves_with_rank;
      sized = sized || r.syntax->sized_by_rank;
      if (!r.syntax->moves_with_rank) return;
      if (moving_buffers.size() <= static_cast<size_t>(r.buffer)) moving_buffers.resize(static_cast<size_t>(r.buffer) + 1, 0);
      moving_buffers[static_cast<size_t>(r.buffer)] = 1;
    }
  };
  RankUse rank_use;

  int find_buffer(std::string_view n) const {
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].name == n) return static_cast<int>(i);
    return -1;
  }
};

// Reads a sched.json document from its text, not yet lowered; bad input
// throws ThunkyError naming the JSON pointer ("", the whole document, for
// malformed JSON).
Program parse_program_text(const std::string& text, const std::string& file);
// The same for a document held as a JSON tree (tests, generators).
Program parse_program(const json& doc, const std::string& file);
// Writes the program back as sched.json (functions and calls as parsed).
json to_json(const Program& p);
json to_json(const Command& c);

// Whether `pred` holds for one of the command's own refs (not those of its
// sub-blocks or its CPU fallback).
template <typename F>
bool any_ref(const Command& c, F pred) {
  for (const auto* r : {&c.src, &c.dst, &c.a, &c.b, &c.c, &c.out})
    if (*r && pred(**r)) return true;
  for (const auto& [k, r] : c.in)
    if (pred(r)) return true;
  for (const auto* v : {&c.refs, &c.refs2})
    for (const auto& r : *v)
      if (pred(r)) return true;
  bool found = false;
  std::visit([&](const auto& x) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) x.uses([&](RefUse u) { found = found || pred(*u.ref); });
  }, c.spec);
  return found;
}

// Calls f(block) or f(block, SubBlock) for every block nested directly in
// the command, in the order its op's description lists them (a while's
// body before its cond, a cond's then before its else). Every walk of
// nested blocks that treats them alike goes through here; walks that run
// control flow pick the block they enter by op.
template <typename C, typename F>
void for_each_sub_block(C& c, F f) {
  std::visit([&](auto& x) {
    if constexpr (!std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) {
      x.blocks([&](auto& block, SubBlock which) {
        if constexpr (std::is_invocable_v<F&, decltype(block), SubBlock>) f(block, which);
        else f(block);
      });
    }
  }, c.spec);
}

// Whether `pred` holds for a command of the block or of any block nested in
// it (a PTX kernel's CPU fallback included).
template <typename F>
bool any_command(const Block& b, F pred) {
  for (const auto& c : b) {
    if (pred(c) || (c.rare().cpu && pred(*c.rare().cpu))) return true;
    bool found = false;
    for_each_sub_block(c, [&](const Block& sub) { found = found || any_command(sub, pred); });
    if (found) return true;
  }
  return false;
}

}  // namespace thunky
