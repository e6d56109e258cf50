// Why a generated sequence ended, and its OpenAI-API spelling.
#pragma once
#include <string_view>

namespace dsinfer {

enum class FinishReason {
  kNone,    // still running, or the stream ended without a stop condition
  kStop,    // a stop string or a stop token id
  kLength,  // max_tokens reached
  kEos,     // the model's end-of-sequence token (reported to API clients as "stop")
  kAbort,   // cancelled by the client or the engine's shutdown, or failed
};

// "stop" for kStop and kEos, "length" for kLength, "abort" for kAbort, "none" for kNone (API layers send null
// for kNone).
constexpr std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

}  // namespace dsinfer
