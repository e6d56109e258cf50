// DeepSeek-V2/V3/V3.2 forward pass: MLA (absorbed form over the latent cache, dense or restricted to the
// positions an MlaTokenSelector picks) + dense or MoE feed-forward.
#include "model/arch/deepseek.h"

#include <cmath>

#include "core/error.h"
#include "model/arch/deepseek_moe.h"

namespace dsinfer {

namespace {

struct MlaWeights {
  bool q_lora = false;
  Linear q_proj;     // [H * qk, hidden] without q_lora
  Linear q_a_proj;   // [q_lora, hidden]
  Tensor q_a_norm;   // [q_lora]
  Linear q_b_proj;   // [H * qk, q_lora]
  Linear kv_a_proj;  // [R + P, hidden]
  Tensor kv_a_norm;  // [R]
  Tensor w_uk;       // [H, nope, R] from kv_b_proj
  Tensor w_uv;       // [H, v, R] from kv_b_proj
  Linear o_proj;     // [hidden, H * v]
};

struct DeepseekLayer {
  Tensor input_norm;
  MlaWeights attn;
  Tensor post_norm;
  bool moe = false;
  MlpWeights mlp;
  MoeWeights experts;
};

// Splits kv_b_proj [H * (nope + v), R] into per-head W_UK [H, nope, R] and W_UV [H, v, R].
void split_kv_b(const Tensor& kv_b, int64_t H, int64_t nope, int64_t v, int64_t R, Tensor* w_uk,
                Tensor* w_uv) {
  *w_uk = Tensor::empty(DType::F32, {H, nope, R});
  *w_uv = Tensor::empty(DType::F32, {H, v, R});
  for (int64_t h = 0; h < H; ++h) {
    const float* src = kv_b.f32() + h * (nope + v) * R;
    std::copy(src, src + nope * R, w_uk->f32() + h * nope * R);
    std::copy(src + nope * R, src + (nope + v) * R, w_uv->f32() + h * v * R);
  }
}

class DeepseekModel : public Model {
 public:
  DeepseekModel(const ModelConfig& c, WeightLoader& w, Backend& backend,
                std::unique_ptr<MlaTokenSelector> selector)
      : config_(c), backend_(backend), selector_(std::move(selector)) {
    DSI_CHECK(!selector_ || c.q_lora_rank > 0, c.model_type, ": sparse MLA needs q_lora_rank");
    const int64_t Hd = c.hidden_size, H = c.num_heads, R = c.kv_lora_rank, P = c.qk_rope_head_dim;
    const int64_t nope = c.qk_nope_head_dim, qk = c.qk_head_dim(), v = c.v_head_dim;
    embed_ = w.get("model.embed_tokens.weight", {c.vocab_size, Hd});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i);
      DeepseekLayer L;
      L.input_norm = w.get(p + ".input_layernorm.weight", {Hd});
      MlaWeights& a = L.attn;
      a.q_lora = c.q_lora_rank > 0;
      if (a.q_lora) {
        a.q_a_proj = w.linear(p + ".self_attn.q_a_proj", c.q_lora_rank, Hd);
        a.q_a_norm = w.get(p + ".self_attn.q_a_layernorm.weight", {c.q_lora_rank});
        a.q_b_proj = w.linear(p + ".self_attn.q_b_proj", H * qk, c.q_lora_rank);
      } else {
        a.q_proj = w.linear(p + ".self_attn.q_proj", H * qk, Hd);
      }
      a.kv_a_proj = w.linear(p + ".self_attn.kv_a_proj_with_mqa", R + P, Hd);
      a.kv_a_norm = w.get(p + ".self_attn.kv_a_layernorm.weight", {R});
      Tensor kv_b = w.get(p + ".self_attn.kv_b_proj.weight", {H * (nope + v), R});
      split_kv_b(kv_b, H, nope, v, R, &a.w_uk, &a.w_uv);
      a.o_proj = w.linear(p + ".self_attn.o_proj", Hd, H * v);
      L.post_norm = w.get(p + ".post_attention_layernorm.weight", {Hd});
      L.moe = c.is_moe_layer(i);
      if (L.moe) {
        L.experts = load_deepseek_moe(c, w, p + ".mlp");
      } else {
        L.mlp = w.mlp(p + ".mlp", Hd, c.intermediate_size);
      }
      layers_.push_back(std::move(L));
    }
    norm_ = w.get("model.norm.weight", {Hd});
    if (c.tie_word_embeddings && !w.has("lm_head.weight")) {
      lm_head_.weight = embed_;
    } else {
      lm_head_ = w.linear("lm_head", c.vocab_size, Hd);
    }
    rope_ = make_rope_table(c.rope, P);
    // V2 uses the complex-pair form; V3 follows rope_interleave.
    layout_ =
        (c.arch == Arch::kDeepseekV2 || c.rope_interleave) ? RopeLayout::kInterleaved : RopeLayout::kHalf;
    double scale = 1.0 / std::sqrt(static_cast<double>(qk));
    // The YaRN mscale (mscale_all_dim) is folded into the softmax scale, as DeepSeek and transformers do.
    if (c.rope.type == RopeType::kYarn && c.rope.mscale_all_dim != 0.0) {
      double m = yarn_mscale(c.rope.factor, c.rope.mscale_all_dim);
      scale *= m * m;
    }
    scale_ = static_cast<float>(scale);
  }

