// The tool-calling half of a chat request: `tools`, `tool_choice` and `parallel_tool_calls` validated,
// earlier tool calls in `messages` normalised for the chat template, and the chat prompt's additions (the
// tools described in a system message when the template does not render them, and the opening of a call
// written after the generation prompt when a call is required).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/ordered_body.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {
class JsonSchema;
}

namespace dsinfer::server {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  nlohmann::json tools = nlohmann::json::array();  // [{"type": "function", "function": {"name", ...}}]
  ToolChoice choice = ToolChoice::kNone;
  std::string forced_name;  // kNamed: the function to call
  bool parallel = true;     // false: only the first call of an answer is returned
  // Tools are described to the model and its answer is read for calls.
  bool active() const { return choice != ToolChoice::kNone; }
};

// The most tools one request may declare.
constexpr size_t kMaxTools = 128;

// Reads tools / tool_choice / parallel_tool_calls (defaults as OpenAI's: "auto" with tools, "none" without).
// Throws ApiError (400) naming the field for anything malformed, a duplicate or invalid function name, or a
// tool_choice that names an undeclared function or needs tools when none are declared.
ToolRequest parse_tool_request(const nlohmann::json& body);

// One chat message's tool fields checked and put in the shape DeepSeek's templates read: an assistant
// message's tool_calls (arguments given as an object become its JSON text, a missing type "function", an
// empty content null) and a tool message's string content. Throws ApiError naming messages[index].
void normalize_tool_message(nlohmann::json& message, size_t index);

// What the chat template is given for a chat request, and what follows its rendering.
struct ToolPrompt {
  // The request's messages; with tools, plus a system message describing them. For templates that do not
  // render tools (V3's, R1's), an assistant message with both text and calls has its calls appended to its
  // text in the model's layout (the template would write only the text).
  nlohmann::json messages;
  nlohmann::json variables;  // template variables: {"tools": [...]} for templates that render tools
  std::string prefill;       // written after the generation prompt: the opening of the required call
  // The calls are in DeepSeek-V3's layout (fenced JSON arguments; else V3.1's bare one), and where the
  // prefill leaves the answer (SamplingParams::tool_arguments_start).
  bool v3_layout = false;
  int32_t arguments_start = 0;
};

// Throws ApiError (400) for active tools when the tokenizer lacks DeepSeek's tool-call tokens.
ToolPrompt tool_prompt(const ToolRequest& request, const nlohmann::json& messages,
                       const Tokenizer& tokenizer);

// Whether a chat template renders the `tools` variable itself (DeepSeek-V3.1's does, V3's and R1's do not).
bool template_renders_tools(const std::string& chat_template);

// The declared functions' parameter schemas, for holding a call's arguments to them (DeepSeek-V3's layout):
// compiled in the order the request's text declares the properties. A function without parameters, or whose
// parameters use what the decoder cannot enforce (see docs/configuration.md, response_format json_schema),
// gets none (any JSON object), unless it is strict: then ApiError (400) naming tools[i].function.parameters.
std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>> tool_parameter_schemas(
    const ToolRequest& request, OrderedBody& ordered);

// "call_" and 24 random letters and digits.
std::string new_tool_call_id();

}  // namespace dsinfer::server
