// ToolCallParser: a small state machine over DeepSeek's tool-call markers (see tool_call_parser.h).
#include "server/tool_call_parser.h"

#include <algorithm>

namespace dsinfer::server {

namespace {

using namespace tool_markup;

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// OpenAI's function names: 1-64 of [A-Za-z0-9_-]; dots are allowed too (namespaced tools).
bool is_function_name(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

// Arguments without the ```json ... ``` fence DeepSeek-V3 wraps them in (an unclosed fence too).
std::string_view unfence(std::string_view args) {
  args = trim(args);
  if (starts_with(args, "```")) {
    const size_t eol = args.find('\n');
    args = eol == std::string_view::npos ? std::string_view() : args.substr(eol + 1);
    args = trim(args);
    if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args.remove_suffix(3);
  }
  return trim(args);
}

// The length of the longest end of `text` that could be the start of a marker (held back until it is known).
size_t marker_prefix_at_end(std::string_view text) {
  size_t hold = 0;
  for (std::string_view m : {kCallsBegin, kCallBegin}) {
    for (size_t len = std::min(m.size() - 1, text.size()); len > hold; --len) {
      if (text.substr(text.size() - len) == m.substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

// The first of `markers` in text at or after `from`: its position and which (npos when none).
std::pair<size_t, std::string_view> first_marker(std::string_view text,
                                                 std::initializer_list<std::string_view> markers,
                                                 size_t from = 0) {
  size_t best = std::string_view::npos;
  std::string_view which;
  for (std::string_view m : markers) {
    const size_t at = text.find(m, from);
    if (at < best) {
      best = at;
      which = m;
    }
  }
  return {best, which};
}

}  // namespace

bool read_tool_call(std::string_view call_text, ParsedToolCall& call, bool complete) {
  const size_t sep = call_text.find(kSep);
  if (sep == std::string_view::npos) return false;
  const std::string_view head = trim(call_text.substr(0, sep));
  const std::string_view body = call_text.substr(sep + kSep.size());
  // V3: "function" <sep> name on its own line, then the fenced arguments. V3.1: name <sep> arguments.
  const size_t eol = body.find('\n');
  const std::string_view first_line = trim(body.substr(0, eol));
  if (head == "function" && is_function_name(first_line)) {
    if (eol == std::string_view::npos && !complete) return false;  // the name's line may not be finished
    call.name = std::string(first_line);
    call.arguments = eol == std::string_view::npos ? "" : std::string(unfence(body.substr(eol + 1)));
    call.complete = complete;
    return true;
  }
  if (!is_function_name(head)) return false;
  call.name = std::string(head);
  call.arguments = std::string(unfence(body));
  call.complete = complete;
  return true;
}

void ToolCallParser::end_call(ToolParseOutput& out, std::string_view call_text, bool complete) {
  ParsedToolCall call;
  if (read_tool_call(call_text, call, complete)) {
    out.calls.push_back(std::move(call));
    ++calls_made_;
    return;
  }
  // Unreadable: kept as text, so that nothing generated is lost.
  ++unreadable_;
  out.content += kCallBegin;
  out.content += call_text;
  if (complete) out.content += kCallEnd;
}

void ToolCallParser::step(ToolParseOutput& out, bool at_end) {
  for (;;) {
    const std::string_view text = pending_;
    switch (state_) {
      case State::kContent: {
        // V3.1 sometimes opens a call without the calls-begin marker: either marker starts the calls.
        const auto [at, which] = first_marker(text, {kCallsBegin, kCallBegin});
        if (at != std::string_view::npos) {
          out.content += text.substr(0, at);
          state_ = which == kCallsBegin ? State::kBetweenCalls : State::kInCall;
          pending_.erase(0, at + which.size());
          continue;
        }
        const size_t hold = at_end ? 0 : marker_prefix_at_end(text);
        out.content += text.substr(0, text.size() - hold);
        pending_.erase(0, text.size() - hold);
        return;
      }
      case State::kBetweenCalls: {
        const std::string_view rest = trim(text);
        if (starts_with(rest, kCallBegin) || starts_with(rest, kCallsEnd)) {
          const bool call = starts_with(rest, kCallBegin);
          state_ = call ? State::kInCall : State::kContent;
          pending_.erase(
              0, static_cast<size_t>(rest.data() - text.data()) + (call ? kCallBegin : kCallsEnd).size());
          continue;
        }
        const bool could_be_marker = starts_with(kCallBegin, rest) || starts_with(kCallsEnd, rest);
        if (!at_end && could_be_marker) return;  // whitespace or the start of a marker: wait
        if (rest.empty()) {
          pending_.clear();
          return;
        }
        state_ = State::kContent;  // off the format: what follows is text
        pending_.erase(0, static_cast<size_t>(rest.data() - text.data()));
        continue;
      }
      case State::kInCall: {
        // A call ends at its end marker; a missing one is forgiven when the next call or the block ends.
        // The text already searched is not searched again (but for a marker's start at its end).
        const size_t longest = std::max({kCallEnd.size(), kCallBegin.size(), kCallsEnd.size()});
        const size_t from = call_scanned_ >= longest ? call_scanned_ - longest + 1 : 0;
        const auto [at, which] = first_marker(text, {kCallEnd, kCallBegin, kCallsEnd}, from);
        if (at == std::string_view::npos) {
          call_scanned_ = text.size();
          if (!at_end) return;
          end_call(out, text, false);
          pending_.clear();
          call_scanned_ = 0;
          state_ = State::kContent;
          return;
        }
        call_scanned_ = 0;
        end_call(out, text.substr(0, at), true);
        state_ = which == kCallBegin  ? State::kInCall
                 : which == kCallsEnd ? State::kContent
                                      : State::kBetweenCalls;
        pending_.erase(0, at + which.size());
        continue;
      }
    }
  }
}

ToolParseOutput ToolCallParser::feed(std::string_view text) {
  ToolParseOutput out;
  pending_ += text;
  step(out, false);
  return out;
}

ToolParseOutput ToolCallParser::finish() {
  ToolParseOutput out;
  step(out, true);
  return out;
}

}  // namespace dsinfer::server
