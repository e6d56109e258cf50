// StopChecker: streaming stop conditions (stop strings, stop token ids, EOS, max_tokens) with hold-back of
// text that might be the start of a stop string, so a stop string is never partially emitted.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampling_params.h"

namespace dsinfer {

// What one generated token changed: text that is safe to emit now, and whether generation ends.
struct StopUpdate {
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::string stop_string;            // the matched stop string (reason kStop by string)
  std::optional<int32_t> stop_token;  // the matched stop token id or EOS id (reason kStop / kEos)

  bool finished() const { return reason != FinishReason::kNone; }
};

// Earliest occurrence of any stop string in `text`: its byte offset and index in `stops`. On a tie in
// position the shortest stop string wins (it completes first).
struct StopMatch {
  size_t pos;
  size_t index;
};
std::optional<StopMatch> find_stop_string(std::string_view text, std::span<const std::string> stops);

class StopChecker {
 public:
  // Uses params.stop, stop_token_ids, ignore_eos and max_tokens. `eos_token_ids` may be empty.
  StopChecker(const SamplingParams& params, std::vector<int32_t> eos_token_ids);

  // Feeds one generated token and its text delta (possibly empty while the detokenizer waits for more
  // bytes). Checks, in order: EOS (unless ignore_eos), stop token ids, stop strings, max_tokens. The text of
  // a stop/EOS token is not emitted; text after a stop string start is dropped. Throws once finished.
  StopUpdate on_token(int32_t token, std::string_view delta);

  // The stream ended without a stop condition: releases the held-back text ("" once finished).
  std::string finish();

  bool finished() const { return reason_ != FinishReason::kNone; }
  FinishReason reason() const { return reason_; }
  int32_t num_tokens() const { return num_tokens_; }
  // Bytes currently held back because they may begin a stop string.
  std::string_view held() const { return pending_; }

 private:
  StopUpdate end(FinishReason reason, std::string text);
  // Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold_length() const;

  std::vector<std::string> stops_;
  std::vector<int32_t> stop_token_ids_;
  std::vector<int32_t> eos_token_ids_;
  bool ignore_eos_;
  int32_t max_tokens_;
  size_t max_stop_length_ = 0;
  int32_t num_tokens_ = 0;
  std::string pending_;
  FinishReason reason_ = FinishReason::kNone;
};

// Non-streaming use: the final text and reason for a whole generation given per-token ids and deltas.
struct StopOutcome {
  std::string text;
  FinishReason reason = FinishReason::kNone;
  int32_t num_tokens = 0;  // tokens consumed, including a stop/EOS token
};
StopOutcome apply_stop_conditions(const SamplingParams& params, std::vector<int32_t> eos_token_ids,
                                  std::span<const int32_t> tokens, std::span<const std::string> deltas);

}  // namespace dsinfer
