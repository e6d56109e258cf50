// `dsinfer tokenize`: ids exactly as Hugging Face produces them, and chat-template renders.
#include <iostream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/prompt.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  bool has_text = false;
  std::string input;
  std::string messages;
  bool add_generation_prompt = false;
  bool json = false;
};

int run_tokenize(const TokenizeArgs& a) {
  const int sources = (a.has_text ? 1 : 0) + (a.input.empty() ? 0 : 1) + (a.messages.empty() ? 0 : 1);
  DSI_CHECK(sources == 1, "give exactly one of --text, --input or --messages");
  DSI_CHECK(!a.add_generation_prompt || !a.messages.empty(), "--add-generation-prompt needs --messages");
  Tokenizer tok = Tokenizer::load(a.model);
  if (a.has_text) {
    std::vector<int32_t> ids = tok.encode(a.text, false);
    if (a.json) {
      std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
    }
    return 0;
  }
  if (!a.input.empty()) {
    std::vector<nlohmann::json> lines = read_json_lines(a.input);
    for (size_t i = 0; i < lines.size(); ++i) {
      DSI_CHECK(lines[i].contains("text") && lines[i]["text"].is_string(), a.input, ": entry ", i + 1,
                " needs a string \"text\" field");
      std::cout << nlohmann::json{{"ids", tok.encode(lines[i]["text"].get<std::string>(), false)}}.dump()
                << "\n";
    }
    return 0;
  }
  nlohmann::json messages = read_json_file(a.messages);
  std::string rendered = render_chat(tok, messages, a.add_generation_prompt);
  std::cout << nlohmann::json{{"prompt", rendered}, {"ids", tok.encode(rendered, false)}}.dump() << "\n";
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids of text, JSON lines or chat messages");
  cmd->add_option("--model", args->model, "Directory with tokenizer.json (+ tokenizer_config.json)")
      ->required();
  cmd->add_option("--text", args->text, "Text to encode (no special tokens added)");
  cmd->add_option("--input", args->input, "JSON lines {\"text\": ...}; prints one {\"ids\": [...]} per line");
  cmd->add_option("--messages", args->messages,
                  "JSON array of {role, content}; prints {\"prompt\", \"ids\"}");
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt,
                "With --messages: end with the assistant prompt");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args, cmd]() {
    args->has_text = cmd->count("--text") > 0;
    run_guarded([&]() { return run_tokenize(*args); });
  });
}

}  // namespace dsinfer::cli
