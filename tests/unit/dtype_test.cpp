// Tests for the narrow float conversions (bf16, f16, fp8 e4m3, e8m0, fp4 e2m1) against values computed
// independently from the format definitions, f32_to_bf16 rounding, dtype names, and FP8 block dequantization.
#include "core/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/weight_loader.h"

namespace dsinfer {
namespace {

using ::testing::HasSubstr;

// Value of an IEEE binary float code with `e_bits` exponent and `m_bits` mantissa bits (all-ones exponent:
// infinity or NaN).
double decode_ieee(uint32_t code, int e_bits, int m_bits) {
  const uint32_t sign = (code >> (e_bits + m_bits)) & 1u;
  const uint32_t exp = (code >> m_bits) & ((1u << e_bits) - 1);
  const uint32_t mant = code & ((1u << m_bits) - 1);
  const int bias = (1 << (e_bits - 1)) - 1;
  double mag;
  if (exp == (1u << e_bits) - 1) {
    mag = mant ? NAN : INFINITY;
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<double>(mant) / (1u << m_bits), 1 - bias);
  } else {
    mag = std::ldexp(1.0 + static_cast<double>(mant) / (1u << m_bits), static_cast<int>(exp) - bias);
  }
  return sign ? -mag : mag;
}

void expect_same_value(float actual, double expected, uint32_t code) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << "code 0x" << std::hex << code;
    return;
  }
  EXPECT_EQ(static_cast<double>(actual), expected) << "code 0x" << std::hex << code;
  EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << "code 0x" << std::hex << code;
}

TEST(DTypeTest, SizesAndNames) {
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E8M0, DType::I8,
                       DType::U8,  DType::I16, DType::I32,  DType::I64,     DType::BOOL,    DType::F64};
  const size_t sizes[] = {4, 2, 2, 1, 1, 1, 1, 2, 4, 8, 1, 8};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(dtype_size(all[i]), sizes[i]) << dtype_name(all[i]);
    DType parsed;
    ASSERT_TRUE(parse_dtype(dtype_name(all[i]), &parsed)) << dtype_name(all[i]);
    EXPECT_EQ(parsed, all[i]);
  }
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_name(DType::BF16), "BF16");
  DType out = DType::F32;
  EXPECT_FALSE(parse_dtype("F8_E5M2", &out));
  EXPECT_FALSE(parse_dtype("f32", &out));
  EXPECT_FALSE(parse_dtype("", &out));
}

TEST(DTypeTest, Bf16AllCodes) {
  for (uint32_t code = 0; code < 65536; ++code) {
    expect_same_value(bf16_to_f32(static_cast<uint16_t>(code)), decode_ieee(code, 8, 7), code);
  }
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
}

TEST(DTypeTest, F16AllCodes) {
  for (uint32_t code = 0; code < 65536; ++code) {
    expect_same_value(f16_to_f32(static_cast<uint16_t>(code)), decode_ieee(code, 5, 10), code);
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(DTypeTest, Fp8E4m3AllCodes) {
  // e4m3fn: bias 7, no infinities; only S.1111.111 is NaN.
  int nans = 0;
  for (uint32_t code = 0; code < 256; ++code) {
    const uint32_t sign = code >> 7, exp = (code >> 3) & 0xf, mant = code & 7;
    double expected;
    if (exp == 15 && mant == 7) {
      expected = NAN;
      ++nans;
    } else if (exp == 0) {
      expected = mant / 8.0 * std::pow(2.0, -6);
    } else {
      expected = (1.0 + mant / 8.0) * std::pow(2.0, static_cast<int>(exp) - 7);
    }
    if (sign) expected = -expected;
    float actual = f8e4m3_to_f32(static_cast<uint8_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << code;
    } else {
      EXPECT_EQ(static_cast<double>(actual), expected) << code;
      EXPECT_FALSE(std::isinf(actual)) << code;
    }
  }
  EXPECT_EQ(nans, 2);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x78), 256.0f);  // exponent 15 is a normal exponent in e4m3fn
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(f8e4m3_to_f32(0x07), 7 * 0.001953125f);
  EXPECT_EQ(f8e4m3_to_f32(0x08), 0.015625f);  // smallest normal 2^-6
  EXPECT_EQ(f8e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(f8e4m3_to_f32(0x80)));
}

