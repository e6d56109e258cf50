// DeepSeek-V3.2 lightning indexer, plugged into the DeepSeek-V3 model as its MLA token selector.
// Exact-math form of the reference (as transformers computes it): no Hadamard rotation (orthogonal, so
// q . k is unchanged) and no FP8 quantisation of the indexer's q and k.
#include "model/arch/deepseek_v32.h"

#include <cmath>

#include "core/error.h"
#include "model/arch/deepseek.h"

namespace dsinfer {

namespace {

struct IndexerWeights {
  Linear wq_b;          // [Hi * Di, q_lora]
  Linear wk;            // [Di, hidden]
  Tensor k_norm_w;      // [Di] LayerNorm weight
  Tensor k_norm_b;      // [Di] LayerNorm bias
  Linear weights_proj;  // [Hi, hidden]
};

class LightningIndexer : public MlaTokenSelector {
 public:
  LightningIndexer(const ModelConfig& c, WeightLoader& w, Backend& backend) : config_(c), backend_(backend) {
    const int64_t Hi = c.index_n_heads, Di = c.index_head_dim, Hd = c.hidden_size;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".self_attn.indexer";
      IndexerWeights L;
      L.wq_b = w.linear(p + ".wq_b", Hi * Di, c.q_lora_rank);
      L.wk = w.linear(p + ".wk", Di, Hd);
      L.k_norm_w = w.get(p + ".k_norm.weight", {Di});
      L.k_norm_b = w.get(p + ".k_norm.bias", {Di});
      L.weights_proj = w.linear(p + ".weights_proj", Hi, Hd);
      layers_.push_back(std::move(L));
    }
    rope_ = make_rope_table(c.rope, c.qk_rope_head_dim);  // the MLA rope table, applied half-split here
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Di)));
    weight_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Hi)));
  }

  std::vector<KvLayerSpec> kv_layout() const override {
    KvLayerSpec spec;
    spec.width = config_.index_head_dim;  // the indexer key (LayerNorm, then rope on its first P dims)
    return std::vector<KvLayerSpec>(config_.num_layers, spec);
  }

  Tensor select(int64_t layer, const Tensor& x, const Tensor& q_resid, const BatchPlan& plan, KvCache& cache,
                IndexSelectionHook* hook) override {
    Backend& b = backend_;
    const IndexerWeights& L = layers_[layer];
    const int64_t T = plan.num_tokens(), Hi = config_.index_n_heads, Di = config_.index_head_dim;
    const int64_t entry = config_.num_layers + layer;
    Tensor q = b.linear(q_resid, L.wq_b).reshape({T, Hi, Di});  // [T, Hi, Di]
    b.rope(q, plan.positions, rope_, 0, RopeLayout::kHalf);
    Tensor k = b.layer_norm(b.linear(x, L.wk), L.k_norm_w, L.k_norm_b, kKNormEps).reshape({T, 1, Di});
    b.rope(k, plan.positions, rope_, 0, RopeLayout::kHalf);  // [T, 1, Di]
    b.write_kv(cache, entry, plan, k, Tensor());
    Tensor weights = b.linear(x, L.weights_proj);  // [T, Hi]
    if (hook) hook->on_index_inputs(b, layer, {q, weights, &cache, entry, &plan, 1, scale_, weight_scale_});
    return b.dsa_indexer_topk(q, weights, cache, entry, plan, scale_, weight_scale_,
                              config_.index_topk);  // [T, K]
  }

 private:
  static constexpr float kKNormEps = 1e-6f;  // nn.LayerNorm(index_head_dim, eps=1e-6) in the reference
  ModelConfig config_;
  Backend& backend_;
  std::vector<IndexerWeights> layers_;
  RopeTable rope_;
  float scale_ = 1.0f;         // index_head_dim^-0.5 on q . k
  float weight_scale_ = 1.0f;  // index_n_heads^-0.5 on the per-head weights
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v32_model(const ModelConfig& config, WeightLoader& weights,
                                               Backend& backend) {
  DSI_CHECK(config.index_n_heads > 0 && config.index_topk > 0, "deepseek_v32: indexer settings are missing");
  auto indexer = std::make_unique<LightningIndexer>(config, weights, backend);
  return make_deepseek_model(config, weights, backend, std::move(indexer));
}

}  // namespace dsinfer
