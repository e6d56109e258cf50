// Tests for make_rope_table: default, linear, llama3 and yarn inverse frequencies and attention scaling,
// checked against independent double-precision evaluations of transformers' rope initialisation formulas.
#include "model/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"

namespace dsinfer {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<double> ref_default(double theta, int64_t dim) {
  std::vector<double> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / dim);
  return inv;
}

// transformers `_compute_llama3_parameters`.
std::vector<double> ref_llama3(double theta, int64_t dim, double factor, double low_freq_factor,
                               double high_freq_factor, double old_len) {
  std::vector<double> inv = ref_default(theta, dim);
  const double low_wavelen = old_len / low_freq_factor;
  const double high_wavelen = old_len / high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * kPi / f;
    if (wavelen < high_wavelen) continue;  // high frequency: unchanged
    if (wavelen > low_wavelen) {
      f /= factor;  // low frequency: interpolated
      continue;
    }
    const double smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    f = (1 - smooth) * f / factor + smooth * f;
  }
  return inv;
}

double ref_get_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

struct YarnRef {
  std::vector<double> inv_freq;
  double attention_factor;
};

// transformers `_compute_yarn_parameters`.
YarnRef ref_yarn(const RopeConfig& r, int64_t dim) {
  const double base = r.theta, factor = r.factor;
  const double orig = static_cast<double>(r.original_max_position_embeddings);
  auto find_correction_dim = [&](double num_rotations) {
    return (dim * std::log(orig / (num_rotations * 2 * kPi))) / (2 * std::log(base));
  };
  double low = find_correction_dim(r.beta_fast);
  double high = find_correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  YarnRef out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / dim);
    const double extrapolation = 1.0 / pos_freq;
    const double interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    out.inv_freq.push_back(interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor);
  }
  if (r.attention_factor) {
    out.attention_factor = *r.attention_factor;
  } else if (r.mscale != 0 && r.mscale_all_dim != 0) {
    out.attention_factor = ref_get_mscale(factor, r.mscale) / ref_get_mscale(factor, r.mscale_all_dim);
  } else {
    out.attention_factor = ref_get_mscale(factor, 1.0);
  }
  return out;
}

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 4e-6 * std::abs(expected[i]) + 1e-30) << what << " index " << i;
  }
}

TEST(RopeTest, Default) {
  for (double theta : {10000.0, 1e6, 500000.0}) {
    for (int64_t dim : {2, 8, 16, 64, 128}) {
      RopeConfig r;
      r.theta = theta;
      RopeTable t = make_rope_table(r, dim);
      EXPECT_EQ(t.rope_dim, dim);
      EXPECT_FLOAT_EQ(t.attention_scaling, 1.0f);
      expect_close(t.inv_freq, ref_default(theta, dim), "default");
      EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);
    }
  }
}

TEST(RopeTest, Linear) {
  RopeConfig r;
  r.type = RopeType::kLinear;
  r.theta = 10000.0;
  r.factor = 2.5;
  RopeTable t = make_rope_table(r, 32);
  std::vector<double> ref = ref_default(10000.0, 32);
  for (double& f : ref) f /= 2.5;
  expect_close(t.inv_freq, ref, "linear");
  EXPECT_FLOAT_EQ(t.attention_scaling, 1.0f);
}

TEST(RopeTest, Llama3CoversAllThreeBands) {
  struct Case {
    double theta;
    int64_t dim;
    double factor, low, high;
    int64_t old_len;
  };
  // Llama 3.1 itself, and a tiny table whose 8 frequencies fall into every band.
  for (const Case& c : {Case{500000.0, 128, 8.0, 1.0, 4.0, 8192}, Case{10000.0, 16, 4.0, 1.0, 4.0, 64},
                        Case{10000.0, 64, 16.0, 2.0, 8.0, 2048}}) {
    RopeConfig r;
    r.type = RopeType::kLlama3;
    r.theta = c.theta;
    r.factor = c.factor;
    r.low_freq_factor = c.low;
    r.high_freq_factor = c.high;
    r.original_max_position_embeddings = c.old_len;
    RopeTable t = make_rope_table(r, c.dim);
    std::vector<double> ref =
        ref_llama3(c.theta, c.dim, c.factor, c.low, c.high, static_cast<double>(c.old_len));
    expect_close(t.inv_freq, ref, "llama3");
    EXPECT_FLOAT_EQ(t.attention_scaling, 1.0f);
    // The table must really differ from the unscaled one (low and medium bands exist in every case).
    std::vector<double> plain = ref_default(c.theta, c.dim);
    int unchanged = 0, divided = 0, smoothed = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      double ratio = ref[i] / plain[i];
      if (std::abs(ratio - 1) < 1e-12) {
        ++unchanged;
      } else if (std::abs(ratio - 1 / c.factor) < 1e-12) {
        ++divided;
      } else {
        ++smoothed;
      }
    }
    EXPECT_GT(unchanged, 0);
    EXPECT_GT(divided, 0);
    EXPECT_GT(smoothed, 0);
  }
}

