// The cuda backend's generated kernels, checked without a GPU: the device
// source is compiled as host C++ (a small shim stands in for CUDA's
// built-ins, one thread walking the whole grid-stride loop) and run on the
// same data as the cpu backend's kernels; the results must be the same
// bits. This is what the GPU computes, up to the device math library's
// last-place differences in transcendental functions, which these cases
// avoid.
#include "exec/cuda/kernel_source.h"

#include "core/broadcast.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <tuple>

#include "core/broadcast.h"
#include "core/expr.h"
#include "core/status.h"
#include "exec/cpu/kernels.h"

namespace thunky::cuda {
namespace {

constexpr const char* kShim = R"(#include <math.h>
#include <string.h>
#define __device__
#define __forceinline__ inline
#define __global__
struct thunky_dim { unsigned x = 0, y = 0, z = 0; };
static thunky_dim blockIdx, threadIdx, blockDim{1, 1, 1}, gridDim{1, 1, 1};
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
static inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
static inline unsigned __float_as_uint(float v) { unsigned u; memcpy(&u, &v, 4); return u; }
)";

// Compiles a generated kernel as a host shared library and returns its entry.
class HostKernel {
 public:
  HostKernel(const KernelSource& src) {
    namespace fs = std::filesystem;
    dir_ = fs::temp_directory_path() / ("thunky_kernel_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "k.cc") << kShim << src.code;
    const std::string cmd = std::string(THUNKY_CXX) + " -std=c++17 -O1 -ffp-contract=off -shared -fPIC -w -o " + (dir_ / "k.so").string() + " " +
                            (dir_ / "k.cc").string() + " 2> " + (dir_ / "log").string();
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(dir_ / "log");
      ADD_FAILURE() << "the generated kernel does not compile as C++:\n" << std::string(std::istreambuf_iterator<char>(log), {});
      return;
    }
    lib_ = dlopen((dir_ / "k.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_) fn_ = dlsym(lib_, src.entry.c_str());
    EXPECT_NE(fn_, nullptr) << dlerror();
  }
  ~HostKernel() {
    if (lib_) dlclose(lib_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Calls the kernel with its parameter struct, passed by value as the
  // bytes the host side writes (8-byte fields: the C ABI passes such a
  // struct in memory, by value, like the device's parameter block).
  // Another entry of the same library, by name.
  template <size_t N>
  void call_entry(const std::string& entry, const std::vector<uint8_t>& params) {
    void* saved = fn_;
    fn_ = lib_ ? dlsym(lib_, entry.c_str()) : nullptr;
    call<N>(params);
    fn_ = saved;
  }
  template <size_t N>
  void call(const std::vector<uint8_t>& params) {
    ASSERT_NE(fn_, nullptr);
    ASSERT_EQ(params.size(), N);
    struct Blob {
      uint8_t b[N];
    } blob;
    std::memcpy(blob.b, params.data(), N);
    reinterpret_cast<void (*)(Blob)>(fn_)(blob);
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  void* lib_ = nullptr;
  void* fn_ = nullptr;
};

std::vector<uint8_t> typed(DType t, const std::vector<double>& v) {
  std::vector<uint8_t> b(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_from_double(b.data(), t, i, v[i]);
  return b;
}

// Values that probe rounding, wrapping, NaN and signed zero.
std::vector<double> probe_values() {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 3.0, -7.0, 255.0, 256.0, 300.0, -129.0, 65504.0, 65520.0, 448.0, 464.0,
                           1e-3, 6e-8, 1e30, -1e30, 3.4e38, NAN, INFINITY, -INFINITY, 2147483648.0, -2147483649.0, 4294967296.5, 1e19, -9223372036854775808.0};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1000, 1000);
  for (int i = 0; i < 33; ++i) v.push_back(u(rng));
  return v;  // 64 values
}

cpu::Tensor tensor(std::vector<uint8_t>& b, DType t, int64_t n) { return cpu::Tensor{b.data(), t, {n}}; }

// Runs `expr` over inputs x (dtype xt, the probe values) and y (dtype yt,
// the probe values reversed) into dtype `out` on both sides.
void expect_map_matches_cpu(const std::string& text, DType xt, DType yt, DType out, bool y_scalar = false) {
  SCOPED_TRACE(text + " " + std::string(dtype_name(xt)) + "," + std::string(dtype_name(yt)) + " -> " + std::string(dtype_name(out)));
  const ExprPtr e = parse_expr(text);
  const std::vector<double> xs = probe_values();
  std::vector<double> ys(xs.rbegin(), xs.rend());
  if (y_scalar) ys = {2.0};
  const int64_t n = static_cast<int64_t>(xs.size());
  auto x = typed(xt, xs), y = typed(yt, ys);
  std::vector<uint8_t> want(n * dtype_size(out)), got(n * dtype_size(out));
  cpu::map(*e, {{"x", tensor(x, xt, n)}, {"y", tensor(y, yt, static_cast<int64_t>(ys.size()))}}, {{"i", 3}}, tensor(want, out, n));
  HostKernel k(map_kernel(*e, {{"x", xt, false}, {"y", yt, y_scalar}}, {"i"}, out));
  k.call<5 * 8>(map_params({x.data(), y.data()}, got.data(), n, {3}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(0, std::memcmp(want.data() + i * dtype_size(out), got.data() + i * dtype_size(out), dtype_size(out)))
        << "element " << i << " (x = " << xs[static_cast<size_t>(i)] << "): cpu " << load_as_double(want.data(), out, i) << ", generated "
        << load_as_double(got.data(), out, i);
}

TEST(GeneratedKernels, ArithmeticAndComparisonsMatchTheCpuBackendBitForBit) {
  expect_map_matches_cpu("x * 2.0 + y", DType::f32, DType::f32, DType::f32);
  expect_map_matches_cpu("x - y / 3.0", DType::f64, DType::f32, DType::f64);
  expect_map_matches_cpu("where(x > y, x, y) + i", DType::f32, DType::f32, DType::f32);
  expect_map_matches_cpu("(x < 0.0) or (y >= 2.0) and not (x == y)", DType::f32, DType::f32, DType::boolean);
  expect_map_matches_cpu("min(x, y) * max(x, 1.0) - abs(y)", DType::f32, DType::f64, DType::f32);
  expect_map_matches_cpu("floor(x) + ceil(y) - round(x)", DType::f64, DType::f64, DType::f64);
  expect_map_matches_cpu("x // y + x % y", DType::f64, DType::f64, DType::f64);
  expect_map_matches_cpu("x * y", DType::f32, DType::f32, DType::f32, /*y_scalar=*/true);
}

TEST(GeneratedKernels, IntegerSemanticsWrapAndFloorAsOnTheCpu) {
  // Python floor semantics on integers, a zero divisor giving 0, wrapping stores.
  expect_map_matches_cpu("x // y", DType::s32, DType::s32, DType::s32);
  // INT64_MIN // -1 wraps and INT64_MIN % -1 is 0, never a signal.
  expect_map_matches_cpu("x // y", DType::s64, DType::s64, DType::s64);
  expect_map_matches_cpu("x % y", DType::s64, DType::s64, DType::s64);
  expect_map_matches_cpu("x % y", DType::s64, DType::s8, DType::s64);
  expect_map_matches_cpu("3 * x + 1", DType::s32, DType::s32, DType::s8);
  expect_map_matches_cpu("x + y", DType::u8, DType::u32, DType::u8);
  expect_map_matches_cpu("(x % 2) == 0", DType::s32, DType::s32, DType::boolean);
}

TEST(GeneratedKernels, NarrowFloatsRoundAsTheCpuBackendsConversions) {
  for (DType t : {DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2}) {
    expect_map_matches_cpu("x", DType::f64, DType::f32, t);  // a store rounds once
    expect_map_matches_cpu("x + y", t, t, DType::f32);        // loads widen exactly
    expect_map_matches_cpu("f32(x) * 0.5", DType::f64, t, t);
  }
  expect_map_matches_cpu("bf16(x) + f16(y)", DType::f32, DType::f32, DType::f32);
  expect_map_matches_cpu("s8(x) + u8(y)", DType::f32, DType::f32, DType::s16);
}

// Many map kernels in one host library: the shared prelude once, each
// kernel's Params struct and entry renamed by its index (one compile per
// batch, where one per kernel would take minutes).
class HostKernelBatch {
 public:
  explicit HostKernelBatch(const std::vector<KernelSource>& kernels) {
    std::string code;
    for (size_t k = 0; k < kernels.size(); ++k) {
      const std::string& src = kernels[k].code;
      const size_t body = src.find("struct Params {");
      if (k == 0) code = src.substr(0, body);
      std::string own = src.substr(body);
      for (const std::string& from : {std::string("Params"), kernels[k].entry}) {
        const std::string to = from + "_" + std::to_string(k);
        for (size_t at = own.find(from); at != std::string::npos; at = own.find(from, at + to.size())) own.replace(at, from.size(), to);
      }
      code += own;
    }
    lib_ = std::make_unique<HostKernel>(KernelSource{kernels.empty() ? "" : kernels[0].entry + "_0", code});
    for (size_t k = 0; k < kernels.size(); ++k) entries_.push_back(kernels[k].entry + "_" + std::to_string(k));
  }
  template <size_t N>
  void call(size_t k, const std::vector<uint8_t>& params) {
    lib_->call_entry<N>(entries_[k], params);
  }

 private:
  std::unique_ptr<HostKernel> lib_;
  std::vector<std::string> entries_;
};

// Values of every kind a dtype holds, stored into it (so each is one of
// its values): the probes, subnormals of every float type, and the
// integer types' extremes.
std::vector<double> edge_values() {
  std::vector<double> v = probe_values();
  for (double x : {5e-324, -1e-310, 1e-40, -1.4e-45, 1e-39, 6e-8, -3e-5, 0x1p-9, 0x1p-16, 127.0, -128.0, 32767.0, -32768.0, 65535.0,
                   2147483647.0, -2147483648.0, 4294967295.0, 9223372036854775807.0, 1.5e-3, -0.75})
    v.push_back(x);
  return v;
}

constexpr DType kAllDtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2, DType::s64,
                                DType::s32, DType::s16, DType::s8, DType::u32, DType::u8, DType::boolean};

TEST(GeneratedKernels, EveryOperatorFunctionAndCastOfEveryDtypeMatchesTheCpuBackend) {
  // docs/format.md's map expressions: every operator, every function and a
  // cast to every dtype, over x and y of one dtype (edge values, y the
  // same reversed) into that dtype (comparisons and logic into bool, casts
  // into f64 so that the cast's own rounding shows), for all 13 dtypes.
  std::vector<std::pair<std::string, bool>> exprs;  // text, bool output
  for (const char* op : {"+", "-", "*", "/", "//", "%", "**"}) exprs.push_back({std::string("x ") + op + " y", false});
  for (const char* op : {"<", "<=", ">", ">=", "==", "!="}) exprs.push_back({std::string("x ") + op + " y", true});
  exprs.push_back({"x and y", true});
  exprs.push_back({"x or y", true});
  exprs.push_back({"not x", true});
  exprs.push_back({"-x", false});
  exprs.push_back({"where(x > y, x, y)", false});
  for (const char* f : {"min", "max"}) exprs.push_back({std::string(f) + "(x, y)", false});
  for (const char* f : {"sin", "cos", "tan", "exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "abs", "neg", "floor", "ceil", "round"})
    exprs.push_back({std::string(f) + "(x)", false});
  const size_t casts = exprs.size();
  for (DType u : kAllDtypes) exprs.push_back({std::string(dtype_name(u)) + "(x)", false});

  const std::vector<double> xs = edge_values();
  const std::vector<double> ys(xs.rbegin(), xs.rend());
  const int64_t n = static_cast<int64_t>(xs.size());
  for (DType t : kAllDtypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<ExprPtr> parsed;
    std::vector<KernelSource> kernels;
    std::vector<DType> outs;
    for (size_t e = 0; e < exprs.size(); ++e) {
      parsed.push_back(parse_expr(exprs[e].first));
      outs.push_back(exprs[e].second ? DType::boolean : e >= casts ? DType::f64 : t);
      kernels.push_back(map_kernel(*parsed.back(), {{"x", t, false}, {"y", t, false}}, {}, outs.back()));
    }
    HostKernelBatch batch(kernels);
    auto x = typed(t, xs), y = typed(t, ys);
    for (size_t e = 0; e < exprs.size(); ++e) {
      const DType out = outs[e];
      const size_t es = dtype_size(out);
      std::vector<uint8_t> want(static_cast<size_t>(n) * es), got(static_cast<size_t>(n) * es);
      cpu::map(*parsed[e], {{"x", tensor(x, t, n)}, {"y", tensor(y, t, n)}}, {}, tensor(want, out, n));
      batch.call<4 * 8>(e, map_params({x.data(), y.data()}, got.data(), n, {}));
      int reported = 0;
      for (int64_t i = 0; i < n && reported < 3; ++i)
        if (std::memcmp(want.data() + i * es, got.data() + i * es, es) != 0 &&
            !(is_float(out) && std::isnan(load_as_double(want.data(), out, i)) && std::isnan(load_as_double(got.data(), out, i)))) {
          ++reported;
          ADD_FAILURE() << exprs[e].first << " over " << dtype_name(t) << ", x = " << load_as_double(x.data(), t, i) << ", y = "
                        << load_as_double(y.data(), t, i) << ": cpu " << load_as_double(want.data(), out, i) << ", generated "
                        << load_as_double(got.data(), out, i);
        }
    }
  }
}

// Equal bits, except that any NaN matches any NaN: IEEE leaves a NaN
// result's sign and payload open, x86 gives 0 * inf a negative NaN and
// the GPU a canonical positive one, and a compiler may swap a product's
// operands (so which NaN propagates). Both backends keep a NaN a NaN.
::testing::AssertionResult same_values(DType t, const std::vector<uint8_t>& want, const std::vector<uint8_t>& got) {
  const size_t es = dtype_size(t);
  for (size_t i = 0; i < want.size() / es; ++i) {
    if (std::memcmp(want.data() + i * es, got.data() + i * es, es) == 0) continue;
    const double w = load_as_double(want.data(), t, i), g = load_as_double(got.data(), t, i);
    if (is_float(t) && std::isnan(w) && std::isnan(g)) continue;
    return ::testing::AssertionFailure() << "element " << i << ": cpu " << w << ", generated " << g;
  }
  return ::testing::AssertionSuccess();
}

TEST(GeneratedKernels, ReductionsOfEveryDtypeMatchTheCpuBackend) {
  // reduce (sum, prod, max, min over axis 1 and over axes 0 and 2 of a
  // [3, 4, 5] view of edge values) and the shared-device collectives'
  // fold of three ranks' sources, for all 13 dtypes.
  std::vector<double> v = edge_values();
  v.resize(60);
  const std::vector<std::string> fns = {"sum", "prod", "max", "min"};
  for (DType t : kAllDtypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<KernelSource> kernels;
    for (const auto& fn : fns) kernels.push_back(reduce_kernel(t, t, *parse_reduction(fn)));
    for (const auto& fn : fns) kernels.push_back(combine_kernel(t, *parse_reduction(fn)));
    HostKernelBatch batch(kernels);
    auto in = typed(t, v);
    const cpu::Tensor tensor3{in.data(), t, {3, 4, 5}};
    for (size_t f = 0; f < fns.size(); ++f) {
      for (const auto& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0, 2}}) {
        const int64_t out_n = axes.size() == 1 ? 15 : 4;
        std::vector<uint8_t> want(static_cast<size_t>(out_n) * dtype_size(t)), got(want.size());
        cpu::reduce(tensor3, axes, *parse_reduction(fns[f]), cpu::Tensor{want.data(), t, {out_n}});
        std::vector<bool> reduced(3, false);
        for (auto a : axes) reduced[static_cast<size_t>(a)] = true;
        batch.call<(4 + 16) * 8>(f, reduce_params(in.data(), got.data(), out_n, {3, 4, 5}, reduced));
        EXPECT_TRUE(same_values(t, want, got)) << "reduce " << fns[f] << " over " << axes.size() << " axes";
      }
      // Ranks' sources are thirds of the values; element i of the result is at offset 1.
      const int64_t count = 19;
      std::vector<uint8_t> got(static_cast<size_t>(count) * dtype_size(t)), want(got.size());
      const std::vector<const void*> srcs = {in.data(), in.data() + 20 * dtype_size(t), in.data() + 40 * dtype_size(t)};
      batch.call<(4 + kMaxCombine) * 8>(fns.size() + f, combine_params(got.data(), count, 1, srcs));
      for (int64_t i = 0; i < count; ++i) {
        // The cpu communicator: acc = src0, then acc = r(acc, src_p) in double, stored once.
        double acc = load_as_double(static_cast<const uint8_t*>(srcs[0]), t, static_cast<size_t>(1 + i));
        for (int p = 1; p < 3; ++p) {
          const double x = load_as_double(static_cast<const uint8_t*>(srcs[static_cast<size_t>(p)]), t, static_cast<size_t>(1 + i));
          acc = fns[f] == "sum" ? acc + x : fns[f] == "prod" ? acc * x : fns[f] == "max" ? std::fmax(acc, x) : std::fmin(acc, x);
        }
        store_from_double(want.data(), t, static_cast<size_t>(i), acc);
      }
      EXPECT_TRUE(same_values(t, want, got)) << "combine " << fns[f];
    }
  }
}

TEST(GeneratedKernels, ABroadcastMapInputIsStagedExpandedAsOnTheCpu) {
  // The gather that stages a broadcast input: a column [3, 1] (0 1 2) and
  // a row [4] (10 11 12 13) over out [3, 4]. The column repeats along out's
  // dimension 1 (strides 1, 0), the row along dimension 0 (strides 0, 1).
  HostKernelBatch batch({transpose_kernel(4)});
  const std::vector<int32_t> column = {0, 1, 2}, row = {10, 11, 12, 13};
  const std::vector<int64_t> out_shape = {3, 4};
  for (const auto& [in, shape, want] : std::vector<std::tuple<std::vector<int32_t>, std::vector<int64_t>, std::vector<int32_t>>>{
           {column, {3, 1}, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}}, {row, {4}, {10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13}}}) {
    const std::vector<int64_t> stride = *broadcast_strides(shape, out_shape);
    std::vector<int32_t> got(12), cpu_got(12);
    batch.call<(4 + 16) * 8>(0, strided_copy_params(in.data(), got.data(), out_shape, stride));
    EXPECT_EQ(got, want);
    std::vector<int32_t> src = in;
    cpu::strided_copy(cpu::Tensor{reinterpret_cast<uint8_t*>(src.data()), DType::s32, shape}, stride,
                      cpu::Tensor{reinterpret_cast<uint8_t*>(cpu_got.data()), DType::s32, out_shape});
    EXPECT_EQ(cpu_got, want);
  }
}

TEST(GeneratedKernels, ReduceAccumulatesInTheCpuBackendsOrder) {
  // A [3, 4, 5] input reduced over axis 1, and over axes 0 and 2.
  std::vector<double> v(60);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i)) * 100;
  auto in = typed(DType::f32, v);
  cpu::Tensor t{in.data(), DType::f32, {3, 4, 5}};
  for (const std::string fn : {"sum", "max", "min", "prod", "mean"}) {
    for (const auto& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0, 2}}) {
      SCOPED_TRACE(fn + " over " + std::to_string(axes.size()) + " axes");
      const int64_t out_n = axes.size() == 1 ? 15 : 4;
      std::vector<uint8_t> want(out_n * 4), got(out_n * 4);
      cpu::reduce(t, axes, *parse_reduction(fn), cpu::Tensor{want.data(), DType::f32, {out_n}});
      HostKernel k(reduce_kernel(DType::f32, DType::f32, *parse_reduction(fn)));
      std::vector<bool> reduced(3, false);
      for (auto a : axes) reduced[static_cast<size_t>(a)] = true;
      k.call<(4 + 16) * 8>(reduce_params(in.data(), got.data(), out_n, {3, 4, 5}, reduced));
      EXPECT_EQ(want, got);
    }
  }
}

TEST(GeneratedKernels, ArgmaxAndArgminGiveTheFirstExtremeAndTheFirstNanAsTheCpuBackend) {
  // A [2, 4, 3] f32 input over axis 1: column (0, *, 0) ties at 5 (indices
  // 1 and 3: argmax 1), column (0, *, 1) has a NaN at 2 (it beats every
  // number: 2 for argmax and argmin), column (1, *, 2) falls 9 8 7 6
  // (argmax 0, argmin 3).
  const double nan = std::nan("");
  std::vector<double> v(24, 0.0);
  auto at = [&](int o, int j, int i) -> double& { return v[static_cast<size_t>((o * 4 + j) * 3 + i)]; };
  at(0, 1, 0) = 5, at(0, 3, 0) = 5;
  at(0, 2, 1) = nan, at(0, 0, 1) = -1;
  for (int j = 0; j < 4; ++j) at(1, j, 2) = 9 - j;
  auto in = typed(DType::f32, v);
  for (const std::string fn : {"max", "min"}) {
    SCOPED_TRACE("arg" + fn);
    std::vector<int32_t> want(6), got(6);
    cpu::arg_reduce(cpu::Tensor{in.data(), DType::f32, {2, 4, 3}}, 1, *parse_reduction(fn),
                    cpu::Tensor{reinterpret_cast<uint8_t*>(want.data()), DType::s32, {2, 3}});
    // argmax: [1 2 0; 0 0 0] (zeros tie at 0); argmin: [0 2 0; 0 0 3]
    // ((0, *, 0) is 0 5 0 5: its first 0; (0, *, 1) has -1 at 0 but the NaN at 2).
    EXPECT_EQ(want, (fn == "max" ? std::vector<int32_t>{1, 2, 0, 0, 0, 0} : std::vector<int32_t>{0, 2, 0, 0, 0, 3}));
    HostKernel k(reduce_kernel(DType::f32, DType::s32, *parse_reduction(fn), true));
    k.call<(4 + 16) * 8>(reduce_params(in.data(), got.data(), 6, {2, 4, 3}, {false, true, false}));
    EXPECT_EQ(want, got);
  }
}

TEST(GeneratedKernels, CollectiveReductionFoldsLeftLikeTheCpuCommunicator) {
  // Three ranks' f16 sources, reduced: element i of the result at offset 2.
  std::vector<std::vector<uint8_t>> src;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> v(8);
    for (int i = 0; i < 8; ++i) v[static_cast<size_t>(i)] = 0.1 * (r + 1) * (i + 1) + 1000 * r;
    src.push_back(typed(DType::f16, v));
  }
  for (const std::string red : {"sum", "prod", "max", "mean"}) {
    std::vector<uint8_t> got(4 * 2);
    HostKernel k(combine_kernel(DType::f16, *parse_reduction(red)));
    k.call<(4 + kMaxCombine) * 8>(combine_params(got.data(), 4, 2, {src[0].data(), src[1].data(), src[2].data()}));
    for (int i = 0; i < 4; ++i) {
      // The cpu communicator: acc = src0, then acc = r(acc, src_p) in double, stored once.
      double acc = load_as_double(src[0].data(), DType::f16, static_cast<size_t>(2 + i));
      for (int p = 1; p < 3; ++p) {
        const double v = load_as_double(src[static_cast<size_t>(p)].data(), DType::f16, static_cast<size_t>(2 + i));
        acc = red == "sum" || red == "mean" ? acc + v : red == "prod" ? acc * v : std::fmax(acc, v);
      }
      if (red == "mean") acc /= 3;  // then divided by the 3 sources
      EXPECT_EQ(load_as_double(got.data(), DType::f16, static_cast<size_t>(i)), round_to(DType::f16, acc)) << red << " " << i;
    }
  }
}

