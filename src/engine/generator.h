// Single-request generation: prompt ids -> sampled tokens with streaming text deltas and stop handling,
// on a private SequenceRunner (the batched engine replaces this for serving).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampling_params.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

struct GenerationResult {
  std::string text;
  std::vector<int32_t> ids;  // generated ids, including a final EOS / stop token
  FinishReason finish_reason = FinishReason::kNone;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  nlohmann::json to_json() const;  // {"text", "ids", "finish_reason", "usage"}
};

// EOS ids of a model: tokenizer_config.json's eos token plus config.json's eos_token_id(s).
std::vector<int32_t> eos_token_ids(const Model& model, const Tokenizer& tokenizer);

// Generates until a stop condition, max_tokens or the end of the model's context. `on_text` receives every
// text delta that is safe to show (never part of a stop string, never a split UTF-8 character).
GenerationResult generate(Model& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
                          const SamplingParams& params,
                          const std::function<void(std::string_view)>& on_text = nullptr);

}  // namespace dsinfer
