// Tool requests: validation of tools / tool_choice, tool-call history, and the prompt's tool additions.
#include "server/tool_request.h"

#include <random>
#include <regex>
#include <set>

#include "core/error.h"
#include "engine/json_schema.h"
#include "model/json_fields.h"
#include "server/api_error.h"
#include "server/ordered_body.h"
#include "server/tool_call_parser.h"

namespace dsinfer::server {

using nlohmann::json;

namespace {

using json_fields::present;

bool valid_name(const std::string& name) {
  static const std::regex pattern("[A-Za-z0-9_.-]{1,64}");
  return std::regex_match(name, pattern);
}

// One entry of `tools`, checked: {"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}}.
json checked_tool(const json& tool, size_t i) {
  const std::string where = str_cat("tools[", i, "]");
  auto fail = [&](const std::string& what) { return bad_request(where + what, "tools", "invalid_value"); };
  if (!tool.is_object()) throw fail(" must be an object {\"type\": \"function\", \"function\": {...}}");
  if (tool.value("type", json()) != "function") throw fail(".type must be \"function\"");
  if (!tool.contains("function") || !tool["function"].is_object()) throw fail(".function must be an object");
  const json& fn = tool["function"];
  if (!fn.contains("name") || !fn["name"].is_string()) throw fail(".function.name must be a string");
  if (!valid_name(fn["name"].get<std::string>()))
    throw fail(".function.name must be 1-64 letters, digits, '_', '-' or '.'");
  if (present(fn, "description") && !fn["description"].is_string())
    throw fail(".function.description must be a string");
  if (present(fn, "parameters") && !fn["parameters"].is_object())
    throw fail(".function.parameters must be a JSON Schema object");
  if (present(fn, "strict") && !fn["strict"].is_boolean()) throw fail(".function.strict must be a boolean");
  return tool;
}

void read_tool_choice(const json& choice, ToolRequest& r, const std::set<std::string>& names) {
  const char* shape =
      "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
      "{\"name\": ...}}";
  if (choice.is_string()) {
    const std::string s = choice.get<std::string>();
    if (s == "none")
      r.choice = ToolChoice::kNone;
    else if (s == "auto")
      r.choice = ToolChoice::kAuto;
    else if (s == "required")
      r.choice = ToolChoice::kRequired;
    else
      throw bad_request(shape, "tool_choice", "invalid_value");
  } else if (choice.is_object() && choice.value("type", json()) == "function" &&
             choice.contains("function") && choice["function"].is_object() &&
             choice["function"].contains("name") && choice["function"]["name"].is_string()) {
    r.choice = ToolChoice::kNamed;
    r.forced_name = choice["function"]["name"].get<std::string>();
    if (!names.count(r.forced_name)) {
      throw bad_request(
          str_cat("'tool_choice' names the function '", r.forced_name, "', which is not in 'tools'"),
          "tool_choice", "invalid_value");
    }
  } else {
    throw bad_request(shape, "tool_choice", "invalid_type");
  }
  if (r.choice != ToolChoice::kNone && r.tools.empty()) {
    throw bad_request("'tool_choice' other than \"none\" needs 'tools'", "tool_choice", "invalid_value");
  }
}

// Calls ([{"function": {"name", "arguments"}}]) in DeepSeek-V3's layout, as the model writes them.
std::string v3_call_block(const json& calls) {
  using namespace tool_markup;
  std::string s(kCallsBegin);
  for (size_t j = 0; j < calls.size(); ++j) {
    const json& fn = calls[j]["function"];
    s += str_cat(j == 0 ? "" : "\n", kCallBegin, "function", kSep, fn["name"].get<std::string>(),
                 "\n```json\n", fn["arguments"].get<std::string>(), "\n```", kCallEnd);
  }
  return s + std::string(kCallsEnd);
}

// The tools described for the model, in the call layout DeepSeek-V3 was trained on (see tool_call_parser.h).
std::string tools_description(const ToolRequest& r) {
  std::string s = "## Tools\n\nYou can call these functions:\n";
  for (const json& tool : r.tools) {
    const json& fn = tool["function"];
    s += str_cat("\n### ", fn["name"].get<std::string>(), "\n");
    if (present(fn, "description")) s += fn["description"].get<std::string>() + "\n";
    const json params = present(fn, "parameters") ? fn["parameters"] : json::object();
    s += str_cat("Parameters (JSON Schema):\n```json\n", params.dump(), "\n```\n");
  }
  const json example =
      json::parse(R"([{"function": {"name": "FUNCTION_NAME", "arguments": "{\"parameter\": \"value\"}"}},
                                       {"function": {"name": "OTHER_FUNCTION_NAME", "arguments": "{}"}}])");
  s += str_cat(
      "\nTo call functions, answer with a block in this form and nothing after it: as many calls as needed, "
      "each call's arguments one JSON object.\n",
      v3_call_block(example), "\n");
  if (!r.parallel) s += "Call at most one function per answer.\n";
  if (r.choice == ToolChoice::kRequired) s += "This answer must call at least one function.\n";
  if (r.choice == ToolChoice::kNamed) s += str_cat("This answer must call ", r.forced_name, ".\n");
  return s;
}