TEST(GeneratedKernels, OneKernelPerExpressionAndDtypes) {
  const ExprPtr e = parse_expr("x + 1.0");
  const auto a = map_kernel(*e, {{"x", DType::f32, false}}, {}, DType::f32);
  EXPECT_EQ(a.code, map_kernel(*e, {{"x", DType::f32, false}}, {}, DType::f32).code);
  EXPECT_NE(a.code, map_kernel(*e, {{"x", DType::bf16, false}}, {}, DType::f32).code);
  EXPECT_NE(a.code, map_kernel(*e, {{"x", DType::f32, true}}, {}, DType::f32).code);
  EXPECT_NE(a.code, map_kernel(*parse_expr("x + 2.0"), {{"x", DType::f32, false}}, {}, DType::f32).code);
}

TEST(GeneratedKernels, AnUnknownNameIsAnError) {
  EXPECT_THROW(map_kernel(*parse_expr("x + z"), {{"x", DType::f32, false}}, {}, DType::f32), ThunkyError);
}

TEST(GeneratedKernels, DeepExpressionsNeedNoDeepRecursion) {
  // A chain of 255 additions is a tree of the deepest height the parser
  // takes (256): generated with an explicit stack.
  std::string text = "x";
  for (int i = 0; i < kMaxExprHeight - 1; ++i) text += " + 1.0";
  const ExprPtr e = parse_expr(text);
  EXPECT_EQ(e->height, kMaxExprHeight);
  const auto k = map_kernel(*e, {{"x", DType::f32, false}}, {}, DType::f32);
  EXPECT_GT(k.code.size(), 255u * 8);
  EXPECT_THROW(parse_expr(text + " + 1.0"), ThunkyError);  // one more level is refused
}

TEST(GeneratedKernels, FillPatternIsTheStoredValue) {
  // bf16 1.0 is 0x3f80; s16 -2 is 0xfffe; f8e4m3 448 is 0x7e.
  EXPECT_EQ(fill_pattern(DType::bf16, 1.0), 0x3f80u);
  EXPECT_EQ(fill_pattern(DType::s16, -2.0), 0xfffeu);
  EXPECT_EQ(fill_pattern(DType::f8e4m3, 448.0), 0x7eu);
}

}  // namespace
}  // namespace thunky::cuda
