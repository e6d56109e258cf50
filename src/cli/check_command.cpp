// `dsinfer check`: what a model needs on a GPU target — parameters, weight bytes, KV bytes per token, the
// memory plan, which backend ops have CUDA kernels in this binary, and warnings for settings that will hurt.
// Works without a GPU for a named target and on a directory holding only config.json.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "model/model_config.h"
#include "model/model_size.h"
#include "model/safetensors.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/device_query.h"
#endif

namespace dsinfer::cli {

namespace {

struct CheckArgs {
  std::string model;
  std::string gpu = "auto";
  double gpu_memory_gib = 0;
  std::string precision = "bf16";
  MemoryPlanInput plan;
  int32_t context_chunk_size = 512;
  bool json = false;
};

// Backend ops a model needs; none has a CUDA kernel in this build yet (the CUDA backend arrives with the
// "CUDA backend" issues) — `check` reports that instead of pretending.
const std::vector<std::string>& backend_ops(const ModelConfig& c) {
  static const std::vector<std::string> dense = {"embed",    "rms_norm",      "linear",      "rope",  "mlp",
                                                 "write_kv", "attention_gqa", "gather_rows", "sample"};
  static const std::vector<std::string> mla = {"embed",     "rms_norm",    "linear",        "rope",
                                               "mlp",       "write_kv",    "attention_mla", "head_matmul",
                                               "moe_route", "moe_experts", "gather_rows",   "sample"};
  static const std::vector<std::string> v4 = {"embed",        "rms_norm",      "linear",
                                              "rope",         "hc_pre",        "hc_post",
                                              "hc_head",      "compress_rows", "write_compressed",
                                              "indexer_topk", "attention_v4",  "moe_route",
                                              "moe_experts",  "gather_rows",   "sample"};
  if (c.arch == Arch::kDeepseekV4) return v4;
  return c.is_deepseek_mla() ? mla : dense;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

int run_check(CheckArgs& a) {
  ModelConfig config = load_model_config(a.model);
  ModelSize size = model_size(config);
  nlohmann::json out;
  std::vector<std::string> warnings;

  // Target.
  std::string target = a.gpu;
  int64_t memory = static_cast<int64_t>(a.gpu_memory_gib * 1073741824.0);
  std::string device_name;
  if (a.gpu == "auto") {
#ifdef DSINFER_HAVE_CUDA
    std::string why;
    auto devices = cuda::query_devices(&why);
    DSI_CHECK(!devices.empty(), "--gpu auto: no GPU visible (", why,
              "); name a target with --gpu sm_90 or sm_80");
    const auto& d = devices[0];
    DSI_CHECK(d.major >= 8, "GPU ", d.name, " is sm_", d.major, d.minor, ": dsinfer needs sm_80 or newer");
    target = d.major >= 9 ? "sm_90" : "sm_80";
    device_name = d.name;
    if (memory == 0) memory = static_cast<int64_t>(d.free_memory);
#else
    fail("--gpu auto: this binary was built without CUDA; name a target with --gpu sm_90 or sm_80");
#endif
  }
  if (memory == 0) memory = int64_t{80} << 30;  // H100 / A100 80 GB class
  a.plan.gpu_memory_bytes = memory;
  a.plan.precision = a.precision;
  if (a.precision == "fp8" && target == "sm_80") {
    warnings.push_back(
        "FP8 requested on sm_80: Ampere has no FP8 tensor cores; weights would be dequantized to bf16");
    a.plan.precision = "bf16";
  }
  if (a.context_chunk_size % a.plan.kv_block_size != 0) {
    warnings.push_back(str_cat("context_chunk_size ", a.context_chunk_size,
                               " is not a multiple of kv_block_size ", a.plan.kv_block_size,
                               ": chunks end mid-block, wasting KV slots and prefix-cache hits"));
  }
  if (a.plan.max_num_tokens < a.context_chunk_size) {
    warnings.push_back(str_cat("max_num_tokens ", a.plan.max_num_tokens, " is below context_chunk_size ",
                               a.context_chunk_size, ": prefill chunks will be cut to the step budget"));
  }
  MemoryPlan plan = plan_memory(config, size, a.plan);
  if (!plan.fits) warnings.push_back("the model does not fit: " + plan.why_not);
  if (plan.fits && plan.kv_tokens < config.max_position_embeddings) {
    warnings.push_back(str_cat("only ", plan.kv_tokens, " KV tokens fit, less than one full context of ",
                               config.max_position_embeddings, " tokens"));
  }

  // Checkpoint on disk, when present.
  nlohmann::json checkpoint = nullptr;
  try {
    SafetensorsArchive archive = SafetensorsArchive::open_dir(a.model);
    checkpoint = {{"tensors", archive.names().size()}, {"bytes", archive.total_bytes()}};
  } catch (const Error& e) {
    checkpoint = {{"error", e.what()}};
  }

  std::vector<std::string> missing = backend_ops(config);
  out["model"] = {{"dir", a.model},
                  {"architecture", config.model_type},
                  {"layers", config.num_layers},
                  {"hidden_size", config.hidden_size},
                  {"vocab_size", config.vocab_size},
                  {"max_position_embeddings", config.max_position_embeddings},
                  {"total_params", size.total_params},
                  {"active_params", size.active_params},
                  {"checkpoint_weight_bytes", size.checkpoint_weight_bytes},
                  {"bf16_weight_bytes", size.bf16_weight_bytes},
                  {"kv_bytes_per_token_bf16", size.kv_bytes_per_token_bf16},
                  {"kv_fixed_bytes_per_sequence_fp32", size.kv_fixed_bytes_per_sequence_fp32},
                  {"checkpoint", checkpoint}};
  out["target"] = {
      {"gpu", target}, {"device", device_name}, {"memory_bytes", memory}, {"precision", a.plan.precision}};
  out["memory_plan"] = {{"weight_bytes", plan.weight_bytes},
                        {"workspace_bytes", plan.workspace_bytes},
                        {"kv_bytes", plan.kv_bytes},
                        {"kv_tokens", plan.kv_tokens},
                        {"fits", plan.fits}};
  out["kernels"] = {{"compiled_archs",
#ifdef DSINFER_HAVE_CUDA
                     nlohmann::json::array({"sm_90a", "sm_80"})
#else
                     nlohmann::json::array()
#endif
                    },
                    {"ops_with_cuda_kernel", nlohmann::json::array()},
                    {"ops_without_cuda_kernel", missing}};
  warnings.push_back("no backend op has a CUDA kernel in this build: models run on the CPU backend");
  out["warnings"] = warnings;

  if (a.json) {
    std::cout << out.dump() << std::endl;
  } else {
    std::printf("model        %s, %lld layers, hidden %lld, vocab %lld, context %lld\n",
                config.model_type.c_str(), static_cast<long long>(config.num_layers),
                static_cast<long long>(config.hidden_size), static_cast<long long>(config.vocab_size),
                static_cast<long long>(config.max_position_embeddings));
    std::printf("parameters   %.3fB total, %.3fB active per token\n", size.total_params / 1e9,
                size.active_params / 1e9);
    std::printf("weights      %s as published, %s in bf16\n", gib(size.checkpoint_weight_bytes).c_str(),
                gib(size.bf16_weight_bytes).c_str());
    std::printf("KV cache     %.0f bytes per token (bf16)", size.kv_bytes_per_token_bf16);
    if (size.kv_fixed_bytes_per_sequence_fp32) {
      std::printf(" + %s per sequence of sliding windows (fp32)",
                  gib(size.kv_fixed_bytes_per_sequence_fp32).c_str());
    }
    std::printf("\ntarget       %s%s%s, %s, %s weights\n", target.c_str(), device_name.empty() ? "" : " ",
                device_name.c_str(), gib(memory).c_str(), a.plan.precision.c_str());
    std::printf("memory plan  weights %s + workspace %s + KV %s = %lld tokens%s\n",
                gib(plan.weight_bytes).c_str(), gib(plan.workspace_bytes).c_str(), gib(plan.kv_bytes).c_str(),
                static_cast<long long>(plan.kv_tokens), plan.fits ? "" : " (DOES NOT FIT)");
    std::printf("kernels      none of %zu ops has a CUDA kernel yet\n", missing.size());
    for (const std::string& w : warnings) std::printf("warning      %s\n", w.c_str());
  }
  return plan.fits ? 0 : 2;
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto a = std::make_shared<CheckArgs>();
  CLI::App* cmd =
      app.add_subcommand("check", "What a model needs on a GPU target: sizes, memory plan, kernels");
  cmd->add_option("--model", a->model, "Model directory (config.json is enough)")->required();
  cmd->add_option("--gpu", a->gpu, "auto (the visible GPU), sm_90 or sm_80")
      ->check(CLI::IsMember({"auto", "sm_90", "sm_80"}));
  cmd->add_option("--gpu-memory-gib", a->gpu_memory_gib,
                  "GPU memory for a named target (default 80, or the GPU's free memory)");
  cmd->add_option("--precision", a->precision, "bf16 or fp8 weights")->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_option("--kv-cache-free-gpu-mem-fraction", a->plan.kv_cache_free_gpu_mem_fraction,
                  "Share of the memory left after weights and workspace for the KV cache (0.9)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--max-tokens-in-paged-kv-cache", a->plan.max_tokens_in_paged_kv_cache,
                  "KV capacity in tokens");
  cmd->add_option("--max-num-tokens", a->plan.max_num_tokens, "Tokens per step (2048)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-batch-size", a->plan.max_batch_size, "Sequences per step (64)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-block-size", a->plan.kv_block_size, "Tokens per KV block (64)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--context-chunk-size", a->context_chunk_size, "Prefill chunk (512)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a]() { run_guarded([&]() { return run_check(*a); }); });
}

}  // namespace dsinfer::cli
