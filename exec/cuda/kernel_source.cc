#include "exec/cuda/kernel_source.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/status.h"

namespace thunky::cuda {

namespace {

// A reduction's start and step in the generated CUDA (acc, the running
// value; v, the next one).
std::string reduction_init(Reduction r) {
  switch (r) {
    case Reduction::sum:
    case Reduction::mean: return "0.0";
    case Reduction::prod: return "1.0";
    case Reduction::min: return "THUNKY_INF";
    case Reduction::max: return "(-THUNKY_INF)";
  }
  return "0.0";
}
std::string reduction_step(Reduction r) {
  switch (r) {
    case Reduction::sum:
    case Reduction::mean: return "acc + v";
    case Reduction::prod: return "acc * v";
    case Reduction::min: return "fmin(acc, v)";
    case Reduction::max: return "fmax(acc, v)";
  }
  return "acc";
}

// Loads and stores of every dtype, ported line by line from core/dtype.cc
// (the narrow floats decode and encode the same way; integers wrap as a
// C cast of an in-range value; NaN stores 0; bool is nonzero-and-not-NaN).
constexpr const char* kPrelude = R"(typedef unsigned char u8_t;
typedef long long i64_t;
typedef unsigned long long u64_t;
#define THUNKY_INF __longlong_as_double(0x7ff0000000000000LL)
#define THUNKY_NAN __longlong_as_double(0x7ff8000000000000LL)

__device__ __forceinline__ float thunky_decode_mini(unsigned bits, int eb, int mb, bool ieee) {
  const unsigned man_mask = (1u << mb) - 1, exp_mask = (1u << eb) - 1;
  const int bias = (1 << (eb - 1)) - 1;
  const bool neg = (bits >> (eb + mb)) & 1;
  const unsigned e = (bits >> mb) & exp_mask, m = bits & man_mask;
  float v;
  if (ieee && e == exp_mask) v = m ? __int_as_float(0x7fc00000) : __int_as_float(0x7f800000);
  else if (!ieee && e == exp_mask && m == man_mask) v = __int_as_float(0x7fc00000);
  else if (e == 0) v = ldexpf((float)m, 1 - bias - mb);
  else v = ldexpf((float)(m | (1u << mb)), (int)e - bias - mb);
  return neg ? -v : v;
}

__device__ unsigned thunky_encode_mini(float v, int eb, int mb, bool ieee) {
  const int total = eb + mb;
  const unsigned sign = (__float_as_uint(v) >> 31) ? (1u << total) : 0;
  const unsigned exp_mask = (1u << eb) - 1, man_mask = (1u << mb) - 1;
  const unsigned nan = ieee ? (exp_mask << mb) | 1u << (mb - 1) : (exp_mask << mb) | man_mask;
  if (v != v) return sign | nan;
  const unsigned max_finite = ieee ? ((exp_mask - 1) << mb) | man_mask : ((exp_mask << mb) | man_mask) - 1;
  const float a = fabsf(v);
  const float max_v = thunky_decode_mini(max_finite, eb, mb, ieee);
  if (a > max_v) {
    const float next = max_v + (max_v - thunky_decode_mini(max_finite - 1, eb, mb, ieee)) / 2;
    if (a < next || (a == next && (max_finite & 1) == 0)) return sign | max_finite;
    return sign | (ieee ? (exp_mask << mb) : nan);
  }
  unsigned lo = 0, hi = max_finite;
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) / 2;
    if (thunky_decode_mini(mid, eb, mb, ieee) <= a) lo = mid; else hi = mid - 1;
  }
  if (lo == max_finite || thunky_decode_mini(lo, eb, mb, ieee) == a) return sign | lo;
  const float below = thunky_decode_mini(lo, eb, mb, ieee), above = thunky_decode_mini(lo + 1, eb, mb, ieee);
  const float d_lo = a - below, d_hi = above - a;
  if (d_lo < d_hi) return sign | lo;
  if (d_hi < d_lo) return sign | (lo + 1);
  return sign | ((lo & 1) == 0 ? lo : lo + 1);
}

