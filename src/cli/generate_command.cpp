// `dsinfer generate`: text generation from a prompt or a chat message, streamed to the terminal as it is
// produced, or from a JSON-lines file whose requests all run through the batched engine at once (results in
// input order); --json prints one JSON object per request.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "backend/backend_factory.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "dsinfer/engine.h"
#include "engine/generator.h"
#include "engine/prompt.h"
#include "model/model.h"

namespace dsinfer::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string chat;
  std::string system;
  std::string input;
  std::string device = "auto";
  std::string cuda_arch = "auto";
  SamplingParams params;
  int64_t seed = -1;
  bool json = false;
  int32_t max_batch_size = 64;       // --input: engine sequences per step
  int32_t max_num_tokens = 2048;     // --input: engine tokens per step
  bool no_async_scheduling = false;  // --input: the engine waits for each step's tokens before the next
};

// Per-line overrides of the sampling parameters in --input files.
SamplingParams line_params(const SamplingParams& base, const nlohmann::json& line, size_t number) {
  SamplingParams p = base;
  auto number_field = [&](const char* key, auto* out) {
    if (!line.contains(key) || line[key].is_null()) return;
    DSI_CHECK(line[key].is_number(), "--input line ", number, ": \"", key, "\" must be a number");
    *out = line[key].get<std::remove_reference_t<decltype(*out)>>();
  };
  number_field("max_tokens", &p.max_tokens);
  number_field("temperature", &p.temperature);
  number_field("top_p", &p.top_p);
  number_field("top_k", &p.top_k);
  number_field("min_p", &p.min_p);
  if (line.contains("seed") && !line["seed"].is_null()) {
    DSI_CHECK(line["seed"].is_number_integer(), "--input line ", number, ": \"seed\" must be an integer");
    p.seed = line["seed"].get<uint64_t>();
  }
  if (line.contains("stop")) {
    p.stop.clear();
    const auto& s = line["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else {
      DSI_CHECK(s.is_array(), "--input line ", number, ": \"stop\" must be a string or a list of strings");
      for (const auto& e : s) {
        DSI_CHECK(e.is_string(), "--input line ", number, ": \"stop\" entries must be strings");
        p.stop.push_back(e.get<std::string>());
      }
    }
  }
  return p;
}

std::vector<int32_t> chat_ids(const Tokenizer& tok, const std::string& system, const std::string& user) {
  nlohmann::json messages = nlohmann::json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  return encode_chat_prompt(tok, messages, true);
}

// --input: every line's request goes to the batched engine at once; results print in input order as soon
// as they and every earlier line are done.
int run_input_file(const GenerateArgs& a) {
  std::vector<nlohmann::json> lines = read_json_lines(a.input);
  EngineConfig config;
  config.model_dir = a.model;
  config.device = a.device;
  config.cuda_arch = a.cuda_arch;
  config.max_batch_size = a.max_batch_size;
  config.max_num_tokens = a.max_num_tokens;
  config.async_scheduling = !a.no_async_scheduling;
  std::unique_ptr<Engine> engine = Engine::create(config);
  const Tokenizer& tok = engine->tokenizer();
  struct Slot {
    GenerationResult result;
    std::string error;
    bool done = false;
  };
  std::vector<Slot> slots(lines.size());
  std::mutex mutex;
  std::condition_variable done;
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& line = lines[i];
    GenerationRequest r;
    if (line.contains("messages")) {
      r.prompt_ids = encode_chat_prompt(tok, line["messages"], true);
    } else {
      const char* key = line.contains("prompt") ? "prompt" : "text";
      DSI_CHECK(line.contains(key) && line[key].is_string(), a.input, ": line ", i + 1,
                " needs a string \"prompt\" (or \"messages\")");
      r.prompt_ids = encode_text_prompt(tok, line[key].get<std::string>());
    }
    r.sampling = line_params(a.params, line, i + 1);
    try {
      r.sampling.validate(static_cast<int32_t>(engine->model_config().vocab_size));
    } catch (const Error& e) {
      fail(a.input, ": line ", i + 1, ": ", e.what());
    }
    slots[i].result.prompt_tokens = static_cast<int32_t>(r.prompt_ids.size());
    r.on_event = [&, i](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      Slot& slot = slots[i];
      slot.result.text += e.text;
      slot.result.ids.insert(slot.result.ids.end(), e.token_ids.begin(), e.token_ids.end());
      if (e.finished) {
        slot.result.finish_reason = e.finish_reason;
        slot.result.completion_tokens = e.usage.completion_tokens;
        slot.error = e.error;
        slot.done = true;
        done.notify_all();
      }
    };
    requests.push_back(std::move(r));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      engine->submit(std::move(requests[i]));
    } catch (const Error& e) {
      engine->shutdown(std::chrono::milliseconds(0));
      fail(a.input, ": line ", i + 1, ": ", e.what());
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return slots[i].done; });
    if (!slots[i].error.empty()) {
      lock.unlock();
      engine->shutdown(std::chrono::milliseconds(0));
      fail(a.input, ": line ", i + 1, ": ", slots[i].error);
    }
    if (a.json) {
      std::cout << slots[i].result.to_json().dump() << std::endl;
    } else {
      std::cout << slots[i].result.text << "\n---\n" << std::flush;
    }
  }
  engine->shutdown();
  return 0;
}

