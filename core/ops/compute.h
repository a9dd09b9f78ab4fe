// Compute commands: they read and write views of buffers on their stream,
// each priced by its own rule (core/accounting.cc). Each op's description
// holds its fields, reads and writes its JSON (core/ops/compute.cc) and
// lists the refs it reads and writes (`uses`, reads first) and its blocks
// (none).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/expr.h"
#include "core/ops/base.h"
#include "core/reduction.h"

namespace thunky {

class OpReader;

// What every compute op shares: no blocks. Each compute op declares its
// model facts beside its refs: `flop_bound` (whether its flops, not only
// its bytes, can bound its time in the roofline) and `compute_class`.
struct ComputeOp {
  static constexpr OpFamily family = OpFamily::compute;
  template <typename F> void blocks(F&&) const {}
  template <typename F> void blocks(F&&) {}
};

struct Memzero : ComputeOp {
  static constexpr bool flop_bound = false;
  static constexpr ComputeClass compute_class = ComputeClass::movement;
  static constexpr std::string_view json_name = "memzero";
  Ref dst;
  static Memzero read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&dst, true}); }
};

// Every element of dst set to a number (NaN and the infinities included),
// or every 4-byte element to a 32-bit pattern.
struct Memset : ComputeOp {
  static constexpr bool flop_bound = false;
  static constexpr ComputeClass compute_class = ComputeClass::movement;
  static constexpr std::string_view json_name = "memset";
  Ref dst;
  double value = 0;
  std::optional<uint32_t> bits;
  static Memset read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&dst, true}); }
};

struct Copy : ComputeOp {
  static constexpr bool flop_bound = false;
  static constexpr ComputeClass compute_class = ComputeClass::movement;
  static constexpr std::string_view json_name = "copy";
  Ref src, dst;
  static Copy read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&src, false}), f(RefUse{&dst, true}); }
};

// dst's dimension d is src's dimension perm[d].
struct Transpose : ComputeOp {
  static constexpr bool flop_bound = false;
  static constexpr ComputeClass compute_class = ComputeClass::movement;
  static constexpr std::string_view json_name = "transpose";
  Ref src, dst;
  std::vector<int64_t> perm;
  static Transpose read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&src, false}), f(RefUse{&dst, true}); }
};

// c = alpha * op(a) op(b) + beta * c, batched over leading dimensions.
struct Gemm : ComputeOp {
  static constexpr bool flop_bound = true;
  static constexpr ComputeClass compute_class = ComputeClass::gemm;
  static constexpr std::string_view json_name = "gemm";
  Ref a, b, c;
  bool transpose_a = false, transpose_b = false;
  double alpha = 1, beta = 0;
  static Gemm read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const {
    f(RefUse{&a, false}), f(RefUse{&b, false});
    if (beta != 0) f(RefUse{&c, false});
    f(RefUse{&c, true});
  }
};

// out = expr(in...), elementwise; inputs broadcast to out's shape by
// numpy's rules.
struct Map : ComputeOp {
  static constexpr bool flop_bound = true;
  static constexpr ComputeClass compute_class = ComputeClass::arithmetic;
  static constexpr std::string_view json_name = "map";
  std::vector<std::pair<std::string, Ref>> in;  // in declaration order
  Ref out;
  ExprPtr expr;
  std::string expr_text;
  static Map read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const {
    for (const auto& [name, r] : in) f(RefUse{&r, false});
    f(RefUse{&out, true});
  }
};

// out = in reduced over `axes` by `fn`; with `arg`, argmax or argmin (fn
// max or min): the index along the one axis where it is first reached.
struct Reduce : ComputeOp {
  static constexpr bool flop_bound = false;
  static constexpr ComputeClass compute_class = ComputeClass::arithmetic;
  static constexpr std::string_view json_name = "reduce";
  Ref in, out;
  Reduction fn = Reduction::sum;
  bool arg = false;
  std::vector<int64_t> axes;
  static Reduce read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&in, false}), f(RefUse{&out, true}); }
};

// Work thunky does not compute, priced by its cost: it reads `reads` and
// writes `writes`.
struct Kernel : ComputeOp {
  static constexpr bool flop_bound = true;
  static constexpr ComputeClass compute_class = ComputeClass::opaque;
  static constexpr std::string_view json_name = "kernel";
  std::vector<Ref> reads, writes;
  static Kernel read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const {
    for (const auto& r : reads) f(RefUse{&r, false});
    for (const auto& r : writes) f(RefUse{&r, true});
  }
};

struct PtxLaunch {
  std::string kernel_name;
  std::string ptx;       // inline source, or
  std::string ptx_file;  // a file relative to the schedule
  std::vector<int64_t> grid{1, 1, 1}, block{1, 1, 1};
  int64_t shmem_bytes = 0;
};

// A PTX kernel launched with views as arguments, each read and, where
// `written`, written; `cpu` is the map the cpu backend runs instead.
struct PtxKernel : ComputeOp {
  static constexpr bool flop_bound = true;
  static constexpr ComputeClass compute_class = ComputeClass::opaque;
  static constexpr std::string_view json_name = "ptx_kernel";
  std::vector<Ref> args;
  std::vector<bool> written;
  Box<PtxLaunch> launch;
  Box<Map> cpu;
  static PtxKernel read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const {
    for (size_t i = 0; i < args.size(); ++i) {
      f(RefUse{&args[i], false});
      if (i < written.size() && written[i]) f(RefUse{&args[i], true});
    }
  }
};

struct CustomCallSpec {
  std::string target;
  json backend_config;
};

// A library call by name (XLA's custom_call): cuSOLVER's Cholesky.
struct CustomCall : ComputeOp {
  static constexpr bool flop_bound = true;
  static constexpr ComputeClass compute_class = ComputeClass::opaque;
  static constexpr std::string_view json_name = "custom_call";
  std::vector<Ref> operands, results;
  Box<CustomCallSpec> spec;
  static CustomCall read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const {
    for (const auto& r : operands) f(RefUse{&r, false});
    for (const auto& r : results) f(RefUse{&r, true});
  }
};

}  // namespace thunky
