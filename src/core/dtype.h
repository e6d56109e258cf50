// Element types of checkpoint tensors and exact conversions of the narrow formats to float.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dsinfer {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I16, I32, I64, BOOL, F64 };

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; returns false when unknown.
bool parse_dtype(std::string_view name, DType* out);

inline float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_f32(uint16_t v) {
  return bits_to_f32(static_cast<uint32_t>(v) << 16);
}

// Round to nearest even, NaN preserved.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits = f32_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t v);
// float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no infinities, 0x7f/0xff are NaN.
float f8e4m3_to_f32(uint8_t v);
// float8 e8m0fnu: an unsigned power of two 2^(v-127); 0xff is NaN.
float e8m0_to_f32(uint8_t v);
// FP4 e2m1 (one nibble): 1 sign, 2 exponent (bias 1), 1 mantissa.
float fp4_e2m1_to_f32(uint8_t nibble);

}  // namespace dsinfer
