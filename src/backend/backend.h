// The backend op interface: everything a model's forward pass computes goes through these ops, so that the
// CPU reference and the CUDA backend run the same model code. Tensors are row-major; shapes in comments.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/batch_plan.h"
#include "backend/sampling_row.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"
#include "model/rope.h"

namespace dsinfer {

// A Linear layer y = x W^T + b as Hugging Face stores it.
struct Linear {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or empty
  int64_t out_features() const { return weight.dim(0); }
  int64_t in_features() const { return weight.dim(1); }
};

// One SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
struct MlpWeights {
  Linear gate;
  Linear up;
  Linear down;
  float swiglu_limit = 0.0f;  // > 0: clamp gate (above) and up (both sides) as DeepSeek-V4 does
};

enum class RopeLayout {
  kHalf,         // pairs (i, i + d/2): Llama/Qwen2 rotate_half
  kInterleaved,  // pairs (2i, 2i + 1): DeepSeek
};

// How a DeepSeekMoE router picks experts.
struct RoutingParams {
  std::string scoring;  // softmax | sigmoid
  std::string method;   // greedy | group_limited_greedy | noaux_tc
  int64_t top_k = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

// What a backend's norm_moe_route precomputed for its own moe_experts_residual from the routed ids (the CUDA
// backend: the permutation of the (token, slot) pairs by expert). Opaque to the model, and valid only with
// the ids and experts it came with; an empty one is always valid.
struct MoeDispatch {
  Tensor data;            // backend-defined; empty: nothing precomputed
  int64_t tile_rows = 0;  // the expert tile size it was computed for
};

// A DeepSeekMoE block's shared experts as moe_experts_residual takes them: the shared MLP and the norm its
// input came from (x = rms_norm(residual, norm, eps) before the call).
struct MoeSharedExperts {
  const MlpWeights* mlp = nullptr;
  Tensor norm;  // [H]
  float eps = 0.0f;
};

// One manifold-constrained hyper-connection (DeepSeek-V4): fn [(2 + n) * n, n * H] (or [n, n * H] for the
// head), base [(2 + n) * n] (or [n]), scale [3] (or [1]); n = hc_mult streams of H values.
struct HyperConnWeights {
  Tensor fn;
  Tensor base;
  Tensor scale;
};

// Which compressed rows a DeepSeek-V4 compressor closes in one step: row `rows[i]` of sequence `seqs[i]`
// (plan index) pools the token window [rows[i] * ratio, (rows[i] + 1) * ratio).
struct CompressedRows {
  std::vector<int32_t> seqs;
  std::vector<int32_t> rows;
  size_t size() const { return rows.size(); }
};

// Rows of a ratio-`ratio` compressor that close in this step, sequence by sequence (row j closes with the
// token at position (j + 1) * ratio - 1).
CompressedRows v4_closing_rows(const BatchPlan& plan, int64_t ratio);

// One DeepSeek-V4 compressor's closing step (Backend::compress_close): where its inputs are, how it pools,
// and the norm and rope of the pooled rows.
struct CompressCloseSpec {
  int64_t in_layer = -1;            // per-token [kv | gate] rows (compress_rows' input layer)
  int64_t out_layer = -1;           // compressed rows of D values
  int64_t ratio = 0;                // tokens a row pools
  bool overlap = false;             // CSA: also the previous window's first halves
  const Tensor* ape = nullptr;      // [ratio, c * D] position biases of the gate
  const Tensor* norm = nullptr;     // [D] RMSNorm weight
  float eps = 1e-6f;                // RMSNorm epsilon
  const RopeTable* rope = nullptr;  // rotates the trailing rope->rope_dim values (interleaved pairs)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Where this backend's activations and KV cache live.
  virtual Device device() const { return Device::kCpu; }
  // The element type of the KV cache this backend's attention kernels read and write.
  virtual DType kv_dtype() const { return DType::F32; }
  // Bytes of device memory free now (-1: host memory, not tracked).
  virtual int64_t free_memory_bytes() const { return -1; }
  // The backend's storage form of a weight read as host float32 (WeightLoader::get calls it for every
  // weight): identity on the CPU; the CUDA backend returns a bf16 device copy.
  virtual Tensor prepare_weight(Tensor host_f32) { return host_f32; }
  // The same for the weight the checkpoint names `name` (WeightLoader::get passes it): a backend may also
  // keep a second layout of some weights (the CUDA backend packs the dense MLP's gate/up and the LM head for
  // its decode GEMV). Default: prepare_weight.
  virtual Tensor prepare_named_weight(Tensor host_f32, const std::string& /*name*/) {
    return prepare_weight(std::move(host_f32));
  }
  // A small float32 weight whose precision matters more than its size (the router's selection bias), in
  // the backend's storage: identity on the CPU, a float32 device copy on the GPU.
  virtual Tensor prepare_weight_f32(Tensor host_f32) { return host_f32; }
  // Called once per MoE layer after its routed experts are loaded (through prepare_weight): a backend may
  // lay them out for its grouped kernels (the CUDA backend stacks them into one gate/up and one down tensor
  // and points every MlpWeights at its slice, freeing the separate copies). Default: nothing.
  virtual void prepare_experts(std::vector<MlpWeights>& /*experts*/) {}
  // Called once per MoE layer after its shared experts' MLP is loaded: a backend may keep a second layout of
  // it (the CUDA backend's packed copies for its units launches, CudaBackendOptions::moe_units_packed).
  // Default: nothing.
  virtual void prepare_shared_experts(MlpWeights& /*shared*/) {}
  // A host float32 copy of a tensor this backend produced (identity for host tensors).
  virtual Tensor to_host(const Tensor& t) { return t; }
  // Brackets one forward pass over `plan` (see StepScope): a device backend uploads the plan's arrays once,
  // and ops given one of the plan's arrays read that copy.
  virtual void begin_step(const BatchPlan& plan) {}
  virtual void end_step() {}

