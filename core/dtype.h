// Element types of sched.json buffers and exact conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace thunky {

enum class DType : uint8_t { f64, f32, f16, bf16, f8e4m3, f8e5m2, s64, s32, s16, s8, u32, u8, boolean };

std::optional<DType> parse_dtype(std::string_view name);
std::string_view dtype_name(DType t);
// Bytes per element. Inline: cost accounting asks it of every view.
constexpr size_t dtype_size(DType t) {
  constexpr uint8_t kSizes[] = {8, 4, 2, 2, 1, 1, 8, 4, 2, 1, 4, 1, 1};  // in DType's order
  static_assert(sizeof(kSizes) == static_cast<size_t>(DType::boolean) + 1);
  return kSizes[static_cast<size_t>(t)];
}
static_assert(dtype_size(DType::f16) == 2 && dtype_size(DType::s64) == 8 && dtype_size(DType::boolean) == 1);
bool is_float(DType t);
bool is_integer(DType t);  // signed or unsigned integer, not bool

// Narrow float encodings, round to nearest even. f8e4m3 is the "fn" variant
// (no infinities, max 448, overflow becomes NaN); f8e5m2 is IEEE-like.
uint16_t f32_to_f16(float v);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float v);
float bf16_to_f32(uint16_t h);
uint8_t f32_to_f8e4m3(float v);
float f8e4m3_to_f32(uint8_t b);
uint8_t f32_to_f8e5m2(float v);
float f8e5m2_to_f32(uint8_t b);

// Reads element i of a typed array as a double (exact for every dtype but
// s64/u64 values beyond 2^53).
double load_as_double(const void* base, DType t, size_t i);
// Writes v converted to dtype t (floats round to nearest even; integers
// truncate toward zero, saturate at the int64 range, and wrap to the
// dtype's width as a C cast does; NaN stores 0 in an integer and true in
// a bool).
void store_from_double(void* base, DType t, size_t i, double v);
// Rounds v to the precision of dtype t, as a cast would.
double round_to(DType t, double v);

}  // namespace thunky
