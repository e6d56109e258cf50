// CudaBackend: the dense-model ops (Llama / Qwen2) on one NVIDIA GPU. Weights are bf16 device tensors
// (prepare_weight), activations float32 device tensors, the KV cache bf16 on the GPU (kv_dtype); logits come
// back through to_host, or stay on the GPU for sample(). DeepSeek-V2/V3's MLA and MoE ops have kernels; the
// V3.2 / V4 ops throw until they do. Built into dsinfer_lib when CUDA is on; the kernels it launches live in
// dsinfer_cuda.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/device_mirror.h"
#include "backend/cuda/keyed_mirrors.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_write_kernels.h"
#include "backend/cuda/pinned_buffer.h"
#include "backend/cuda/step_plan.h"

namespace dsinfer {

struct CudaBackendOptions {
  // Linear layers over more than 8 rows (prefill, large batches) keep ~16 bits of each activation (two
  // bf16 GEMMs, hi and lo halves) instead of rounding activations to bf16 (one GEMM, the default). See
  // gemm_cublaslt.h. Up to 8 rows run the GEMV kernels at gemv_activation_parts.
  bool split_gemm_activations = false;
  // bf16 parts per activation in the dense GEMV launches (up to 8 rows: linear, norm_linears,
  // linear_residual, mlp, norm_mlp_residual; cuda::GemvConfig::splits): 1 rounds the activations to bf16 as
  // the GEMMs over more rows do by default, 2 keeps ~16 bits as split_gemm_activations does; 0 (default):
  // 2 with split_gemm_activations, else 1. make_backend sets it (gemv_activation_parts_for: 2 for
  // mixture-of-experts models, DSINFER_GEMV_ACT_PARTS). The MoE experts' GEMV launches (and a shared MLP run
  // beside them) keep 2 either way, the precision of the expert kernels for more tokens. H200, 8B batch 1
  // (thirty-sixth session): 3.777 ms/token with 1 against 3.886 with 2 on a GPU under its power limit (-2.8%,
  // 40 W less), 3.842 against 4.009 on one at it (-4.2%).
  int gemv_activation_parts = 0;
  // moe_experts above 64 (bucketed) rows per expert runs the grouped bf16 GEMMs (cuda::moe_grouped_*) unless
  // split_gemm_activations: 0 picks the tile variant from the rows per expert, 1..cuda::kMoeGroupedVariants
  // forces one at any rows per expert (benchmarks, tests), -1 runs the older 64-row tensor-core tiles
  // instead.
  int moe_grouped_variant = 0;
  // moe_experts runs the grouped bf16 GEMMs from this many (bucketed) rows per expert on, the
  // weight-streaming kernels (fp32 activations as bf16 hi + lo) below it; DSINFER_MOE_GROUPED_MIN_ROWS
  // overrides it (see backend_factory.cpp). DISABLED_BenchExpertsDecodeBatch on the H200 (2026-12-01, V2-Lite
  // experts): the 64-row grouped tiles take 271 / 280 / 285 / 297 / 325 us at 3 / 6 / 12 / 24 / 48 rows per
  // expert where streaming takes 299 / 394 / 456 / 634 / 1159 (even at 1.5 rows: 238 / 247). From 24 rows:
  // below it the bf16 activations of the grouped path made batched greedy output differ from one-at-a-time
  // output beyond the margin rule (tiny-deepseek-v3, 1 of 32 prompts at batch 32); the gain given up there is
  // the 3-12 row figures above (V2-Lite T 32-128), not measured end to end.
  int64_t moe_grouped_min_rows = 24;
  // true (default; DSINFER_CUDA_MOE_FUSED_ROUTE=0 turns it off): norm_moe_route runs its one-kernel decode
  // path (RMSNorm, routing and the experts' permutation) up to cuda::kMoeNormRouteMaxTokens (bucketed) tokens
  // and bucket x experts up to cuda::kMoeNormRouteMaxTokenExperts; false: rms_norm and moe_route, and
  // moe_experts_residual's own permutation (the same bits). The kernel of 2026-12-01 (E/8 blocks, one warp
  // per token selecting in the last block) took 21 us per layer in the model's trace and was off by default
  // (V2-Lite batch 1: 3.43 vs 3.36 ms/token); its successor spreads the router over 64-128 blocks, loads it
  // before the PDL wait and selects with the whole last block (DISABLED_BenchNormMoeRoute on the H200, in a
  // graph: V2-Lite T 1 7.7 us fused vs 18.9 separate, V3 T 8 42 vs 68; V2-Lite batch 1 end to end 2.87 vs
  // 3.14 ms/token).
  bool moe_fused_route = true;
  // true (default; DSINFER_CUDA_MOE_ROUTE_CLUSTER=0 turns it off): that one-kernel routing of one token as
  // one thread block cluster where it takes the router (the Hopper path, at most 64 experts:
  // DeepSeek-V2-Lite's), the logits gathered in the first CTA's shared memory instead of an arrival counter
  // and an L2 round trip (the same bits). H200 (2026-12-05): V2-Lite batch 1 1.9866 against 2.0292 ms/token
  // (-2.1%).
  bool moe_route_cluster = true;
  // true (default; DSINFER_CUDA_MOE_SHARED_FUSED=0 turns it off): moe_experts_residual runs a DeepSeekMoE
  // block's shared experts (n_shared units of the routed intermediate size) inside the routed experts'
  // weight-streaming gate/up and down launches, as extra experts every token visits with weight 1, when
  // the streaming kernels run and every shared unit fits one tile (next_pow2(T) <= tile rows); false: the
  // shared MLP's own GEMV launches (norm_mlp_residual) first, the same bits as before.
  bool moe_shared_fused = true;
  // true (default; DSINFER_MLA_PREPARE_FUSED=0 turns it off): mla_prepare runs the MLA cache write and the
  // W_UK head GEMV in one launch (mla_prepare_kernels.cu) wherever head_matmul would run its tiled decode
  // GEMV (next_pow2(T) <= 8); false: mla_rope_write_kv, then head_matmul (the same bits, one launch more).
  bool mla_prepare_fused = true;
  // true (default; DSINFER_CUDA_ROPE_ATTENTION_FUSED=0 turns it off): rope_attention_gqa runs a pure decode
  // step (one new token per sequence) as one kernel, the rope and cache write inside the split-KV decode
  // attention (cuda::DecodeRopeArgs), where the warp kernel takes the shape; false: rope_write_kv, then
  // attention_gqa (the same bits, one launch more). H200 8B batch 1: 4.255 vs 4.303 ms/token.
  bool rope_attention_fused = true;
  // true (default; DSINFER_CUDA_MOE_UNITS=0 turns it off): moe_experts / moe_experts_residual of one token
  // run the shared and routed experts as two persistent GEMV launches over units of the routed intermediate
  // size (cuda::GemvMoeUnits: gate/up + SwiGLU with the routing weights, then down over all units' columns
  // into the output), with no permutation and no combine kernel; false: the weight-streaming expert kernels,
  // the permutation and the combine. H200, V2-Lite batch 1: 2.173 vs 2.379 ms/token.
  bool moe_units = true;
  // Where the units launches read the experts' weights (DSINFER_GEMV_UNITS_PACKED = 0 / 1 / auto): 0
  // (default, until measured on an H200) the row-major stacks by 16-byte copies; otherwise prepare_experts
  // and prepare_shared_experts keep a packed copy of each MoE block's stacked experts and shared experts
  // beside them (gemv_packed.h's layout; the weights' bytes once more, on the Hopper path only; 2 = auto:
  // only while 30% of the GPU's memory stays free after each, as DSINFER_GEMV_PACKED), which the units
  // launches stream by bulk copies, a contiguous run per warp stage (the same bits). The lead: the H200's
  // stream probe reads such runs at ~4.69 TB/s against ~4.3 for row-strided copies, the 8B's packed gate/up
  // runs at its bytes (55.3 us for 54.8), and V2-Lite's units down streamed its 46 MB at ~3.2 TB/s there
  // (docs/benchmarks.md, sixty-second session).
  int moe_units_packed = 0;
  // true (default; DSINFER_CUDA_HC_FUSED=0 turns it off): hc_pre and hc_post_pre of up to 64 tokens with V4's
  // 4 streams of at most 4096 values run as one launch on the Hopper path (cuda::launch_hc_pre_fused: a
  // thread block cluster per token; hc_post, the mixes and the finish together), other shapes as separate
  // launches; the mixes' float32 sums in another order. H100, V4-Flash 4-layer slice, batch 1 (2026-12-06):
  // 1.4213 against 1.4471 ms/token for the separate launches (-1.8%).
  bool hc_fused = true;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(CudaBackendOptions options = {});
  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::kCuda; }
  DType kv_dtype() const override { return DType::BF16; }
  int64_t free_memory_bytes() const override;
  Tensor prepare_weight(Tensor host_f32) override;
  // prepare_weight, plus a packed copy for the decode GEMV (gemv_packed.h) of the dense MLP's gate and up
  // projections and the LM head, while the GPU keeps enough memory free (DSINFER_GEMV_PACKED).
  Tensor prepare_named_weight(Tensor host_f32, const std::string& name) override;
  Tensor to_host(const Tensor& t) override;
  // Uploads the step plan; then patches the tokens it feeds from the last sample_async (prev_sample_rows)
  // into the plan's device token ids, unless a CUDA graph is being captured.
  void begin_step(const BatchPlan& plan) override;
  void end_step() override;