  // Samples one token per row of logits [rows.size(), vocab] (float32, host or this backend's device, left
  // unmodified) with each row's parameters and state; only the results come back to the host. The default
  // runs HostSampler on a host copy (backend_sampling.cpp), drawing from each row's host_rng. A row that
  // cannot be sampled reports SampledToken::error; the others are unaffected.
  virtual std::vector<SampledToken> sample(const Tensor& logits, const std::vector<SamplingRow>& rows);
  // sample() in two halves, for async scheduling: sample_async queues the sampling of logits [rows, vocab]
  // and returns (rows and their spans are read before it returns); sample_wait returns its results, waiting
  // for them to reach the host. The sampled ids stay where the backend keeps them until the next
  // sample_async, so that the next forward pass can take them as input (BatchPlan::prev_sample_rows) before
  // the host has seen them. Default: samples at once with sample() and keeps the ids on the host.
  virtual void sample_async(const Tensor& logits, const std::vector<SamplingRow>& rows);
  virtual std::vector<SampledToken> sample_wait();
  // Resolves plan.prev_sample_rows before the forward pass: tokens fed from the last sample_async call.
  // Default (the ids are on the host): writes them into plan.token_ids (an id of a failed row becomes 0;
  // that row's result is dropped). The CUDA backend leaves the host placeholders and patches its device
  // copy of the token ids (begin_step), so the forward pass does not wait for the previous sampling.
  virtual void feed_sampled_tokens(BatchPlan& plan);

  // [T, H] rows of table [V, H] for ids [T].
  virtual Tensor embed(const Tensor& table, const std::vector<int32_t>& ids) = 0;
  // x [T, H] -> [T, H], y = x / rms(x) * w.
  virtual Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) = 0;
  // x [T, in] -> [T, out].
  virtual Tensor linear(const Tensor& x, const Linear& w) = 0;
  // a += b (same shape).
  virtual void add_inplace(Tensor& a, const Tensor& b) = 0;
  // Rotates dims [offset, offset + table.rope_dim) of every head of x [T, heads, head_dim] in place.
  virtual void rope(Tensor& x, const std::vector<int32_t>& positions, const RopeTable& table, int64_t offset,
                    RopeLayout layout, bool inverse = false) = 0;
  // SwiGLU block over x [T, H] -> [T, H].
  virtual Tensor mlp(const Tensor& x, const MlpWeights& w) = 0;

