// The sched.json IR (thunky.sched/1): buffers, commands and functions as
// validated value types. Parsing rejects unknown keys and names the JSON
// pointer of every error.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/ops/base.h"
#include "core/ops/collective.h"
#include "core/ops/compute.h"
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
  // npy: the file holds the raw bits of this dtype (bf16 and the f8s, which
  // NumPy itself lacks, saved as <u2 or |u1); empty: the file's own dtype.
  std::optional<DType> bits;
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

// What a command is: one typed description per op (core/ops/), made from
// THUNKY_OPS, so a description's index is its op. Each holds its fields,
// reads and writes its JSON, lists the refs it reads and writes (`uses`)
// and the blocks it holds (`blocks`), and declares its family and, for
// compute, its model facts. Code visits this variant by family (Overload,
// below), so a new op does not compile until each consumer of its family
// handles it.
namespace detail {
template <typename First, typename... T> using VariantOfRest = std::variant<T...>;
}  // namespace detail
#define THUNKY_OP_DESCRIPTION(op, Description) , Description
using OpSpec = detail::VariantOfRest<void THUNKY_OPS(THUNKY_OP_DESCRIPTION)>;
#undef THUNKY_OP_DESCRIPTION

struct Command {
  OpSpec spec;
  Box<Cost> cost;       // a price that overrides the machine model's
  std::string pointer;  // source JSON pointer (for messages)
  std::string name;     // the user's label, for reports

  // The op's description, where the command is that op (std::get: a
  // mismatch throws); get_if: null where it is not.
  template <typename T> const T& as() const { return std::get<T>(spec); }
  template <typename T> T& as() { return std::get<T>(spec); }
  template <typename T> const T* get_if() const { return std::get_if<T>(&spec); }
  template <typename T> T* get_if() { return std::get_if<T>(&spec); }
  // Which op the command is: the alternative `spec` holds.
  Op op() const { return static_cast<Op>(spec.index()); }
  // Makes the command the op `x`.
  template <typename T> void set(T x) { spec = std::move(x); }

  // The command's pointer in the lowered schedule (for reports): its source
  // pointer, except inside an inlined call (set by lower()).
  const std::string& id() const { return id_.empty() ? pointer : id_; }
  void set_id(std::string id) { id_ = std::move(id); }

 private:
  std::string id_;  // empty where it equals `pointer`
};


// Visitors of OpSpec (std::visit) name their cases by family: one case
// per op where behaviour differs, and a catch-all constrained to the
// families the consumer does not handle op by op, so a new op of a handled
// family does not compile until the consumer has its case:
//   std::visit(Overload{[&](const Gemm& g) {...}, ...,
//                       [](const NotCompute auto&) {}}, c.spec);
template <typename... F> struct Overload : F... { using F::operator()...; };
// A description of one of the families F...: OfFamily<OpFamily::compute,
// OpFamily::collective> auto.
template <typename T, OpFamily... F> concept OfFamily = ((T::family == F) || ...);
template <typename T> concept ComputeSpec = OfFamily<T, OpFamily::compute>;
template <typename T> concept CollectiveSpec = OfFamily<T, OpFamily::collective>;
template <typename T> concept ControlSpec = OfFamily<T, OpFamily::control>;
template <typename T> concept NotCompute = !ComputeSpec<T>;
template <typename T> concept NotControl = !ControlSpec<T>;
// One of the descriptions U...: OneOf<Memzero, Copy> auto.
template <typename T, typename... U> concept OneOf = (std::is_same_v<T, U> || ...);

// A table by op of what `fact` (a captureless lambda taking
// std::type_identity<T>) says of each op's description T.
template <typename Fact>
constexpr auto op_table(Fact fact) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array{fact(std::type_identity<std::variant_alternative_t<I, OpSpec>>())...};
  }(std::make_index_sequence<std::variant_size_v<OpSpec>>());
}