TEST(DTypeTest, E8m0AllCodes) {
  for (uint32_t code = 0; code < 255; ++code) {
    EXPECT_EQ(static_cast<double>(e8m0_to_f32(static_cast<uint8_t>(code))),
              std::pow(2.0, static_cast<int>(code) - 127))
        << code;
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_GT(e8m0_to_f32(0), 0.0f);  // 2^-127 is a float subnormal, not zero
}

TEST(DTypeTest, Fp4E2m1AllCodes) {
  for (uint32_t code = 0; code < 16; ++code) {
    const uint32_t sign = code >> 3, exp = (code >> 1) & 3, mant = code & 1;
    double expected = exp == 0 ? mant * 0.5 : (1.0 + mant / 2.0) * std::pow(2.0, static_cast<int>(exp) - 1);
    if (sign) expected = -expected;
    EXPECT_EQ(static_cast<double>(fp4_e2m1_to_f32(static_cast<uint8_t>(code))), expected) << code;
  }
  EXPECT_EQ(fp4_e2m1_to_f32(0x7), 6.0f);
  EXPECT_EQ(fp4_e2m1_to_f32(0xf), -6.0f);
  // Only the low nibble counts.
  EXPECT_EQ(fp4_e2m1_to_f32(0x35), fp4_e2m1_to_f32(0x5));
}

// Independent round-to-nearest-even: choose the closer of the two bf16 neighbours, ties to even mantissa.
uint16_t ref_f32_to_bf16(float f) {
  const uint32_t bits = f32_to_bits(f);
  const uint16_t down = static_cast<uint16_t>(bits >> 16);
  if (std::isinf(f)) return down;
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double x = f, lo = bf16_to_f32(down);
  const double hi = (down & 0x7fff) == 0x7f7f ? std::copysign(std::ldexp(1.0, 128), x) : bf16_to_f32(up);
  const double dlo = std::abs(x - lo), dhi = std::abs(hi - x);
  if (dlo < dhi) return down;
  if (dhi < dlo) return up;
  return (down & 1) ? up : down;
}

TEST(DTypeTest, F32ToBf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // halfway, even stays
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // halfway, odd rounds up
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);  // above halfway
  EXPECT_EQ(f32_to_bf16(-1.0f - std::ldexp(1.0f, -8)), 0xbf80);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(f32_to_bf16(3.4028235e38f), 0x7f80);  // FLT_MAX rounds up to infinity
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // NaN stays NaN, also a signalling NaN whose payload lies only in the low 16 bits.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    uint16_t b = f32_to_bf16(bits_to_f32(nan_bits));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan_bits;
    EXPECT_EQ(b >> 15, nan_bits >> 31);
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f = bits_to_f32(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), ref_f32_to_bf16(f)) << std::hex << bits;
  }
  // Every bf16 value round-trips exactly.
  for (uint32_t code = 0; code < 65536; ++code) {
    float f = bf16_to_f32(static_cast<uint16_t>(code));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), code);
  }
}

// ---------------------------------------------------------------------------------------------------------
// dequantize_fp8_blocks

Tensor random_fp8(int64_t n, int64_t k, uint32_t seed) {
  Tensor w = Tensor::empty(DType::F8_E4M3, {n, k});
  std::mt19937 rng(seed);
  uint8_t* p = w.data<uint8_t>();
  for (int64_t i = 0; i < n * k; ++i) {
    uint8_t v;
    do {
      v = static_cast<uint8_t>(rng());
    } while ((v & 0x7f) == 0x7f);  // keep NaN codes out so values compare exactly
    p[i] = v;
  }
  return w;
}

