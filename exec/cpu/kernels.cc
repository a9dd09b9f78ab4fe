#include "exec/cpu/kernels.h"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace thunky::cpu {

void fill_bits(const Tensor& dst, uint32_t bits) {
  for (int64_t i = 0; i < dst.count(); ++i) std::memcpy(dst.data + i * 4, &bits, 4);
}

void fill(const Tensor& dst, double value) {
  const size_t es = dtype_size(dst.dtype);
  const int64_t n = dst.count();
  if (n == 0) return;
  uint8_t pattern[8];
  store_from_double(pattern, dst.dtype, 0, value);
  bool zero = true;
  for (size_t i = 0; i < es; ++i) zero &= pattern[i] == 0;
  if (zero) {
    std::memset(dst.data, 0, dst.bytes());
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst.data + i * es, pattern, es);
}

namespace {
// The inverse of erf: Giles' approximation ("Approximating the erfinv
// function", GPU Computing Gems, 2011), then two Newton steps on erf itself
// to double precision. erf_inv(+-1) is +-inf; outside [-1, 1], NaN.
double erf_inv(double y) {
  if (!(y >= -1 && y <= 1)) return std::nan("");
  if (y == 1 || y == -1) return y * HUGE_VAL;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941}) x = c + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682}) x = c + x * w;
  }
  x *= y;
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}
}  // namespace

namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void gemm_one(const T* a, const T* b, T* c, int64_t ar, int64_t ac, int64_t br, int64_t bc, int64_t cr, int64_t cc,
              bool ta, bool tb, T alpha, T beta) {
  Eigen::Map<const RowMat<T>> A(a, ar, ac), B(b, br, bc);
  Eigen::Map<RowMat<T>> C(c, cr, cc);
  if (beta == T(0) && alpha == T(1) && !ta && !tb) {
    C.noalias() = A * B;  // the common case, exactly what a direct Eigen call does
  } else if (beta == T(0)) {
    if (!ta && !tb) C.noalias() = alpha * (A * B);
    else if (ta && !tb) C.noalias() = alpha * (A.transpose() * B);
    else if (!ta && tb) C.noalias() = alpha * (A * B.transpose());
    else C.noalias() = alpha * (A.transpose() * B.transpose());
  } else {
    if (!ta && !tb) C = beta * C + alpha * (A * B);
    else if (ta && !tb) C = beta * C + alpha * (A.transpose() * B);
    else if (!ta && tb) C = beta * C + alpha * (A * B.transpose());
    else C = beta * C + alpha * (A.transpose() * B.transpose());
  }
}

template <typename T>
void gemm_typed(const T* a, const T* b, T* c, const Tensor& ta_, const Tensor& tb_, const Tensor& tc_, bool ta, bool tb,
                double alpha, double beta) {
  auto rc = [](const Tensor& t) {
    size_t r = t.shape.size();
    return std::pair{t.shape[r - 2], t.shape[r - 1]};
  };
  auto [ar, ac] = rc(ta_);
  auto [br, bc] = rc(tb_);
  auto [cr, cc] = rc(tc_);
  const int64_t batch = tc_.shape.size() == 3 ? tc_.shape[0] : 1;
  const int64_t sa = ta_.shape.size() == 3 ? ar * ac : 0, sb = tb_.shape.size() == 3 ? br * bc : 0;
  for (int64_t i = 0; i < batch; ++i)
    gemm_one<T>(a + i * sa, b + i * sb, c + i * cr * cc, ar, ac, br, bc, cr, cc, ta, tb, static_cast<T>(alpha), static_cast<T>(beta));
}

bool overlaps(const Tensor& x, const Tensor& y) {
  return x.data < y.data + y.bytes() && y.data < x.data + x.bytes();
}

