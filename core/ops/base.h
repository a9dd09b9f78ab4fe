// What every op's description is made of: refs to buffer views, the
// blocks of commands an op holds, streams, and Box for rarely present
// parts. The ops themselves are in the other headers of core/ops/.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ref.h"

namespace thunky {

using json = nlohmann::ordered_json;

// Every op, once: its enumerator and its description (core/ops/). Op and
// OpSpec (core/schedule.h) are both made from this list, so an op's
// position in Op is its description's index in OpSpec.
#define THUNKY_OPS(X)                                                                                                   \
  X(memzero, Memzero) X(memset, Memset) X(copy, Copy) X(gemm, Gemm) X(map, Map) X(reduce, Reduce) X(kernel, Kernel)    \
  X(ptx_kernel, PtxKernel) X(custom_call, CustomCall) X(transpose, Transpose) X(all_reduce, AllReduce)                \
  X(all_gather, AllGather) X(reduce_scatter, ReduceScatter) X(all_to_all, AllToAll)                                   \
  X(collective_permute, CollectivePermute) X(collective_group, CollectiveGroup) X(async_start, AsyncStart)            \
  X(async_done, AsyncDone) X(cond, Cond) X(switch_, Switch) X(while_, While) X(call, Call)

#define THUNKY_OP_ENUMERATOR(op, Description) op,
enum class Op { THUNKY_OPS(THUNKY_OP_ENUMERATOR) };
#undef THUNKY_OP_ENUMERATOR
std::string_view op_name(Op op);

// What kind of command an op is; each op's description gives its own
// (op_family in core/schedule.h).
enum class OpFamily { compute, collective, group, stream, control, call };

// What a compute op's work is, as reports group and colour it: a GEMM,
// elementwise or reducing arithmetic, data movement, or work thunky does
// not compute itself.
enum class ComputeClass { gemm, arithmetic, movement, opaque };

// Which collective a collective op is; each collective's description
// declares its own (core/ops/collective.h), and code that prices or runs
// collectives switches over this, not over every op.
enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute };

struct Ref {
  std::shared_ptr<const RefSyntax> syntax;  // shared: schedules repeat refs
  int buffer = -1;  // index into Program::buffers once lowered
  // Index into Program::fixed_views once lowered, where the view names no
  // mesh axis (and so is the same on every rank) and is in bounds; else -1.
  int fixed = -1;
  // JSON pointer of the ref string (for messages), held by its program's
  // Program::texts.
  std::string_view pointer;
};

// An optional value held behind a pointer, for the fields a command
// rarely has (most of its nine named refs, a cost, a PTX launch): it keeps
// Command small. Copies are deep (lowering copies function bodies and then
// rebinds their refs). Used like std::optional.
template <typename T>
class Box {
 public:
  Box() = default;
  Box(T v) : p_(std::make_unique<T>(std::move(v))) {}  // NOLINT: like std::optional
  Box(const Box& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Box(Box&&) noexcept = default;
  Box& operator=(const Box& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  Box& operator=(Box&&) noexcept = default;
  explicit operator bool() const { return p_ != nullptr; }
  bool has_value() const { return p_ != nullptr; }
  T& operator*() { return *p_; }
  const T& operator*() const { return *p_; }
  T* operator->() { return p_.get(); }
  const T* operator->() const { return p_.get(); }
  // The value's address, or null.
  const T* get() const { return p_.get(); }
  void reset() { p_.reset(); }

 private:
  std::unique_ptr<T> p_;
};

using OptRef = Box<Ref>;

struct StreamId {
  enum class Kind { computation, communication };
  Kind kind = Kind::computation;
  int id = 0;
  std::string str() const { return std::string(kind == Kind::computation ? "computation:" : "communication:") + std::to_string(id); }
  auto operator<=>(const StreamId&) const = default;
};

// One of a command's own refs (not its sub-blocks') and whether the
// command writes through it. A ref read and written (a gemm's c with
// beta != 0, a written ptx_kernel argument) is visited twice, read first.
struct RefUse {
  const Ref* ref;
  bool write;
};

// Which of its op's blocks a nested block is: its JSON key, and its
// position in a list of blocks (a switch's branches) or -1.
struct SubBlock {
  std::string_view key;
  int index = -1;
  // The block's pointer below its command's: "/then", "/branches/2".
  std::string suffix() const {
    std::string s(1, '/');  // appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) of "/" + std::string
    s += key;
    if (index >= 0) {
      s += '/';
      s += std::to_string(index);
    }
    return s;
  }
};

struct Command;
// A list of commands, run in order on one stream (Command is complete in
// core/schedule.h).
using Block = std::vector<Command>;

}  // namespace thunky
