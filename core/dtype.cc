#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace thunky {

namespace {
struct Entry {
  std::string_view name;
  DType type;
};
constexpr std::array<Entry, 13> kTypes{{{"f64", DType::f64},
                                        {"f32", DType::f32},
                                        {"f16", DType::f16},
                                        {"bf16", DType::bf16},
                                        {"f8e4m3", DType::f8e4m3},
                                        {"f8e5m2", DType::f8e5m2},
                                        {"s64", DType::s64},
                                        {"s32", DType::s32},
                                        {"s16", DType::s16},
                                        {"s8", DType::s8},
                                        {"u32", DType::u32},
                                        {"u8", DType::u8},
                                        {"bool", DType::boolean}}};

// A small float format: exponent bits, mantissa bits, and whether the top
// exponent is reserved for inf/NaN (IEEE) or only the all-ones pattern is NaN (fn).
struct MiniFloat {
  int exp_bits;
  int man_bits;
  bool ieee;
};

float decode_mini(uint32_t bits, MiniFloat f) {
  const uint32_t man_mask = (1u << f.man_bits) - 1;
  const uint32_t exp_mask = (1u << f.exp_bits) - 1;
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const bool neg = (bits >> (f.exp_bits + f.man_bits)) & 1;
  const uint32_t e = (bits >> f.man_bits) & exp_mask;
  const uint32_t m = bits & man_mask;
  float v;
  if (f.ieee && e == exp_mask) {
    v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (!f.ieee && e == exp_mask && m == man_mask) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<float>(m | (1u << f.man_bits)), static_cast<int>(e) - bias - f.man_bits);
  }
  return neg ? -v : v;
}

// Encodes by rounding |v| to the nearest representable magnitude (ties to an
// even mantissa), using the monotone ordering of the bit patterns.
uint32_t encode_mini(float v, MiniFloat f) {
  const int total = f.exp_bits + f.man_bits;
  const uint32_t sign = std::signbit(v) ? (1u << total) : 0;
  const uint32_t exp_mask = (1u << f.exp_bits) - 1;
  const uint32_t man_mask = (1u << f.man_bits) - 1;
  const uint32_t nan = f.ieee ? (exp_mask << f.man_bits) | 1u << (f.man_bits - 1) : (exp_mask << f.man_bits) | man_mask;
  if (std::isnan(v)) return sign | nan;
  const uint32_t max_finite = f.ieee ? ((exp_mask - 1) << f.man_bits) | man_mask : ((exp_mask << f.man_bits) | man_mask) - 1;
  const float a = std::fabs(v);
  const float max_v = decode_mini(max_finite, f);
  if (a > max_v) {
    // Values that round back down to max stay finite; beyond the half-way point overflow.
    // Half an ulp above the largest finite value is the rounding boundary.
    const float next = max_v + (max_v - decode_mini(max_finite - 1, f)) / 2;
    if (a < next || (a == next && (max_finite & 1) == 0)) return sign | max_finite;
    return sign | (f.ieee ? (exp_mask << f.man_bits) : nan);
  }
  uint32_t lo = 0, hi = max_finite;  // largest pattern with value <= a
  while (lo < hi) {
    uint32_t mid = (lo + hi + 1) / 2;
    if (decode_mini(mid, f) <= a) lo = mid; else hi = mid - 1;
  }
  if (lo == max_finite || decode_mini(lo, f) == a) return sign | lo;
  const float below = decode_mini(lo, f), above = decode_mini(lo + 1, f);
  const float d_lo = a - below, d_hi = above - a;
  if (d_lo < d_hi) return sign | lo;
  if (d_hi < d_lo) return sign | (lo + 1);
  return sign | ((lo & 1) == 0 ? lo : lo + 1);
}

constexpr MiniFloat kE4M3{4, 3, false};
constexpr MiniFloat kE5M2{5, 2, true};