bool has_tool_tokens(const Tokenizer& tok) {
  using namespace tool_markup;
  for (std::string_view marker : {kCallsBegin, kCallsEnd, kCallBegin, kCallEnd, kSep})
    if (!tok.token_to_id(marker)) return false;
  return true;
}

// DeepSeek-V3's template writes an assistant message's calls only when its content is null: one with text
// and calls becomes text followed by the calls in the model's own layout, as the model wrote them.
void inline_calls_after_text(json& messages) {
  for (json& m : messages) {
    if (m.value("role", json()) != "assistant" || !m.contains("tool_calls") || !m["tool_calls"].is_array() ||
        !m.value("content", json()).is_string())
      continue;
    m["content"] = m["content"].get<std::string>() + v3_call_block(m["tool_calls"]);
    m.erase("tool_calls");
  }
}

}  // namespace

std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>> tool_parameter_schemas(
    const ToolRequest& request, OrderedBody& ordered) {
  std::vector<std::pair<std::string, std::shared_ptr<const JsonSchema>>> out;
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const json& fn = request.tools[i]["function"];
    if (!present(fn, "parameters")) continue;
    const nlohmann::ordered_json params =
        ordered.part(nlohmann::ordered_json::json_pointer(str_cat("/tools/", i, "/function/parameters")),
                     fn["parameters"]);
    try {
      out.emplace_back(fn["name"].get<std::string>(),
                       JsonSchema::compile_cached(params, /*object_root=*/true));
    } catch (const std::exception& e) {  // (Error; anything else unexpected is still the schema's)
      if (fn.value("strict", json(false)) == json(true)) {
        throw bad_request(
            str_cat("tools[", i, "].function.parameters cannot be enforced (strict): ", e.what()), "tools",
            "invalid_value");
      }
      // Not strict: the arguments are held to a JSON object only.
    }
  }
  return out;
}

ToolRequest parse_tool_request(const json& body) {
  ToolRequest r;
  std::set<std::string> names;
  if (present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) throw bad_request("'tools' must be a list", "tools", "invalid_type");
    if (tools.size() > kMaxTools)
      throw bad_request(str_cat("'tools' may hold at most ", kMaxTools, " functions"), "tools",
                        "invalid_value");
    for (size_t i = 0; i < tools.size(); ++i) {
      r.tools.push_back(checked_tool(tools[i], i));
      const std::string name = tools[i]["function"]["name"].get<std::string>();
      if (!names.insert(name).second) {
        throw bad_request(str_cat("tools[", i, "]: the function name '", name, "' is declared twice"),
                          "tools", "invalid_value");
      }
    }
  }
  r.choice = r.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (present(body, "tool_choice")) read_tool_choice(body["tool_choice"], r, names);
  if (present(body, "parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean())
      throw bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls", "invalid_type");
    r.parallel = body["parallel_tool_calls"].get<bool>();
  }
  return r;
}

