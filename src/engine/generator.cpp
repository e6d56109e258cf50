// The sample -> detokenize -> stop-check loop for one request.
#include "engine/generator.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "engine/stop_checker.h"

namespace dsinfer {

nlohmann::json GenerationResult::to_json() const {
  return {{"text", text},
          {"ids", ids},
          {"finish_reason", to_string(finish_reason)},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

std::vector<int32_t> eos_token_ids(const Model& model, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids = model.config().eos_token_ids;
  if (tokenizer.eos_id() && std::find(ids.begin(), ids.end(), *tokenizer.eos_id()) == ids.end()) {
    ids.push_back(*tokenizer.eos_id());
  }
  return ids;
}

GenerationResult generate(Model& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
                          const SamplingParams& params,
                          const std::function<void(std::string_view)>& on_text) {
  const int64_t context = model.config().max_position_embeddings;
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  DSI_CHECK(!prompt_ids.empty(), "the prompt is empty");
  DSI_CHECK(static_cast<int64_t>(prompt_ids.size()) < context, "the prompt has ", prompt_ids.size(),
            " tokens; the model's context is ", context, " tokens, leaving no room to generate");
  params.validate(vocab);
  GenerationResult result;
  result.prompt_tokens = static_cast<int32_t>(prompt_ids.size());
  if (params.max_tokens == 0) {
    result.finish_reason = FinishReason::kLength;
    return result;
  }
  SequenceRunner runner(model, context);
  Sampler sampler(params, prompt_ids);
  StopChecker stops(params, eos_token_ids(model, tokenizer));
  IncrementalDetokenizer detok(tokenizer, /*skip_special_tokens=*/true);
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (on_text) on_text(text);
  };
  Tensor logits = runner.append(prompt_ids);  // [1, V]
  while (true) {
    const int32_t token = sampler.sample(logits.f32(), vocab);
    sampler.accept(token);
    result.ids.push_back(token);
    std::string delta = token < tokenizer.vocab_size() ? detok.push(token) : std::string();
    StopUpdate update = stops.on_token(token, delta);
    emit(update.text);
    if (update.finished()) {
      result.finish_reason = update.reason;
      break;
    }
    if (runner.length() + 1 >= context) {  // no room for the next token's cache row
      emit(stops.finish());
      result.finish_reason = FinishReason::kLength;
      break;
    }
    logits = runner.append({token});
  }
  // A length stop may leave the bytes of an incomplete character: decode shows them as U+FFFD.
  if (result.finish_reason == FinishReason::kLength) emit(detok.flush());
  result.completion_tokens = static_cast<int32_t>(result.ids.size());
  return result;
}

}  // namespace dsinfer
