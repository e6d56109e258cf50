// Batched-vs-one-at-a-time greedy agreement (see batch_agreement.h). The model is loaded once: the
// one-at-a-time phase runs on it directly, then an engine shares it for the batched phase, and the routing
// rule replays differing prompts on it once the engine is gone.
#include "engine/batch_agreement.h"

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "engine/engine_impl.h"
#include "engine/routing_rule.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace dsinfer {

namespace {

// Per step of the one-at-a-time run: the argmax, its top-2 margin and the largest |logit|.
struct StepInfo {
  int32_t token = 0;
  double margin = 0.0;
  double max_abs_logit = 0.0;
};

std::vector<int32_t> tensor_ids(const Tensor& t) {
  std::vector<int32_t> ids(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    ids[i] = t.dtype() == DType::I64 ? static_cast<int32_t>(t.data<int64_t>()[i]) : t.data<int32_t>()[i];
  }
  return ids;
}

std::vector<std::vector<int32_t>> golden_prompts(const std::string& path, int32_t limit) {
  std::vector<std::vector<int32_t>> out;
  if (path.empty() || !std::filesystem::exists(path)) return out;
  SafetensorsFile golden(path);
  for (int i = 0; static_cast<int32_t>(out.size()) < limit; ++i) {
    const std::string name = "input_ids." + std::to_string(i);
    if (!golden.contains(name)) break;
    Tensor t = golden.get(name);
    DSI_CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64, path, ": ", name, " must be I32 or I64");
    out.push_back(tensor_ids(t));
  }
  return out;
}

std::vector<StepInfo> run_one(Model& model, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  const int64_t V = model.config().vocab_size;
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size()) + max_tokens + 1);
  Tensor logits = runner.append(prompt);  // [1, V]
  std::vector<StepInfo> steps;
  for (int32_t g = 0; g < max_tokens; ++g) {
    const float* row = logits.f32();
    StepInfo s;
    s.token = argmax_first(row, V);
    s.margin = top2_margin(row, V);
    s.max_abs_logit = max_abs(row, V);
    steps.push_back(s);
    if (g + 1 < max_tokens) logits = runner.append({s.token});
  }
  return steps;
}

// All prompts submitted at once to an engine sharing `backend` and `model`; returns each one's generated
// ids (errors throw). Prompt i is the engine's sequence i + 1 (checked).
std::vector<std::vector<int32_t>> run_batched(const EngineConfig& config, std::shared_ptr<Backend> backend,
                                              std::shared_ptr<Model> model,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int32_t max_tokens) {
  std::unique_ptr<Engine> engine = make_engine(config, std::move(backend), std::move(model), std::nullopt);
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<std::string> errors(prompts.size());
  size_t finished = 0;
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest& r = requests.emplace_back();
    r.prompt_ids = prompts[i];
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.on_event = [&, i](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(mutex);
      out[i].insert(out[i].end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finished) {
        errors[i] = ev.error;
        ++finished;
        cv.notify_all();
      }
    };
  }
  // One arrival: the batch's steps are the same run by run.
  const std::vector<uint64_t> ids = engine->submit_all(std::move(requests));
  for (size_t i = 0; i < ids.size(); ++i)
    DSI_CHECK(ids[i] == i + 1, "batch agreement: the engine numbered prompt ", i, " as request ", ids[i]);
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return finished == prompts.size(); });
  }
  engine->shutdown();
  for (size_t i = 0; i < prompts.size(); ++i)
    DSI_CHECK(errors[i].empty(), "batch agreement: batched request ", i, " failed: ", errors[i]);
  return out;
}

}  // namespace

double BatchAgreementReport::exact_rate() const {
  return cases.empty() ? 0.0 : static_cast<double>(exact) / static_cast<double>(cases.size());
}

double BatchAgreementReport::agreement_rate() const {
  return cases.empty()
             ? 0.0
             : static_cast<double>(exact + excused + excused_routing) / static_cast<double>(cases.size());
}

nlohmann::json BatchAgreementReport::to_json() const {
  nlohmann::json j = {{"backend", backend},
                      {"margin_rule", margin_rule},
                      {"routing_rule", routing_rule},
                      {"prompts", cases.size()},
                      {"exact", exact},
                      {"excused", excused},
                      {"excused_routing", excused_routing},
                      {"differ", static_cast<int32_t>(cases.size()) - exact - excused - excused_routing},
                      {"exact_rate", exact_rate()},
                      {"agreement_rate", agreement_rate()},
                      {"cases", nlohmann::json::array()}};
  for (const BatchAgreementCase& c : cases) {
    nlohmann::json cj = {{"case", c.index},
                         {"source", c.source},
                         {"prompt_tokens", c.prompt_tokens},
                         {"exact", c.exact},
                         {"excused_mismatch", c.mismatch.excused ? c.mismatch.to_json() : nlohmann::json()}};
    if (!c.exact) {
      cj["mismatch"] = c.mismatch.to_json();
      cj["single"] = c.single;
      cj["batched"] = c.batched;
    }
    cj["excused_routing"] = c.excused_routing;
    if (c.routing_checked) cj.update(c.routing.to_json());
    j["cases"].push_back(cj);
  }
  return j;
}