// A double stored to an integer dtype: truncated toward zero, saturated
// at the int64 range (as the GPU's conversion does), NaN as 0, then
// wrapped to the dtype's width as a C cast does (300 -> s8 44).
template <typename T>
T wrap_cast(double v) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  int64_t x;
  if (t >= 9223372036854775807.0) x = std::numeric_limits<int64_t>::max();
  else if (t <= -9223372036854775808.0) x = std::numeric_limits<int64_t>::min();
  else x = static_cast<int64_t>(t);
  if constexpr (std::is_unsigned_v<T>) {
    // Unsigned: values at or past 2^63 keep their low bits as uint64 would.
    if (t >= 9223372036854775808.0 && t < 18446744073709551616.0) return static_cast<T>(static_cast<uint64_t>(t));
    if (t >= 18446744073709551616.0) return static_cast<T>(std::numeric_limits<uint64_t>::max());
  }
  return static_cast<T>(x);
}
}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& e : kTypes)
    if (e.name == name) return e.type;
  return std::nullopt;
}
std::string_view dtype_name(DType t) { return kTypes[static_cast<size_t>(t)].name; }
bool is_float(DType t) { return t <= DType::f8e5m2; }
bool is_integer(DType t) { return t >= DType::s64 && t <= DType::u8; }

uint16_t f32_to_f16(float v) { return static_cast<uint16_t>(encode_mini(v, {5, 10, true})); }
float f16_to_f32(uint16_t h) { return decode_mini(h, {5, 10, true}); }

uint16_t f32_to_bf16(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
uint8_t f32_to_f8e4m3(float v) { return static_cast<uint8_t>(encode_mini(v, kE4M3)); }
float f8e4m3_to_f32(uint8_t b) { return decode_mini(b, kE4M3); }
uint8_t f32_to_f8e5m2(float v) { return static_cast<uint8_t>(encode_mini(v, kE5M2)); }
float f8e5m2_to_f32(uint8_t b) { return decode_mini(b, kE5M2); }

double load_as_double(const void* base, DType t, size_t i) {
  const auto* p = static_cast<const uint8_t*>(base);
  switch (t) {
    case DType::f64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case DType::f32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::f16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return f16_to_f32(v); }
    case DType::bf16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bf16_to_f32(v); }
    case DType::f8e4m3: return f8e4m3_to_f32(p[i]);
    case DType::f8e5m2: return f8e5m2_to_f32(p[i]);
    case DType::s64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case DType::s32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::s16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::s8: return static_cast<int8_t>(p[i]);
    case DType::u32: { uint32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::u8: return p[i];
    case DType::boolean: return p[i] != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void store_from_double(void* base, DType t, size_t i, double v) {
  auto* p = static_cast<uint8_t*>(base);
  switch (t) {
    case DType::f64: std::memcpy(p + 8 * i, &v, 8); return;
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); return; }
    case DType::f16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); return; }
    case DType::bf16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); return; }
    case DType::f8e4m3: p[i] = f32_to_f8e4m3(static_cast<float>(v)); return;
    case DType::f8e5m2: p[i] = f32_to_f8e5m2(static_cast<float>(v)); return;
    case DType::s64: { int64_t x = wrap_cast<int64_t>(v); std::memcpy(p + 8 * i, &x, 8); return; }
    case DType::s32: { int32_t x = wrap_cast<int32_t>(v); std::memcpy(p + 4 * i, &x, 4); return; }
    case DType::s16: { int16_t x = wrap_cast<int16_t>(v); std::memcpy(p + 2 * i, &x, 2); return; }
    case DType::s8: p[i] = static_cast<uint8_t>(wrap_cast<int8_t>(v)); return;
    case DType::u32: { uint32_t x = wrap_cast<uint32_t>(v); std::memcpy(p + 4 * i, &x, 4); return; }
    case DType::u8: p[i] = wrap_cast<uint8_t>(v); return;
    case DType::boolean: p[i] = v != 0 ? 1 : 0; return;  // NaN is true, as numpy's bool(nan)
  }
}

double round_to(DType t, double v) {
  uint8_t tmp[8];
  store_from_double(tmp, t, 0, v);
  return load_as_double(tmp, t, 0);
}

}  // namespace thunky
