#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace thunky {
namespace {

TEST(DType, NamesRoundTrip) {
  for (const char* n : {"f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "s64", "s32", "s16", "s8", "u32", "u8", "bool"}) {
    auto t = parse_dtype(n);
    ASSERT_TRUE(t) << n;
    EXPECT_EQ(dtype_name(*t), n);
  }
  EXPECT_FALSE(parse_dtype("f128"));
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8e5m2), 1u);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: spacing near 1 is 2^-7 = 0.0078125.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0.00390625f)), 1.0f);          // exactly half-way: ties to even (1.0)
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0.00390625f)), 1.015625f);  // 1.5 ulp: ties to even (2 ulp)
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0.005f)), 1.0078125f);          // above half: up
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16Limits) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);  // largest finite half
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(65520.0f))));  // half-way to 2^16 rounds to inf
  EXPECT_EQ(f16_to_f32(f32_to_f16(65519.0f)), 65504.0f);
  EXPECT_EQ(f16_to_f32(1), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.1f)), 0.0999755859375f);
}

TEST(DType, F8E4M3FnHasNoInfinity) {
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(448.0f)), 448.0f);  // S.1111.110 is the largest finite
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(460.0f)), 448.0f);  // below the half-way point 464
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(500.0f))));  // overflow is NaN in the fn variant
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // subnormal 2^(1-7) * 1/8
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-1.75f)), -1.75f);
}

TEST(DType, F8E5M2IsIeeeLike) {
  EXPECT_EQ(f8e5m2_to_f32(f32_to_f8e5m2(57344.0f)), 57344.0f);  // largest finite
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(f32_to_f8e5m2(70000.0f))));
  EXPECT_EQ(f8e5m2_to_f32(f32_to_f8e5m2(1.25f)), 1.25f);
  EXPECT_EQ(f8e5m2_to_f32(f32_to_f8e5m2(1.1f)), 1.0f);  // spacing 0.25 near 1
}

TEST(DType, IntegerStoresTruncateTowardZero) {
  int32_t v[2];
  store_from_double(v, DType::s32, 0, -2.7);
  store_from_double(v, DType::s32, 1, 2.7);
  EXPECT_EQ(v[0], -2);
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(round_to(DType::boolean, 0.5), 1.0);
  EXPECT_EQ(round_to(DType::u8, 300.0), 44.0);  // wraps as a C cast of 300 to uint8
}

TEST(DType, OutOfRangeIntegerStoresSaturateThenWrapAndNanIsZeroOrTrue) {
  int64_t w[3];
  store_from_double(w, DType::s64, 0, 1e30);   // saturates at INT64_MAX (not 0)
  store_from_double(w, DType::s64, 1, -1e30);  // and INT64_MIN
  store_from_double(w, DType::s64, 2, NAN);    // NaN stores 0
  EXPECT_EQ(w[0], INT64_MAX);
  EXPECT_EQ(w[1], INT64_MIN);
  EXPECT_EQ(w[2], 0);
  EXPECT_EQ(round_to(DType::s8, 300.0), 44.0);   // 300 = 0x12c keeps its low byte
  EXPECT_EQ(round_to(DType::u8, -1.0), 255.0);   // -1 wraps
  EXPECT_EQ(round_to(DType::s32, 1e30), -1.0);   // INT64_MAX's low 32 bits
  EXPECT_EQ(round_to(DType::u32, 1e19), 2313682944.0);  // 1e19 = 0x8ac7230489e80000 < 2^64: its low 32 bits
  EXPECT_EQ(round_to(DType::boolean, NAN), 1.0);  // bool(nan) is True, as numpy
}

}  // namespace
}  // namespace thunky