__device__ __forceinline__ unsigned short thunky_f32_to_bf16(float v) {
  unsigned u = __float_as_uint(v);
  if (v != v) return (unsigned short)((u >> 16) | 0x40);
  unsigned rounding = 0x7fff + ((u >> 16) & 1);
  return (unsigned short)((u + rounding) >> 16);
}

__device__ __forceinline__ i64_t thunky_wrap_signed(double v) {
  if (v != v) return 0;
  double t = trunc(v);
  if (t >= 9223372036854775807.0) return 0x7fffffffffffffffLL;
  if (t <= -9223372036854775808.0) return (i64_t)0x8000000000000000ULL;
  return (i64_t)t;
}
__device__ __forceinline__ u64_t thunky_wrap_unsigned(double v) {
  if (v != v) return 0;
  double t = trunc(v);
  if (t >= 18446744073709551616.0) return 0xffffffffffffffffULL;
  if (t >= 9223372036854775808.0) return (u64_t)t;
  return (u64_t)thunky_wrap_signed(t);
}

__device__ __forceinline__ double ld_f64(const u8_t* p, i64_t i) { return ((const double*)p)[i]; }
__device__ __forceinline__ double ld_f32(const u8_t* p, i64_t i) { return ((const float*)p)[i]; }
__device__ __forceinline__ double ld_f16(const u8_t* p, i64_t i) { return thunky_decode_mini(((const unsigned short*)p)[i], 5, 10, true); }
__device__ __forceinline__ double ld_bf16(const u8_t* p, i64_t i) { return __uint_as_float(((unsigned)((const unsigned short*)p)[i]) << 16); }
__device__ __forceinline__ double ld_f8e4m3(const u8_t* p, i64_t i) { return thunky_decode_mini(p[i], 4, 3, false); }
__device__ __forceinline__ double ld_f8e5m2(const u8_t* p, i64_t i) { return thunky_decode_mini(p[i], 5, 2, true); }
__device__ __forceinline__ double ld_s64(const u8_t* p, i64_t i) { return (double)((const i64_t*)p)[i]; }
__device__ __forceinline__ double ld_s32(const u8_t* p, i64_t i) { return ((const int*)p)[i]; }
__device__ __forceinline__ double ld_s16(const u8_t* p, i64_t i) { return ((const short*)p)[i]; }
__device__ __forceinline__ double ld_s8(const u8_t* p, i64_t i) { return ((const signed char*)p)[i]; }
__device__ __forceinline__ double ld_u32(const u8_t* p, i64_t i) { return ((const unsigned*)p)[i]; }
__device__ __forceinline__ double ld_u8(const u8_t* p, i64_t i) { return p[i]; }
__device__ __forceinline__ double ld_bool(const u8_t* p, i64_t i) { return p[i] != 0 ? 1.0 : 0.0; }

__device__ __forceinline__ void st_f64(u8_t* p, i64_t i, double v) { ((double*)p)[i] = v; }
__device__ __forceinline__ void st_f32(u8_t* p, i64_t i, double v) { ((float*)p)[i] = (float)v; }
__device__ __forceinline__ void st_f16(u8_t* p, i64_t i, double v) { ((unsigned short*)p)[i] = (unsigned short)thunky_encode_mini((float)v, 5, 10, true); }
__device__ __forceinline__ void st_bf16(u8_t* p, i64_t i, double v) { ((unsigned short*)p)[i] = thunky_f32_to_bf16((float)v); }
__device__ __forceinline__ void st_f8e4m3(u8_t* p, i64_t i, double v) { p[i] = (u8_t)thunky_encode_mini((float)v, 4, 3, false); }
__device__ __forceinline__ void st_f8e5m2(u8_t* p, i64_t i, double v) { p[i] = (u8_t)thunky_encode_mini((float)v, 5, 2, true); }
__device__ __forceinline__ void st_s64(u8_t* p, i64_t i, double v) { ((i64_t*)p)[i] = thunky_wrap_signed(v); }
__device__ __forceinline__ void st_s32(u8_t* p, i64_t i, double v) { ((int*)p)[i] = (int)thunky_wrap_signed(v); }
__device__ __forceinline__ void st_s16(u8_t* p, i64_t i, double v) { ((short*)p)[i] = (short)thunky_wrap_signed(v); }
__device__ __forceinline__ void st_s8(u8_t* p, i64_t i, double v) { p[i] = (u8_t)(signed char)thunky_wrap_signed(v); }
__device__ __forceinline__ void st_u32(u8_t* p, i64_t i, double v) { ((unsigned*)p)[i] = (unsigned)thunky_wrap_unsigned(v); }
__device__ __forceinline__ void st_u8(u8_t* p, i64_t i, double v) { p[i] = (u8_t)thunky_wrap_unsigned(v); }
__device__ __forceinline__ void st_bool(u8_t* p, i64_t i, double v) { p[i] = v != 0 ? 1 : 0; }