  const ModelConfig& config() const override { return config_; }
  bool prefix_cache_exact() const override { return selector_ == nullptr; }

  std::vector<KvLayerSpec> kv_layout() const override {
    KvLayerSpec spec;
    spec.width = config_.kv_lora_rank + config_.qk_rope_head_dim;  // [latent | rope key]
    std::vector<KvLayerSpec> layout(config_.num_layers, spec);
    if (selector_) {
      for (const KvLayerSpec& extra : selector_->kv_layout()) layout.push_back(extra);
    }
    return layout;
  }

  Tensor forward(const BatchPlan& plan, KvCache& cache) override {
    Backend& b = backend_;
    const StepScope step(b, plan);
    const float eps = static_cast<float>(config_.rms_norm_eps);
    Tensor h = b.embed(embed_, plan.token_ids);  // [T, hidden]
    for (size_t i = 0; i < layers_.size(); ++i) {
      const DeepseekLayer& L = layers_[i];
      Tensor x = b.rms_norm(h, L.input_norm, eps);
      b.add_inplace(h, attention(L.attn, x, plan, cache, static_cast<int64_t>(i)));
      x = b.rms_norm(h, L.post_norm, eps);
      b.add_inplace(h, L.moe ? run_moe(b, L.experts, x) : b.mlp(x, L.mlp));
    }
    Tensor last = b.gather_rows(h, plan.logits_rows);  // [rows, hidden]
    return b.linear(b.rms_norm(last, norm_, eps), lm_head_);
  }

 private:
  Tensor attention(const MlaWeights& a, const Tensor& x, const BatchPlan& plan, KvCache& cache,
                   int64_t layer) {
    Backend& b = backend_;
    const ModelConfig& c = config_;
    const int64_t T = plan.num_tokens(), H = c.num_heads, R = c.kv_lora_rank, P = c.qk_rope_head_dim;
    const int64_t nope = c.qk_nope_head_dim, qk = c.qk_head_dim();
    const float eps = static_cast<float>(c.rms_norm_eps);
    Tensor q_resid;  // [T, q_lora] normalised compressed query (q_lora only)
    if (a.q_lora) q_resid = b.rms_norm(b.linear(x, a.q_a_proj), a.q_a_norm, eps);
    Tensor q = a.q_lora ? b.linear(q_resid, a.q_b_proj) : b.linear(x, a.q_proj);  // [T, H * qk]
    q = q.reshape({T, H, qk});
    Tensor q_nope = Tensor::empty(DType::F32, {T, H, nope});  // [T, H, nope]
    Tensor q_pe = Tensor::empty(DType::F32, {T, H, P});       // [T, H, P]
    for (int64_t r = 0; r < T * H; ++r) {
      std::copy(q.f32() + r * qk, q.f32() + r * qk + nope, q_nope.f32() + r * nope);
      std::copy(q.f32() + r * qk + nope, q.f32() + (r + 1) * qk, q_pe.f32() + r * P);
    }
    Tensor kv = b.linear(x, a.kv_a_proj);                // [T, R + P]
    Tensor latent = Tensor::empty(DType::F32, {T, R});   // [T, R]
    Tensor k_pe = Tensor::empty(DType::F32, {T, 1, P});  // [T, 1, P]
    for (int64_t t = 0; t < T; ++t) {
      std::copy(kv.f32() + t * (R + P), kv.f32() + t * (R + P) + R, latent.f32() + t * R);
      std::copy(kv.f32() + t * (R + P) + R, kv.f32() + (t + 1) * (R + P), k_pe.f32() + t * P);
    }
    latent = b.rms_norm(latent, a.kv_a_norm, eps);
    b.rope(q_pe, plan.positions, rope_, 0, layout_);
    b.rope(k_pe, plan.positions, rope_, 0, layout_);
    b.write_kv(cache, layer, plan, latent, k_pe);
    Tensor q_lat = b.head_matmul(q_nope, a.w_uk, /*transpose_w=*/true);  // [T, H, R]
    Tensor o_lat;                                                        // [T, H, R]
    if (selector_) {
      Tensor selected = selector_->select(layer, x, q_resid, plan, cache);  // [T, K] positions
      o_lat = b.attention_mla_sparse(q_lat, q_pe, cache, layer, plan, selected, scale_);
    } else {
      o_lat = b.attention_mla(q_lat, q_pe, cache, layer, plan, scale_);
    }
    Tensor o = b.head_matmul(o_lat, a.w_uv, /*transpose_w=*/false);  // [T, H, v]
    return b.linear(o.reshape({T, H * c.v_head_dim}), a.o_proj);     // [T, hidden]
  }

  ModelConfig config_;
  Backend& backend_;
  std::unique_ptr<MlaTokenSelector> selector_;  // null: dense MLA
  Tensor embed_;
  std::vector<DeepseekLayer> layers_;
  Tensor norm_;
  Linear lm_head_;
  RopeTable rope_;
  RopeLayout layout_ = RopeLayout::kInterleaved;
  float scale_ = 1.0f;
};

}  // namespace

std::unique_ptr<Model> make_deepseek_model(const ModelConfig& config, WeightLoader& weights, Backend& backend,
                                           std::unique_ptr<MlaTokenSelector> selector) {
  return std::make_unique<DeepseekModel>(config, weights, backend, std::move(selector));
}

}  // namespace dsinfer
