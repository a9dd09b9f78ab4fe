// Collectives: a group of them issued as one (collective_group). Each op's
// description holds its fields, reads and writes its JSON (core/ops/
// collective.cc) and lists its refs and blocks.
#pragma once

#include "core/ops/base.h"

namespace thunky {

class OpReader;

// Collectives issued together, as ncclGroupStart/End: none waits for the
// others' peers before the rest are issued.
struct CollectiveGroup {
  static constexpr Op kind = Op::collective_group;
  Block body;

  static CollectiveGroup read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&&) const {}
  template <typename F> void blocks(F&& f) const { f(body, SubBlock{"body"}); }
  template <typename F> void blocks(F&& f) { f(body, SubBlock{"body"}); }
};

}  // namespace thunky
