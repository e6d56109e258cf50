// Element type names, sizes and conversions of the narrow float formats.
#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace dsinfer {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
      return 2;
    case DType::F8_E4M3:
    case DType::F8_E8M0:
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F8_E4M3:
      return "F8_E4M3";
    case DType::F8_E8M0:
      return "F8_E8M0";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::I16:
      return "I16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::BOOL:
      return "BOOL";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  static constexpr struct {
    std::string_view name;
    DType type;
  } kNames[] = {{"F32", DType::F32},   {"F64", DType::F64},         {"F16", DType::F16},
                {"BF16", DType::BF16}, {"F8_E4M3", DType::F8_E4M3}, {"F8_E8M0", DType::F8_E8M0},
                {"I8", DType::I8},     {"U8", DType::U8},           {"I16", DType::I16},
                {"I32", DType::I32},   {"I64", DType::I64},         {"BOOL", DType::BOOL}};
  for (const auto& n : kNames) {
    if (n.name == name) {
      *out = n.type;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t v) {
  uint32_t sign = (v >> 15) & 1u;
  uint32_t exp = (v >> 10) & 0x1fu;
  uint32_t mant = v & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    mag = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -mag : mag;
}

float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t mant = v & 0x7u;
  float mag;
  if (exp == 0xf && mant == 0x7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x8u), static_cast<int>(exp) - 10);
  }
  return sign ? -mag : mag;
}

float e8m0_to_f32(uint8_t v) {
  if (v == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

float fp4_e2m1_to_f32(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float mag = kValues[nibble & 0x7u];
  return (nibble & 0x8u) ? -mag : mag;
}

}  // namespace dsinfer
