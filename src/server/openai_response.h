// JSON bodies of OpenAI completion / chat completion responses and stream chunks, logprobs and usage.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dsinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

struct ResponseHeader {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool chat = false;
};

// A function call of a chat answer, as OpenAI's tool_calls entries carry it.
struct ToolCallOutput {
  int32_t index = 0;  // its position among the choice's calls (stream deltas are matched by it)
  std::string id;     // "call_..."
  std::string name;
  std::string arguments;  // JSON text
};

struct ChoiceOutput {
  int32_t index = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;               // "" => null
  std::vector<ToolCallOutput> tool_calls;  // chat only; with calls, an empty text is a null content
  // Chat answers read for thinking: `reasoning_content` ("" => null); unset => no such field.
  std::optional<std::string> reasoning;
  // Completions with echo and logprobs: the leading logprobs entries nothing scores (the prompt's first
  // token): their logprob and alternatives are null; and those whose bytes are not in the text (the
  // beginning-of-sequence token the tokenizer put before an echoed text prompt): text_offset skips them.
  size_t unscored = 0;
  size_t untexted = 0;
};

// Dumps JSON for the wire (invalid UTF-8 replaced, never thrown).
std::string dump(const nlohmann::json& j);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// `top` alternatives per token (< 0: logprobs were not requested => null). A token's `token` is its text
// (U+FFFD for the bytes of an incomplete UTF-8 character), its `bytes` (chat) the bytes it adds to the
// output; text_offset starts at `offset` and advances by those bytes. Completions' top_logprobs keys a token
// that is not UTF-8 on its own as `bytes:\xe4` so that such alternatives do not collide. The first `unscored`
// entries (completions: an echoed prompt's first token) have a null logprob and null alternatives; the first
// `untexted` add no bytes to the output (text_offset does not advance over them).
nlohmann::json logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int32_t top,
                             bool chat, size_t offset = 0, size_t unscored = 0, size_t untexted = 0);

// The bytes these tokens add to the output (where the next text_offset starts), the first `untexted` none.
size_t logprobs_text_bytes(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, size_t untexted = 0);

nlohmann::json completion_body(const ResponseHeader& h, const Tokenizer& tok,
                               const std::vector<ChoiceOutput>& choices, int32_t top_logprobs,
                               const nlohmann::json& usage);

// One stream chunk for one choice. `role_delta` (chat): the first chunk of a choice carries the role.
nlohmann::json chunk_body(const ResponseHeader& h, const Tokenizer& tok, const ChoiceOutput& delta,
                          int32_t top_logprobs, bool role_delta, bool include_usage, size_t text_offset);

// The final usage-only chunk of stream_options.include_usage.
nlohmann::json usage_chunk(const ResponseHeader& h, const nlohmann::json& usage);

}  // namespace dsinfer::server
