// Rope frequency tables, following transformers' rope initialisation functions.
#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsinfer {

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

std::vector<float> default_inv_freq(double theta, int64_t dim) {
  std::vector<float> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    // base ** (2i / dim) evaluated in float32 as torch does.
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    float pos_freq = std::pow(static_cast<float>(theta), exponent);
    inv[i] = 1.0f / pos_freq;
  }
  return inv;
}

}  // namespace

RopeTable make_rope_table(const RopeConfig& rope, int64_t rope_dim) {
  DSI_CHECK(rope_dim > 0 && rope_dim % 2 == 0, "rope dimension must be positive and even, got ", rope_dim);
  RopeTable table;
  table.rope_dim = rope_dim;
  table.inv_freq = default_inv_freq(rope.theta, rope_dim);
  const int64_t half = rope_dim / 2;
  switch (rope.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      for (float& f : table.inv_freq) f = f / static_cast<float>(rope.factor);
      break;
    case RopeType::kLlama3: {
      const double old_len = static_cast<double>(rope.original_max_position_embeddings);
      const double low_wavelen = old_len / rope.low_freq_factor;
      const double high_wavelen = old_len / rope.high_freq_factor;
      for (float& f : table.inv_freq) {
        double wavelen = 2 * M_PI / f;
        float scaled = wavelen > low_wavelen ? static_cast<float>(f / rope.factor) : f;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
          double smooth =
              (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
          scaled = static_cast<float>((1 - smooth) * scaled / rope.factor + smooth * scaled);
        }
        f = scaled;
      }
      break;
    }
    case RopeType::kYarn: {
      const double base = rope.theta;
      const double factor = rope.factor;
      auto correction_dim = [&](double rotations) {
        return (rope_dim * std::log(rope.original_max_position_embeddings / (rotations * 2 * M_PI))) /
               (2 * std::log(base));
      };
      double low = correction_dim(rope.beta_fast);
      double high = correction_dim(rope.beta_slow);
      if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(rope_dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        float pos_freq =
            std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(rope_dim));
        float extrapolation = 1.0f / pos_freq;
        float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
        float ramp = static_cast<float>((static_cast<double>(i) - low) / (high - low));
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        float extrapolation_factor = 1.0f - ramp;
        table.inv_freq[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
      }
      if (rope.attention_factor) {
        table.attention_scaling = static_cast<float>(*rope.attention_factor);
      } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
        table.attention_scaling =
            static_cast<float>(yarn_mscale(factor, rope.mscale) / yarn_mscale(factor, rope.mscale_all_dim));
      } else {
        table.attention_scaling = static_cast<float>(yarn_mscale(factor, 1.0));
      }
      break;
    }
  }
  return table;
}

}  // namespace dsinfer