  // Step plan on the device (CUDA graphs: its buffer's generation() changes when addresses move).
  const cuda::StepPlan& step_plan() const { return step_; }
  // Uploads `plan` as the step plan without starting a step (a graph replay's inputs), fed tokens patched
  // in as begin_step does (the patch is never part of a graph: its source moves every step).
  void stage_plan(const BatchPlan& plan);
  // Attention kernels size their grids for contexts up to max(longest context, bound): set by the graph
  // runner to its context bucket so that a captured graph serves every step of the bucket.
  void set_context_bound(int32_t bound) { context_bound_ = bound; }
  // Samples on the GPU (cuda_backend_sampling.cpp): only the chosen tokens and logprobs are copied back.
  // Host logits go to the default (host) implementation.
  std::vector<SampledToken> sample(const Tensor& logits, const std::vector<SamplingRow>& rows) override;
  // sample() in two halves: the inputs go up with one asynchronous copy from pinned memory, the kernel and
  // the copy of the results into pinned memory are queued, and only sample_wait waits (for an event), so a
  // forward pass queued after sample_async runs while the host prepares the next step. The device results
  // stay until the next call: feed_sampled_tokens / begin_step read the sampled ids from there.
  void sample_async(const Tensor& logits, const std::vector<SamplingRow>& rows) override;
  std::vector<SampledToken> sample_wait() override;
  // Sampling calls whose row parameters were read from the device cache (equal to the last cached call's).
  int64_t sample_params_cache_hits() const { return sample_params_cache_hits_; }
  // Host logits were sampled last: the default (host ids into plan.token_ids). Device: nothing on the host;
  // begin_step / stage_plan patch the device token ids (launch_feed_sampled_tokens).
  void feed_sampled_tokens(BatchPlan& plan) override;

