// `dsinfer eval golden` (logits and greedy agreement with Hugging Face references) and `dsinfer eval ppl`.
#include <cstdio>
#include <iostream>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "engine/golden_eval.h"
#include "engine/perplexity.h"
#include "model/model.h"

namespace dsinfer::cli {

namespace {

struct GoldenArgs {
  std::string model;
  std::string golden;
  std::string device = "cpu";
  double tolerance = 1e-4;
  int64_t chunk = 0;
  bool json = false;
};

int run_golden_command(const GoldenArgs& a) {
  auto backend = make_backend(a.device, a.model);
  auto model = load_model(a.model, *backend);
  const std::string golden = a.golden.empty() ? a.model + "/golden.safetensors" : a.golden;
  GoldenOptions options;
  options.rel_l2_tolerance = a.tolerance;
  options.prefill_chunk = a.chunk;
  GoldenReport report = run_golden(*model, golden, options);
  if (a.json) {
    std::cout << report.to_json().dump() << std::endl;
  } else {
    std::printf("%-6s %8s %14s %14s %8s\n", "case", "tokens", "max_abs_err", "rel_l2_err", "greedy");
    for (const GoldenCase& c : report.cases) {
      std::printf("%-6d %8lld %14.3e %14.3e %8s\n", c.index, static_cast<long long>(c.tokens), c.max_abs_err,
                  c.rel_l2_err, c.greedy_match ? "match" : "DIFFER");
      if (!c.greedy_match) {
        std::printf("       first difference at greedy token %d (our top-2 margin there %.3e)\n",
                    c.first_mismatch, c.mismatch_margin);
      }
    }
    std::printf("%s (rel_l2 <= %.1e and identical greedy tokens, %s backend)\n",
                report.pass ? "PASS" : "FAIL", report.tolerance, backend->name().c_str());
  }
  return report.pass ? 0 : 1;
}

struct PplArgs {
  std::string model;
  std::string corpus;
  std::string device = "cpu";
  std::string precision = "fp32";
  int64_t window = 256;
  int64_t max_windows = 0;
  bool json = false;
};

int run_ppl_command(const PplArgs& a) {
  DSI_CHECK(a.precision == "fp32" || a.precision == "auto", "--precision ", a.precision,
            " is not available on this backend (fp32 only until the CUDA backend lands)");
  auto backend = make_backend(a.device, a.model);
  auto model = load_model(a.model, *backend);
  PerplexityOptions options;
  options.window = a.window;
  options.max_windows = a.max_windows;
  options.progress = true;
  PerplexityResult r = evaluate_perplexity(*model, a.model, a.corpus, options);
  if (a.json) {
    std::cout << r.to_json().dump() << std::endl;
  } else {
    std::printf("perplexity %.4f  mean NLL %.6f  over %lld tokens in %lld windows of %lld\n", r.ppl,
                r.mean_nll, static_cast<long long>(r.scored_tokens), static_cast<long long>(r.windows),
                static_cast<long long>(a.window));
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  CLI::App* eval = app.add_subcommand("eval", "Correctness measurements: golden logits and perplexity");
  eval->require_subcommand(1);

  auto golden_args = std::make_shared<GoldenArgs>();
  CLI::App* golden = eval->add_subcommand("golden", "Compare logits and greedy tokens with a golden file");
  golden->add_option("--model", golden_args->model, "Model directory (config.json + safetensors)")
      ->required();
  golden->add_option("--golden", golden_args->golden, "Golden file (default: MODEL/golden.safetensors)");
  golden->add_option("--device", golden_args->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  golden->add_option("--tolerance", golden_args->tolerance, "Largest relative L2 error that passes (1e-4)");
  golden->add_option("--prefill-chunk", golden_args->chunk,
                     "Prefill the prompt in chunks of this many tokens");
  golden->add_flag("--json", golden_args->json, "Print one JSON object");
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
  ppl->add_option("--precision", ppl_args->precision, "Weight precision (fp32 on the CPU backend)");
  ppl->add_flag("--json", ppl_args->json, "Print one JSON object");
  ppl->callback([ppl_args]() { run_guarded([&]() { return run_ppl_command(*ppl_args); }); });
}

}  // namespace dsinfer::cli