void check_dequant(int64_t n, int64_t k, int64_t bn, int64_t bk, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << n << "x" << k << " blocks " << bn << "x" << bk);
  Tensor w = random_fp8(n, k, seed);
  const int64_t sn = (n + bn - 1) / bn, sk = (k + bk - 1) / bk;
  std::vector<float> scales(sn * sk);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> dist(0.001f, 2.0f);
  for (float& s : scales) s = dist(rng);
  Tensor scale = Tensor::from_f32(scales, {sn, sk});
  Tensor out = dequantize_fp8_blocks(w, scale, bn, bk);
  ASSERT_EQ(out.dtype(), DType::F32);
  ASSERT_EQ(out.shape(), (Shape{n, k}));
  const uint8_t* codes = w.data<uint8_t>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float expected = f8e4m3_to_f32(codes[r * k + c]) * scales[(r / bn) * sk + c / bk];
      ASSERT_EQ(out.f32()[r * k + c], expected) << r << "," << c;
    }
  }
}

TEST(DequantizeFp8Test, PartialEdgeBlocks) {
  check_dequant(200, 300, 128, 128, 1);  // 2x3 scales, partial last row and column blocks
  check_dequant(128, 256, 128, 128, 2);  // exact multiples
  check_dequant(7, 5, 128, 128, 3);      // one partial block
  check_dequant(33, 70, 16, 32, 4);      // non-square blocks
  check_dequant(1, 1, 1, 1, 5);          // one scale per element
}

TEST(DequantizeFp8Test, Bf16AndE8m0Scales) {
  Tensor w = random_fp8(130, 129, 9);
  Tensor s_bf16 = Tensor::empty(DType::BF16, {2, 2});
  Tensor s_e8m0 = Tensor::empty(DType::F8_E8M0, {2, 2});
  const uint16_t bf[4] = {0x3f80, 0x4000, 0x3e80, 0xbf00};  // 1, 2, 0.25, -0.5
  const uint8_t e8[4] = {127, 128, 125, 120};               // 1, 2, 0.25, 2^-7
  for (int i = 0; i < 4; ++i) {
    s_bf16.data<uint16_t>()[i] = bf[i];
    s_e8m0.data<uint8_t>()[i] = e8[i];
  }
  Tensor a = dequantize_fp8_blocks(w, s_bf16, 128, 128);
  Tensor b = dequantize_fp8_blocks(w, s_e8m0, 128, 128);
  const uint8_t* codes = w.data<uint8_t>();
  for (int64_t r = 0; r < 130; ++r) {
    for (int64_t c = 0; c < 129; ++c) {
      const int blk = static_cast<int>((r / 128) * 2 + c / 128);
      const float v = f8e4m3_to_f32(codes[r * 129 + c]);
      ASSERT_EQ(a.f32()[r * 129 + c], v * bf16_to_f32(bf[blk]));
      ASSERT_EQ(b.f32()[r * 129 + c], v * e8m0_to_f32(e8[blk]));
    }
  }
}

TEST(DequantizeFp8Test, WrongScaleShapeIsAnError) {
  Tensor w = random_fp8(200, 300, 11);
  for (const Shape& bad : {Shape{2, 2}, Shape{1, 3}, Shape{3, 2}, Shape{6}, Shape{2, 3, 1}}) {
    Tensor s = Tensor::zeros(DType::F32, bad);
    try {
      dequantize_fp8_blocks(w, s, 128, 128);
      ADD_FAILURE() << "expected an error for scale shape " << shape_str(bad);
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("scale_inv"));
      EXPECT_THAT(e.what(), HasSubstr(shape_str(bad)));
      EXPECT_THAT(e.what(), HasSubstr("[2, 3]"));
      EXPECT_THAT(e.what(), HasSubstr("[200, 300]"));
    }
  }
}

TEST(DequantizeFp8Test, RejectsOtherDtypesAndBadBlocks) {
  Tensor f = Tensor::zeros(DType::F32, {4, 4});
  Tensor s = Tensor::zeros(DType::F32, {1, 1});
  EXPECT_THROW(dequantize_fp8_blocks(f, s, 128, 128), Error);
  Tensor w = random_fp8(4, 4, 3);
  EXPECT_THROW(dequantize_fp8_blocks(w, s, 0, 128), Error);
  EXPECT_THROW(dequantize_fp8_blocks(w, s, 128, -1), Error);
}

}  // namespace
}  // namespace dsinfer