  // Writes the new tokens' cache rows: slot s of layer gets [a[t] | b[t]] (b may be empty).
  virtual void write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a,
                        const Tensor& b) = 0;
  // GQA over the paged cache. q [T, Hq, D]; slot rows [K (Hkv*D) | V (Hkv*Dv)]. Returns [T, Hq * Dv].
  virtual Tensor attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                               int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) = 0;
  // MLA in the absorbed form. q_lat [T, H, R] (q_nope through W_UK), q_pe [T, H, P]; slot rows
  // [latent (R) | rope key (P)]. Returns the attention-weighted latent [T, H, R].
  virtual Tensor attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                               const BatchPlan& plan, float scale) = 0;
  // Per-head matmul: x [T, H, A], w [H, B, A] -> [T, H, B] (transpose_w false: y = w x);
  // with transpose_w, w is [H, A, B] and y = w^T x.
  virtual Tensor head_matmul(const Tensor& x, const Tensor& w, bool transpose_w) = 0;

  // DeepSeekMoE routing: x [T, H], router weight [E, H], optional selection bias [E].
  // Outputs expert ids [T, k] (I32) and weights [T, k] (F32).
  virtual void moe_route(const Tensor& x, const Tensor& router, const Tensor& bias, const RoutingParams& p,
                         Tensor* ids, Tensor* weights) = 0;
  // sum_k weights[t, k] * expert_{ids[t, k]}(x[t]) -> [T, H].
  virtual Tensor moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             const std::vector<MlpWeights>& experts) = 0;
  // Selected rows of x [T, H] -> [rows, H]. When rows is every row of x in order, a backend may return x
  // itself (the CUDA one does): callers only read the result.
  virtual Tensor gather_rows(const Tensor& x, const std::vector<int32_t>& rows) = 0;

  // ---- Fused ops (backend_fused_ops.cpp): each default composes the primitives above in the order the
  // reference computes them; a backend overrides them to fuse kernels (e.g. the CUDA GEMV path). ----
  // x [T, H] -> [linear(rms_norm(x, norm, eps), *linears[i]) for each i] ([T, out_i] each).
  virtual std::vector<Tensor> norm_linears(const Tensor& x, const Tensor& norm, float eps,
                                           const std::vector<const Linear*>& linears);
  // residual [..., N] += linear(x [..., K], w).
  virtual void linear_residual(const Tensor& x, const Linear& w, Tensor& residual);
  // residual [T, H] += mlp(rms_norm(residual, norm, eps), w).
  virtual void norm_mlp_residual(Tensor& residual, const Tensor& norm, float eps, const MlpWeights& w);
  // Rotates q [T, Hq, D] and k [T, Hkv, D] in place (layout, dims [0, table.rope_dim)), then writes the
  // cache rows [k | v] (v [T, Hkv * Dv]) of the plan's tokens to cache layer `layer`.
  virtual void rope_write_kv(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table, RopeLayout layout,
                             KvCache& cache, int64_t layer, const BatchPlan& plan);
  // rope_write_kv(q, k, v, table, layout, cache, layer, plan), then returns attention_gqa(q, cache, layer,
  // plan, k.dim(1), q.dim(2), v_head_dim, scale) ([T, Hq * Dv]). A backend may run both in one kernel and
  // leave q and k unrotated, so callers must not read q or k afterwards.
  virtual Tensor rope_attention_gqa(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table,
                                    RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan,
                                    int64_t v_head_dim, float scale);
  // DeepSeek MLA's cache write: rotates q_pe [T, H, P] and k_pe [T, 1, P] in place (layout, dims [0, P)),
  // then writes the cache rows [rms_norm(latent [T, R], norm, eps) | k_pe] of the plan's tokens to `layer`.
  virtual void mla_rope_write_kv(Tensor& q_pe, Tensor& k_pe, const Tensor& latent, const Tensor& norm,
                                 float eps, const RopeTable& table, RopeLayout layout, KvCache& cache,
                                 int64_t layer, const BatchPlan& plan);
  // DeepSeek MLA's decode preparation: mla_rope_write_kv(q_pe, k_pe, latent, norm, eps, table, layout, cache,
  // layer, plan), then returns q_lat = head_matmul(q_nope [T, H, A], w_uk [H, A, R], true) ([T, H, R]). Both
  // depend only on the projections, so a backend may run them together.
  virtual Tensor mla_prepare(const Tensor& q_nope, const Tensor& w_uk, Tensor& q_pe, Tensor& k_pe,
                             const Tensor& latent, const Tensor& norm, float eps, const RopeTable& table,
                             RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan);
  // A DeepSeekMoE block's routing from its residual: returns x = rms_norm(h [T, H], norm, eps) and routes it
  // as moe_route (ids, weights [T, k]); a backend may also leave in *dispatch (when not null) what its
  // moe_experts_residual would compute from these ids for `experts`. Default: rms_norm, moe_route, no
  // dispatch.
  virtual Tensor norm_moe_route(const Tensor& h, const Tensor& norm, float eps, const Tensor& router,
                                const Tensor& bias, const RoutingParams& p,
                                const std::vector<MlpWeights>& experts, Tensor* ids, Tensor* weights,
                                MoeDispatch* dispatch);
  // residual [T, H] += moe_experts(x, ids, weights, experts) (the routed experts' weighted sum added last).
  // dispatch: norm_moe_route's for these ids and experts, or null. shared (not null): first
  // norm_mlp_residual(residual, shared->norm, shared->eps, *shared->mlp), the block's shared experts on the
  // same x (a backend may run them inside its routed experts' kernels).
  virtual void moe_experts_residual(Tensor& residual, const Tensor& x, const Tensor& ids,
                                    const Tensor& weights, const std::vector<MlpWeights>& experts,
                                    const MoeDispatch* dispatch = nullptr,
                                    const MoeSharedExperts* shared = nullptr);

  // MLA attention with the value up-projection applied: head_matmul(attention_mla(q_lat, q_pe, cache, layer,
  // plan, scale), w_uv, false), w_uv [H, V, R] -> [T, H, V] (a backend may apply W_UV inside its merge).
  virtual Tensor attention_mla_uv(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                  int64_t layer, const BatchPlan& plan, float scale, const Tensor& w_uv);

  // ---- DeepSeek-V4 (cpu_v4_*.cpp) ----
  // x [T, H] -> n identical residual streams [T, n, H].
  virtual Tensor hc_expand(const Tensor& x, int64_t n) = 0;
  // Hyper-connection mixing weights from the RMS-normalised flattened streams x [T, n, H]: returns the
  // streams collapsed with `pre` [T, H]; post [T, n] and comb [T, n, n] (Sinkhorn-projected, `iters` steps).
  virtual Tensor hc_pre(const Tensor& x, const HyperConnWeights& w, int64_t iters, float hc_eps,
                        float norm_eps, Tensor* post, Tensor* comb) = 0;
  // New streams [T, n, H]: out[k] = post[k] * y + sum_j comb[j, k] * x[j] for sublayer output y [T, H].
  virtual Tensor hc_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb) = 0;
  // hc_pre(hc_post(x, y, post, comb), w, ...): a sublayer's write-back, then the next sublayer's mixing and
  // collapse. The new streams [T, n, H] go to *streams, the next post [T, n] and comb [T, n, n] to *post_out
  // and *comb_out (each may be the tensor passed as x, post or comb). Default: the two ops.
  virtual Tensor hc_post_pre(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                             const HyperConnWeights& w, int64_t iters, float hc_eps, float norm_eps,
                             Tensor* streams, Tensor* post_out, Tensor* comb_out);
  // DeepSeek-V4's attention inputs: returns rope(rms_norm(q, q_norm)) for q [T, H, D] (per head), and writes
  // rope(rms_norm(kv, kv_norm)) for kv [T, D] (K = V, one row a token) to cache layer `layer`; the rope on
  // each row's last table.rope_dim dims, interleaved pairs, at plan.positions. Default: rms_norm, rope,
  // rms_norm, rope, write_kv.
  virtual Tensor norm_rope_write_kv(const Tensor& q, const Tensor& kv, const Tensor& q_norm,
                                    const Tensor& kv_norm, float eps, const RopeTable& table, KvCache& cache,
                                    int64_t layer, const BatchPlan& plan);
  // Final collapse of x [T, n, H] -> [T, H] with the head's sigmoid weights.
  virtual Tensor hc_head(const Tensor& x, const HyperConnWeights& w, float hc_eps, float norm_eps) = 0;
  // Expert choice given by a table (V4 hash layers): ids [T, k] I32 chosen by the caller; weights [T, k] are
  // the chosen experts' scores (p.scoring) normalised and scaled by p.routed_scaling_factor.
  virtual Tensor moe_weights_for(const Tensor& x, const Tensor& router, const Tensor& ids,
                                 const RoutingParams& p) = 0;
  // Rows of an I32 table [V, k] (prepared by prepare_table) by token id: [T, k] I32 for ids [T], taken as
  // embed takes them (a GPU backend reads the step's device copy, tokens fed from the previous sample call
  // included). DeepSeek-V4's hash layers: the experts of each token (tid2eid).
  virtual Tensor table_rows(const Tensor& table, const std::vector<int32_t>& ids) = 0;
  // An I32 table (table_rows') in the backend's own form (default: as read).
  virtual Tensor prepare_table(Tensor host_i32) { return host_i32; }
  // Pools compressor windows from the per-token compressor inputs in cache layer `in_layer` (rows
  // [kv (c * D) | gate (c * D)], c = 2 with `overlap`): row r of sequence s is
  // sum_i softmax_i(gate_i + ape_i) * kv_i over its window's tokens (with overlap also the previous window's
  // first halves). ape [ratio, c * D]. Returns [rows.size(), D] (before norm and rope).
  virtual Tensor compress_rows(const KvCache& cache, int64_t in_layer, const BatchPlan& plan,
                               const CompressedRows& rows, const Tensor& ape, int64_t ratio,
                               bool overlap) = 0;
  // Writes rows [R, width] to cache layer `layer`: row i goes to sequence seqs[i]'s slot of position rows[i]
  // (compressed row j of a sequence lives in the slot of position j).
  virtual void write_compressed(KvCache& cache, int64_t layer, const BatchPlan& plan,
                                const CompressedRows& rows, const Tensor& values) = 0;
  // The rows that close in this step (v4_closing_rows) pooled (compress_rows), RMS-normalised, roped at
  // their window's first position (row j: j * ratio) and written to spec.out_layer (write_compressed). A GPU
  // backend finds the rows of a decode step on the device (each token closes a row when (pos + 1) % ratio ==
  // 0), so that no per-step host list stops the step from being captured in a CUDA graph.
  virtual void compress_close(KvCache& cache, const BatchPlan& plan, const CompressCloseSpec& spec);
  // Lightning indexer: q [T, h, d], weights [T, h]; score(t, j) =
  // sum_h (relu(q[t, h] . K[j]) * scale) * (weights[t, h] * weights_scale) over compressed keys K (cache
  // layer `layer`) visible to t (j < (pos + 1) / ratio). Returns the top `top_k` rows per token [T, top_k]
  // I32, -1 padded.
  virtual Tensor indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                              const BatchPlan& plan, int64_t ratio, int64_t top_k, float scale,
                              float weights_scale) = 0;
  // DeepSeek-V4 shared-KV attention with per-head sink logits [H]: q [T, H, D] attends to the last `window`
  // raw rows (cache layer `window_layer`, width D) and, when comp_layer >= 0, compressed rows j < (pos + 1) /
  // ratio of comp_layer: all of them, or only those listed in `selected` [T, k] (-1 = none) when given.
  // K = V. Returns [T, H, D].
  virtual Tensor attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                              int64_t comp_layer, int64_t ratio, const Tensor& selected,
                              const BatchPlan& plan, const Tensor& sinks, float scale) = 0;
  // attention_v4, then the output's last table.rope_dim dims rotated back to each token's position (rope's
  // inverse, interleaved pairs): K = V carried the rope. Default: attention_v4, then rope.
  virtual Tensor attention_v4_unrope(const Tensor& q, const KvCache& cache, int64_t window_layer,
                                     int64_t window, int64_t comp_layer, int64_t ratio,
                                     const Tensor& selected, const BatchPlan& plan, const Tensor& sinks,
                                     float scale, const RopeTable& table);
  // DeepSeek-V3.2 sparse attention (DSA).
  // x [T, H] -> [T, H], y = (x - mean(x)) / sqrt(var(x) + eps) * w + b (torch.nn.LayerNorm, biased variance).
  virtual Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) = 0;
  // Lightning indexer: for each query token t, the `top_k` positions p <= positions[t] of its sequence with
  // the largest score sum_h (weights[t, h] * weight_scale) * relu(q[t, h] . k_p * scale), k_p the D values
  // cached at p in cache entry `layer`. q [T, Hi, D], weights [T, Hi]. Returns positions [T, top_k] (I32)
  // in ascending order, padded with -1 when fewer than top_k tokens are visible (then all of them are
  // chosen). Equal scores prefer the earlier position.
  virtual Tensor dsa_indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                                  const BatchPlan& plan, float scale, float weight_scale, int64_t top_k) = 0;
  // attention_mla restricted to the cache positions `selected` [T, K] (I32, -1 entries ignored) of each query
  // token's sequence. Returns [T, H, R].
  virtual Tensor attention_mla_sparse(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                      int64_t layer, const BatchPlan& plan, const Tensor& selected,
                                      float scale) = 0;

 private:
  // The default sample_async's results (until sample_wait) and its sampled ids (until the next call).
  std::vector<SampledToken> async_results_;
  std::vector<int32_t> last_sampled_;
  bool async_pending_ = false;
};

// Calls begin_step / end_step around a model's forward pass (also when it throws).
class StepScope {
 public:
  StepScope(Backend& backend, const BatchPlan& plan) : backend_(backend) { backend_.begin_step(plan); }
  ~StepScope() { backend_.end_step(); }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Backend& backend_;
};

}  // namespace dsinfer
