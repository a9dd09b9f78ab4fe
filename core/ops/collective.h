// Collectives, as NCCL's: all_reduce, all_gather, reduce_scatter,
// all_to_all and collective_permute, each over the ranks of one or more
// mesh axes, and a group of them issued as one (collective_group). Each
// op's description holds its fields, reads and writes its JSON (core/ops/
// collective.cc) and lists its refs and blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ops/base.h"
#include "core/reduction.h"

namespace thunky {

class OpReader;

// What every collective has: its source and destination views and its
// communicator: the ranks that differ from this one only along `axis`, or,
// with `groups`, the group of them (by position along the axis) this rank
// is in. `ctas`: the CTAs (one SM each) its kernel holds, where NCCL's own
// choice is overridden (NCCL_MIN_CTAS/NCCL_MAX_CTAS for one collective);
// the simulator prices SMs taken from the kernels beside it, and a
// collective given fewer than NCCL would take moves its bytes slower.
struct Collective {
  static constexpr OpFamily family = OpFamily::collective;
  static constexpr int64_t kMaxCtas = 1024;
  Ref src, dst;
  std::vector<std::string> axis;  // one or more mesh axes
  Box<std::vector<std::vector<int64_t>>> groups;
  std::optional<int64_t> ctas;

  template <typename F> void uses(F&& f) const { f(RefUse{&src, false}), f(RefUse{&dst, true}); }
  template <typename F> void blocks(F&&) const {}
  template <typename F> void blocks(F&&) {}

  // The fields above, from and to JSON (each collective's read and write
  // start here).
  void read_common(OpReader& r);
  void write_common(json& j) const;
};

// A collective that combines its members' values: all_reduce and
// reduce_scatter, by `reduction` (sum unless given).
struct ReducingCollective : Collective {
  Reduction reduction = Reduction::sum;
  void read_common(OpReader& r);
  void write_common(json& j) const;
};

struct AllReduce : ReducingCollective {
  static constexpr CollectiveKind collective = CollectiveKind::all_reduce;
  static constexpr std::string_view json_name = "all_reduce";
  static AllReduce read(OpReader& r);
  void write(json& j) const { write_common(j); }
};

struct AllGather : Collective {
  static constexpr CollectiveKind collective = CollectiveKind::all_gather;
  static constexpr std::string_view json_name = "all_gather";
  static AllGather read(OpReader& r);
  void write(json& j) const { write_common(j); }
};

struct ReduceScatter : ReducingCollective {
  static constexpr CollectiveKind collective = CollectiveKind::reduce_scatter;
  static constexpr std::string_view json_name = "reduce_scatter";
  static ReduceScatter read(OpReader& r);
  void write(json& j) const { write_common(j); }
};

struct AllToAll : Collective {
  static constexpr CollectiveKind collective = CollectiveKind::all_to_all;
  static constexpr std::string_view json_name = "all_to_all";
  static AllToAll read(OpReader& r);
  void write(json& j) const { write_common(j); }
};

// Each member sends its src to one other's dst: by `pairs` of (source,
// target) positions, or every position i to (i + shift) mod n.
struct CollectivePermute : Collective {
  static constexpr CollectiveKind collective = CollectiveKind::collective_permute;
  static constexpr std::string_view json_name = "collective_permute";
  std::optional<int64_t> shift;
  Box<std::vector<std::pair<int64_t, int64_t>>> pairs;
  static CollectivePermute read(OpReader& r);
  void write(json& j) const;
};

// Collectives issued together, as ncclGroupStart/End: none waits for the
// others' peers before the rest are issued.
struct CollectiveGroup {
  static constexpr OpFamily family = OpFamily::group;
  static constexpr std::string_view json_name = "collective_group";
  Block body;

  static CollectiveGroup read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&&) const {}
  template <typename F> void blocks(F&& f) const { f(body, SubBlock{"body"}); }
  template <typename F> void blocks(F&& f) { f(body, SubBlock{"body"}); }
};

}  // namespace thunky
