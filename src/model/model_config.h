// ModelConfig: the architecture description parsed from a Hugging Face config.json.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsinfer {

enum class Arch { kLlama, kQwen2, kDeepseekV2, kDeepseekV3, kDeepseekV32, kDeepseekV4 };
const char* arch_name(Arch arch);

enum class RopeType { kDefault, kLinear, kYarn, kLlama3 };
const char* rope_type_name(RopeType type);

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  std::optional<double> attention_factor;
  bool truncate = true;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double partial_rotary_factor = 1.0;
};

struct QuantConfig {
  bool fp8_block = false;  // quant_method fp8 with weight_block_size
  int64_t block_n = 128;   // output rows per scale block
  int64_t block_k = 128;   // input columns per scale block
  std::string scale_fmt;   // "" or "ue8m0"
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // GQA head size (llama/qwen2); for DeepSeek the rope dimension as HF defines it
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections carry a bias (qwen2; llama with attention_bias)
  bool o_bias = false;    // o_proj carries a bias (llama with attention_bias)
  bool mlp_bias = false;
  RopeConfig rope;

  // Multi-head latent attention (DeepSeek-V2/V3/V3.2).
  int64_t q_lora_rank = 0;  // 0: no query compression (V2-Lite)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = true;

  // DeepSeekMoE.
  int64_t n_routed_experts = 0;  // 0: dense model
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  std::string topk_method;    // greedy | group_limited_greedy | noaux_tc
  std::string scoring_func;   // softmax | sigmoid
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int64_t num_nextn_predict_layers = 0;

  // DeepSeek-V3.2 sparse attention (DSA): the lightning indexer picks index_topk cached tokens per query.
  int64_t index_n_heads = 0;   // 0: dense MLA
  int64_t index_head_dim = 0;  // its first qk_rope_head_dim dims carry (half-split) rope
  int64_t index_topk = 0;

  QuantConfig quant;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  nlohmann::json raw;  // the whole config.json, for architecture-specific fields

  bool is_deepseek_mla() const {
    return arch == Arch::kDeepseekV2 || arch == Arch::kDeepseekV3 || arch == Arch::kDeepseekV32;
  }
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Parses config.json contents; throws dsinfer::Error naming the field on missing or inconsistent values.
ModelConfig parse_model_config(const nlohmann::json& json);
// Reads DIR/config.json (or DIR itself when it is a file).
ModelConfig load_model_config(const std::string& dir);

}  // namespace dsinfer
