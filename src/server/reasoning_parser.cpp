// ReasoningParser: splits thinking from the answer (see reasoning_parser.h).
#include "server/reasoning_parser.h"

#include <algorithm>

namespace dsinfer::server {

namespace {

using namespace reasoning_markup;

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t leading_space(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_space(s[n])) ++n;
  return n;
}

// The length of the longest end of `text` that could be the start of `tag`.
size_t tag_prefix_at_end(std::string_view text, std::string_view tag) {
  for (size_t len = std::min(tag.size() - 1, text.size()); len > 0; --len)
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

}  // namespace

void ReasoningParser::step(ReasoningOutput& out, bool at_end) {
  for (;;) {
    std::string_view text = pending_;
    switch (state_) {
      case State::kStart: {
        const std::string_view rest = text.substr(leading_space(text));
        if (rest.substr(0, kOpen.size()) == kOpen) {
          pending_.erase(0, static_cast<size_t>(rest.data() - text.data()) + kOpen.size());
          state_ = State::kReasoningStart;
          continue;
        }
        if (!at_end && kOpen.substr(0, rest.size()) == rest) return;  // may still open: wait
        state_ = State::kContent;  // an answer without thinking: the text as it is
        continue;
      }
      case State::kReasoningStart:
      case State::kContentStart: {
        const size_t space = leading_space(text);
        pending_.erase(0, space);
        if (pending_.empty() && !at_end) return;
        state_ = state_ == State::kReasoningStart ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t close = text.find(kClose);
        if (close != std::string_view::npos) {
          // The whitespace before </think> is not part of the reasoning.
          std::string_view thought = text.substr(0, close);
          while (!thought.empty() && is_space(thought.back())) thought.remove_suffix(1);
          out.reasoning += thought;
          pending_.erase(0, close + kClose.size());
          state_ = State::kContentStart;
          continue;
        }
        // Held back: a possible start of </think> and the whitespace before it.
        size_t keep = at_end ? 0 : tag_prefix_at_end(text, kClose);
        if (!at_end) {
          while (keep < text.size() && is_space(text[text.size() - keep - 1])) ++keep;
        }
        std::string_view thought = text.substr(0, text.size() - keep);
        if (at_end)
          while (!thought.empty() && is_space(thought.back())) thought.remove_suffix(1);
        out.reasoning += thought;
        pending_.erase(0, text.size() - keep);
        if (at_end) pending_.clear();
        return;
      }
      case State::kContent:
        out.content += pending_;
        pending_.clear();
        return;
    }
  }
}

ReasoningOutput ReasoningParser::feed(std::string_view text) {
  ReasoningOutput out;
  pending_ += text;
  step(out, false);
  return out;
}

ReasoningOutput ReasoningParser::finish() {
  ReasoningOutput out;
  step(out, true);
  return out;
}

bool reasoning_enabled(const std::string& mode, const Tokenizer& tok) {
  if (mode == "deepseek_r1") return true;
  if (mode != "auto") return false;
  return tok.token_to_id(kOpen).has_value() && tok.token_to_id(kClose).has_value();
}

bool prompt_opens_reasoning(const Tokenizer& tok, const std::vector<int32_t>& prompt) {
  // The last few tokens suffice: <think> is one token in R1's tokenizer, a few in others.
  const size_t tail = std::min<size_t>(prompt.size(), 8);
  std::string text =
      tok.decode(std::vector<int32_t>(prompt.end() - static_cast<std::ptrdiff_t>(tail), prompt.end()));
  while (!text.empty() && is_space(text.back())) text.pop_back();
  return text.size() >= kOpen.size() && std::string_view(text).substr(text.size() - kOpen.size()) == kOpen;
}

}  // namespace dsinfer::server
