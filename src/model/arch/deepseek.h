// DeepSeek-V2 / V3 (and the MLA + MoE trunk V3.2 shares): multi-head latent attention with an absorbed
// decode path over the 576-wide latent cache, and DeepSeekMoE with shared experts.
#pragma once
#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_deepseek_model(const ModelConfig& config, WeightLoader& weights, Backend& backend);

}  // namespace dsinfer