int run_generate(GenerateArgs& a) {
  const int sources = (a.prompt.empty() ? 0 : 1) + (a.chat.empty() ? 0 : 1) + (a.input.empty() ? 0 : 1);
  DSI_CHECK(sources == 1, "give exactly one of --prompt, --chat or --input (and it must not be empty)");
  if (a.seed >= 0) a.params.seed = static_cast<uint64_t>(a.seed);
  if (!a.input.empty()) return run_input_file(a);
  std::unique_ptr<Backend> backend = make_backend(a.device, a.model, a.cuda_arch);
  Tokenizer tok = Tokenizer::load(a.model);
  std::unique_ptr<Model> model = load_model(a.model, *backend);
  a.params.validate(static_cast<int32_t>(model->config().vocab_size));

  std::vector<int32_t> ids =
      a.chat.empty() ? encode_text_prompt(tok, a.prompt) : chat_ids(tok, a.system, a.chat);
  const auto start = std::chrono::steady_clock::now();
  GenerationResult r;
  if (a.json) {
    r = generate(*model, tok, ids, a.params);
    std::cout << r.to_json().dump() << std::endl;
  } else {
    if (!a.prompt.empty()) std::cout << a.prompt << std::flush;
    r = generate(*model, tok, ids, a.params, [](std::string_view text) { std::cout << text << std::flush; });
    std::cout << std::endl;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (::isatty(STDERR_FILENO)) {
      std::fprintf(stderr, "[%s: %d prompt + %d generated tokens, %.1f tokens/s, %s backend]\n",
                   std::string(to_string(r.finish_reason)).c_str(), r.prompt_tokens, r.completion_tokens,
                   r.completion_tokens / std::max(secs, 1e-9), backend->name().c_str());
    }
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  a->params.temperature = 0.0f;
  a->params.max_tokens = 128;
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a model");
  cmd->add_option("--model", a->model, "Model directory (config.json, safetensors, tokenizer)")->required();
  cmd->add_option("--prompt", a->prompt, "Plain-text prompt (BOS added as tokenizer_config.json says)");
  cmd->add_option("--chat", a->chat, "A user message, rendered with the model's chat template");
  cmd->add_option("--system", a->system, "With --chat: a system message");
  cmd->add_option("--input", a->input,
                  "JSON lines: {\"prompt\"} or {\"messages\"} (+ sampling fields) per line");
  cmd->add_option("--max-tokens", a->params.max_tokens, "Most tokens to generate (128)");
  cmd->add_option("--temperature", a->params.temperature, "0 = greedy (default)");
  cmd->add_option("--top-p", a->params.top_p, "Nucleus sampling mass (1.0)");
  cmd->add_option("--top-k", a->params.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--min-p", a->params.min_p, "Drop tokens below min_p x the top probability (0: off)");
  cmd->add_option("--repetition-penalty", a->params.repetition_penalty, "HF-style repetition penalty (1.0)");
  cmd->add_option("--presence-penalty", a->params.presence_penalty, "OpenAI presence penalty (0)");
  cmd->add_option("--frequency-penalty", a->params.frequency_penalty, "OpenAI frequency penalty (0)");
  cmd->add_option("--stop", a->params.stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", a->params.ignore_eos, "Keep generating after EOS");
  cmd->add_option("--seed", a->seed, "Sampling seed (same seed and inputs give the same text)");
  cmd->add_option("--device", a->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add_cuda_arch_option(cmd, a->cuda_arch);
  cmd->add_option("--max-batch-size", a->max_batch_size, "--input: sequences per engine step (64)");
  cmd->add_option("--max-num-tokens", a->max_num_tokens, "--input: tokens per engine step (2048)");
  cmd->add_flag("--no-async-scheduling", a->no_async_scheduling,
                "--input: do not overlap the next step's scheduling with the GPU's current step");
  cmd->add_flag("--json", a->json, "Print {\"text\", \"ids\", \"finish_reason\", \"usage\"}");
  cmd->callback([a]() { run_guarded([&]() { return run_generate(*a); }); });
}

}  // namespace dsinfer::cli