  Tensor embed(const Tensor& table, const std::vector<int32_t>& ids) override;
  Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) override;
  Tensor linear(const Tensor& x, const Linear& w) override;
  void add_inplace(Tensor& a, const Tensor& b) override;
  void rope(Tensor& x, const std::vector<int32_t>& positions, const RopeTable& table, int64_t offset,
            RopeLayout layout, bool inverse) override;
  Tensor mlp(const Tensor& x, const MlpWeights& w) override;
  // Fused linear layers (cuda_backend_linear.cpp): GEMV kernels for <= 8 rows, cuBLASLt above.
  std::vector<Tensor> norm_linears(const Tensor& x, const Tensor& norm, float eps,
                                   const std::vector<const Linear*>& linears) override;
  void linear_residual(const Tensor& x, const Linear& w, Tensor& residual) override;
  void norm_mlp_residual(Tensor& residual, const Tensor& norm, float eps, const MlpWeights& w) override;
  void write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a,
                const Tensor& b) override;
  Tensor attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                       int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int32_t>& rows) override;
  // One kernel: rope on q and k, then the [k | v] cache rows (float32 or bf16 cache).
  void rope_write_kv(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table, RopeLayout layout,
                     KvCache& cache, int64_t layer, const BatchPlan& plan) override;
  // A pure decode step in one kernel (options_.rope_attention_fused; q and k are then left as they were);
  // otherwise rope_write_kv, then attention_gqa.
  Tensor rope_attention_gqa(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table, RopeLayout layout,
                            KvCache& cache, int64_t layer, const BatchPlan& plan, int64_t v_head_dim,
                            float scale) override;

  // DeepSeek-V2/V3: MLA (cuda_backend_mla.cpp) and DeepSeekMoE (cuda_backend_moe.cpp).
  Tensor prepare_weight_f32(Tensor host_f32) override;
  void prepare_experts(std::vector<MlpWeights>& experts) override;
  // With moe_units_packed: the shared MLP's three matrices moved into allocations that carry their packed
  // copies. Otherwise nothing.
  void prepare_shared_experts(MlpWeights& shared) override;
  Tensor attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                       const BatchPlan& plan, float scale) override;
  // At decode sizes with a split launch merged by the combine kernel: the merge + W_UV kernel in its place
  // (mla_uv_kernels.cu, DSINFER_MLA_UV_FUSED); else attention_mla then head_matmul.
  Tensor attention_mla_uv(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                          const BatchPlan& plan, float scale, const Tensor& w_uv) override;
  Tensor head_matmul(const Tensor& x, const Tensor& w, bool transpose_w) override;
  void moe_route(const Tensor& x, const Tensor& router, const Tensor& bias, const RoutingParams& p,
                 Tensor* ids, Tensor* weights) override;
  Tensor moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                     const std::vector<MlpWeights>& experts) override;
  // One kernel: RMSNorm of the latent, rope of q_pe and k_pe, the cache rows (mla_write_kernels.cu).
  void mla_rope_write_kv(Tensor& q_pe, Tensor& k_pe, const Tensor& latent, const Tensor& norm, float eps,
                         const RopeTable& table, RopeLayout layout, KvCache& cache, int64_t layer,
                         const BatchPlan& plan) override;
  // Up to 8 (bucketed) tokens, where head_matmul runs its tiled GEMV: one kernel for the cache write and the
  // W_UK GEMV (mla_prepare_fused); otherwise mla_rope_write_kv, then head_matmul
  // (cuda_backend_mla_prepare.cpp).
  Tensor mla_prepare(const Tensor& q_nope, const Tensor& w_uk, Tensor& q_pe, Tensor& k_pe,
                     const Tensor& latent, const Tensor& norm, float eps, const RopeTable& table,
                     RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan) override;
  // moe_experts whose combine kernel adds into the residual (no separate add); a dispatch of norm_moe_route
  // made for the same tile size replaces the permutation kernel. Shared experts: streamed as extra experts
  // of every token inside the routed experts' streaming launches when those run with one tile per shared
  // expert (moe_shared_fused), else norm_mlp_residual first.
  void moe_experts_residual(Tensor& residual, const Tensor& x, const Tensor& ids, const Tensor& weights,
                            const std::vector<MlpWeights>& experts, const MoeDispatch* dispatch = nullptr,
                            const MoeSharedExperts* shared = nullptr) override;
  // Up to cuda::kMoeNormRouteMaxTokens (bucketed) tokens and kMoeNormRouteMaxTokenExperts: one kernel for the
  // RMSNorm, the routing and the experts' permutation (left in *dispatch); otherwise rms_norm and moe_route.
  Tensor norm_moe_route(const Tensor& h, const Tensor& norm, float eps, const Tensor& router,
                        const Tensor& bias, const RoutingParams& p, const std::vector<MlpWeights>& experts,
                        Tensor* ids, Tensor* weights, MoeDispatch* dispatch) override;

  // DeepSeek-V4 ops (cuda_backend_v4.cpp; indexer_topk in cuda_backend_dsa.cpp).
  Tensor hc_expand(const Tensor& x, int64_t n) override;
  Tensor hc_pre(const Tensor& x, const HyperConnWeights& w, int64_t iters, float hc_eps, float norm_eps,
                Tensor* post, Tensor* comb) override;
  Tensor hc_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb) override;
  Tensor norm_rope_write_kv(const Tensor& q, const Tensor& kv, const Tensor& q_norm, const Tensor& kv_norm,
                            float eps, const RopeTable& table, KvCache& cache, int64_t layer,
                            const BatchPlan& plan) override;
  Tensor hc_post_pre(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                     const HyperConnWeights& w, int64_t iters, float hc_eps, float norm_eps, Tensor* streams,
                     Tensor* post_out, Tensor* comb_out) override;
  Tensor hc_head(const Tensor& x, const HyperConnWeights& w, float hc_eps, float norm_eps) override;
  Tensor table_rows(const Tensor& table, const std::vector<int32_t>& ids) override;
  Tensor prepare_table(Tensor host_i32) override;
  Tensor moe_weights_for(const Tensor& x, const Tensor& router, const Tensor& ids,
                         const RoutingParams& p) override;
  Tensor compress_rows(const KvCache& cache, int64_t in_layer, const BatchPlan& plan,
                       const CompressedRows& rows, const Tensor& ape, int64_t ratio, bool overlap) override;
  void write_compressed(KvCache& cache, int64_t layer, const BatchPlan& plan, const CompressedRows& rows,
                        const Tensor& values) override;
  // One launch: the closing rows pooled, normed, roped and written (a decode step's rows found on the
  // device).
  void compress_close(KvCache& cache, const BatchPlan& plan, const CompressCloseSpec& spec) override;
  Tensor indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                      const BatchPlan& plan, int64_t ratio, int64_t top_k, float scale,
                      float weights_scale) override;
  Tensor attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                      int64_t comp_layer, int64_t ratio, const Tensor& selected, const BatchPlan& plan,
                      const Tensor& sinks, float scale) override;
  // The inverse rope in attention_v4's last stores (its single-split epilogue or its merge).
  Tensor attention_v4_unrope(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                             int64_t comp_layer, int64_t ratio, const Tensor& selected, const BatchPlan& plan,
                             const Tensor& sinks, float scale, const RopeTable& table) override;
  Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override;
  Tensor dsa_indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                          const BatchPlan& plan, float scale, float weight_scale, int64_t top_k) override;
  Tensor attention_mla_sparse(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                              const BatchPlan& plan, const Tensor& selected, float scale) override;

 private:
  // Device pointer of a host array: the step plan's copy when `v` is one of the current plan's arrays, else
  // `mirror`'s.
  template <typename T>
  const T* device_array(const std::vector<T>& v, cuda::DeviceMirror& mirror) {
    if (const T* p = step_.find(v)) return p;
    return mirror.upload(v);
  }

  // rope_write_kv's checks; returns Dv (cuda_backend_attention.cpp).
  int64_t check_rope_write_kv(const Tensor& q, const Tensor& k, const Tensor& v, const RopeTable& table,
                              const KvCache& cache, int64_t layer, const BatchPlan& plan);
  // The attention_gqa decode launch for the n tokens dec_tokens (all of the plan's T tokens in order: no
  // token list), given the step plan's device view; rope (or null): the fused rope of a pure decode step.
  void launch_gqa_decode(const float* q, const cuda::DeviceCacheView& cv, const cuda::DevicePlanView& view,
                         const std::vector<int32_t>& dec_tokens, int64_t T, int64_t max_context, float* out,
                         const cuda::GqaShape& shape, const cuda::DecodeRopeArgs* rope);
  // attention_v4, and with `unrope` (not null) its inverse rope in the same launches (cuda_backend_v4.cpp).
  Tensor run_attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                          int64_t comp_layer, int64_t ratio, const Tensor& selected, const BatchPlan& plan,
                          const Tensor& sinks, float scale, const RopeTable* unrope);
  // The step plan's device arrays as attention kernels read them (uploads a lone op call's plan: `lone`).
  cuda::DevicePlanView plan_view(const BatchPlan& plan, bool& lone);
  // mla_rope_write_kv's checks and kernel arguments (cuda_backend_attention.cpp).
  cuda::MlaWriteArgs mla_write_args(Tensor& q_pe, Tensor& k_pe, const Tensor& latent, const Tensor& norm,
                                    float eps, const RopeTable& table, RopeLayout layout, KvCache& cache,
                                    int64_t layer, const BatchPlan& plan);
  // moe_experts into out [T, H] (accumulate: out += the experts' weighted sum instead of out =). shared (only
  // with accumulate): the shared experts' MLP on the same x, added to out before the routed sum: inside the
  // streaming launches when they take it, else norm_mlp_residual on out first.
  void run_moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                       const std::vector<MlpWeights>& experts, float* out, bool accumulate,
                       const MoeDispatch* dispatch = nullptr, const MoeSharedExperts* shared = nullptr,
                       Tensor* residual = nullptr);
  // The dense GEMV launches' activation parts (options_.gemv_activation_parts resolved).
  int gemv_parts() const;
  // norm_mlp_residual with `parts` bf16 parts per activation in its GEMV launches (up to 8 rows).
  void norm_mlp_residual_parts(Tensor& residual, const Tensor& norm, float eps, const MlpWeights& w,
                               int parts);
  // The step plan's device arrays as the MLA kernels read them, for a cache layer of `storage` (uploads a
  // lone op call's plan: `lone`).
  cuda::MlaPlanView mla_plan_view(const BatchPlan& plan, const Tensor& storage, bool& lone);
  // attention_mla, with w_uv (not null) attention_mla_uv: returns [T, H, R], or [T, H, V] with w_uv.
  Tensor run_attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                           const BatchPlan& plan, float scale, const Tensor* w_uv);
  // Makes `plan` the current step plan and patches its device token ids fed from the last device sampling
  // call (by the upload's kernel when it can, else by a feed kernel).
  void upload_and_feed(const BatchPlan& plan);

  // The last sample_async call (cuda_backend_sampling.cpp).
  struct SampleCall {
    Tensor results;  // [rows] cuda::SampleRowResult on the device: the fed tokens' source until the next call
    int32_t rows = 0;
    int32_t vocab = 0;
    std::vector<std::string> errors;  // per row, found on the host
    std::vector<int32_t> logprobs;    // per row, top logprobs asked for
    bool on_device = false;           // false: host logits (the Backend default sampled them)
    bool pending = false;             // sample_wait has not taken the results yet
  };

  CudaBackendOptions options_;
  cuda::StepPlan step_;
  int32_t context_bound_ = 0;
  // Device copies of the host arrays ops receive, one mirror per kind so they do not evict each other.
  cuda::DeviceMirror ids_, rows_, positions_, slot_mapping_, decode_tokens_, flash_tiles_;
  cuda::KeyedMirrors<cuda::DeviceMirror> inv_freq_;  // one copy per rope table (V4 alternates two a step)
  cuda::DeviceMirror comp_seqs_, comp_rows_, comp_slots_;  // DeepSeek-V4's closing compressor rows
  SampleCall sample_;
  cuda::PinnedBuffer sample_inputs_, sample_outputs_;  // staging of the sampling inputs and results
  Tensor sample_row_counters_;  // [rows] I32 (used as uint32) arrival counters of the split row max (zeroed
                                // once, kept zero)
  void* sample_inputs_copied_ = nullptr;  // events (cuda::EventHandle) after those copies
  void* sample_outputs_copied_ = nullptr;
  // The row parameters of the last sampling call that had nothing else to upload (no penalties, no scored
  // rows), as bytes (empty: none cached), and [rows] cuda::SampleRowParams on the device, which that call's
  // kernel wrote: a call with the same bytes (every greedy step of the same requests) reads them there
  // instead of over the bus.
  std::vector<char> sample_params_cached_;
  Tensor sample_params_cache_;
  int64_t sample_params_cache_hits_ = 0;
  // Host scratch of attention_gqa: the tokens of decode sequences and the flash query tiles.
  std::vector<int32_t> decode_tokens_host_, flash_tiles_host_;
};

}  // namespace dsinfer