void normalize_tool_message(json& m, size_t index) {
  const std::string role = m.value("role", json()).is_string() ? m["role"].get<std::string>() : "";
  auto fail = [&](const std::string& what) {
    return bad_request(str_cat("messages[", index, "]", what), "messages", "invalid_value");
  };
  if (role == "tool") {
    if (!m.contains("content") || !m["content"].is_string())
      throw fail(".content must be the tool's result as a string");
    if (present(m, "tool_call_id") && !m["tool_call_id"].is_string())
      throw fail(".tool_call_id must be a string");
    return;
  }
  if (role != "assistant" || !present(m, "tool_calls")) return;
  json& calls = m["tool_calls"];
  if (!calls.is_array()) throw fail(".tool_calls must be a list");
  if (calls.empty()) {
    m.erase("tool_calls");
    return;
  }
  for (size_t j = 0; j < calls.size(); ++j) {
    json& call = calls[j];
    const std::string where = str_cat(".tool_calls[", j, "]");
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      throw fail(where + " must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    if (!present(call, "type")) call["type"] = "function";
    if (call["type"] != "function") throw fail(where + ".type must be \"function\"");
    json& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string())
      throw fail(where + ".function.name must be a string");
    if (!present(fn, "arguments")) fn["arguments"] = "{}";
    if (fn["arguments"].is_object()) fn["arguments"] = fn["arguments"].dump();
    if (!fn["arguments"].is_string())
      throw fail(where + ".function.arguments must be a string (JSON text) or an object");
  }
  // DeepSeek's templates write the calls only for an assistant message whose content is null.
  if (!m.contains("content") || (m["content"].is_string() && m["content"].get<std::string>().empty()))
    m["content"] = nullptr;
}

bool template_renders_tools(const std::string& chat_template) {
  static const std::regex word("\\btools\\b");
  return std::regex_search(chat_template, word);
}

ToolPrompt tool_prompt(const ToolRequest& r, const json& messages, const Tokenizer& tok) {
  using namespace tool_markup;
  ToolPrompt p;
  p.messages = messages;
  p.variables = json::object();
  const std::string& tmpl = tok.chat_template();
  const bool renders = template_renders_tools(tmpl);
  const bool tool_tokens = has_tool_tokens(tok);
  if (tool_tokens && !renders) inline_calls_after_text(p.messages);
  if (!r.active()) return p;
  if (!tool_tokens) {
    throw bad_request(str_cat("'tools': this model's tokenizer has no ", kCallsBegin,
                              " token, so it was not trained to call tools; send \"tool_choice\": \"none\""),
                      "tools", "unsupported_parameter");
  }
  // The call layout the prompt teaches: the template's own (fenced JSON for V3/R1, bare for V3.1) or ours.
  const bool v3_layout = !renders || tmpl.find("```json") != std::string::npos;
  if (renders) {
    p.variables["tools"] = r.tools;
  } else {
    size_t at = 0;  // after the leading system messages, so that templates keep their order
    while (at < p.messages.size() && p.messages[at].value("role", json()) == "system") ++at;
    p.messages.insert(p.messages.begin() + static_cast<std::ptrdiff_t>(at),
                      json{{"role", "system"}, {"content", tools_description(r)}});
  }
  p.v3_layout = v3_layout;
  p.arguments_start = r.choice == ToolChoice::kRequired ? 1 : r.choice == ToolChoice::kNamed ? 2 : 0;
  if (r.choice == ToolChoice::kRequired) {
    p.prefill = str_cat(kCallsBegin, kCallBegin, v3_layout ? str_cat("function", kSep) : "");
  } else if (r.choice == ToolChoice::kNamed) {
    p.prefill = v3_layout ? str_cat(kCallsBegin, kCallBegin, "function", kSep, r.forced_name, "\n```json\n")
                          : str_cat(kCallsBegin, kCallBegin, r.forced_name, kSep);
  }
  return p;
}

std::string new_tool_call_id() {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                   std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += alphabet[rng() % (sizeof(alphabet) - 1)];
  return id;
}

}  // namespace dsinfer::server
