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
  Linear q_a_proj;   // [q_lora, hidden]
  Tensor q_a_norm;   // [q_lora]
  Linear q_nope;     // [H * nope, hidden or q_lora]: the no-rope dims of q_proj / q_b_proj
  Linear q_pe;       // [H * P, hidden or q_lora]: the rope dims
  Linear kv_latent;  // [R, hidden]: rows [0, R) of kv_a_proj_with_mqa
  Linear kv_pe;      // [P, hidden]: rows [R, R + P)
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

// Splits the rows of a host matrix [heads * (a + b), cols], head by head, into [heads * a, cols] and
// [heads * b, cols] (q_proj into no-rope / rope dims, kv_b_proj into W_UK / W_UV, kv_a_proj into latent /
// rope key with heads = 1).
void split_head_rows(const Tensor& m, int64_t heads, int64_t a, int64_t b, Tensor* first, Tensor* second) {
  const int64_t cols = m.dim(1);
  *first = Tensor::empty(DType::F32, {heads * a, cols});
  *second = Tensor::empty(DType::F32, {heads * b, cols});
  for (int64_t h = 0; h < heads; ++h) {
    const float* src = m.f32() + h * (a + b) * cols;
    std::copy(src, src + a * cols, first->f32() + h * a * cols);
    std::copy(src + a * cols, src + (a + b) * cols, second->f32() + h * b * cols);
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
      // Split on the host, then prepared piece by piece, so that no op has to slice activations.
      Tensor first, second;
      if (a.q_lora) {
        a.q_a_proj = w.linear(p + ".self_attn.q_a_proj", c.q_lora_rank, Hd);
        a.q_a_norm = w.get(p + ".self_attn.q_a_layernorm.weight", {c.q_lora_rank});
        split_head_rows(w.get_host(p + ".self_attn.q_b_proj.weight", {H * qk, c.q_lora_rank}), H, nope, P,
                        &first, &second);
      } else {
        split_head_rows(w.get_host(p + ".self_attn.q_proj.weight", {H * qk, Hd}), H, nope, P, &first,
                        &second);
      }
      a.q_nope.weight = backend.prepare_weight(first);
      a.q_pe.weight = backend.prepare_weight(second);
      split_head_rows(w.get_host(p + ".self_attn.kv_a_proj_with_mqa.weight", {R + P, Hd}), 1, R, P, &first,
                      &second);
      a.kv_latent.weight = backend.prepare_weight(first);
      a.kv_pe.weight = backend.prepare_weight(second);
      a.kv_a_norm = w.get(p + ".self_attn.kv_a_layernorm.weight", {R});
      split_head_rows(w.get_host(p + ".self_attn.kv_b_proj.weight", {H * (nope + v), R}), H, nope, v, &first,
                      &second);
      a.w_uk = backend.prepare_weight(first.reshape({H, nope, R}));
      a.w_uv = backend.prepare_weight(second.reshape({H, v, R}));
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
  Device kv_device() const override { return backend_.device(); }
  DType kv_dtype() const override { return backend_.kv_dtype(); }
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

  bool set_moe_routing_hook(MoeRoutingHook* hook) override {
    routing_hook_ = hook;
    return config_.n_routed_experts > 0;  // a dense configuration has no routing to show
  }

  bool set_index_selection_hook(IndexSelectionHook* hook) override {
    selection_hook_ = hook;
    return selector_ != nullptr;
  }

  Tensor forward(const BatchPlan& plan, KvCache& cache) override {
    return backend_.to_host(forward_device(plan, cache));
  }

  Tensor forward_device(const BatchPlan& plan, KvCache& cache) override {
    Backend& b = backend_;
    const StepScope step(b, plan);
    if (routing_hook_) routing_hook_->on_step(plan);
    const float eps = static_cast<float>(config_.rms_norm_eps);
    Tensor h = b.embed(embed_, plan.token_ids);  // [T, hidden]
    for (size_t i = 0; i < layers_.size(); ++i) {
      const DeepseekLayer& L = layers_[i];
      attention(L, h, plan, cache, static_cast<int64_t>(i));
      if (L.moe) {
        add_moe_residual(b, L.experts, h, L.post_norm, eps, routing_hook_, static_cast<int64_t>(i));
      } else {
        b.norm_mlp_residual(h, L.post_norm, eps, L.mlp);
      }
    }
    Tensor last = b.gather_rows(h, plan.logits_rows);         // [rows, hidden]
    return b.norm_linears(last, norm_, eps, {&lm_head_})[0];  // [rows, vocab]
  }

 private:
  // h [T, hidden] += the MLA block of layer `layer` (input norm included).
  void attention(const DeepseekLayer& L, Tensor& h, const BatchPlan& plan, KvCache& cache, int64_t layer) {
    Backend& b = backend_;
    const MlaWeights& a = L.attn;
    const ModelConfig& c = config_;
    const int64_t T = plan.num_tokens(), H = c.num_heads, P = c.qk_rope_head_dim, nope = c.qk_nope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    Tensor x;        // [T, hidden] normalised input (the sparse selector reads it)
    Tensor q_resid;  // [T, q_lora] normalised compressed query (q_lora only)
    std::vector<const Linear*> linears = {&a.kv_latent, &a.kv_pe};
    if (a.q_lora) {
      linears.push_back(&a.q_a_proj);
    } else {
      linears.insert(linears.end(), {&a.q_nope, &a.q_pe});
    }
    std::vector<Tensor> proj;  // [latent, rope key, q_a] or [latent, rope key, q_nope, q_pe]
    if (selector_) {
      x = b.rms_norm(h, L.input_norm, eps);
      for (const Linear* l : linears) proj.push_back(b.linear(x, *l));
    } else {
      proj = b.norm_linears(h, L.input_norm, eps, linears);
    }
    Tensor q_nope, q_pe;  // [T, H * nope], [T, H * P]
    if (a.q_lora) {
      if (selector_) {
        q_resid = b.rms_norm(proj[2], a.q_a_norm, eps);  // the sparse selector reads it
        q_nope = b.linear(q_resid, a.q_nope);
        q_pe = b.linear(q_resid, a.q_pe);
      } else {
        std::vector<Tensor> q = b.norm_linears(proj[2], a.q_a_norm, eps, {&a.q_nope, &a.q_pe});
        q_nope = q[0];
        q_pe = q[1];
      }
    } else {
      q_nope = proj[2];
      q_pe = proj[3];
    }
    q_nope = q_nope.reshape({T, H, nope});
    q_pe = q_pe.reshape({T, H, P});
    // The normalised latent and the rotated rope key are only read back from the cache (absorbed form, also
    // for prefill), so one op normalises, rotates q_pe and k_pe and writes the rows, and absorbs W_UK into
    // the query (q_lat = W_UK^T q_nope).
    Tensor k_pe = proj[1].reshape({T, 1, P});  // [T, 1, P]
    Tensor q_lat = b.mla_prepare(q_nope, a.w_uk, q_pe, k_pe, proj[0], a.kv_a_norm, eps, rope_, layout_, cache,
                                 layer, plan);  // [T, H, R]
    Tensor o;                                   // [T, H, v]
    if (selector_) {
      Tensor selected =
          selector_->select(layer, x, q_resid, plan, cache, selection_hook_);  // [T, K] positions
      if (selection_hook_) selection_hook_->on_select(b, layer, selected);
      Tensor o_lat = b.attention_mla_sparse(q_lat, q_pe, cache, layer, plan, selected, scale_);  // [T, H, R]
      o = b.head_matmul(o_lat, a.w_uv, /*transpose_w=*/false);
    } else {
      // attention_mla then head_matmul(.., w_uv): a backend may apply W_UV inside the attention's merge.
      o = b.attention_mla_uv(q_lat, q_pe, cache, layer, plan, scale_, a.w_uv);
    }
    b.linear_residual(o.reshape({T, H * c.v_head_dim}), a.o_proj, h);
  }

  ModelConfig config_;
  Backend& backend_;
  std::unique_ptr<MlaTokenSelector> selector_;    // null: dense MLA
  MoeRoutingHook* routing_hook_ = nullptr;        // evaluation tools only
  IndexSelectionHook* selection_hook_ = nullptr;  // evaluation tools only
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
