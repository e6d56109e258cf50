// DeepseekV4Config: the DeepSeek-V4 architecture description, parsed from config.json in DeepSeek's published
// spelling (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling) or transformers' newer one
// (layer_types + compress_rates, mlp_layer_types, rope_parameters {main, compress}, partial_rotary_factor),
// plus the size report (parameters, published weight bytes, KV bytes per token) computed from it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace dsinfer {

// What a layer's attention keeps besides its sliding window of raw tokens.
enum class V4AttnKind {
  kSliding,  // compress ratio 0: the window only
  kCsa,      // Compressed Sparse Attention: overlapping windows + lightning indexer top-k
  kHca,      // Heavily Compressed Attention: every visible compressed row
};
const char* v4_attn_kind_name(V4AttnKind kind);

struct DeepseekV4Config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;  // query / shared KV head size
  int64_t rope_dim = 0;  // qk_rope_head_dim: trailing rotated dims of every head
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;

  std::vector<V4AttnKind> attn_kinds;    // [num_layers]
  std::vector<int64_t> compress_ratios;  // [num_layers], 0 for sliding layers
  RopeConfig main_rope;                  // sliding layers: rope_theta, no scaling
  RopeConfig compress_rope;              // CSA/HCA layers, compressors, indexer: compress_rope_theta + yarn

  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  int64_t hc_mult = 1;
  int64_t hc_sinkhorn_iters = 1;
  double hc_eps = 1e-6;

  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  std::vector<bool> hash_layers;  // [num_layers] expert choice by tid2eid[token]
  std::string scoring_func;       // sqrtsoftplus | sigmoid | softmax
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;

  int64_t num_nextn_predict_layers = 0;
  std::vector<int64_t> mtp_compress_ratios;  // compress_ratios entries past num_layers (MTP layers)
  bool fp8_weights = false;                  // quantization_config fp8 (128x128 block scales)
  std::string expert_dtype;                  // "fp4" | "fp8" | "" (as the other weights)

  int64_t coff(int64_t layer) const { return attn_kinds[layer] == V4AttnKind::kCsa ? 2 : 1; }
  int64_t num_hash_layers() const;
};

// Parses config.json contents; throws dsinfer::Error naming any missing or inconsistent field.
DeepseekV4Config parse_deepseek_v4_config(const nlohmann::json& json);

struct DeepseekV4SizeReport {
  int64_t total_params = 0;   // every weight of the decoding layers, embedding and head (no MTP)
  int64_t active_params = 0;  // per token: routed experts counted num_experts_per_tok times
  int64_t active_params_no_embed = 0;
  int64_t mtp_params = 0;    // multi-token-prediction layers (not used for decoding)
  int64_t weight_bytes = 0;  // decoding weights in the published formats, scales included
  int64_t weight_bytes_with_mtp = 0;
  // Cache growth per token: compressed rows (one per `ratio` tokens) of every CSA/HCA layer and
  // indexer keys of every CSA layer, at 2 bytes (bf16) and 4 bytes (this engine's fp32) per value.
  double kv_bytes_per_token_bf16 = 0;
  double kv_bytes_per_token_fp32 = 0;
  // Fixed per-sequence part at fp32: sliding windows of raw KV and of compressor inputs.
  int64_t kv_window_bytes_fp32 = 0;
};

DeepseekV4SizeReport deepseek_v4_size_report(const DeepseekV4Config& config);

}  // namespace dsinfer
