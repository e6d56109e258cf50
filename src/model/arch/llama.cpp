// Llama / Qwen2 forward pass composed of backend ops.
#include "model/arch/llama.h"

#include <cmath>

#include "core/error.h"

namespace dsinfer {

namespace {

struct LlamaLayer {
  Tensor input_norm;  // [H]
  Linear q, k, v, o;
  Tensor post_norm;  // [H]
  MlpWeights mlp;
};

class LlamaModel : public Model {
 public:
  LlamaModel(const ModelConfig& config, WeightLoader& w, Backend& backend)
      : config_(config), backend_(backend) {
    const int64_t H = config.hidden_size, D = config.head_dim;
    embed_ = w.get("model.embed_tokens.weight", {config.vocab_size, H});
    for (int64_t i = 0; i < config.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i);
      LlamaLayer layer;
      layer.input_norm = w.get(p + ".input_layernorm.weight", {H});
      layer.q = w.linear(p + ".self_attn.q_proj", config.num_heads * D, H, config.qkv_bias);
      layer.k = w.linear(p + ".self_attn.k_proj", config.num_kv_heads * D, H, config.qkv_bias);
      layer.v = w.linear(p + ".self_attn.v_proj", config.num_kv_heads * D, H, config.qkv_bias);
      layer.o = w.linear(p + ".self_attn.o_proj", H, config.num_heads * D, config.o_bias);
      layer.post_norm = w.get(p + ".post_attention_layernorm.weight", {H});
      layer.mlp = w.mlp(p + ".mlp", H, config.intermediate_size, config.mlp_bias);
      layers_.push_back(std::move(layer));
    }
    norm_ = w.get("model.norm.weight", {H});
    if (config.tie_word_embeddings && !w.has("lm_head.weight")) {
      lm_head_.weight = embed_;
    } else {
      lm_head_ = w.linear("lm_head", config.vocab_size, H);
    }
    rope_ = make_rope_table(config.rope, D);
    scale_ = 1.0f / std::sqrt(static_cast<float>(D));
  }

  const ModelConfig& config() const override { return config_; }

  Device kv_device() const override { return backend_.device(); }
  DType kv_dtype() const override { return backend_.kv_dtype(); }

  std::vector<KvLayerSpec> kv_layout() const override {
    KvLayerSpec spec;
    spec.width = 2 * config_.num_kv_heads * config_.head_dim;  // [K | V]
    return std::vector<KvLayerSpec>(config_.num_layers, spec);
  }

  Tensor forward(const BatchPlan& plan, KvCache& cache) override {
    return backend_.to_host(forward_device(plan, cache));
  }

  Tensor forward_device(const BatchPlan& plan, KvCache& cache) override {
    Backend& b = backend_;
    const StepScope step(b, plan);
    const int64_t T = plan.num_tokens(), D = config_.head_dim;
    Tensor h = b.embed(embed_, plan.token_ids);  // [T, H]
    const float eps = static_cast<float>(config_.rms_norm_eps);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LlamaLayer& L = layers_[i];
      std::vector<Tensor> qkv = b.norm_linears(h, L.input_norm, eps, {&L.q, &L.k, &L.v});
      Tensor q = qkv[0].reshape({T, config_.num_heads, D});     // [T, Hq, D]
      Tensor k = qkv[1].reshape({T, config_.num_kv_heads, D});  // [T, Hkv, D]
      const Tensor& v = qkv[2];                                 // [T, Hkv * D]
      Tensor attn = b.rope_attention_gqa(q, k, v, rope_, RopeLayout::kHalf, cache, static_cast<int64_t>(i),
                                         plan, D, scale_);  // [T, Hq * D]
      b.linear_residual(attn, L.o, h);
      b.norm_mlp_residual(h, L.post_norm, eps, L.mlp);
    }
    Tensor last = b.gather_rows(h, plan.logits_rows);         // [rows, H]
    return b.norm_linears(last, norm_, eps, {&lm_head_})[0];  // [rows, vocab]
  }

 private:
  ModelConfig config_;
  Backend& backend_;
  Tensor embed_;
  std::vector<LlamaLayer> layers_;
  Tensor norm_;
  Linear lm_head_;
  RopeTable rope_;
  float scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Model> make_llama_model(const ModelConfig& config, WeightLoader& weights, Backend& backend) {
  return std::make_unique<LlamaModel>(config, weights, backend);
}

}  // namespace dsinfer