// What kind of command an op is, from its description.
constexpr OpFamily op_family(Op op) {
  constexpr auto table = op_table([]<typename T>(std::type_identity<T>) { return T::family; });
  return table[static_cast<size_t>(op)];
}
// The five NCCL-style collectives (not the group).
constexpr bool is_collective(Op op) { return op_family(op) == OpFamily::collective; }

// Whether an op's flops, not only its bytes, can bound its time (a compute
// op's flop_bound); false for the other families.
constexpr bool is_flop_bound(Op op) {
  constexpr auto table = op_table([]<typename T>(std::type_identity<T>) {
    if constexpr (ComputeSpec<T>) return T::flop_bound;
    else return false;
  });
  return table[static_cast<size_t>(op)];
}

// A compute op's class (its compute_class); empty for the other families.
constexpr std::optional<ComputeClass> compute_class(Op op) {
  constexpr auto table = op_table([]<typename T>(std::type_identity<T>) -> std::optional<ComputeClass> {
    if constexpr (ComputeSpec<T>) return T::compute_class;
    else return std::nullopt;
  });
  return table[static_cast<size_t>(op)];
}

// Which collective a collective op is, as its description declares; any
// other op is an error of the caller (std::logic_error).
constexpr CollectiveKind collective_kind(Op op) {
  constexpr auto table = op_table([]<typename T>(std::type_identity<T>) -> std::optional<CollectiveKind> {
    if constexpr (CollectiveSpec<T>) return T::collective;
    else return std::nullopt;
  });
  const std::optional<CollectiveKind> k = table[static_cast<size_t>(op)];
  if (!k) throw std::logic_error("collective_kind of an op that is not a collective");
  return *k;
}

// The op whose JSON name is `name`, if any.
std::optional<Op> op_named(std::string_view name);

// Calls f(RefUse) for every ref the command reads or writes, reads before
// writes, as its op's description lists them. Control flow reads its
// predicate, index or cond_buf; async, group and call commands use no
// refs of their own.
template <typename F>
void for_each_use(const Command& c, F&& f) {
  std::visit([&](const auto& x) { x.uses(f); }, c.spec);
}

// The fields every collective has (is_collective(c.op())); a mismatch throws.
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
  if (const Reduce* x = c.get_if<Reduce>()) return x->fn;
  return Reduction::sum;
}

// The token of an async_start or async_done; empty for other ops.
inline const std::string& async_token(const Command& c) {
  static const std::string none;
  if (const AsyncStart* a = c.get_if<AsyncStart>()) return a->token;
  if (const AsyncDone* d = c.get_if<AsyncDone>()) return d->token;
  return none;
}

// Asks memory for what a front-to-back walk of a long block reads next:
// the command 16 ahead (its first four lines).
inline void prefetch_ahead(const Block& b, size_t pos) {
  constexpr size_t kCommandAhead = 16;
  if (pos + kCommandAhead < b.size()) {
    const char* next = reinterpret_cast<const char*>(&b[pos + kCommandAhead]);
    for (int line = 0; line < 4; ++line) __builtin_prefetch(next + 64 * line);
  }
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
// sub-blocks or a PTX kernel's CPU fallback).
template <typename F>
bool any_ref(const Command& c, F pred) {
  bool found = false;
  for_each_use(c, [&](RefUse u) { found = found || pred(*u.ref); });
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
    x.blocks([&](auto& block, SubBlock which) {
      if constexpr (std::is_invocable_v<F&, decltype(block), SubBlock>) f(block, which);
      else f(block);
    });
  }, c.spec);
}

// Whether `pred` holds for a command of the block or of any block nested in
// it.
template <typename F>
bool any_command(const Block& b, F pred) {
  for (const auto& c : b) {
    if (pred(c)) return true;
    bool found = false;
    for_each_sub_block(c, [&](const Block& sub) { found = found || any_command(sub, pred); });
    if (found) return true;
  }
  return false;
}

}  // namespace thunky
