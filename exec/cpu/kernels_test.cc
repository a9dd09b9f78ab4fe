#include "exec/cpu/kernels.h"

#include <gtest/gtest.h>

#include <cmath>

namespace thunky::cpu {
namespace {

Tensor t(std::vector<float>& v, std::vector<int64_t> shape) { return Tensor{reinterpret_cast<uint8_t*>(v.data()), DType::f32, shape}; }

TEST(Gemm, TransposesAlphaBeta) {
  // a = [[1 2 3], [4 5 6]], b = a, c = 2 * a @ b^T + 1 * c0.
  std::vector<float> a{1, 2, 3, 4, 5, 6}, c{1, 1, 1, 1};
  gemm(t(a, {2, 3}), t(a, {2, 3}), t(c, {2, 2}), false, true, 2.0, 1.0);
  // a a^T = [[14, 32], [32, 77]].
  EXPECT_EQ(c, (std::vector<float>{29, 65, 65, 155}));
  std::vector<float> d(9);
  gemm(t(a, {2, 3}), t(a, {2, 3}), t(d, {3, 3}), true, false, 1.0, 0.0);
  // a^T a: row 0 = [1*1+4*4, 1*2+4*5, 1*3+4*6].
  EXPECT_EQ(d[0], 17);
  EXPECT_EQ(d[1], 22);
  EXPECT_EQ(d[2], 27);
  EXPECT_EQ(d[8], 45);
}

TEST(Gemm, InPlaceSquareIsComputedOutOfPlace) {
  // r = r @ r with r = [[1 1], [0 1]] gives [[1 2], [0 1]].
  std::vector<float> r{1, 1, 0, 1};
  gemm(t(r, {2, 2}), t(r, {2, 2}), t(r, {2, 2}), false, false, 1.0, 0.0);
  EXPECT_EQ(r, (std::vector<float>{1, 2, 0, 1}));
}

TEST(Gemm, BatchedWithBroadcastB) {
  std::vector<float> a{1, 2, 3, 4}, b{1, 0, 0, 2}, c(4);  // a: 2 batches of [1 x 2]
  gemm(t(a, {2, 1, 2}), t(b, {2, 2}), t(c, {2, 1, 2}), false, false, 1.0, 0.0);
  EXPECT_EQ(c, (std::vector<float>{1, 4, 3, 8}));
}

TEST(Gemm, Bf16AccumulatesInF32) {
  // 256 products of 1 * (1 + 2^-7): in f32 the sum is 258 exactly; a bf16
  // accumulator would stall at 256 (its spacing there is 2).
  const int k = 256;
  std::vector<uint16_t> a(k, f32_to_bf16(1.0f)), b(k, f32_to_bf16(1.0078125f)), c(1);
  Tensor ta{reinterpret_cast<uint8_t*>(a.data()), DType::bf16, {1, k}};
  Tensor tb{reinterpret_cast<uint8_t*>(b.data()), DType::bf16, {k, 1}};
  Tensor tc{reinterpret_cast<uint8_t*>(c.data()), DType::bf16, {1, 1}};
  gemm(ta, tb, tc, false, false, 1.0, 0.0);
  EXPECT_EQ(bf16_to_f32(c[0]), 258.0f);
}

TEST(Map, PythonSemanticsPerType) {
  std::vector<int32_t> n{7, -7, 8};
  std::vector<int32_t> out(3);
  Tensor tn{reinterpret_cast<uint8_t*>(n.data()), DType::s32, {3}};
  Tensor to{reinterpret_cast<uint8_t*>(out.data()), DType::s32, {3}};
  map(*parse_expr("n // 2"), {{"n", tn}}, {}, to);
  EXPECT_EQ(out, (std::vector<int32_t>{3, -4, 4}));
  map(*parse_expr("n % 3"), {{"n", tn}}, {}, to);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 2}));
  std::vector<float> f(3);
  map(*parse_expr("n / 2 + x"), {{"n", tn}}, {{"x", 10}}, t(f, {3}));  // true division, axis value 10
  EXPECT_EQ(f, (std::vector<float>{13.5f, 6.5f, 14.0f}));
  map(*parse_expr("where(n > 0, 1.0, -1.0) * sqrt(4.0)"), {{"n", tn}}, {}, t(f, {3}));
  EXPECT_EQ(f, (std::vector<float>{2, -2, 2}));
  map(*parse_expr("bf16(1.00390625) + 0.0"), {}, {}, t(f, {3}));  // the cast rounds to bf16 first
  EXPECT_EQ(f[0], 1.0f);
}

TEST(Reduce, OverListedAxes) {
  std::vector<float> in{1, 2, 3, 4, 5, 6}, out2(2), out3(3);
  reduce(t(in, {2, 3}), {1}, Reduction::sum, t(out2, {2}));
  EXPECT_EQ(out2, (std::vector<float>{6, 15}));
  reduce(t(in, {2, 3}), {0}, Reduction::max, t(out3, {3}));
  EXPECT_EQ(out3, (std::vector<float>{4, 5, 6}));
}

TEST(Cholesky, UpperFlagGivesRowMajorUpperFactor) {
  // lower=true (column-major lower) is the row-major upper U = L^T of the
  // cholesky example's matrix: [[2 6 -8], [0 1 5], [0 0 3]]; the strict lower keeps A.
  std::vector<float> a{4, 12, -16, 12, 37, -43, -16, -43, 98};
  std::vector<int32_t> info(1, 99);
  Tensor ti{reinterpret_cast<uint8_t*>(info.data()), DType::s32, {}};
  cholesky(t(a, {3, 3}), t(a, {3, 3}), ti, true);
  EXPECT_EQ(a, (std::vector<float>{2, 6, -8, 12, 1, 5, -16, -43, 3}));
  EXPECT_EQ(info[0], 0);
}

TEST(Cholesky, OutOfPlaceTheOtherTriangleIsTheOperands) {
  // As JAX's potrf handler (and the cuda backend): the result is the
  // operand copied in, then factored. lower=false writes the row-major lower
  // L = [[2 0 0], [6 1 0], [-8 5 3]]; the strict upper keeps a's 12, -16,
  // -43, not the result's old 7s.
  std::vector<float> a{4, 12, -16, 12, 37, -43, -16, -43, 98}, r(9, 7);
  std::vector<int32_t> info(1, 99);
  cholesky(t(a, {3, 3}), t(r, {3, 3}), Tensor{reinterpret_cast<uint8_t*>(info.data()), DType::s32, {}}, false);
  EXPECT_EQ(r, (std::vector<float>{2, 12, -16, 6, 1, -43, -8, 5, 3}));
  EXPECT_EQ(info[0], 0);
}

TEST(Cholesky, InfoNamesTheFirstFailingMinor) {
  // [[1 2], [2 1]]: the 1x1 minor is fine, the 2x2 one has determinant -3.
  std::vector<float> a{1, 2, 2, 1};
  std::vector<int32_t> info(1);
  cholesky(t(a, {2, 2}), t(a, {2, 2}), Tensor{reinterpret_cast<uint8_t*>(info.data()), DType::s32, {}}, false);
  EXPECT_EQ(info[0], 2);
}

}  // namespace
}  // namespace thunky::cpu
