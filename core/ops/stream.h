// Work on another stream: async_start forks its body onto a stream under a
// token, async_done joins the token back. Each op's description holds its
// fields, reads and writes its JSON (core/ops/stream.cc) and lists its
// refs (none) and blocks.
#pragma once

#include <string>
#include <string_view>

#include "core/ops/base.h"

namespace thunky {

class OpReader;

struct AsyncStart {
  static constexpr OpFamily family = OpFamily::stream;
  static constexpr std::string_view json_name = "async_start";
  std::string token;
  StreamId stream;
  Block body;

  static AsyncStart read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&&) const {}
  template <typename F> void blocks(F&& f) const { f(body, SubBlock{"body"}); }
  template <typename F> void blocks(F&& f) { f(body, SubBlock{"body"}); }
};

struct AsyncDone {
  static constexpr OpFamily family = OpFamily::stream;
  static constexpr std::string_view json_name = "async_done";
  std::string token;

  static AsyncDone read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&&) const {}
  template <typename F> void blocks(F&&) const {}
  template <typename F> void blocks(F&&) {}
};

}  // namespace thunky
