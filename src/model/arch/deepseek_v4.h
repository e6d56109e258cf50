// DeepSeek-V4: hyper-connected residual streams, sliding-window + compressed (CSA / HCA) shared-KV
// attention and hash / top-k routed MoE (issue 4).
#pragma once
#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_deepseek_v4_model(const ModelConfig& config, WeightLoader& weights,
                                              Backend& backend);

}  // namespace dsinfer
