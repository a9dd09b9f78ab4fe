// What each op requires of its views on one rank: shapes, dtypes, roles,
// element counts and the collective rules. Each check throws ThunkyError
// at the JSON pointer of the offending field. The validator's rank walk
// (core/rank_walk.cc) calls them with the views it resolved; a new op adds
// its check here.
#pragma once

#include "core/mesh.h"
#include "core/schedule.h"
#include "core/validate.h"

namespace thunky {

// "f32[4, 8]": a view's dtype and shape, as messages print it.
std::string view_str(const Program& p, const View& v);

// The view of a ref the command writes: its buffer must not be an input.
View writable_view(const Program& p, const Ref& r, const RankCtx& ctx);
// The view of a one-element ref of dtype `want` (a predicate or an index);
// `what` names it in the message.
View scalar_view(const Program& p, const Ref& r, const RankCtx& ctx, DType want, const char* what);

// copy: equal byte sizes.
// A memset's pattern fits its dst: 4-byte elements for "bits", a
// floating-point dtype for NaN and infinities.
void check_memset(const Program& p, const Command& c, const View& dst);
void check_copy(const Program& p, const Command& c, const View& src, const View& dst);
// transpose: perm a permutation of src's dimensions (at most 8), dst of
// src's dtype and of src's shape permuted, and the two disjoint.
void check_transpose(const Program& p, const Command& c, const View& src, const View& dst);
// gemm: one float dtype for a and b, 2-D or 3-D operands, matching
// contraction, output and batch dimensions.
void check_gemm(const Program& p, const Command& c, const View& a, const View& b, const View& cv);
// The type a gemm of `operand`s accumulates in where no library takes its
// dtypes directly: f64 for f64, and for s8 (exact: every s8 x s8 sum a
// GEMM can hold fits 2^53), else f32.
inline DType gemm_accumulator(DType operand) { return operand == DType::f64 || operand == DType::s8 ? DType::f64 : DType::f32; }
// reduce: axes in range and listed once, out holding what is left.
void check_reduce(const Program& p, const Command& c, const View& in, const View& out);
// map (also a PTX kernel's CPU fallback, at `pointer`): inputs are scalars or out's
// size; with `names`, every name in the expression is an input, an axis
// or a known function of the right arity.
void check_map(const Program& p, const Map& m, const std::string& pointer, const RankCtx& ctx, bool names);
// A collective among `part`: one dtype, the element counts its op needs,
// src and dst disjoint or in place as the op allows, permute pairs in
// range and one-to-one.
void check_collective(const Program& p, const Command& c, const View& src, const View& dst, const Participants& part);
// collective_group: a non-empty list of collectives.
void check_collective_group(const Command& g);
// custom_call: a registered target, its backend_config, and its operand
// and result views.
void check_custom_call(const Program& p, const Command& c, const RankCtx& ctx);

}  // namespace thunky