__device__ __forceinline__ i64_t thunky_as_i64(double v) {  // truncated, saturated, NaN as 0 (as cvt.rzi.s64.f64)
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return 0x7fffffffffffffffLL;
  if (v <= -9223372036854775808.0) return (i64_t)0x8000000000000000ULL;
  return (i64_t)v;
}
__device__ __forceinline__ double thunky_floordiv(double a, double b) {
  i64_t x = thunky_as_i64(a), y = thunky_as_i64(b);
  if (y == 0) return 0;
  if (y == -1) return (double)(i64_t)(0ULL - (u64_t)x);
  i64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return (double)q;
}
__device__ __forceinline__ double thunky_imod(double a, double b) {
  i64_t x = thunky_as_i64(a), y = thunky_as_i64(b);
  if (y == 0 || y == -1) return 0;
  i64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return (double)m;
}
__device__ __forceinline__ double thunky_fmod(double a, double b) {
  double m = fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
)";

// The C identifier part of a dtype's load/store helpers.
std::string tname(DType t) { return t == DType::boolean ? "bool" : std::string(dtype_name(t)); }

// A double literal that reads back as exactly `v`.
std::string literal(double v) {
  if (std::isnan(v)) return "THUNKY_NAN";
  if (std::isinf(v)) return v > 0 ? "THUNKY_INF" : "(-THUNKY_INF)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return std::string("(") + buf + ")";
}

enum class VT { i, f, b };  // the value's kind, as the cpu backend types it
VT promote(VT a, VT b) { return (a == VT::f || b == VT::f) ? VT::f : VT::i; }

struct Emitted {
  std::string code;  // a C expression of type double
  VT type;
};

class MapEmitter {
 public:
  MapEmitter(const std::vector<MapOperand>& in, const std::vector<std::string>& axes) : in_(in), axes_(axes) {}

