// Control flow on the device and calls: cond, switch, while and call. Each
// op's description holds its fields, reads and writes its JSON (core/ops/
// control.cc), and lists the refs it reads (`uses`) and the blocks it holds
// (`blocks`, in a fixed order). What they mean when run is in
// core/control_flow.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ops/base.h"

namespace thunky {

class OpReader;

// Runs `then` where the boolean scalar `pred` is non-zero, else `else`.
struct Cond {
  static constexpr OpFamily family = OpFamily::control;
  static constexpr std::string_view json_name = "cond";
  Ref pred;
  Block then_, else_;
  std::optional<bool> taken;  // the simulator's hint: which branch runs

  static Cond read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&pred, false}); }
  template <typename F> void blocks(F&& f) const { f(then_, SubBlock{"then"}), f(else_, SubBlock{"else"}); }
  template <typename F> void blocks(F&& f) { f(then_, SubBlock{"then"}), f(else_, SubBlock{"else"}); }
};

// Runs branches[index], the s32 scalar `index` clamped into range.
struct Switch {
  static constexpr OpFamily family = OpFamily::control;
  static constexpr std::string_view json_name = "switch";
  Ref index;
  std::vector<Block> branches;
  std::optional<int64_t> branch;  // the simulator's hint

  static Switch read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&index, false}); }
  template <typename F> void blocks(F&& f) const { for (size_t k = 0; k < branches.size(); ++k) f(branches[k], SubBlock{"branches", static_cast<int>(k)}); }
  template <typename F> void blocks(F&& f) { for (size_t k = 0; k < branches.size(); ++k) f(branches[k], SubBlock{"branches", static_cast<int>(k)}); }
};

// Runs `cond`, then `body` while the boolean scalar `cond_buf` is non-zero.
struct While {
  static constexpr OpFamily family = OpFamily::control;
  static constexpr std::string_view json_name = "while";
  Ref cond_buf;
  Block body, cond;
  std::optional<int64_t> trip_count;  // the simulator's hint

  static While read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&cond_buf, false}); }
  template <typename F> void blocks(F&& f) const { f(body, SubBlock{"body"}), f(cond, SubBlock{"cond"}); }
  template <typename F> void blocks(F&& f) { f(body, SubBlock{"body"}), f(cond, SubBlock{"cond"}); }
};

// Calls a function of the schedule with refs bound to its parameters;
// lower() inlines the function's program into `body`.
struct Call {
  static constexpr OpFamily family = OpFamily::call;
  static constexpr std::string_view json_name = "call";
  std::string fn;
  std::vector<std::pair<std::string, Ref>> args;
  Block body;  // empty until lowered

  static Call read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&&) const {}
  template <typename F> void blocks(F&& f) const { f(body, SubBlock{"body"}); }
  template <typename F> void blocks(F&& f) { f(body, SubBlock{"body"}); }
};

}  // namespace thunky