std::vector<std::vector<int32_t>> synthetic_prompts(int32_t count, int32_t max_len, int64_t vocab,
                                                    uint64_t seed) {
  DSI_CHECK(max_len >= 1 && vocab >= 1, "synthetic prompts need a length and a vocabulary");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> len(std::max(1, max_len / 2), max_len);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(std::max(count, 0)));
  for (auto& p : out) {
    p.resize(static_cast<size_t>(len(rng)));
    for (int32_t& t : p) t = static_cast<int32_t>(id(rng));
  }
  return out;
}

BatchAgreementReport run_batch_agreement(const BatchAgreementOptions& options) {
  DSI_CHECK(options.prompts >= 1, "batch agreement: --prompts must be >= 1");
  DSI_CHECK(options.max_tokens >= 1, "batch agreement: --max-tokens must be >= 1");
  const EngineConfig& ec = options.engine;
  BatchAgreementReport report;
  report.margin_rule = options.margin_rule;
  DSI_CHECK(options.routing_rule == "auto" || options.routing_rule == "on" || options.routing_rule == "off",
            "batch agreement: --routing-rule must be auto, on or off, got ", options.routing_rule);

  // Prompts: the golden file's first, then synthetic ones.
  const std::string golden = options.golden.empty() ? ec.model_dir + "/golden.safetensors" : options.golden;
  std::vector<std::vector<int32_t>> prompts = golden_prompts(golden, options.prompts);
  const size_t from_golden = prompts.size();

  // Phase 1: one at a time.
  std::vector<std::vector<StepInfo>> single;
  std::shared_ptr<Backend> backend = make_backend(ec.device, ec.model_dir, ec.cuda_arch);
  report.backend = backend->name();
  LoadOptions load;
  load.progress = false;
  load.dummy_weights = ec.dummy_weights;
  std::shared_ptr<Model> model = load_model(ec.model_dir, *backend, load);
  const bool rule_on =
      options.routing_rule == "on" || (options.routing_rule == "auto" && backend->device() != Device::kCpu);
  report.routing_rule = rule_on && has_moe_routing(*model);  // dense models: never
  DSI_CHECK(!options.batched_routing_hook || report.routing_rule,
            "batch agreement: a batched routing hook needs the routing rule on an MoE model");
  {
    const ModelConfig& mc = model->config();
    for (auto& p : synthetic_prompts(options.prompts - static_cast<int32_t>(from_golden), options.prompt_len,
                                     mc.vocab_size, options.seed)) {
      prompts.push_back(std::move(p));
    }
    for (const auto& p : prompts) {
      DSI_CHECK(static_cast<int64_t>(p.size()) + options.max_tokens <= mc.max_position_embeddings,
                "batch agreement: a prompt of ", p.size(), " tokens + ", options.max_tokens,
                " new ones exceeds the context of ", mc.max_position_embeddings);
      single.push_back(run_one(*model, p, options.max_tokens));
    }
  }

  // Phase 2: all together through the engine (the routing recorded per sequence and position when the
  // routing rule is on; the engine steps are eager here, never CUDA graphs, so the hook sees every step).
  EngineConfig config = ec;
  config.max_batch_size = std::max(config.max_batch_size, options.prompts);
  SequenceRoutingLog log(options.batched_routing_hook);
  if (report.routing_rule) model->set_moe_routing_hook(&log);
  std::vector<std::vector<int32_t>> batched =
      run_batched(config, backend, model, prompts, options.max_tokens);
  model->set_moe_routing_hook(nullptr);

  // The routing rule's CPU reference: the model itself on the CPU, else loaded on first use.
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Model> cpu_model;
  auto reference = [&]() -> Model& {
    if (backend->device() == Device::kCpu) return *model;
    if (!cpu_model) {
      cpu = make_backend("cpu", ec.model_dir, "auto");
      cpu_model = load_model(ec.model_dir, *cpu, load);
    }
    return *cpu_model;
  };

  for (size_t i = 0; i < prompts.size(); ++i) {
    BatchAgreementCase c;
    c.index = static_cast<int>(i);
    c.source = i < from_golden ? "golden" : "synthetic";
    c.prompt_tokens = static_cast<int64_t>(prompts[i].size());
    for (const StepInfo& s : single[i]) c.single.push_back(s.token);
    c.batched = batched[i];
    DSI_CHECK(c.batched.size() == c.single.size(), "batch agreement: the engine returned ", c.batched.size(),
              " tokens for prompt ", i, ", expected ", c.single.size());
    c.exact = c.single == c.batched;
    if (!c.exact) {
      size_t g = 0;
      while (c.single[g] == c.batched[g]) ++g;
      const StepInfo& s = single[i][g];
      c.mismatch = judge_margin(static_cast<int>(g), c.batched[g], s.token, s.margin, "reference_top2",
                                s.max_abs_logit, /*measured_abs_err=*/0.0, options.margin_rule);
    }
    if (!c.exact && !c.mismatch.excused && report.routing_rule) {
      c.routing =
          judge_agreement_routing(*model, reference(), prompts[i], c.single, c.batched, c.mismatch.step, log,
                                  static_cast<int64_t>(i) + 1, options.margin_rule);
      c.routing_checked = true;
      c.excused_routing = c.routing.excused;
    }
    report.exact += c.exact ? 1 : 0;
    report.excused += (!c.exact && c.mismatch.excused) ? 1 : 0;
    report.excused_routing += c.excused_routing ? 1 : 0;
    report.cases.push_back(std::move(c));
  }
  return report;
}

}  // namespace dsinfer
