// Reading DeepSeek-V4 checkpoints by their published tensor names, with every shape checked against the
// config (FP8 / FP4 dequantization happens in WeightLoader).
#include "model/arch/deepseek_v4_weights.h"

#include <string>

namespace dsinfer {

namespace {

// A small float32 parameter the V4 kernels read in full precision (hyper-connection mixes, compressor
// position biases, attention sinks, routing bias): float32 on the backend's device too.
Tensor get_f32(WeightLoader& w, const std::string& name, const Shape& shape) {
  Tensor t = w.get_host(name, shape);
  return w.backend() ? w.backend()->prepare_weight_f32(std::move(t)) : t;
}

HyperConnWeights load_hc(WeightLoader& w, const std::string& prefix, int64_t mixes, int64_t inputs,
                         int64_t scales) {
  HyperConnWeights hc;
  hc.fn = get_f32(w, prefix + "_fn", {mixes, inputs});
  hc.base = get_f32(w, prefix + "_base", {mixes});
  hc.scale = get_f32(w, prefix + "_scale", {scales});
  return hc;
}

V4CompressorWeights load_compressor(WeightLoader& w, const std::string& p, int64_t hidden, int64_t dim,
                                    int64_t c, int64_t ratio) {
  V4CompressorWeights comp;
  comp.wkv = w.linear(p + ".wkv", c * dim, hidden);
  comp.wgate = w.linear(p + ".wgate", c * dim, hidden);
  comp.ape = get_f32(w, p + ".ape", {ratio, c * dim});
  comp.norm = w.get(p + ".norm.weight", {dim});
  return comp;
}

MlpWeights load_expert(WeightLoader& w, const std::string& p, int64_t hidden, int64_t inter, float limit) {
  MlpWeights m;
  m.gate = w.linear(p + ".w1", inter, hidden);
  m.up = w.linear(p + ".w3", inter, hidden);
  m.down = w.linear(p + ".w2", hidden, inter);
  m.swiglu_limit = limit;
  return m;
}

}  // namespace

V4Weights load_deepseek_v4_weights(const DeepseekV4Config& c, WeightLoader& w) {
  const int64_t Hd = c.hidden_size, H = c.num_heads, D = c.head_dim, n = c.hc_mult;
  const float limit = static_cast<float>(c.swiglu_limit);
  V4Weights out;
  out.embed = w.get("embed.weight", {c.vocab_size, Hd});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    V4LayerWeights L;
    L.attn_norm = w.get(p + ".attn_norm.weight", {Hd});
    L.ffn_norm = w.get(p + ".ffn_norm.weight", {Hd});
    L.hc_attn = load_hc(w, p + ".hc_attn", (2 + n) * n, n * Hd, 3);
    L.hc_ffn = load_hc(w, p + ".hc_ffn", (2 + n) * n, n * Hd, 3);

    V4AttentionWeights& a = L.attn;
    const std::string ap = p + ".attn";
    a.wq_a = w.linear(ap + ".wq_a", c.q_lora_rank, Hd);
    a.q_norm = w.get(ap + ".q_norm.weight", {c.q_lora_rank});
    a.wq_b = w.linear(ap + ".wq_b", H * D, c.q_lora_rank);
    a.wkv = w.linear(ap + ".wkv", D, Hd);
    a.kv_norm = w.get(ap + ".norm.weight", {D});
    const int64_t group_in = H * D / c.o_groups;
    a.wo_a = w.get(ap + ".wo_a.weight", {c.o_groups * c.o_lora_rank, group_in})
                 .reshape({c.o_groups, c.o_lora_rank, group_in});
    a.wo_b = w.linear(ap + ".wo_b", Hd, c.o_groups * c.o_lora_rank);
    a.sinks = get_f32(w, ap + ".attn_sink", {H});
    const int64_t ratio = c.compress_ratios[i];
    if (c.attn_kinds[i] != V4AttnKind::kSliding) {
      a.has_compressor = true;
      a.compressor = load_compressor(w, ap + ".compressor", Hd, D, c.coff(i), ratio);
    }
    if (c.attn_kinds[i] == V4AttnKind::kCsa) {
      a.has_indexer = true;
      const std::string ip = ap + ".indexer";
      a.indexer.wq_b = w.linear(ip + ".wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      a.indexer.weights_proj = w.linear(ip + ".weights_proj", c.index_n_heads, Hd);
      a.indexer.compressor = load_compressor(w, ip + ".compressor", Hd, c.index_head_dim, 2, ratio);
    }

    V4MoeWeights& f = L.ffn;
    const std::string fp = p + ".ffn";
    const int64_t E = c.n_routed_experts;
    f.router = w.get(fp + ".gate.weight", {E, Hd});
    if (c.hash_layers[i]) {
      f.tid2eid = w.get_ids(fp + ".gate.tid2eid", {c.vocab_size, c.num_experts_per_tok});
      for (int64_t k = 0; k < f.tid2eid.numel(); ++k) {
        const int32_t e = f.tid2eid.data<int32_t>()[k];
        DSI_CHECK(e >= 0 && e < E, fp, ".gate.tid2eid holds expert id ", e, " outside [0, ", E, ")");
      }
      if (w.backend()) f.tid2eid = w.backend()->prepare_table(f.tid2eid);
    } else {
      f.bias = w.has(fp + ".gate.bias") ? w.get_host(fp + ".gate.bias", {E}) : Tensor::zeros(DType::F32, {E});
      if (w.backend()) f.bias = w.backend()->prepare_weight_f32(f.bias);
    }
    for (int64_t e = 0; e < E; ++e) {
      f.experts.push_back(
          load_expert(w, fp + ".experts." + std::to_string(e), Hd, c.moe_intermediate_size, limit));
    }
    if (w.backend()) w.backend()->prepare_experts(f.experts);
    if (c.n_shared_experts > 0) {
      f.has_shared = true;
      f.shared =
          load_expert(w, fp + ".shared_experts", Hd, c.moe_intermediate_size * c.n_shared_experts, limit);
      if (w.backend()) w.backend()->prepare_shared_experts(f.shared);
    }
    out.layers.push_back(std::move(L));
  }
  out.hc_head = load_hc(w, "hc_head", n, n * Hd, 1);
  out.norm = w.get("norm.weight", {Hd});
  if (c.tie_word_embeddings && !w.has("head.weight")) {
    out.head.weight = out.embed;
  } else {
    out.head = w.linear("head", c.vocab_size, Hd);
  }
  return out;
}

}  // namespace dsinfer
