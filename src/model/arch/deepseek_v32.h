// DeepSeek-V3.2 (DeepSeek Sparse Attention): the DeepSeek-V3 model whose MLA attends, per query token, only
// to the index_topk cached tokens its lightning indexer scores highest. See docs/deepseek_v32.md.
#pragma once
#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_deepseek_v32_model(const ModelConfig& config, WeightLoader& weights,
                                               Backend& backend);

}  // namespace dsinfer
