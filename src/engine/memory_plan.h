// Memory planning for a GPU target: weights, fixed workspace, then the KV cache from
// kv_cache_free_gpu_mem_fraction of what is left (or max_tokens_in_paged_kv_cache).
#pragma once
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/model_size.h"

namespace dsinfer {

struct MemoryPlanInput {
  int64_t gpu_memory_bytes = 0;
  double kv_cache_free_gpu_mem_fraction = 0.9;
  int64_t max_tokens_in_paged_kv_cache = 0;  // > 0 overrides the fraction
  int32_t max_num_tokens = 2048;             // tokens per step (sizes activations)
  int32_t max_batch_size = 64;               // sequences per step (sizes logits)
  // Largest decode batch replayed from CUDA graphs (EngineConfig::cuda_graph_max_batch_size, resolved by
  // cuda_graph_batch_limit) and whether graphs are on: their shared pool holds about one decode step of that
  // many sequences.
  int32_t cuda_graph_max_batch_size = 256;
  bool cuda_graphs = true;
  int32_t kv_block_size = 64;
  std::string precision = "bf16";  // weight precision on the GPU: bf16 | fp8
  int32_t kv_element_bytes = 2;    // the KV cache's element size: 2 (bf16) or 4 (fp32)
  // The Hopper path's packed copies of the dense MLP's gate/up and the LM head for the decode GEMV
  // (backend/cuda/gemv_packed.h, DSINFER_GEMV_PACKED): planned where made, that is while 30% of the GPU's
  // memory stays free after them.
  bool gemv_packed_copies = false;
  // The MoE experts' packed copies for the units launches (DSINFER_GEMV_UNITS_PACKED on the Hopper path,
  // CudaBackendOptions::moe_units_packed): 0 none, 1 always, 2 (auto) where 30% of the GPU's memory stays
  // free after them. Planned for every MoE layer's routed and shared experts at once (the backend decides per
  // layer) where hidden and expert intermediate sizes are multiples of 32.
  int units_packed_copies = 0;
};

struct MemoryPlan {
  int64_t weight_bytes = 0;
  int64_t packed_weight_bytes = 0;  // the GEMV's packed copies (gemv_packed_copies, units_packed_copies)
  int64_t workspace_bytes = 0;
  int64_t graph_bytes = 0;  // the CUDA graphs' pool: one decode step of the largest graphed batch (estimate)
  int64_t kv_bytes = 0;
  int64_t kv_tokens = 0;  // tokens of KV that fit (rounded down to whole blocks)
  double kv_bytes_per_token = 0;
  bool fits = false;
  std::string why_not;  // when !fits
};

MemoryPlan plan_memory(const ModelConfig& config, const ModelSize& size, const MemoryPlanInput& input);

// The largest decode batch replayed from CUDA graphs (Engine::create and the plan): `configured`
// (EngineConfig::cuda_graph_max_batch_size; DSINFER_CUDA_GRAPH_MAX_BATCH overrides it), 0 meaning
// max_batch_size, never above max_batch_size.
int32_t cuda_graph_batch_limit(int32_t configured, int32_t max_batch_size);

// The error of the start-up step that profiles a step of max_num_tokens tokens on the GPU: an out-of-memory
// failure says the model does not fit and to lower max_num_tokens; any other failure (a bad setting, a
// kernel error) keeps its own message, so it is not mistaken for a memory problem.
std::string step_profile_error(const std::exception& e, int32_t max_num_tokens);

}  // namespace dsinfer