  // Iterative over an explicit stack, so that an expression of any depth
  // costs no C++ stack.
  Emitted emit(const Expr& root) {
    struct Frame {
      const Expr* e;
      size_t next = 0;
      std::vector<Emitted> kids;
    };
    std::vector<Frame> stack;
    stack.push_back({&root, 0, {}});
    Emitted result;
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next < f.e->args.size()) {
        const Expr* child = f.e->args[f.next++].get();
        stack.push_back({child, 0, {}});
        continue;
      }
      Emitted done = node(*f.e, f.kids);
      stack.pop_back();
      if (stack.empty()) result = std::move(done);
      else stack.back().kids.push_back(std::move(done));
    }
    return result;
  }

 private:
  Emitted node(const Expr& e, const std::vector<Emitted>& k) {
    switch (e.kind) {
      case Expr::Kind::int_lit: return {literal(static_cast<double>(e.ival)), VT::i};
      case Expr::Kind::float_lit: return {literal(e.fval), VT::f};
      case Expr::Kind::bool_lit: return {e.ival ? "1.0" : "0.0", VT::b};
      case Expr::Kind::name: {
        for (size_t i = 0; i < in_.size(); ++i)
          if (in_[i].name == e.text) {
            DType t = in_[i].dtype;
            return {"x" + std::to_string(i), is_float(t) ? VT::f : t == DType::boolean ? VT::b : VT::i};
          }
        for (size_t a = 0; a < axes_.size(); ++a)
          if (axes_[a] == e.text) return {"(double)p.axis" + std::to_string(a), VT::i};
        throw ThunkyError("", "unknown name '" + e.text + "' in map expression");
      }
      case Expr::Kind::unary:
        if (e.text == "not") return {"(" + k[0].code + " == 0 ? 1.0 : 0.0)", VT::b};
        return {"(-" + k[0].code + ")", k[0].type == VT::b ? VT::i : k[0].type};
      case Expr::Kind::binary: return binary(e.text, k[0], k[1]);
      case Expr::Kind::call: return call(e.text, k);
    }
    return {"0.0", VT::f};
  }

  static Emitted binary(const std::string& op, const Emitted& a, const Emitted& b) {
    const bool ints = a.type != VT::f && b.type != VT::f;
    auto cmp = [&](const char* c) { return Emitted{"(" + a.code + " " + c + " " + b.code + " ? 1.0 : 0.0)", VT::b}; };
    if (op == "+" || op == "-" || op == "*") return {"(" + a.code + " " + op + " " + b.code + ")", promote(a.type, b.type)};
    if (op == "/") return {"(" + a.code + " / " + b.code + ")", VT::f};
    if (op == "//")
      return {ints ? "thunky_floordiv(" + a.code + ", " + b.code + ")" : "floor(" + a.code + " / " + b.code + ")", promote(a.type, b.type)};
    if (op == "%") return {std::string(ints ? "thunky_imod(" : "thunky_fmod(") + a.code + ", " + b.code + ")", promote(a.type, b.type)};
    if (op == "**") return {"pow(" + a.code + ", " + b.code + ")", promote(a.type, b.type)};
    if (op == "and") return {"((" + a.code + " != 0) && (" + b.code + " != 0) ? 1.0 : 0.0)", VT::b};
    if (op == "or") return {"((" + a.code + " != 0) || (" + b.code + " != 0) ? 1.0 : 0.0)", VT::b};
    for (const char* c : {"<", "<=", ">", ">=", "==", "!="})
      if (op == c) return cmp(c);
    throw ThunkyError("", "unknown operator '" + op + "' in map expression");
  }

  static Emitted call(const std::string& f, const std::vector<Emitted>& k) {
    if (f == "where") return {"(" + k[0].code + " != 0 ? " + k[1].code + " : " + k[2].code + ")", promote(k[1].type, k[2].type)};
    if (f == "min" || f == "max") return {"f" + f + "(" + k[0].code + ", " + k[1].code + ")", promote(k[0].type, k[1].type)};
    if (f == "abs") return {"fabs(" + k[0].code + ")", k[0].type == VT::b ? VT::i : k[0].type};
    if (f == "neg") return {"(-" + k[0].code + ")", k[0].type == VT::b ? VT::i : k[0].type};
    if (auto t = parse_dtype(f)) {
      // A cast rounds to the target type as astype does: store, load back.
      return {"thunky_round_" + tname(*t) + "(" + k[0].code + ")", is_float(*t) ? VT::f : *t == DType::boolean ? VT::b : VT::i};
    }
    static const std::pair<const char*, const char*> kFloat[] = {
        {"sin", "sin"}, {"cos", "cos"}, {"tan", "tan"},     {"exp", "exp"},     {"log", "log"},     {"log1p", "log1p"}, {"sqrt", "sqrt"},
        {"tanh", "tanh"}, {"floor", "floor"}, {"ceil", "ceil"}, {"round", "rint"},  // rint: half to even, as jnp.round
        {"erf", "erf"},   {"erfc", "erfc"},   {"erf_inv", "erfinv"},
    };
    for (auto [name, c] : kFloat)
      if (f == name) return {std::string(c) + "(" + k[0].code + ")", VT::f};
    if (f == "rsqrt") return {"(1.0 / sqrt(" + k[0].code + "))", VT::f};
    throw ThunkyError("", "unknown function '" + f + "' in map expression");
  }

  const std::vector<MapOperand>& in_;
  const std::vector<std::string>& axes_;
};

std::string round_helpers() {
  std::string s;
  for (int t = 0; t <= static_cast<int>(DType::boolean); ++t) {
    std::string n = tname(static_cast<DType>(t));
    s += "__device__ __forceinline__ double thunky_round_" + n + "(double v) { u8_t b[8]; st_" + n + "(b, 0, v); return ld_" + n + "(b, 0); }\n";
  }
  return s;
}