template <typename T>
std::vector<T> widen(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.count()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(load_as_double(t.data, t.dtype, i));
  return v;
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool ta, bool tb, double alpha, double beta) {
  const bool alias = overlaps(c, a) || overlaps(c, b);
  if (a.dtype == DType::f32 && b.dtype == DType::f32 && c.dtype == DType::f32 && !alias) {
    gemm_typed<float>(reinterpret_cast<const float*>(a.data), reinterpret_cast<const float*>(b.data),
                      reinterpret_cast<float*>(c.data), a, b, c, ta, tb, alpha, beta);
    return;
  }
  if (a.dtype == DType::f64 && b.dtype == DType::f64 && c.dtype == DType::f64 && !alias) {
    gemm_typed<double>(reinterpret_cast<const double*>(a.data), reinterpret_cast<const double*>(b.data),
                       reinterpret_cast<double*>(c.data), a, b, c, ta, tb, alpha, beta);
    return;
  }
  if (a.dtype == DType::s8) {
    // s8 x s8 into s32, as cuBLASLt's 32-bit integer compute: exact in
    // 64 bits, then wrapped to 32 as the GPU's accumulator wraps.
    auto A = widen<int64_t>(a), B = widen<int64_t>(b);
    std::vector<int64_t> C = beta != 0 ? widen<int64_t>(c) : std::vector<int64_t>(static_cast<size_t>(c.count()));
    gemm_typed<int64_t>(A.data(), B.data(), C.data(), a, b, c, ta, tb, alpha, beta);
    for (size_t i = 0; i < C.size(); ++i) {
      const auto v = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(C[i])));
      std::memcpy(c.data + i * 4, &v, 4);
    }
    return;
  }
  // Narrow types, mixed types or aliasing: compute out of place in the
  // accumulation type, then store (rounding once).
  if (a.dtype == DType::f64) {
    auto A = widen<double>(a), B = widen<double>(b), C = widen<double>(c);
    gemm_typed<double>(A.data(), B.data(), C.data(), a, b, c, ta, tb, alpha, beta);
    for (size_t i = 0; i < C.size(); ++i) store_from_double(c.data, c.dtype, i, C[i]);
  } else {
    auto A = widen<float>(a), B = widen<float>(b);
    std::vector<float> C = beta != 0 ? widen<float>(c) : std::vector<float>(static_cast<size_t>(c.count()));
    gemm_typed<float>(A.data(), B.data(), C.data(), a, b, c, ta, tb, alpha, beta);
    if (c.dtype == DType::f32) std::memcpy(c.data, C.data(), C.size() * 4);
    else
      for (size_t i = 0; i < C.size(); ++i) store_from_double(c.data, c.dtype, i, C[i]);
  }
}

namespace {

enum class VT { i, f, b };

struct Node {
  const Expr* e;
  VT type;
  std::vector<Node> kids;
  int input = -1;         // name of an input
  double constant = 0;    // literal or axis value
  bool is_const = false;
  DType cast = DType::f32;
};

VT promote(VT a, VT b) { return (a == VT::f || b == VT::f) ? VT::f : VT::i; }

Node build(const Expr& e, const std::vector<MapInput>& inputs, const std::vector<std::pair<std::string, int64_t>>& axes) {
  Node n{&e, VT::f, {}};
  for (const auto& a : e.args) n.kids.push_back(build(*a, inputs, axes));
  switch (e.kind) {
    case Expr::Kind::int_lit: n.type = VT::i; n.is_const = true; n.constant = static_cast<double>(e.ival); break;
    case Expr::Kind::float_lit: n.type = VT::f; n.is_const = true; n.constant = e.fval; break;
    case Expr::Kind::bool_lit: n.type = VT::b; n.is_const = true; n.constant = static_cast<double>(e.ival); break;
    case Expr::Kind::name: {
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].name == e.text) {
          n.input = static_cast<int>(i);
          DType t = inputs[i].tensor.dtype;
          n.type = is_float(t) ? VT::f : t == DType::boolean ? VT::b : VT::i;
          return n;
        }
      for (const auto& [name, v] : axes)
        if (name == e.text) {
          n.type = VT::i;
          n.is_const = true;
          n.constant = static_cast<double>(v);
          return n;
        }
      throw std::runtime_error("unknown name '" + e.text + "' in map expression");
    }
    case Expr::Kind::unary: n.type = e.text == "not" ? VT::b : (n.kids[0].type == VT::b ? VT::i : n.kids[0].type); break;
    case Expr::Kind::binary: {
      const std::string& op = e.text;
      if (op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=" || op == "and" || op == "or") n.type = VT::b;
      else if (op == "/") n.type = VT::f;
      else n.type = promote(n.kids[0].type, n.kids[1].type);
      break;
    }
    case Expr::Kind::call: {
      const std::string& f = e.text;
      if (f == "where") n.type = promote(n.kids[1].type, n.kids[2].type);
      else if (f == "min" || f == "max") n.type = promote(n.kids[0].type, n.kids[1].type);
      else if (f == "abs" || f == "neg") n.type = n.kids[0].type == VT::b ? VT::i : n.kids[0].type;
      else if (auto t = parse_dtype(f)) {
        n.cast = *t;
        n.type = is_float(*t) ? VT::f : *t == DType::boolean ? VT::b : VT::i;
      } else n.type = VT::f;  // floor ceil round and the transcendental functions return floats
      break;
    }
  }
  return n;
}