TEST(RopeTest, YarnDeepseekV3) {
  // DeepSeek-V3: rope dim 64, factor 40, original 4096, mscale == mscale_all_dim -> attention scaling 1.
  RopeConfig r;
  r.type = RopeType::kYarn;
  r.theta = 10000.0;
  r.factor = 40.0;
  r.original_max_position_embeddings = 4096;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  r.mscale = 1.0;
  r.mscale_all_dim = 1.0;
  RopeTable t = make_rope_table(r, 64);
  YarnRef ref = ref_yarn(r, 64);
  expect_close(t.inv_freq, ref.inv_freq, "yarn v3");
  EXPECT_NEAR(t.attention_scaling, 1.0, 1e-6);
  // First frequencies extrapolate (unchanged), last interpolate (divided by the factor).
  EXPECT_NEAR(t.inv_freq[0], 1.0, 1e-6);
  EXPECT_NEAR(t.inv_freq[31] * 40.0, ref_default(10000.0, 64)[31], 1e-6 * ref_default(10000.0, 64)[31]);
}

TEST(RopeTest, YarnVariants) {
  struct Case {
    int64_t dim;
    double theta, factor;
    int64_t orig;
    double beta_fast, beta_slow, mscale, mscale_all_dim;
    bool truncate;
    std::optional<double> attention_factor;
  };
  const Case cases[] = {
      {8, 10000.0, 4.0, 64, 32.0, 1.0, 1.0, 1.0, true, std::nullopt},         // tiny-deepseek-v3 fixture
      {8, 10000.0, 8.0, 32, 32.0, 1.0, 1.0, 1.0, true, std::nullopt},         // tiny-deepseek-v2 fixture
      {64, 10000.0, 40.0, 4096, 32.0, 1.0, 0.707, 1.0, true, std::nullopt},   // mscale ratio != 1
      {64, 10000.0, 40.0, 4096, 32.0, 1.0, 0.707, 1.0, false, std::nullopt},  // no truncation
      {128, 1e6, 4.0, 32768, 32.0, 1.0, 0.0, 0.0, true, std::nullopt},        // Qwen-style: 0.1 ln(s) + 1
      {128, 1e6, 4.0, 32768, 16.0, 2.0, 1.0, 0.0, false, std::nullopt},       // mscale only: default formula
      {32, 10000.0, 2.0, 512, 32.0, 1.0, 1.0, 1.0, true, 1.5},                // explicit attention_factor
      {16, 10000.0, 0.5, 128, 32.0, 1.0, 0.0, 0.0, true, std::nullopt},       // factor <= 1: scaling 1
  };
  for (const Case& c : cases) {
    RopeConfig r;
    r.type = RopeType::kYarn;
    r.theta = c.theta;
    r.factor = c.factor;
    r.original_max_position_embeddings = c.orig;
    r.beta_fast = c.beta_fast;
    r.beta_slow = c.beta_slow;
    r.mscale = c.mscale;
    r.mscale_all_dim = c.mscale_all_dim;
    r.truncate = c.truncate;
    r.attention_factor = c.attention_factor;
    RopeTable t = make_rope_table(r, c.dim);
    YarnRef ref = ref_yarn(r, c.dim);
    SCOPED_TRACE(testing::Message() << "dim " << c.dim << " factor " << c.factor << " truncate " << c.truncate
                                    << " mscale " << c.mscale << "/" << c.mscale_all_dim);
    expect_close(t.inv_freq, ref.inv_freq, "yarn");
    EXPECT_NEAR(t.attention_scaling, ref.attention_factor, 1e-6 * ref.attention_factor);
  }
  // Spot values of the attention scaling.
  RopeConfig r;
  r.type = RopeType::kYarn;
  r.factor = 40.0;
  r.original_max_position_embeddings = 4096;
  EXPECT_NEAR(make_rope_table(r, 64).attention_scaling, 0.1 * std::log(40.0) + 1.0, 1e-6);
  r.mscale = 0.707;
  r.mscale_all_dim = 1.0;
  EXPECT_NEAR(make_rope_table(r, 64).attention_scaling,
              (0.0707 * std::log(40.0) + 1.0) / (0.1 * std::log(40.0) + 1.0), 1e-6);
}

TEST(RopeTest, YarnTruncateMatters) {
  // The correction range differs with and without truncation, so the tables must differ.
  RopeConfig r;
  r.type = RopeType::kYarn;
  r.factor = 40.0;
  r.original_max_position_embeddings = 4096;
  RopeTable a = make_rope_table(r, 64);
  r.truncate = false;
  RopeTable b = make_rope_table(r, 64);
  bool differ = false;
  for (size_t i = 0; i < a.inv_freq.size(); ++i) differ = differ || a.inv_freq[i] != b.inv_freq[i];
  EXPECT_TRUE(differ);
}

TEST(RopeTest, YarnMscaleHelper) {
  EXPECT_DOUBLE_EQ(yarn_mscale(1.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(yarn_mscale(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(yarn_mscale(40.0, 1.0), 0.1 * std::log(40.0) + 1.0);
  EXPECT_DOUBLE_EQ(yarn_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0);
}

TEST(RopeTest, InvalidDimension) {
  RopeConfig r;
  EXPECT_THROW(make_rope_table(r, 0), Error);
  EXPECT_THROW(make_rope_table(r, 7), Error);
  EXPECT_THROW(make_rope_table(r, -2), Error);
}

}  // namespace
}  // namespace dsinfer
