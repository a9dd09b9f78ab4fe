// What every consumer of a command needs to know about it, in one place:
// the refs it reads and writes, a collective_permute's pairs, and the
// signature that every member of a communicator must agree on. The
// validator, the simulator and both backends read these; none keeps a
// switch of its own for them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ref.h"
#include "core/schedule.h"

namespace thunky {

// Calls f(RefUse) for every ref the command reads or writes, reads before
// writes. Control flow reads its predicate, index or cond_buf; async and
// call commands use no refs of their own.
template <typename F>
void for_each_use(const Command& c, F f) {
  switch (c.op) {
    case Op::memzero:
    case Op::memset: f(RefUse{&*c.dst, true}); break;
    case Op::copy:
    case Op::transpose:
      f(RefUse{&*c.src, false});
      f(RefUse{&*c.dst, true});
      break;
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
    case Op::collective_permute: collective_of(c).uses(f); break;
    case Op::gemm:
      f(RefUse{&*c.a, false});
      f(RefUse{&*c.b, false});
      if (c.beta != 0) f(RefUse{&*c.c, false});
      f(RefUse{&*c.c, true});
      break;
    case Op::map:
      for (const auto& [name, r] : c.in) f(RefUse{&r, false});
      f(RefUse{&*c.out, true});
      break;
    case Op::reduce:
      f(RefUse{&*c.src, false});
      f(RefUse{&*c.out, true});
      break;
    case Op::kernel:
    case Op::custom_call:
      for (const auto& r : c.refs) f(RefUse{&r, false});
      for (const auto& r : c.refs2) f(RefUse{&r, true});
      break;
    case Op::ptx_kernel:
      for (size_t i = 0; i < c.refs.size(); ++i) {
        f(RefUse{&c.refs[i], false});
        if (i < c.rare().written.size() && c.rare().written[i]) f(RefUse{&c.refs[i], true});
      }
      break;
    case Op::cond: c.as<Cond>().uses(f); break;
    case Op::switch_: c.as<Switch>().uses(f); break;
    case Op::while_: c.as<While>().uses(f); break;
    case Op::collective_group:
    case Op::async_start:
    case Op::async_done:
    case Op::call: break;
  }
}

// A collective_permute's (source, target) pairs by position among its n
// participants: `pairs` as written, or every i sending to (i + shift) mod n.
std::vector<std::pair<int64_t, int64_t>> permute_pairs(const Command& c, int64_t n);
// Where position `source` sends under a permute's `shift` (without
// overflow for any shift).
inline int64_t shift_target(const Command& c, int64_t source, int64_t n) {
  return floor_mod(source + floor_mod(*c.as<CollectivePermute>().shift, n), n);
}

// What every member of a communicator must issue alike, as text: the op,
// both views' dtype and shape, the reduction, and a permute's pairs
// (sorted). Two ranks whose signatures differ deadlock or exchange the
// wrong data.
std::string collective_signature(const Program& p, const Command& c, const View& src, const View& dst, int64_t n);

}  // namespace thunky