constexpr int64_t kChunk = 256;

// An integer operand held as a double, as the GPU's conversion makes it:
// truncated, saturated at the int64 range, NaN as 0.
int64_t as_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}
// Integer division and modulo by zero give 0 (documented; the GPU kernels agree).
double int_floordiv(double a, double b) {
  const int64_t y = as_int64(b);
  if (y == 0) return 0;
  return static_cast<double>(floor_div(as_int64(a), y));
}
double int_mod(double a, double b) {
  const int64_t y = as_int64(b);
  if (y == 0) return 0;
  return static_cast<double>(floor_mod(as_int64(a), y));
}
double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Evaluates node `n` for elements [base, base + len) into out[0..len).
void eval(const Node& n, const std::vector<MapInput>& inputs, int64_t base, int64_t len, double* out) {
  if (n.is_const) {
    for (int64_t i = 0; i < len; ++i) out[i] = n.constant;
    return;
  }
  if (n.input >= 0) {
    const Tensor& t = inputs[n.input].tensor;
    if (t.count() == 1) {
      double v = load_as_double(t.data, t.dtype, 0);
      for (int64_t i = 0; i < len; ++i) out[i] = v;
    } else if (t.dtype == DType::f32) {
      const float* p = reinterpret_cast<const float*>(t.data) + base;
      for (int64_t i = 0; i < len; ++i) out[i] = p[i];
    } else {
      for (int64_t i = 0; i < len; ++i) out[i] = load_as_double(t.data, t.dtype, base + i);
    }
    return;
  }
  double a[kChunk], b[kChunk], c[kChunk];
  const std::string& op = n.e->text;
  if (n.e->kind == Expr::Kind::unary) {
    eval(n.kids[0], inputs, base, len, a);
    if (op == "-") for (int64_t i = 0; i < len; ++i) out[i] = -a[i];
    else for (int64_t i = 0; i < len; ++i) out[i] = a[i] == 0 ? 1 : 0;
    return;
  }
  if (n.e->kind == Expr::Kind::binary) {
    eval(n.kids[0], inputs, base, len, a);
    eval(n.kids[1], inputs, base, len, b);
    const bool ints = n.kids[0].type != VT::f && n.kids[1].type != VT::f;
    if (op == "+") for (int64_t i = 0; i < len; ++i) out[i] = a[i] + b[i];
    else if (op == "-") for (int64_t i = 0; i < len; ++i) out[i] = a[i] - b[i];
    else if (op == "*") for (int64_t i = 0; i < len; ++i) out[i] = a[i] * b[i];
    else if (op == "/") for (int64_t i = 0; i < len; ++i) out[i] = a[i] / b[i];
    else if (op == "//") for (int64_t i = 0; i < len; ++i) out[i] = ints ? int_floordiv(a[i], b[i]) : std::floor(a[i] / b[i]);
    else if (op == "%") for (int64_t i = 0; i < len; ++i) out[i] = ints ? int_mod(a[i], b[i]) : float_mod(a[i], b[i]);
    else if (op == "**") for (int64_t i = 0; i < len; ++i) out[i] = std::pow(a[i], b[i]);
    else if (op == "<") for (int64_t i = 0; i < len; ++i) out[i] = a[i] < b[i];
    else if (op == "<=") for (int64_t i = 0; i < len; ++i) out[i] = a[i] <= b[i];
    else if (op == ">") for (int64_t i = 0; i < len; ++i) out[i] = a[i] > b[i];
    else if (op == ">=") for (int64_t i = 0; i < len; ++i) out[i] = a[i] >= b[i];
    else if (op == "==") for (int64_t i = 0; i < len; ++i) out[i] = a[i] == b[i];
    else if (op == "!=") for (int64_t i = 0; i < len; ++i) out[i] = a[i] != b[i];
    else if (op == "and") for (int64_t i = 0; i < len; ++i) out[i] = (a[i] != 0) && (b[i] != 0);
    else if (op == "or") for (int64_t i = 0; i < len; ++i) out[i] = (a[i] != 0) || (b[i] != 0);
    return;
  }
  // Calls.
  if (op == "where") {
    eval(n.kids[0], inputs, base, len, a);
    eval(n.kids[1], inputs, base, len, b);
    eval(n.kids[2], inputs, base, len, c);
    for (int64_t i = 0; i < len; ++i) out[i] = a[i] != 0 ? b[i] : c[i];
    return;
  }
  if (op == "min" || op == "max") {
    eval(n.kids[0], inputs, base, len, a);
    eval(n.kids[1], inputs, base, len, b);
    if (op == "min") for (int64_t i = 0; i < len; ++i) out[i] = std::fmin(a[i], b[i]);
    else for (int64_t i = 0; i < len; ++i) out[i] = std::fmax(a[i], b[i]);
    return;
  }
  eval(n.kids[0], inputs, base, len, a);
  double (*f)(double) = nullptr;
  if (op == "sin") f = [](double x) { return std::sin(x); };
  else if (op == "cos") f = [](double x) { return std::cos(x); };
  else if (op == "tan") f = [](double x) { return std::tan(x); };
  else if (op == "exp") f = [](double x) { return std::exp(x); };
  else if (op == "log") f = [](double x) { return std::log(x); };
  else if (op == "log1p") f = [](double x) { return std::log1p(x); };
  else if (op == "sqrt") f = [](double x) { return std::sqrt(x); };
  else if (op == "rsqrt") f = [](double x) { return 1.0 / std::sqrt(x); };
  else if (op == "tanh") f = [](double x) { return std::tanh(x); };
  else if (op == "erf") f = [](double x) { return std::erf(x); };
  else if (op == "erfc") f = [](double x) { return std::erfc(x); };
  else if (op == "erf_inv") f = erf_inv;
  else if (op == "abs") f = [](double x) { return std::fabs(x); };
  else if (op == "neg") f = [](double x) { return -x; };
  else if (op == "floor") f = [](double x) { return std::floor(x); };
  else if (op == "ceil") f = [](double x) { return std::ceil(x); };
  else if (op == "round") f = [](double x) { return std::nearbyint(x); };  // half to even, as jnp.round
  if (f) {
    for (int64_t i = 0; i < len; ++i) out[i] = f(a[i]);
    return;
  }
  // A cast: round to the target type as astype does.
  for (int64_t i = 0; i < len; ++i) out[i] = round_to(n.cast, a[i]);
}

}  // namespace

