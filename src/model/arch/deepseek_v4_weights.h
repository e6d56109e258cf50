// DeepSeek-V4 weights as the model uses them (float32), read from the published tensor names
// (embed.weight, layers.N.attn.wq_a.weight, layers.N.ffn.experts.E.w1.weight, hc_head_fn, ...).
#pragma once
#include <vector>

#include "backend/backend.h"
#include "model/deepseek_v4_config.h"
#include "model/weight_loader.h"

namespace dsinfer {

// A compressor: per-token kv/gate projections [c * D, hidden] (c = 2 with overlapping windows), the
// positional gate bias ape [ratio, c * D] and the RMSNorm of the pooled row [D].
struct V4CompressorWeights {
  Linear wkv;
  Linear wgate;
  Tensor ape;
  Tensor norm;
};

struct V4IndexerWeights {
  Linear wq_b;                     // [index_n_heads * index_head_dim, q_lora_rank]
  Linear weights_proj;             // [index_n_heads, hidden]
  V4CompressorWeights compressor;  // at index_head_dim, overlapping
};

struct V4AttentionWeights {
  Linear wq_a;     // [q_lora_rank, hidden]
  Tensor q_norm;   // [q_lora_rank]
  Linear wq_b;     // [H * D, q_lora_rank]
  Linear wkv;      // [D, hidden]
  Tensor kv_norm;  // [D]
  Tensor wo_a;     // [o_groups, o_lora_rank, H * D / o_groups]
  Linear wo_b;     // [hidden, o_groups * o_lora_rank]
  Tensor sinks;    // [H]
  bool has_compressor = false;
  V4CompressorWeights compressor;
  bool has_indexer = false;
  V4IndexerWeights indexer;
};

struct V4MoeWeights {
  Tensor router;   // [E, hidden]
  Tensor bias;     // [E] selection bias (zeros when absent); unused by hash layers
  Tensor tid2eid;  // [vocab, k] I32 on hash layers
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
};

struct V4LayerWeights {
  Tensor attn_norm;  // [hidden]
  Tensor ffn_norm;   // [hidden]
  HyperConnWeights hc_attn;
  HyperConnWeights hc_ffn;
  V4AttentionWeights attn;
  V4MoeWeights ffn;
};

struct V4Weights {
  Tensor embed;  // [vocab, hidden]
  std::vector<V4LayerWeights> layers;
  HyperConnWeights hc_head;
  Tensor norm;  // [hidden]
  Linear head;  // [vocab, hidden]
};

V4Weights load_deepseek_v4_weights(const DeepseekV4Config& config, WeightLoader& w);

}  // namespace dsinfer
