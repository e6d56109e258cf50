// ChatTemplate facade over the Jinja engine (see chat_template.h).
#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_parser.h"

namespace dsinfer {
namespace {

template <typename Json>
jinja::Dict make_globals(const Json& messages, bool add_generation_prompt, const Json& extra) {
  DSI_CHECK(messages.is_array(), "chat template: messages must be a JSON array");
  DSI_CHECK(extra.is_object() || extra.is_null(), "chat template: extra variables must be a JSON object");
  jinja::Dict globals;
  globals.set("messages", jinja::Value::from_json(messages));
  globals.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  globals.set("tools", jinja::Value::none());
  globals.set("documents", jinja::Value::none());
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it)
      globals.set(it.key(), jinja::Value::from_json(it.value()));
  return globals;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source)
    : ast_(std::make_unique<jinja::TemplateAst>(jinja::parse_template(source))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  return jinja::render(*ast_, make_globals(messages, add_generation_prompt, extra));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  return jinja::render(*ast_, make_globals(messages, add_generation_prompt, extra));
}

std::string chat_template_from_config(const nlohmann::json& config) {
  DSI_CHECK(config.is_object() && config.contains("chat_template"), "tokenizer config has no chat_template");
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template"))
        return entry["template"].get<std::string>();
  }
  fail("tokenizer config chat_template is neither a string nor a list with a 'default' entry");
}

}  // namespace dsinfer