void map(const Expr& expr, const std::vector<MapInput>& inputs, const std::vector<std::pair<std::string, int64_t>>& axes,
         const Tensor& out) {
  Node root = build(expr, inputs, axes);
  const int64_t n = out.count();
  // Inputs may alias out (in place): each chunk reads its inputs before it
  // writes, and chunks cover disjoint elements, so elementwise aliasing is safe.
  double buf[kChunk];
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t len = std::min(kChunk, n - base);
    eval(root, inputs, base, len, buf);
    if (out.dtype == DType::f32) {
      float* o = reinterpret_cast<float*>(out.data) + base;
      for (int64_t i = 0; i < len; ++i) o[i] = static_cast<float>(buf[i]);
    } else {
      for (int64_t i = 0; i < len; ++i) store_from_double(out.data, out.dtype, base + i, buf[i]);
    }
  }
}

void strided_copy(const Tensor& src, const std::vector<int64_t>& stride, const Tensor& dst) {
  // Walk dst in order; src's offset steps by the stride of each of dst's
  // dimensions. Elements move as bytes.
  const size_t r = dst.shape.size(), es = dtype_size(dst.dtype);
  std::vector<int64_t> idx(r, 0);
  int64_t at = 0;
  const int64_t n = dst.count();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst.data + static_cast<size_t>(i) * es, src.data + static_cast<size_t>(at) * es, es);
    for (size_t d = r; d-- > 0;) {
      at += stride[d];
      if (++idx[d] < dst.shape[d]) break;
      at -= stride[d] * dst.shape[d];
      idx[d] = 0;
    }
  }
}

