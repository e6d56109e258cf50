// DeepSeek-V4 forward pass: hyper-connected residual streams around shared-KV attention (sliding window,
// + Compressed Sparse Attention with a lightning indexer, or + Heavily Compressed Attention) and a MoE with
// hash-routed first layers. Follows transformers' DeepseekV4ForCausalLM (see docs/deepseek_v4_kv.md for the
// cache layout and for where DeepSeek's own inference code differs).
#include "model/arch/deepseek_v4.h"

#include <cmath>

#include "core/error.h"
#include "model/arch/deepseek_v4_compressor.h"
#include "model/arch/deepseek_v4_weights.h"
#include "model/rope.h"

namespace dsinfer {

namespace {

// Cache layers (indices into kv_layout()) of one model layer; -1 where the layer has none.
struct V4CacheLayers {
  int64_t window = -1;   // raw K=V rows, sliding window
  int64_t comp_in = -1;  // compressor inputs [kv | gate] per token, sliding window of the open window(s)
  int64_t comp = -1;     // compressed rows
  int64_t idx_in = -1;   // indexer compressor inputs
  int64_t idx = -1;      // indexer keys
};

class DeepseekV4Model : public Model {
 public:
  DeepseekV4Model(const ModelConfig& mc, WeightLoader& w, Backend& backend)
      : config_(mc), c_(parse_deepseek_v4_config(mc.raw)), backend_(backend) {
    weights_ = load_deepseek_v4_weights(c_, w);
    main_rope_ = make_rope_table(c_.main_rope, c_.rope_dim);
    compress_rope_ = make_rope_table(c_.compress_rope, c_.rope_dim);
    head_ones_ =
        backend.prepare_weight(Tensor::from_f32(std::vector<float>(c_.head_dim, 1.0f), {c_.head_dim}));
    // Cache layout: see kv_layout().
    int64_t next = 0;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      V4CacheLayers L;
      L.window = next++;
      if (c_.attn_kinds[i] != V4AttnKind::kSliding) {
        L.comp_in = next++;
        L.comp = next++;
      }
      if (c_.attn_kinds[i] == V4AttnKind::kCsa) {
        L.idx_in = next++;
        L.idx = next++;
      }
      cache_layers_.push_back(L);
    }
  }

  const ModelConfig& config() const override { return config_; }
  Device kv_device() const override { return backend_.device(); }
  DType kv_dtype() const override { return backend_.kv_dtype(); }
  // Decode steps are capturable: a GPU backend finds the compressors' closing rows on the device
  // (Backend::compress_close).
  // The hook sees the learned routing of the non-hash MoE layers (hash layers' experts are fixed by the
  // token id: nothing to flip).
  bool set_moe_routing_hook(MoeRoutingHook* hook) override {
    routing_hook_ = hook;
    for (bool hash : c_.hash_layers)
      if (!hash) return true;
    return false;
  }
  bool set_index_selection_hook(IndexSelectionHook* hook) override {
    selection_hook_ = hook;
    for (V4AttnKind kind : c_.attn_kinds)
      if (kind == V4AttnKind::kCsa) return true;
    return false;
  }

  // Per model layer, in order: the raw K=V window; for CSA/HCA the compressor inputs (a window of the
  // last c * ratio tokens' [kv | gate] rows) and the compressed rows; for CSA the same pair for the indexer.
  bool prefix_cache_exact() const override { return false; }
  std::vector<KvLayerSpec> kv_layout() const override {
    std::vector<KvLayerSpec> specs;
    const int64_t D = c_.head_dim, ihd = c_.index_head_dim;
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      const int64_t r = c_.compress_ratios[i], cf = c_.coff(i);
      specs.push_back({KvKind::kSlidingWindow, D, c_.sliding_window, 1});
      if (c_.attn_kinds[i] != V4AttnKind::kSliding) {
        specs.push_back({KvKind::kSlidingWindow, 2 * cf * D, cf * r, 1});
        specs.push_back({KvKind::kCompressed, D, 0, r});
      }
      if (c_.attn_kinds[i] == V4AttnKind::kCsa) {
        specs.push_back({KvKind::kSlidingWindow, 2 * 2 * ihd, 2 * r, 1});
        specs.push_back({KvKind::kCompressed, ihd, 0, r});
      }
    }
    return specs;
  }

  Tensor forward(const BatchPlan& plan, KvCache& cache) override {
    return backend_.to_host(forward_device(plan, cache));
  }