void put(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}
void put_ptr(std::vector<uint8_t>& out, const void* p) { put(out, ptr_bits(p)); }

}  // namespace

KernelSource map_kernel(const Expr& expr, const std::vector<MapOperand>& inputs, const std::vector<std::string>& axis_names, DType out) {
  MapEmitter em(inputs, axis_names);
  Emitted body = em.emit(expr);
  std::ostringstream s;
  s << kPrelude << round_helpers() << "struct Params {\n";
  for (size_t i = 0; i < inputs.size(); ++i) s << "  const u8_t* in" << i << ";\n";
  s << "  u8_t* out;\n  i64_t n;\n";
  for (size_t a = 0; a < axis_names.size(); ++a) s << "  i64_t axis" << a << ";\n";
  s << "};\n"
    << "extern \"C\" __global__ void thunky_map(Params p) {\n"
    << "  for (i64_t i = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += (i64_t)gridDim.x * blockDim.x) {\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    s << "    const double x" << i << " = ld_" << tname(inputs[i].dtype) << "(p.in" << i << ", " << (inputs[i].scalar ? "0" : "i") << ");\n";
  s << "    st_" << tname(out) << "(p.out, i, " << body.code << ");\n  }\n}\n";
  return {"thunky_map", s.str()};
}

std::vector<uint8_t> map_params(const std::vector<const void*>& inputs, void* out, int64_t n, const std::vector<int64_t>& axis_values) {
  std::vector<uint8_t> b;
  for (const void* p : inputs) put_ptr(b, p);
  put_ptr(b, out);
  put(b, static_cast<uint64_t>(n));
  for (int64_t v : axis_values) put(b, static_cast<uint64_t>(v));
  return b;
}

KernelSource reduce_kernel(DType in, DType out, Reduction fn, bool arg) {
  const std::string init = reduction_init(fn), step = reduction_step(fn);
  // argmax, argmin: the first element, then each that beats the best so far (core/reduction.h's arg_beats).
  const std::string beats = std::string("k == 0 || (!isnan(acc) && (isnan(v) || v ") + (fn == Reduction::max ? ">" : "<") + " acc))";
  std::ostringstream s;
  s << kPrelude << "struct Params {\n  const u8_t* in;\n  u8_t* out;\n  i64_t out_count;\n  i64_t rank;\n  i64_t shape[8];\n  i64_t reduced[8];\n};\n"
    << "extern \"C\" __global__ void thunky_reduce(Params p) {\n"
    << "  for (i64_t o = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; o < p.out_count; o += (i64_t)gridDim.x * blockDim.x) {\n"
    // The kept dimensions' indices of output element o (row-major).
    << "    i64_t idx[8];\n    i64_t rest = o;\n"
    << "    for (int d = (int)p.rank - 1; d >= 0; --d) {\n"
    << "      if (p.reduced[d]) { idx[d] = 0; continue; }\n"
    << "      idx[d] = rest % p.shape[d];\n      rest /= p.shape[d];\n    }\n"
    << "    i64_t inner = 1;\n    for (int d = 0; d < (int)p.rank; ++d) if (p.reduced[d]) inner *= p.shape[d];\n"
    << "    double acc = " << init << ";\n    i64_t at = 0;\n"
    // Walk the reduced dimensions in row-major order, as the cpu backend's flat walk meets them.
    << "    for (i64_t k = 0; k < inner; ++k) {\n"
    << "      i64_t flat = 0;\n"
    << "      for (int d = 0; d < (int)p.rank; ++d) flat = flat * p.shape[d] + idx[d];\n"
    << "      const double v = ld_" << tname(in) << "(p.in, flat);\n"
    << (arg ? "      if (" + beats + ") { acc = v; at = k; }\n" : "      acc = " + step + ";\n")
    << "      for (int d = (int)p.rank - 1; d >= 0; --d) {\n"
    << "        if (!p.reduced[d]) continue;\n"
    << "        if (++idx[d] < p.shape[d]) break;\n"
    << "        idx[d] = 0;\n      }\n    }\n"
    << "    st_" << tname(out) << "(p.out, o, " << (arg ? "(double)at" : fn == Reduction::mean ? "acc / (double)inner" : "acc") << ");\n  }\n}\n";
  return {"thunky_reduce", s.str()};
}

