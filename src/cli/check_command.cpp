// `dsinfer check`: what a model needs on a GPU target — parameters, weight bytes, KV bytes per token, the
// memory plan, which backend ops have CUDA kernels in this binary (from the one op registry the backend
// factory also uses, src/backend/cuda/cuda_op_registry.cpp), and warnings for settings that will hurt.
// Works without a GPU for a named target (sm_90, sm_80 or a GPU model) and on a directory holding only
// config.json.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "core/env_choice.h"
#include "core/error.h"
#include "engine/memory_plan.h"
#include "model/model_config.h"
#include "model/model_size.h"
#include "model/safetensors.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/arch_path.h"
#include "backend/cuda/cuda_op_registry.h"
#include "backend/cuda/device_query.h"
#endif

namespace dsinfer::cli {

namespace {

struct CheckArgs {
  std::string model;
  std::string gpu = "auto";
  double gpu_memory_gib = 0;
  std::string precision = "auto";
  std::string kv_dtype = "bf16";
  MemoryPlanInput plan;
  int32_t context_chunk_size = 512;
  bool json = false;
};

// A GPU `check` can plan for without one: its compute capability and typical memory (MiB as the driver
// reports it for the common SKU).
struct NamedGpu {
  const char* target;
  const char* description;
  int major, minor;
  int64_t memory_mib;
};

const NamedGpu kNamedGpus[] = {
    {"h100", "H100 SXM 80 GB", 9, 0, 81559}, {"h200", "H200 141 GB", 9, 0, 143771},
    {"a100", "A100 80 GB", 8, 0, 81920},     {"a100-40gb", "A100 40 GB", 8, 0, 40960},
    {"l40s", "L40S 48 GB", 8, 9, 46068},     {"a10", "A10 24 GB", 8, 6, 23028},
};

// What `check` plans for.
struct Target {
  std::string name;         // as given: auto, sm_90, h200, ...
  std::string arch_path;    // sm_90 or sm_80: the kernel path
  std::string device_name;  // the GPU's name (auto) or the assumed model
  int major = 0, minor = 0;
  int64_t memory = 0;
  std::string memory_source;
  bool fp8_tensor_cores() const { return major * 10 + minor >= 89; }
  std::string sm() const { return str_cat("sm_", major, minor); }
};

Target resolve_target(const CheckArgs& a) {
  Target t;
  t.name = a.gpu;
  if (a.gpu == "auto") {
#ifdef DSINFER_HAVE_CUDA
    std::string why;
    auto devices = cuda::query_devices(&why);
    DSI_CHECK(!devices.empty(), "--gpu auto: no GPU is visible (", why,
              "); name a target instead: --gpu sm_90, sm_80, h100, h200, a100, a100-40gb, l40s or a10");
    const auto& d = devices[0];
    t.major = d.major;
    t.minor = d.minor;
    t.device_name = d.name;
    t.arch_path =
        cuda::arch_path_name(cuda::choose_arch_path(d.major, d.minor, d.name, cuda::arch_request("")));
    t.memory = static_cast<int64_t>(d.free_memory);
    t.memory_source = "free memory of GPU 0";
#else
    fail(
        "--gpu auto: this binary was built without CUDA; name a target: --gpu sm_90, sm_80, h100, h200, "
        "a100, "
        "a100-40gb, l40s or a10");
#endif
  } else {
    std::string named = a.gpu == "sm_90" ? "h100" : a.gpu == "sm_80" ? "a100" : a.gpu;
    const NamedGpu* g = nullptr;
    for (const NamedGpu& n : kNamedGpus)
      if (named == n.target) g = &n;
    DSI_CHECK(g, "unknown --gpu \"", a.gpu, "\"");
    t.major = g->major;
    t.minor = g->minor;
    t.device_name = g->description;
    t.arch_path = g->major == 9 ? "sm_90" : "sm_80";
    t.memory = g->memory_mib << 20;
    t.memory_source = str_cat("typical memory of an ", g->description,
                              a.gpu == named ? "" : str_cat(" (assumed for ", a.gpu, ")"));
  }
  if (a.gpu_memory_gib > 0) {
    t.memory = static_cast<int64_t>(a.gpu_memory_gib * 1073741824.0);
    t.memory_source = "--gpu-memory-gib";
  }
  return t;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

std::string joined(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// The model's ops and their kernels on `arch_path`, from the CUDA op registry.
nlohmann::json kernel_report(const ModelConfig& config, const std::string& arch_path,
                             std::vector<std::string>* with, std::vector<std::string>* without) {
  nlohmann::json ops = nlohmann::json::array();
#ifdef DSINFER_HAVE_CUDA
  const cuda::ArchPath path = arch_path == "sm_90" ? cuda::ArchPath::kHopper : cuda::ArchPath::kAmpere;
  for (const std::string& op : cuda::model_backend_ops(config.arch)) {
    const cuda::OpCoverage c = cuda::cuda_op_coverage(op);
    nlohmann::json row = {{"op", op}, {"coverage", cuda::op_coverage_name(c)}};
    row["kernels"] = cuda::cuda_kernels_for(op, path);
    if (c == cuda::OpCoverage::kHostFallback) row["fallback"] = cuda::cuda_op(op).host_fallback;
    ops.push_back(row);
    (c == cuda::OpCoverage::kMissing ? without : with)->push_back(op);
  }
#else
  (void)arch_path;
  (void)with;
  (void)without;
  (void)config;
#endif
  return ops;
}

int run_check(CheckArgs& a) {
  ModelConfig config = load_model_config(a.model);
  ModelSize size = model_size(config);
  nlohmann::json out;
  std::vector<std::string> warnings;
  const Target target = resolve_target(a);

  // Precision: auto takes FP8 when the checkpoint is FP8 and the GPU has FP8 tensor cores.
  a.plan.gpu_memory_bytes = target.memory;
  std::string precision = a.precision;
  if (precision == "auto") precision = config.quant.fp8_block && target.fp8_tensor_cores() ? "fp8" : "bf16";
  if (precision == "fp8" && !target.fp8_tensor_cores()) {
    warnings.push_back(
        str_cat("FP8 requested on ", target.sm(), ": ", target.device_name,
                " has no FP8 tensor cores (those start at sm_89); weights would be dequantized "
                "to bf16, planned as bf16"));
    precision = "bf16";
  } else if (a.precision == "auto" && config.quant.fp8_block && !target.fp8_tensor_cores()) {
    warnings.push_back(
        str_cat("the checkpoint is FP8 (quantization_config) but ", target.sm(),
                " has no FP8 tensor cores: weights are dequantized to bf16 (twice the bytes)"));
  }
  if (precision == "fp8") {
    warnings.push_back(
        "the CUDA backend has no FP8 GEMM yet: it loads weights as bf16 today, so the plan's "
        "FP8 weight bytes are what a later build needs, not this one");
  }
  a.plan.precision = precision;
  a.plan.kv_element_bytes = a.kv_dtype == "fp32" ? 4 : 2;
  // Activations as the CUDA backend will round them (backend_factory.cpp): the GEMMs over 8 rows (bf16, or
  // hi/lo halves with DSINFER_CUDA_GEMM=split) and the decode GEMVs' bf16 parts (1: bf16; 2: ~16 bits).
  const bool split_gemm = split_gemm_activations_for(&config);
  const int gemv_parts = gemv_activation_parts_for(&config, split_gemm);
  // DSINFER_GEMV_PACKED as the CUDA backend reads it (gemv_packed.h): 0 never, 1 or auto (default) on sm_90.
  a.plan.gemv_packed_copies =
      target.arch_path == "sm_90" && env_choice("DSINFER_GEMV_PACKED", {"0", "1", "auto"}, 2) != 0;
  // DSINFER_GEMV_UNITS_PACKED likewise (backend_factory.cpp): the MoE experts' copies, 0 (default) never.
  a.plan.units_packed_copies =
      target.arch_path == "sm_90" ? env_choice("DSINFER_GEMV_UNITS_PACKED", {"0", "1", "auto"}, 0) : 0;
  // CUDA graphs as Engine::create decides them (DSINFER_CUDA_GRAPHS=0 off; plan_memory takes the batch
  // limit from cuda_graph_batch_limit).
  a.plan.cuda_graphs = env_switch("DSINFER_CUDA_GRAPHS", true);

  // Scheduler settings that hurt.
  const int32_t block = a.plan.kv_block_size;
  if (a.context_chunk_size % block != 0) {
    warnings.push_back(str_cat("context_chunk_size ", a.context_chunk_size,
                               " is not a multiple of kv_block_size ", block,
                               ": chunks end mid-block, wasting KV slots and prefix-cache hits"));
  }
  if (a.plan.max_num_tokens < a.context_chunk_size) {
    warnings.push_back(str_cat("max_num_tokens ", a.plan.max_num_tokens, " is below context_chunk_size ",
                               a.context_chunk_size, ": prefill chunks will be cut to the step budget"));
  }
  if (a.plan.max_num_tokens < block) {
    warnings.push_back(str_cat("max_num_tokens ", a.plan.max_num_tokens, " is smaller than kv_block_size ",
                               block, ": no step can fill a KV block; prefill crawls"));
  }
  if (a.plan.max_batch_size > a.plan.max_num_tokens) {
    warnings.push_back(str_cat("max_batch_size ", a.plan.max_batch_size, " exceeds max_num_tokens ",
                               a.plan.max_num_tokens,
                               ": decode batches are capped at max_num_tokens sequences"));
  }
  MemoryPlan plan = plan_memory(config, size, a.plan);
  if (!plan.fits) warnings.push_back("the model does not fit: " + plan.why_not);
  if (plan.fits && plan.kv_tokens < config.max_position_embeddings) {
    warnings.push_back(str_cat("only ", plan.kv_tokens, " KV tokens fit, less than one full context of ",
                               config.max_position_embeddings, " tokens"));
  }
  if (plan.fits && plan.kv_tokens < static_cast<int64_t>(a.plan.max_batch_size) * block) {
    warnings.push_back(str_cat("only ", plan.kv_tokens / block, " KV blocks fit for max_batch_size ",
                               a.plan.max_batch_size, ": batches will be limited by preemption"));
  }

  // Checkpoint on disk, when present.
  nlohmann::json checkpoint = nullptr;
  try {
    SafetensorsArchive archive = SafetensorsArchive::open_dir(a.model);
    checkpoint = {{"tensors", archive.names().size()}, {"bytes", archive.total_bytes()}};
  } catch (const Error& e) {
    checkpoint = {{"error", e.what()}};
  }

  // Kernels.
  std::vector<std::string> with, without;
  nlohmann::json ops = kernel_report(config, target.arch_path, &with, &without);
#ifdef DSINFER_HAVE_CUDA
  const nlohmann::json compiled = nlohmann::json::array({"sm_90a", "sm_80"});
  if (!without.empty()) {
    warnings.push_back(str_cat(without.size(), " ops of ", config.model_type,
                               " have no CUDA kernel in this binary (", joined(without),
                               "): --device auto runs it on the CPU, --device cuda refuses it"));
  }
#else
  const nlohmann::json compiled = nlohmann::json::array();
  without = {"(this binary has no CUDA backend)"};
  warnings.push_back("this binary was built without CUDA: every model runs on the CPU backend");
#endif

  out["model"] = {{"dir", a.model},
                  {"architecture", config.model_type},
                  {"layers", config.num_layers},
                  {"hidden_size", config.hidden_size},
                  {"vocab_size", config.vocab_size},
                  {"max_position_embeddings", config.max_position_embeddings},
                  {"total_params", size.total_params},
                  {"active_params", size.active_params},
                  {"decode_params", size.decode_params},
                  {"checkpoint_weight_bytes", size.checkpoint_weight_bytes},
                  {"bf16_weight_bytes", size.bf16_weight_bytes},
                  {"kv_bytes_per_token_bf16", size.kv_bytes_per_token_bf16},
                  {"kv_fixed_bytes_per_sequence_fp32", size.kv_fixed_bytes_per_sequence_fp32},
                  {"fp8_checkpoint", config.quant.fp8_block},
                  {"checkpoint", checkpoint}};
  out["target"] = {{"gpu", target.arch_path},
                   {"target", target.name},
                   {"device", target.device_name},
                   {"compute_capability", str_cat(target.major, ".", target.minor)},
                   {"arch_path", target.arch_path},
                   {"fp8_tensor_cores", target.fp8_tensor_cores()},
                   {"memory_bytes", target.memory},
                   {"memory_source", target.memory_source},
                   {"precision", precision},
                   {"kv_dtype", a.kv_dtype},
                   {"gemm_activations", split_gemm ? "split" : "bf16"},
                   {"decode_gemv_activation_parts", gemv_parts}};
  out["settings"] = {{"max_num_tokens", a.plan.max_num_tokens},
                     {"max_batch_size", a.plan.max_batch_size},
                     {"cuda_graph_max_batch_size", a.plan.cuda_graph_max_batch_size},
                     {"kv_block_size", block},
                     {"context_chunk_size", a.context_chunk_size},
                     {"kv_cache_free_gpu_mem_fraction", a.plan.kv_cache_free_gpu_mem_fraction},
                     {"max_tokens_in_paged_kv_cache", a.plan.max_tokens_in_paged_kv_cache}};
  out["memory_plan"] = {{"weight_bytes", plan.weight_bytes},
                        {"gemv_packed_bytes", plan.packed_weight_bytes},
                        {"workspace_bytes", plan.workspace_bytes},
                        {"cuda_graph_bytes", plan.graph_bytes},
                        {"kv_bytes", plan.kv_bytes},
                        {"kv_tokens", plan.kv_tokens},
                        {"kv_bytes_per_token", plan.kv_bytes_per_token},
                        {"fits", plan.fits}};
  out["kernels"] = {{"compiled_archs", compiled},
                    {"arch_path", target.arch_path},
                    {"ops_with_cuda_kernel", with},
                    {"ops_without_cuda_kernel", without},
                    {"ops", ops},
                    {"runs_on_gpu", without.empty()}};
  out["warnings"] = warnings;

  if (a.json) {
    std::cout << out.dump() << std::endl;
  } else {
    std::printf("model        %s, %lld layers, hidden %lld, vocab %lld, context %lld\n",
                config.model_type.c_str(), static_cast<long long>(config.num_layers),
                static_cast<long long>(config.hidden_size), static_cast<long long>(config.vocab_size),
                static_cast<long long>(config.max_position_embeddings));
    std::printf("parameters   %.3fB total, %.3fB active per token, %.3fB read per decode token\n",
                size.total_params / 1e9, size.active_params / 1e9, size.decode_params / 1e9);
    std::printf("weights      %s as published, %s in bf16\n", gib(size.checkpoint_weight_bytes).c_str(),
                gib(size.bf16_weight_bytes).c_str());
    std::printf("KV cache     %.0f bytes per token (%s)", plan.kv_bytes_per_token, a.kv_dtype.c_str());
    if (size.kv_fixed_bytes_per_sequence_fp32) {
      std::printf(" + %s per sequence of sliding windows (fp32)",
                  gib(size.kv_fixed_bytes_per_sequence_fp32).c_str());
    }
    std::printf("\ntarget       %s: %s, compute capability %d.%d, %s path, %s (%s), %s weights\n",
                target.name.c_str(), target.device_name.c_str(), target.major, target.minor,
                target.arch_path.c_str(), gib(target.memory).c_str(), target.memory_source.c_str(),
                precision.c_str());
    std::printf("activations  GEMMs over 8 rows %s; decode GEMVs (up to 8 rows) %d bf16 part%s (%s)\n",
                split_gemm ? "split into bf16 hi/lo halves" : "rounded to bf16", gemv_parts,
                gemv_parts == 1 ? "" : "s", gemv_parts == 1 ? "rounded to bf16" : "~16 bits");
    std::printf(
        "memory plan  weights %s + packed GEMV copies %s + workspace %s + CUDA graphs %s + KV %s = %lld "
        "tokens%s\n",
        gib(plan.weight_bytes).c_str(), gib(plan.packed_weight_bytes).c_str(),
        gib(plan.workspace_bytes).c_str(), gib(plan.graph_bytes).c_str(), gib(plan.kv_bytes).c_str(),
        static_cast<long long>(plan.kv_tokens), plan.fits ? "" : " (DOES NOT FIT)");
    std::printf("kernels      compiled for %s; %zu of %zu ops covered on the %s path\n",
                compiled.empty() ? "nothing (no CUDA)" : "sm_90a, sm_80", with.size(),
                with.size() + without.size(), target.arch_path.c_str());
    for (const auto& row : ops) {
      const auto kernels = row["kernels"].get<std::vector<std::string>>();
      std::string what = kernels.empty() ? "NO CUDA KERNEL" : joined(kernels, ", ");
      if (row.contains("fallback")) what = row["fallback"].get<std::string>();
      std::printf("  %-20s %-13s %s\n", row["op"].get<std::string>().c_str(),
                  row["coverage"].get<std::string>().c_str(), what.c_str());
    }
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
  cmd->add_option(
         "--gpu", a->gpu,
         "auto (the visible GPU), sm_90 (as an H100 80 GB), sm_80 (as an A100 80 GB), or a GPU: h100, "
         "h200, a100, a100-40gb, l40s, a10")
      ->check(CLI::IsMember({"auto", "sm_90", "sm_80", "h100", "h200", "a100", "a100-40gb", "l40s", "a10"}));
  cmd->add_option("--gpu-memory-gib", a->gpu_memory_gib,
                  "GPU memory to plan for (default: the named GPU's, or the visible GPU's free memory)");
  cmd->add_option("--precision", a->precision,
                  "Weights: auto (fp8 for an FP8 checkpoint on a GPU with FP8 tensor cores), bf16 or fp8")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}));
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache element type: bf16 (default) or fp32")
      ->check(CLI::IsMember({"bf16", "fp32"}));
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
  cmd->add_option("--cuda-graph-max-batch-size", a->plan.cuda_graph_max_batch_size,
                  "Largest decode batch replayed from CUDA graphs, whose pool the plan keeps (256; 0: "
                  "max_batch_size)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--context-chunk-size,--prefill-chunk", a->context_chunk_size, "Prefill chunk tokens (512)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a]() { run_guarded([&]() { return run_check(*a); }); });
}

}  // namespace dsinfer::cli