  // Logits [rows, vocab] where the backend keeps them (device memory on the GPU).
  Tensor forward_device(const BatchPlan& plan, KvCache& cache) override {
    Backend& b = backend_;
    const StepScope step(b, plan);
    DSI_CHECK(cache.num_layers() == static_cast<int64_t>(kv_layout().size()),
              "deepseek_v4: the KV cache was not built from this model's kv_layout()");
    for (int32_t s = 0; s < plan.num_seqs(); ++s) {
      const int32_t first = plan.context_lens[s] - plan.query_len(s);
      for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) {
        DSI_CHECK(plan.positions[t] == first + (t - plan.cu_seqlens[s]), "deepseek_v4: sequence ", s,
                  " positions must continue its cached prefix (the compressors close windows by position)");
      }
    }
    const float eps = static_cast<float>(c_.rms_norm_eps), hc_eps = static_cast<float>(c_.hc_eps);
    const int64_t iters = c_.hc_sinkhorn_iters;
    if (routing_hook_) routing_hook_->on_step(plan);
    Tensor h = b.hc_expand(b.embed(weights_.embed, plan.token_ids), c_.hc_mult);  // [T, n, hidden]
    // Each sublayer's write-back (hc_post) and the next sublayer's collapse (hc_pre) go together.
    Tensor post, comb;  // [T, n], [T, n, n] of the sublayer in progress
    Tensor x;           // [T, hidden] the sublayer's input
    if (c_.num_layers > 0) x = b.hc_pre(h, weights_.layers[0].hc_attn, iters, hc_eps, eps, &post, &comb);
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      const V4LayerWeights& L = weights_.layers[i];
      Tensor y = attention(i, x, L.attn_norm, plan, cache);
      x = b.hc_post_pre(h, y, post, comb, L.hc_ffn, iters, hc_eps, eps, &h, &post, &comb);
      y = moe(i, L.ffn, x, L.ffn_norm, plan, c_.hash_layers[i]);
      if (i + 1 < c_.num_layers) {
        x = b.hc_post_pre(h, y, post, comb, weights_.layers[i + 1].hc_attn, iters, hc_eps, eps, &h, &post,
                          &comb);
      } else {
        h = b.hc_post(h, y, post, comb);
      }
    }
    // A step of prefill chunks only (nothing to sample) needs no logits.
    if (plan.logits_rows.empty()) return Tensor::empty(DType::F32, {0, c_.vocab_size});
    Tensor last = b.gather_rows(h, plan.logits_rows);  // [rows, n, hidden]
    Tensor collapsed = b.hc_head(last, weights_.hc_head, hc_eps, eps);
    return b.linear(b.rms_norm(collapsed, weights_.norm, eps), weights_.head);  // [rows, vocab]
  }

 private:
  // kv, gate [T, dim]: the compressor's projections of the step's attention input.
  void compress(const V4CompressorWeights& w, const Tensor& kv, const Tensor& gate, int64_t ratio,
                bool overlap, int64_t in_layer, int64_t out_layer, const BatchPlan& plan, KvCache& cache) {
    V4CompressorStep step;
    step.ratio = ratio;
    step.overlap = overlap;
    step.in_layer = in_layer;
    step.out_layer = out_layer;
    step.rope_dim = c_.rope_dim;
    step.rms_eps = static_cast<float>(c_.rms_norm_eps);
    run_v4_compressor(backend_, w, step, compress_rope_, kv, gate, plan, cache);
  }

  // x [T, hidden]: the layer's attention input before attn_norm. Every projection of the normed input (q's
  // and kv's, the compressors', the indexer's head weights) is one norm_linears call, and both projections of
  // q_res another (the CUDA backend fuses the norm into its decode GEMV, four matrices a launch).
  Tensor attention(int64_t layer, const Tensor& x, const Tensor& attn_norm, const BatchPlan& plan,
                   KvCache& cache) {
    Backend& b = backend_;
    const V4AttentionWeights& a = weights_.layers[layer].attn;
    const V4CacheLayers& cl = cache_layers_[layer];
    const int64_t T = plan.num_tokens(), H = c_.num_heads, D = c_.head_dim, rd = c_.rope_dim;
    const float eps = static_cast<float>(c_.rms_norm_eps);
    const int64_t ratio = c_.compress_ratios[layer];
    const RopeTable& rope = c_.attn_kinds[layer] == V4AttnKind::kSliding ? main_rope_ : compress_rope_;
    const V4IndexerWeights& ix = a.indexer;

    std::vector<const Linear*> in_linears = {&a.wq_a, &a.wkv};
    if (a.has_compressor) in_linears.insert(in_linears.end(), {&a.compressor.wkv, &a.compressor.wgate});
    if (a.has_indexer) {
      in_linears.insert(in_linears.end(), {&ix.compressor.wkv, &ix.compressor.wgate, &ix.weights_proj});
    }
    const std::vector<Tensor> in = b.norm_linears(x, attn_norm, eps, in_linears);  // [T, out_i] each
    std::vector<const Linear*> q_linears = {&a.wq_b};
    if (a.has_indexer) q_linears.push_back(&ix.wq_b);
    const std::vector<Tensor> qs = b.norm_linears(in[0], a.q_norm, eps, q_linears);  // of q_res [T, q_lora]

    // q per head (unweighted) and K = V normalised and roped; K = V goes to the window cache.
    Tensor q = b.norm_rope_write_kv(qs[0].reshape({T, H, D}), in[1], head_ones_, a.kv_norm, eps, rope, cache,
                                    cl.window, plan);  // [T, H, D]

    Tensor selected;  // [T, index_topk] on CSA layers
    if (a.has_compressor) {
      compress(a.compressor, in[2], in[3], ratio, a.has_indexer, cl.comp_in, cl.comp, plan, cache);
    }
    if (a.has_indexer) {
      const int64_t nh = c_.index_n_heads, ihd = c_.index_head_dim;
      compress(ix.compressor, in[4], in[5], ratio, true, cl.idx_in, cl.idx, plan, cache);
      Tensor qi = qs[1].reshape({T, nh, ihd});  // [T, nh, ihd]
      b.rope(qi, plan.positions, compress_rope_, ihd - rd, RopeLayout::kInterleaved);
      const Tensor& wts = in[6];  // [T, nh]
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ihd)));
      const float weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(nh)));
      if (selection_hook_) {
        selection_hook_->on_index_inputs(b, layer,
                                         {qi, wts, &cache, cl.idx, &plan, ratio, scale, weight_scale});
      }
      selected = b.indexer_topk(qi, wts, cache, cl.idx, plan, ratio, c_.index_topk, scale, weight_scale);
      if (selection_hook_) selection_hook_->on_select(b, layer, selected);
    }
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    // K = V carried rope on its trailing dims: the output is rotated back to the query position.
    Tensor o = b.attention_v4_unrope(q, cache, cl.window, c_.sliding_window, cl.comp, ratio, selected, plan,
                                     a.sinks, scale, rope);  // [T, H, D]
    const int64_t G = c_.o_groups;
    Tensor g = b.head_matmul(o.reshape({T, G, H * D / G}), a.wo_a, /*transpose_w=*/false);  // [T, G, o_lora]
    return b.linear(g.reshape({T, G * c_.o_lora_rank}), a.wo_b);                            // [T, hidden]
  }

  // h [T, hidden]: the collapsed streams before ffn_norm. Hash layers take their experts from the token ids;
  // the others route the normed input (norm and routing in one op unless a hook watches the routing). The
  // output is the shared expert's plus the routed experts' weighted sum.
  Tensor moe(int64_t layer, const V4MoeWeights& f, const Tensor& h, const Tensor& norm, const BatchPlan& plan,
             bool hash) {
    Backend& b = backend_;
    const float eps = static_cast<float>(c_.rms_norm_eps);
    const int64_t K = c_.num_experts_per_tok;
    RoutingParams p;
    p.scoring = c_.scoring_func;
    p.method = "noaux_tc";
    p.top_k = K;
    p.norm_topk_prob = true;  // V4 always renormalises the chosen weights
    p.routed_scaling_factor = static_cast<float>(c_.routed_scaling_factor);
    Tensor x, ids, weights;  // [T, hidden], [T, k], [T, k]
    MoeDispatch dispatch;
    if (hash) {
      x = b.rms_norm(h, norm, eps);
      ids = b.table_rows(f.tid2eid, plan.token_ids);  // tid2eid[token]
      weights = b.moe_weights_for(x, f.router, ids, p);
    } else if (routing_hook_) {
      x = b.rms_norm(h, norm, eps);
      routing_hook_->on_router_input(b, layer, x, f.router, f.bias, p);
      b.moe_route(x, f.router, f.bias, p, &ids, &weights);
      routing_hook_->on_route(b, layer, ids, weights);
    } else {
      x = b.norm_moe_route(h, norm, eps, f.router, f.bias, p, f.experts, &ids, &weights, &dispatch);
    }
    if (!f.has_shared) return b.moe_experts(x, ids, weights, f.experts);
    Tensor y = b.mlp(x, f.shared);                                     // [T, hidden]
    b.moe_experts_residual(y, x, ids, weights, f.experts, &dispatch);  // y += routed experts
    return y;
  }

  ModelConfig config_;
  DeepseekV4Config c_;
  Backend& backend_;
  V4Weights weights_;
  RopeTable main_rope_;
  RopeTable compress_rope_;
  Tensor head_ones_;
  std::vector<V4CacheLayers> cache_layers_;
  MoeRoutingHook* routing_hook_ = nullptr;        // evaluation tools only
  IndexSelectionHook* selection_hook_ = nullptr;  // evaluation tools only
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v4_model(const ModelConfig& config, WeightLoader& weights,
                                              Backend& backend) {
  return std::make_unique<DeepseekV4Model>(config, weights, backend);
}

}  // namespace dsinfer
