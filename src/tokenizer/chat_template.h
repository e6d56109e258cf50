// ChatTemplate: renders a Hugging Face chat_template (Jinja) into a prompt string, matching transformers'
// apply_chat_template (trim_blocks, lstrip_blocks, its tojson and raise_exception).
//
// The engine (jinja_*.h) covers the Jinja subset chat templates use. Not supported, and rejected at load
// time where it is syntax: include/import/extends/block, {% call %}, recursive loops, filtered block
// set, *args/**kwargs, macro varargs/kwargs/caller, loop.changed, the globals lipsum/cycler/joiner, and
// filters/tests/methods outside the lists in jinja_filters.cpp, jinja_tests.cpp and jinja_methods.cpp.
// Differences at render time: printf-style '%' on strings fails; dict literal keys must be strings;
// integers are 64-bit; methods must be called (d.items without () is an item lookup); |safe and
// |escape return plain strings (no Markup escaping on concatenation); case mapping covers Latin,
// Greek and Cyrillic only.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace dsinfer {

namespace jinja {
struct TemplateAst;
}

class ChatTemplate {
 public:
  // Parses the template; throws dsinfer::Error naming the construct and line when it uses anything
  // unsupported (statement, filter, test, method or function).
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // messages: JSON array of {"role", "content", ...}; extra: additional variables (bos_token, eos_token,
  // tools, ...). As in transformers, `tools` and `documents` are none unless `extra` sets them.
  // Throws dsinfer::Error on render failures, including the template's raise_exception() messages.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;
  // Same, keeping the key order of JSON objects as given (matters for templates that print dicts or
  // use tojson, e.g. tool schemas); nlohmann::json sorts keys.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

 private:
  std::unique_ptr<jinja::TemplateAst> ast_;
};

// The "chat_template" of a tokenizer_config.json (string form, or the entry named "default" when it
// is a list of {"name", "template"}). Throws dsinfer::Error when absent.
std::string chat_template_from_config(const nlohmann::json& tokenizer_config);

}  // namespace dsinfer
