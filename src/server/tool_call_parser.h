// DeepSeek's tool-call markup in generated text, and the incremental parser that splits a chat answer into
// plain content and the function calls it makes.
//
// DeepSeek-V3 / R1 write calls as
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//   \n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// and DeepSeek-V3.1 as <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>; the parser reads both.
// The markers are single (non-special) tokens of the DeepSeek tokenizers, so they reach the text whole.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer::server {

namespace tool_markup {
inline constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kSep = "<｜tool▁sep｜>";
}  // namespace tool_markup

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // as generated (normally a JSON object), fences and outer whitespace removed
  bool complete = true;   // false: generation ended inside the call (arguments are cut short)
};

struct ToolParseOutput {
  std::string content;  // text outside the calls
  std::vector<ParsedToolCall> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Feed the generated text in pieces; each feed returns what became final: content that cannot be the start of
// a marker, and calls whose end marker arrived. finish() returns the rest at the end of generation. The
// concatenated content plus the calls account for every generated character except the markup: a call that
// cannot be read (no separator, no name) is returned as content, markers included.
class ToolCallParser {
 public:
  ToolParseOutput feed(std::string_view text);
  ToolParseOutput finish();
  // Whether any call has been returned.
  bool made_calls() const { return calls_made_ > 0; }
  // Call markup that could not be read (returned as content).
  size_t unreadable_calls() const { return unreadable_; }

 private:
  enum class State { kContent, kBetweenCalls, kInCall };
  void step(ToolParseOutput& out, bool at_end);
  void end_call(ToolParseOutput& out, std::string_view call_text, bool complete);

  State state_ = State::kContent;
  std::string pending_;      // text not yet classified
  size_t call_scanned_ = 0;  // in a call: how much of pending_ was searched for its end without finding it
  size_t calls_made_ = 0;
  size_t unreadable_ = 0;
};

// Reads one call's text (between the call-begin and call-end markers) in either DeepSeek layout. false when
// it has no separator or no name, or, for a call cut short (`complete` false), when the name may be cut too.
bool read_tool_call(std::string_view call_text, ParsedToolCall& call, bool complete = true);

}  // namespace dsinfer::server
