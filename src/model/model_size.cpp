// Size arithmetic per architecture, from the config's shapes.
#include "model/model_size.h"

#include "core/error.h"
#include "model/deepseek_v4_config.h"

namespace dsinfer {

namespace {

// Bytes of an [out, in] projection stored as FP8 with 128x128 float32 block scales.
int64_t fp8_block_bytes(int64_t out, int64_t in, const QuantConfig& q) {
  const int64_t blocks = ((out + q.block_n - 1) / q.block_n) * ((in + q.block_k - 1) / q.block_k);
  return out * in + blocks * 4;
}

struct Counter {
  const ModelConfig& c;
  ModelSize s;
  // A projection: quantized in FP8 checkpoints, bf16 otherwise. `experts` copies, `active` of them per token.
  void proj(int64_t out, int64_t in, int64_t copies = 1, int64_t active = -1) {
    const int64_t n = out * in;
    s.total_params += n * copies;
    s.active_params += n * (active < 0 ? copies : active);
    s.bf16_weight_bytes += 2 * n * copies;
    s.checkpoint_weight_bytes += (c.quant.fp8_block ? fp8_block_bytes(out, in, c.quant) : 2 * n) * copies;
  }
  // A tensor kept in bf16 in every format (norms, embeddings, router).
  void plain(int64_t n, bool active = true) {
    s.total_params += n;
    if (active) s.active_params += n;
    s.bf16_weight_bytes += 2 * n;
    s.checkpoint_weight_bytes += 2 * n;
  }
};

// A decode step reads one embedding row; a tied embedding is the head as well, read whole.
int64_t decode_params(int64_t active_params, const ModelConfig& c) {
  return c.tie_word_embeddings ? active_params : active_params - c.vocab_size * c.hidden_size + c.hidden_size;
}

}  // namespace

ModelSize model_size(const ModelConfig& c) {
  if (c.arch == Arch::kDeepseekV4) {
    DeepseekV4Config v4 = parse_deepseek_v4_config(c.raw);
    DeepseekV4SizeReport r = deepseek_v4_size_report(v4);
    ModelSize s;
    s.total_params = r.total_params;
    s.active_params = r.active_params;
    s.checkpoint_weight_bytes = r.weight_bytes;
    s.bf16_weight_bytes = 2 * r.total_params;
    s.kv_bytes_per_token_bf16 = r.kv_bytes_per_token_bf16;
    s.kv_bytes_per_token_fp32 = r.kv_bytes_per_token_fp32;
    s.kv_fixed_bytes_per_sequence_fp32 = r.kv_window_bytes_fp32;
    s.decode_params = decode_params(s.active_params, c);
    return s;
  }
  Counter k{c, {}};
  const int64_t H = c.hidden_size;
  k.plain(c.vocab_size * H);  // embedding
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    k.plain(2 * H);  // input + post-attention norms
    int64_t kv_values = 0;
    if (c.is_deepseek_mla()) {
      const int64_t qk = c.qk_head_dim();
      if (c.q_lora_rank > 0) {
        k.proj(c.q_lora_rank, H);
        k.plain(c.q_lora_rank);
        k.proj(c.num_heads * qk, c.q_lora_rank);
      } else {
        k.proj(c.num_heads * qk, H);
      }
      k.proj(c.kv_lora_rank + c.qk_rope_head_dim, H);
      k.plain(c.kv_lora_rank);
      k.proj(c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      k.proj(H, c.num_heads * c.v_head_dim);
      kv_values = c.kv_lora_rank + c.qk_rope_head_dim;
    } else {
      const int64_t D = c.head_dim;
      k.proj(c.num_heads * D, H);
      k.proj(2 * c.num_kv_heads * D, H);
      k.proj(H, c.num_heads * D);
      if (c.qkv_bias) k.plain((c.num_heads + 2 * c.num_kv_heads) * D);
      kv_values = 2 * c.num_kv_heads * D;
    }
    if (c.is_moe_layer(layer)) {
      const int64_t I = c.moe_intermediate_size;
      k.plain(c.n_routed_experts * H);  // router
      k.proj(I, H, 3 * c.n_routed_experts, 3 * c.num_experts_per_tok);
      if (c.n_shared_experts > 0) k.proj(I * c.n_shared_experts, H, 3);
    } else {
      k.proj(c.intermediate_size, H, 3);
    }
    k.s.kv_bytes_per_token_bf16 += 2.0 * kv_values;
    k.s.kv_bytes_per_token_fp32 += 4.0 * kv_values;
  }
  k.plain(H);  // final norm
  if (!c.tie_word_embeddings) k.plain(c.vocab_size * H);
  k.s.decode_params = decode_params(k.s.active_params, c);
  return k.s;
}

}  // namespace dsinfer
