// `dsinfer eval golden` (logits and greedy agreement with Hugging Face references), `dsinfer eval ppl` and
// `dsinfer eval batch-agreement` (batched vs one-at-a-time greedy outputs).
#include <cstdio>
#include <iostream>
#include <memory>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "engine/batch_agreement.h"
#include "engine/golden_eval.h"
#include "engine/perplexity.h"
#include "engine/routing_check.h"
#include "model/model.h"

namespace dsinfer::cli {

namespace {

// --margin-rule / --routing-rule auto: on for every backend but the CPU reference (its fp32 logits match
// exactly).
bool rule_on(const std::string& flag, const Backend& backend) {
  if (flag == "auto") return backend.device() != Device::kCpu;
  return flag == "on";
}

struct GoldenArgs {
  std::string model;
  std::string golden;
  std::string device = "cpu";
  std::string cuda_arch = "auto";
  double tolerance = 0;  // 0: 1e-4 on the CPU, 2e-2 (bf16 weights) on other devices
  std::string margin_rule = "auto";
  std::string routing_rule = "auto";
  int64_t chunk = 0;
  bool json = false;
  bool routing_check = false;
};

int run_golden_command(const GoldenArgs& a) {
  auto backend = make_backend(a.device, a.model, a.cuda_arch);
  auto model = load_model(a.model, *backend);
  const std::string golden = a.golden.empty() ? a.model + "/golden.safetensors" : a.golden;
  GoldenOptions options;
  options.rel_l2_tolerance = a.tolerance > 0 ? a.tolerance : backend->device() == Device::kCpu ? 1e-4 : 2e-2;
  options.prefill_chunk = a.chunk;
  options.margin_rule = rule_on(a.margin_rule, *backend);
  // The CPU reference for the routing rule and --routing-check, loaded on first use.
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Model> reference;
  auto cpu_reference = [&]() -> Model& {
    if (!reference) {
      cpu = make_backend("cpu", a.model, "auto");
      reference = load_model(a.model, *cpu);
    }
    return *reference;
  };
  options.routing_rule = rule_on(a.routing_rule, *backend);  // auto: on for non-CPU devices
  options.routing_reference = cpu_reference;
  GoldenReport report = run_golden(*model, golden, options);
  std::vector<RoutingCheckCase> routing;
  if (a.routing_check) routing = run_routing_check(*model, cpu_reference(), golden_prompts(golden), a.chunk);
  if (a.json) {
    nlohmann::json j = report.to_json();
    if (a.routing_check) j["routing_check"] = routing_check_json(routing);
    std::cout << j.dump() << std::endl;
  } else {
    std::printf("%-6s %8s %14s %14s %8s\n", "case", "tokens", "max_abs_err", "rel_l2_err", "greedy");
    for (const GoldenCase& c : report.cases) {
      std::printf("%-6d %8lld %14.3e %14.3e %8s\n", c.index, static_cast<long long>(c.tokens), c.max_abs_err,
                  c.rel_l2_err, c.greedy_match ? "match" : "DIFFER");
      if (!c.greedy_match) {
        std::printf("       first difference at greedy token %d: margin %.3e (%s) vs bound %.3e: %s\n",
                    c.first_mismatch, c.mismatch.margin, c.mismatch.margin_source.c_str(), c.mismatch.bound,
                    c.excused_mismatch ? "excused (bf16 noise), rest not compared" : "NOT excused");
      }
      if (c.routing_checked) {
        std::printf("       routing rule: %s: %s\n", c.excused_routing ? "excused" : "NOT excused",
                    c.routing.reason.c_str());
      }
    }
    for (const RoutingCheckCase& r : routing) {
      std::string selections;
      if (r.selections > 0) {
        selections = ", " + std::to_string(r.selections_differ) + " of " + std::to_string(r.selections) +
                     " index selections";
      }
      std::printf(
          "routing check case %d: %lld of %lld routing decisions%s differ from the CPU reference's; rel_l2 "
          "%.3e free, %.3e with the CPU forced to this backend's choices\n",
          r.index, static_cast<long long>(r.flipped), static_cast<long long>(r.decisions), selections.c_str(),
          r.free_rel_l2, r.forced_rel_l2);
    }
    std::printf("%s (rel_l2 <= %.1e and %s%s, %s backend)\n", report.pass ? "PASS" : "FAIL", report.tolerance,
                report.margin_rule ? "greedy tokens identical up to a mismatch within bf16 noise"
                                   : "identical greedy tokens",
                report.routing_rule ? ", or only routing flips or index selections within bf16 noise" : "",
                backend->name().c_str());
  }
  return report.pass ? 0 : 1;
}

struct PplArgs {
  std::string model;
  std::string corpus;
  std::string device = "cpu";
  std::string cuda_arch = "auto";
  std::string precision = "auto";
  int64_t window = 256;
  int64_t max_windows = 0;
  bool json = false;
};

int run_ppl_command(const PplArgs& a) {
  auto backend = make_backend(a.device, a.model, a.cuda_arch);
  // The CPU reference keeps fp32 weights; the CUDA backend keeps bf16 weights (fp32 activations).
  const std::string weights = backend->device() == Device::kCpu ? "fp32" : "bf16";
  DSI_CHECK(a.precision == weights || a.precision == "auto", "--precision ", a.precision,
            " is not available on the ", backend->name(), " backend (its weights are ", weights, ")");
  auto model = load_model(a.model, *backend);
  PerplexityOptions options;
  options.window = a.window;
  options.max_windows = a.max_windows;
  options.progress = true;
  PerplexityResult r = evaluate_perplexity(*model, a.model, a.corpus, options);
  if (a.json) {
    std::cout << r.to_json().dump() << std::endl;
  } else {
    std::printf("perplexity %.4f  mean NLL %.6f  over %lld tokens in %lld windows of %lld (%s backend)\n",
                r.ppl, r.mean_nll, static_cast<long long>(r.scored_tokens), static_cast<long long>(r.windows),
                static_cast<long long>(a.window), backend->name().c_str());
  }
  return 0;
}

struct AgreementArgs {
  BatchAgreementOptions options;
  std::string margin_rule = "on";
  bool json = false;
};

int run_agreement_command(AgreementArgs& a) {
  DSI_CHECK(a.margin_rule == "on" || a.margin_rule == "off", "--margin-rule must be on or off");
  a.options.margin_rule = a.margin_rule == "on";
  BatchAgreementReport r = run_batch_agreement(a.options);
  if (a.json) {
    std::cout << r.to_json().dump() << std::endl;
  } else {
    for (const BatchAgreementCase& c : r.cases) {
      if (c.exact) continue;
      const char* verdict = c.mismatch.excused  ? "excused"
                            : c.excused_routing ? "excused by the routing rule"
                                                : "NOT excused";
      const std::string routing = c.routing_checked ? " (routing rule: " + c.routing.reason + ")" : "";
      std::printf(
          "prompt %d (%s, %lld tokens): first difference at step %d, one-at-a-time top-2 margin %.3e "
          "vs bound %.3e: %s%s\n",
          c.index, c.source.c_str(), static_cast<long long>(c.prompt_tokens), c.mismatch.step,
          c.mismatch.margin, c.mismatch.bound, verdict, routing.c_str());
    }
    std::printf(
        "%zu prompts x %d greedy tokens on the %s backend: %d identical (%.1f%%), %d more within bf16 "
        "noise%s: agreement %.1f%%%s\n",
        r.cases.size(), a.options.max_tokens, r.backend.c_str(), r.exact, 100.0 * r.exact_rate(), r.excused,
        r.routing_rule
            ? (", " + std::to_string(r.excused_routing) + " more by routing flips within it").c_str()
            : "",
        100.0 * r.agreement_rate(), r.margin_rule ? "" : " (margin rule off)");
  }
  return r.agreement_rate() == 1.0 ? 0 : 1;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  CLI::App* eval = app.add_subcommand(
      "eval", "Correctness measurements: golden logits, perplexity, batched-vs-single agreement");
  eval->require_subcommand(1);

  auto golden_args = std::make_shared<GoldenArgs>();
  CLI::App* golden = eval->add_subcommand("golden", "Compare logits and greedy tokens with a golden file");
  golden->add_option("--model", golden_args->model, "Model directory (config.json + safetensors)")
      ->required();
  golden->add_option("--golden", golden_args->golden, "Golden file (default: MODEL/golden.safetensors)");
  golden->add_option("--device", golden_args->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add_cuda_arch_option(golden, golden_args->cuda_arch);
  golden->add_option("--tolerance", golden_args->tolerance,
                     "Largest relative L2 error that passes (1e-4 on the CPU, 2e-2 on the GPU)");
  golden
      ->add_option("--margin-rule", golden_args->margin_rule,
                   "Excuse a greedy mismatch within bf16 noise: on, off, auto (on for non-CPU devices)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  golden
      ->add_option(
          "--routing-rule", golden_args->routing_rule,
          "MoE and sparse-attention models: excuse a failing case whose only cause is expert-routing "
          "flips or indexer selections within bf16 noise (checked on the CPU reference forced to this "
          "backend's routing and selections): on, off, auto (on for non-CPU devices)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  golden->add_option("--prefill-chunk", golden_args->chunk,
                     "Prefill the prompt in chunks of this many tokens");
  golden->add_flag("--json", golden_args->json, "Print one JSON object");
  golden->add_flag("--routing-check", golden_args->routing_check,
                   "MoE and sparse-attention models: also run each prompt on the CPU reference forced to "
                   "this backend's expert routing and indexer selections and report the ones that differ, "
                   "their margins and both logits errors (diagnostic: the verdict is unchanged)");
  golden->callback([golden_args]() { run_guarded([&]() { return run_golden_command(*golden_args); }); });

  auto ppl_args = std::make_shared<PplArgs>();
  CLI::App* ppl = eval->add_subcommand("ppl", "Perplexity over a corpus (documents separated by NUL)");
  ppl->add_option("--model", ppl_args->model, "Model directory")->required();
  ppl->add_option("--corpus", ppl_args->corpus, "Text file, documents separated by NUL characters")
      ->required();
  ppl->add_option("--window", ppl_args->window, "Tokens per window (256)")->check(CLI::Range(2, 1 << 20));
  ppl->add_option("--max-windows", ppl_args->max_windows, "Score only the first N windows (0: all)");
  ppl->add_option("--device", ppl_args->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add_cuda_arch_option(ppl, ppl_args->cuda_arch);
  ppl->add_option("--precision", ppl_args->precision,
                  "Weight precision: auto, fp32 (the CPU backend) or bf16 (the CUDA backend)");
  ppl->add_flag("--json", ppl_args->json, "Print one JSON object");
  ppl->callback([ppl_args]() { run_guarded([&]() { return run_ppl_command(*ppl_args); }); });

  auto ag = std::make_shared<AgreementArgs>();
  ag->options.engine.device = "auto";
  CLI::App* agreement = eval->add_subcommand(
      "batch-agreement", "Greedy tokens of N prompts run one at a time vs all together through the engine");
  agreement->add_option("--model", ag->options.engine.model_dir, "Model directory")->required();
  agreement->add_option("--device", ag->options.engine.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add_cuda_arch_option(agreement, ag->options.engine.cuda_arch);
  agreement->add_flag("--dummy-weights", ag->options.engine.dummy_weights,
                      "Random weights from config.json alone");
  agreement
      ->add_option("--prompts", ag->options.prompts, "Prompts: the golden file's first, then synthetic (8)")
      ->check(CLI::Range(1, 100000));
  agreement->add_option("--max-tokens", ag->options.max_tokens, "Greedy tokens per prompt (16)")
      ->check(CLI::Range(1, 1 << 20));
  agreement
      ->add_option("--prompt-len", ag->options.prompt_len,
                   "Synthetic prompts: lengths uniform in [N/2, N] (64)")
      ->check(CLI::Range(1, 1 << 24));
  agreement->add_option("--seed", ag->options.seed, "Seed of the synthetic prompts (0)");
  agreement->add_option(
      "--golden", ag->options.golden,
      "Golden file whose prompts come first (default: MODEL/golden.safetensors if present)");
  agreement
      ->add_option("--max-num-tokens", ag->options.engine.max_num_tokens, "Engine tokens per step (2048)")
      ->check(CLI::PositiveNumber);
  agreement
      ->add_option("--context-chunk-size", ag->options.engine.context_chunk_size,
                   "Engine prefill chunk (512)")
      ->check(CLI::PositiveNumber);
  agreement->add_option("--margin-rule", ag->margin_rule, "on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
  agreement
      ->add_option(
          "--routing-rule", ag->options.routing_rule,
          "MoE models: excuse a prompt whose only cause of difference is expert-routing flips within "
          "bf16 noise of the one-at-a-time run's scores (checked by replaying it forced to the "
          "batched routing on the CPU reference): on, off, auto (on for non-CPU devices)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  agreement->add_flag("--json", ag->json, "Print one JSON object");
  agreement->callback([ag]() { run_guarded([&]() { return run_agreement_command(*ag); }); });
}

}  // namespace dsinfer::cli
