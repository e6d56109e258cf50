// The GPU memory plan arithmetic.
#include "engine/memory_plan.h"

#include <algorithm>

#include "core/env_choice.h"
#include "core/error.h"
#include "resilience/step_error.h"

namespace dsinfer {

MemoryPlan plan_memory(const ModelConfig& c, const ModelSize& size, const MemoryPlanInput& in) {
  MemoryPlan p;
  p.weight_bytes = in.precision == "fp8" ? size.checkpoint_weight_bytes : size.bf16_weight_bytes;
  if (in.gemv_packed_copies && in.precision != "fp8") {
    const int64_t dense_layers =
        c.n_routed_experts > 0 ? std::min(c.first_k_dense_replace, c.num_layers) : c.num_layers;
    int64_t bytes = dense_layers * 2 * c.intermediate_size * c.hidden_size * 2;  // gate and up, bf16
    if (!c.tie_word_embeddings) bytes += c.vocab_size * c.hidden_size * 2;       // the LM head
    const double free_after = static_cast<double>(in.gpu_memory_bytes - p.weight_bytes - bytes);
    // 0.3: gemv_packed.h's kGemvPackedFreeFraction (the engine does not include the CUDA backend's headers).
    if (free_after >= 0.3 * static_cast<double>(in.gpu_memory_bytes)) p.packed_weight_bytes = bytes;
  }
  if (in.units_packed_copies != 0 && in.precision != "fp8" && c.n_routed_experts > 0 &&
      c.hidden_size % 32 == 0 && c.moe_intermediate_size % 32 == 0) {
    int64_t moe_layers = 0;
    for (int64_t layer = 0; layer < c.num_layers; ++layer) moe_layers += c.is_moe_layer(layer) ? 1 : 0;
    // Gate, up and down of every routed and shared expert, bf16.
    const int64_t bytes = moe_layers * (c.n_routed_experts + c.n_shared_experts) * 3 *
                          c.moe_intermediate_size * c.hidden_size * 2;
    const double free_after =
        static_cast<double>(in.gpu_memory_bytes - p.weight_bytes - p.packed_weight_bytes - bytes);
    if (in.units_packed_copies == 1 || free_after >= 0.3 * static_cast<double>(in.gpu_memory_bytes))
      p.packed_weight_bytes += bytes;
  }
  // Workspace: bf16 activations of one step (residual, normed input, the widest projection output, MLP
  // gate/up/act), fp32 logits for every sequence of the step, and 64 MiB for cuBLASLt and split-K partials.
  const int64_t widest =
      std::max({c.hidden_size * 4, c.intermediate_size * 3,
                c.moe_intermediate_size * 3 * std::max<int64_t>(1, c.num_experts_per_tok)});
  const int64_t activations = static_cast<int64_t>(in.max_num_tokens) * (c.hidden_size * 3 + widest) * 2;
  const int64_t logits = static_cast<int64_t>(in.max_batch_size) * c.vocab_size * 4;
  p.workspace_bytes = activations + logits + (int64_t{64} << 20);
  // The CUDA graphs' pool, which the engine measures at startup and keeps out of the KV cache: the same
  // per-token activations and logits for the largest graphed batch, and 1/8 as the engine adds.
  if (in.cuda_graphs) {
    const int64_t rows = cuda_graph_batch_limit(in.cuda_graph_max_batch_size, in.max_batch_size);
    const int64_t step = rows * ((c.hidden_size * 3 + widest) * 2 + c.vocab_size * 4);
    p.graph_bytes = step + step / 8;
  }
  p.kv_bytes_per_token = size.kv_bytes_per_token_bf16 * in.kv_element_bytes / 2.0;
  const int64_t left =
      in.gpu_memory_bytes - p.weight_bytes - p.packed_weight_bytes - p.workspace_bytes - p.graph_bytes;
  if (left <= 0) {
    p.why_not = str_cat("weights (", p.weight_bytes >> 20, " MiB), workspace (", p.workspace_bytes >> 20,
                        " MiB) and CUDA graphs (", p.graph_bytes >> 20, " MiB) exceed the GPU's ",
                        in.gpu_memory_bytes >> 20, " MiB");
    return p;
  }
  if (in.max_tokens_in_paged_kv_cache > 0) {
    p.kv_tokens = in.max_tokens_in_paged_kv_cache;
    p.kv_bytes = static_cast<int64_t>(p.kv_tokens * p.kv_bytes_per_token);
    if (p.kv_bytes > left) {
      p.why_not = str_cat("max_tokens_in_paged_kv_cache ", p.kv_tokens, " needs ", p.kv_bytes >> 20,
                          " MiB of KV, only ", left >> 20, " MiB are left after weights and workspace");
      return p;
    }
  } else {
    p.kv_bytes = static_cast<int64_t>(left * in.kv_cache_free_gpu_mem_fraction);
    p.kv_tokens = p.kv_bytes_per_token > 0 ? static_cast<int64_t>(p.kv_bytes / p.kv_bytes_per_token) : 0;
  }
  p.kv_tokens = (p.kv_tokens / in.kv_block_size) * in.kv_block_size;
  p.fits = p.kv_tokens >= in.kv_block_size;
  if (!p.fits) p.why_not = "no room for a single KV block after weights and workspace";
  return p;
}

int32_t cuda_graph_batch_limit(int32_t configured, int32_t max_batch_size) {
  DSI_CHECK(configured >= 0, "cuda_graph_max_batch_size must be >= 0 (0: max_batch_size), got ", configured);
  const int32_t cap = env_int("DSINFER_CUDA_GRAPH_MAX_BATCH", configured, 0, 1 << 20);
  return cap > 0 ? std::min(cap, max_batch_size) : max_batch_size;
}

std::string step_profile_error(const std::exception& e, int32_t max_num_tokens) {
  if (classify_step_error(e) == StepErrorType::kOutOfMemory) {
    return str_cat("the model does not fit: one step of max_num_tokens = ", max_num_tokens,
                   " tokens failed on the GPU after the weights were loaded (", e.what(),
                   "); lower max_num_tokens");
  }
  return str_cat("the first step (max_num_tokens = ", max_num_tokens,
                 " tokens, run at start-up) failed: ", e.what());
}

}  // namespace dsinfer
