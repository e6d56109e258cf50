// Rotary embedding frequencies for every rope type transformers defines for these models
// (default, linear, llama3, yarn with mscale), computed once per model.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace dsinfer {

struct RopeTable {
  std::vector<float> inv_freq;     // [rope_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (yarn)
  int64_t rope_dim = 0;
};

RopeTable make_rope_table(const RopeConfig& rope, int64_t rope_dim);

// yarn_get_mscale of DeepSeek: 0.1 * mscale * ln(scale) + 1 for scale > 1.
double yarn_mscale(double scale, double mscale);

}  // namespace dsinfer
