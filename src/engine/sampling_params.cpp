// Validation of SamplingParams: every field is checked against its documented range.
#include "engine/sampling_params.h"

#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace dsinfer {

void SamplingParams::validate(int32_t vocab_size) const {
  DSI_CHECK(vocab_size > 0, "sampling: vocab_size must be > 0, got ", vocab_size);
  DSI_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
            "sampling: temperature must be a finite value >= 0 (0 = greedy), got ", temperature);
  DSI_CHECK(top_p > 0.0f && top_p <= 1.0f, "sampling: top_p must be in (0, 1], got ", top_p);
  DSI_CHECK(min_p >= 0.0f && min_p <= 1.0f, "sampling: min_p must be in [0, 1], got ", min_p);
  DSI_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
            "sampling: repetition_penalty must be a finite value > 0 (1 = off), got ", repetition_penalty);
  DSI_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
            "sampling: presence_penalty must be in [-2, 2], got ", presence_penalty);
  DSI_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
            "sampling: frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  if (prompt_logprobs >= 0) {
    DSI_CHECK(max_tokens >= 0, "sampling: max_tokens must be >= 0, got ", max_tokens);
  } else {
    DSI_CHECK(max_tokens >= 1, "sampling: max_tokens must be >= 1 (0 only with prompt_logprobs), got ",
              max_tokens);
  }
  DSI_CHECK(stop.size() <= kMaxStopStrings, "sampling: stop must have at most ", kMaxStopStrings,
            " strings, got ", stop.size());
  for (size_t i = 0; i < stop.size(); ++i) {
    DSI_CHECK(!stop[i].empty(), "sampling: stop[", i, "] must be a non-empty string");
    DSI_CHECK(stop[i].size() <= kMaxStopStringBytes, "sampling: stop[", i, "] must be at most ",
              kMaxStopStringBytes, " bytes, got ", stop[i].size());
  }
  DSI_CHECK(stop_token_ids.size() <= kMaxStopTokenIds, "sampling: stop_token_ids must have at most ",
            kMaxStopTokenIds, " ids, got ", stop_token_ids.size());
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    DSI_CHECK(stop_token_ids[i] >= 0 && stop_token_ids[i] < vocab_size, "sampling: stop_token_ids[", i,
              "] must be in [0, ", vocab_size, "), got ", stop_token_ids[i]);
  }
  DSI_CHECK(logit_bias_ids.size() == logit_bias_values.size(), "sampling: logit_bias has ",
            logit_bias_ids.size(), " ids but ", logit_bias_values.size(), " values");
  DSI_CHECK(logit_bias_ids.size() <= kMaxLogitBias, "sampling: logit_bias must have at most ", kMaxLogitBias,
            " tokens, got ", logit_bias_ids.size());
  std::unordered_set<int32_t> biased;
  for (size_t i = 0; i < logit_bias_ids.size(); ++i) {
    const int32_t id = logit_bias_ids[i];
    const float v = logit_bias_values[i];
    DSI_CHECK(id >= 0 && id < vocab_size, "sampling: logit_bias token ", id, " must be in [0, ", vocab_size,
              ")");
    DSI_CHECK(biased.insert(id).second, "sampling: logit_bias has token ", id, " twice");
    DSI_CHECK(std::isfinite(v) && v >= -kMaxLogitBiasValue && v <= kMaxLogitBiasValue,
              "sampling: logit_bias of token ", id, " must be in [-", kMaxLogitBiasValue, ", ",
              kMaxLogitBiasValue, "], got ", v);
  }
  DSI_CHECK(
      !(json_object && ignore_eos),
      "sampling: json_object (response_format) cannot be combined with ignore_eos: the answer ends with the "
      "object");
  DSI_CHECK(json_object || !json_schema, "sampling: json_schema needs json_object (it narrows JSON mode)");
  DSI_CHECK(!(json_object && json_tool_arguments),
            "sampling: json_object and json_tool_arguments cannot be combined");
  DSI_CHECK(tool_arguments_start >= 0 && tool_arguments_start <= 2,
            "sampling: tool_arguments_start must be 0, 1 or 2, got ", tool_arguments_start);
  DSI_CHECK(logprobs >= 0 && logprobs <= kMaxLogprobs, "sampling: logprobs must be in [0, ", kMaxLogprobs,
            "], got ", logprobs);
  DSI_CHECK(prompt_logprobs >= -1 && prompt_logprobs <= kMaxLogprobs,
            "sampling: prompt_logprobs must be in [-1, ", kMaxLogprobs, "] (-1 = off), got ",
            prompt_logprobs);
}

}  // namespace dsinfer