KernelSource transpose_kernel(size_t element_bytes) {
  std::ostringstream s;
  s << kPrelude << "struct Params {\n  const u8_t* src;\n  u8_t* dst;\n  i64_t count;\n  i64_t rank;\n  i64_t shape[8];\n  i64_t stride[8];\n};\n"
    << "extern \"C\" __global__ void thunky_transpose(Params p) {\n"
    << "  for (i64_t i = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += (i64_t)gridDim.x * blockDim.x) {\n"
    // dst's index of element i (row-major), then src's offset by the strides of the dimensions it came from.
    << "    i64_t rest = i, at = 0;\n"
    << "    for (int d = (int)p.rank - 1; d >= 0; --d) {\n      at += (rest % p.shape[d]) * p.stride[d];\n      rest /= p.shape[d];\n    }\n"
    << "    for (int b = 0; b < " << element_bytes << "; ++b) p.dst[i * " << element_bytes << " + b] = p.src[at * " << element_bytes << " + b];\n"
    << "  }\n}\n";
  return {"thunky_transpose", s.str()};
}

std::vector<uint8_t> strided_copy_params(const void* src, void* dst, const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& stride) {
  const size_t r = dst_shape.size();
  int64_t count = 1;
  for (auto d : dst_shape) count *= d;
  std::vector<uint8_t> b;
  put_ptr(b, src);
  put_ptr(b, dst);
  put(b, static_cast<uint64_t>(count));
  put(b, r);
  for (int d = 0; d < kMaxRank; ++d) put(b, d < static_cast<int>(r) ? static_cast<uint64_t>(dst_shape[static_cast<size_t>(d)]) : 1);
  for (int d = 0; d < kMaxRank; ++d) put(b, d < static_cast<int>(r) ? static_cast<uint64_t>(stride[static_cast<size_t>(d)]) : 0);
  return b;
}

std::vector<uint8_t> transpose_params(const void* src, void* dst, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& perm) {
  // dst's dimension d is src's perm[d], stepping by its stride.
  const size_t r = src_shape.size();
  std::vector<int64_t> src_stride(r, 1), shape(r), stride(r);
  for (size_t d = r; d-- > 1;) src_stride[d - 1] = src_stride[d] * src_shape[d];
  for (size_t d = 0; d < r; ++d) {
    shape[d] = src_shape[static_cast<size_t>(perm[d])];
    stride[d] = src_stride[static_cast<size_t>(perm[d])];
  }
  return strided_copy_params(src, dst, shape, stride);
}

std::vector<uint8_t> reduce_params(const void* in, void* out, int64_t out_count, const std::vector<int64_t>& shape,
                                   const std::vector<bool>& reduced) {
  std::vector<uint8_t> b;
  put_ptr(b, in);
  put_ptr(b, out);
  put(b, static_cast<uint64_t>(out_count));
  put(b, shape.size());
  for (int d = 0; d < kMaxRank; ++d) put(b, d < static_cast<int>(shape.size()) ? static_cast<uint64_t>(shape[d]) : 1);
  for (int d = 0; d < kMaxRank; ++d) put(b, d < static_cast<int>(reduced.size()) && reduced[d] ? 1 : 0);
  return b;
}

KernelSource combine_kernel(DType t, Reduction reduction) {
  const std::string step = reduction_step(reduction);
  const std::string n = tname(t);
  std::ostringstream s;
  s << kPrelude << "struct Params {\n  u8_t* out;\n  i64_t count;\n  i64_t offset;\n  i64_t k;\n  const u8_t* src[" << kMaxCombine << "];\n};\n"
    << "extern \"C\" __global__ void thunky_combine(Params p) {\n"
    << "  for (i64_t i = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += (i64_t)gridDim.x * blockDim.x) {\n"
    << "    double acc = ld_" << n << "(p.src[0], p.offset + i);\n"
    << "    for (i64_t j = 1; j < p.k; ++j) {\n"
    << "      const double v = ld_" << n << "(p.src[j], p.offset + i);\n"
    << "      acc = " << step << ";\n    }\n"
    << "    st_" << n << "(p.out, i, " << (reduction == Reduction::mean ? "acc / (double)p.k" : "acc") << ");\n  }\n}\n";
  return {"thunky_combine", s.str()};
}

