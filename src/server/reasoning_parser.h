// DeepSeek-R1's thinking in a chat answer: the text between <think> and </think> (opened by the answer or
// already by the prompt, as R1-0528's and V3.1's thinking templates do) becomes `reasoning_content`, the rest
// `content`. Incremental, like ToolCallParser: what may still be a tag is held back until it is known.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

namespace reasoning_markup {
inline constexpr std::string_view kOpen = "<think>";
inline constexpr std::string_view kClose = "</think>";
}  // namespace reasoning_markup

struct ReasoningOutput {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // opened: the prompt ends inside the thinking (with <think>), so the answer starts there.
  explicit ReasoningParser(bool opened) : state_(opened ? State::kReasoningStart : State::kStart) {}
  ReasoningOutput feed(std::string_view text);
  // The end of generation: an unclosed thinking is all reasoning.
  ReasoningOutput finish();

 private:
  // kStart: before the answer shows whether it thinks; the *Start states drop the whitespace that follows a
  // tag ("<think>\n", "</think>\n\n").
  enum class State { kStart, kReasoningStart, kReasoning, kContentStart, kContent };
  void step(ReasoningOutput& out, bool at_end);

  State state_;
  std::string pending_;
};

// Whether answers are read for thinking: `mode` "deepseek_r1" always, "none" never, "auto" when the tokenizer
// has <think> and </think> tokens (R1, V3.1).
bool reasoning_enabled(const std::string& mode, const Tokenizer& tokenizer);

// Whether the prompt ends with <think> (whitespace after it aside): the answer starts inside the thinking.
bool prompt_opens_reasoning(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt);

}  // namespace dsinfer::server