void transpose(const Tensor& src, const std::vector<int64_t>& perm, const Tensor& dst) {
  // dst's dimension d steps through src's dimension perm[d].
  const size_t r = dst.shape.size();
  std::vector<int64_t> src_stride(r, 1), stride(r);
  for (size_t d = r; d-- > 1;) src_stride[d - 1] = src_stride[d] * src.shape[d];
  for (size_t d = 0; d < r; ++d) stride[d] = src_stride[static_cast<size_t>(perm[d])];
  strided_copy(src, stride, dst);
}

void reduce(const Tensor& in, const std::vector<int64_t>& axes_in, Reduction fn, const Tensor& out) {
  const size_t r = in.shape.size();
  std::vector<bool> reduced(r, false);
  for (auto a : axes_in) reduced[a < 0 ? a + static_cast<int64_t>(r) : a] = true;
  const int64_t on = out.count();
  std::vector<double> acc(static_cast<size_t>(on), reduction_identity(fn));
  std::vector<int64_t> idx(r, 0);
  const int64_t n = in.count();
  for (int64_t i = 0; i < n; ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < r; ++d)
      if (!reduced[d]) o = o * in.shape[d] + idx[d];
    double v = load_as_double(in.data, in.dtype, i);
    acc[o] = reduce_values(fn, acc[o], v);
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      if (++idx[d] < in.shape[d]) break;
      idx[d] = 0;
    }
  }
  const int64_t folded = on == 0 ? 0 : n / on;  // values folded into each out element
  for (int64_t i = 0; i < on; ++i) store_from_double(out.data, out.dtype, i, reduction_finish(fn, acc[i], folded));
}

void arg_reduce(const Tensor& in, int64_t axis, Reduction fn, const Tensor& out) {
  // in is [outer, n, inner] around the axis; out is [outer, inner].
  if (axis < 0) axis += static_cast<int64_t>(in.shape.size());
  const int64_t n = in.shape[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in.shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < in.shape.size(); ++d) inner *= in.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t at = 0;
      double best = load_as_double(in.data, in.dtype, o * n * inner + i);
      for (int64_t j = 1; j < n; ++j) {
        const double v = load_as_double(in.data, in.dtype, (o * n + j) * inner + i);
        if (arg_beats(fn, v, best)) best = v, at = j;
      }
      store_from_double(out.data, out.dtype, o * inner + i, static_cast<double>(at));
    }
}

void cholesky(const Tensor& a, const Tensor& result, const Tensor& info, bool lower) {
  const int64_t n = a.shape.back();
  const int64_t batch = n == 0 ? 0 : a.count() / (n * n);
  using M = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  for (int64_t k = 0; k < batch; ++k) {
    M m(n, n), keep(n, n);
    for (int64_t i = 0; i < n * n; ++i) {
      m.data()[i] = load_as_double(a.data, a.dtype, k * n * n + i);
    }
    // The result starts as a copy of the operand (in place or not, as
    // JAX's potrf handler copies it in): potrf writes one triangle, and
    // the other keeps the operand's values.
    keep = m;
    // potrf reads one triangle: with row-major L wanted (lower=false) that is
    // the row-major lower triangle.
    M sym = lower ? M(m.triangularView<Eigen::Upper>().transpose()) : M(m.triangularView<Eigen::Lower>());
    const M mirrored = sym.transpose();
    sym.triangularView<Eigen::StrictlyUpper>() = mirrored.triangularView<Eigen::StrictlyUpper>();
    Eigen::LLT<M> llt(sym);
    int32_t status = 0;
    if (llt.info() != Eigen::Success) {
      // Find the order of the first leading minor that is not positive definite.
      for (int64_t j = 1; j <= n; ++j) {
        Eigen::LLT<M> part(sym.topLeftCorner(j, j));
        if (part.info() != Eigen::Success) {
          status = static_cast<int32_t>(j);
          break;
        }
      }
      if (status == 0) status = static_cast<int32_t>(n);
    } else {
      M L = llt.matrixL();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          if (!lower && j <= i) keep(i, j) = L(i, j);
          if (lower && j >= i) keep(i, j) = L(j, i);
        }
    }
    for (int64_t i = 0; i < n * n; ++i) store_from_double(result.data, result.dtype, k * n * n + i, keep.data()[i]);
    store_from_double(info.data, DType::s32, k, status);
  }
}

}  // namespace thunky::cpu