std::vector<uint8_t> combine_params(void* out, int64_t count, int64_t offset, const std::vector<const void*>& srcs) {
  std::vector<uint8_t> b;
  put_ptr(b, out);
  put(b, static_cast<uint64_t>(count));
  put(b, static_cast<uint64_t>(offset));
  put(b, srcs.size());
  for (int j = 0; j < kMaxCombine; ++j) put_ptr(b, j < static_cast<int>(srcs.size()) ? srcs[j] : nullptr);
  return b;
}

KernelSource support_kernels() {
  std::string s = kPrelude;
  s += R"(
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);

struct FillParams { u8_t* dst; i64_t n; i64_t elem_bytes; u64_t pattern; };
extern "C" __global__ void thunky_fill(FillParams p) {
  for (i64_t i = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += (i64_t)gridDim.x * blockDim.x) {
    switch (p.elem_bytes) {
      case 1: p.dst[i] = (u8_t)p.pattern; break;
      case 2: ((unsigned short*)p.dst)[i] = (unsigned short)p.pattern; break;
      case 4: ((unsigned*)p.dst)[i] = (unsigned)p.pattern; break;
      default: ((u64_t*)p.dst)[i] = p.pattern; break;
    }
  }
}

struct TouchParams { const u8_t* src; i64_t src_bytes; u8_t* dst; i64_t dst_bytes; };
extern "C" __global__ void thunky_touch(TouchParams p) {
  unsigned sink = 0;
  const i64_t stride = (i64_t)gridDim.x * blockDim.x;
  for (i64_t i = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.src_bytes; i += stride) sink ^= p.src[i];
  for (i64_t i = (i64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.dst_bytes; i += stride) {
    volatile u8_t* d = p.dst + i;
    *d = *d;
  }
  if (sink == 0x5eed5eedu) p.dst[0] = p.dst[0];  // keeps the reads
}

struct SpinParams { u64_t ns; };
extern "C" __global__ void thunky_spin(SpinParams p) {
  if (threadIdx.x != 0) return;
  u64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < p.ns);
}

struct SetIfParams { cudaGraphConditionalHandle handle; const u8_t* pred; };
extern "C" __global__ void thunky_set_if(SetIfParams p) {
  cudaGraphSetConditional(p.handle, p.pred[0] != 0 ? 1u : 0u);
}

struct SetWhileParams { cudaGraphConditionalHandle handle; const u8_t* pred; u64_t* counter; u64_t max; u64_t* overflow; };
extern "C" __global__ void thunky_set_while(SetWhileParams p) {
  unsigned go = p.pred[0] != 0 ? 1u : 0u;
  if (go) {
    if (p.counter[0] >= p.max) {
      go = 0;
      p.overflow[0] = 1;
    } else {
      p.counter[0] += 1;
    }
  }
  cudaGraphSetConditional(p.handle, go);
}

struct SetSwitchParams { cudaGraphConditionalHandle handle; const int* index; i64_t n; };
extern "C" __global__ void thunky_set_switch(SetSwitchParams p) {
  i64_t k = p.index[0];
  if (k < 0) k = 0;
  if (k > p.n - 1) k = p.n - 1;
  cudaGraphSetConditional(p.handle, (unsigned)k);
}
)";
  return {"", s};
}

std::vector<uint8_t> pack_params(std::initializer_list<uint64_t> fields) {
  std::vector<uint8_t> b;
  for (uint64_t v : fields) put(b, v);
  return b;
}

uint64_t fill_pattern(DType t, double value) {
  uint8_t b[8] = {};
  store_from_double(b, t, 0, value);
  uint64_t v;
  std::memcpy(&v, b, 8);
  return v;
}

}  // namespace thunky::cuda
