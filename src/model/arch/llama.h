// Llama / Qwen2 decoder (deepseek-llm, deepseek-coder, R1-Distill-Llama/Qwen): GQA with optional qkv bias.
#pragma once
#include <memory>

#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_llama_model(const ModelConfig& config, WeightLoader& weights, Backend& backend);

}  // namespace dsinfer
