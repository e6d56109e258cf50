// CudaBackend's DeepSeek-V3.2 (DSA) ops: layer_norm (the indexer key's LayerNorm), dsa_indexer_topk (index
// scores on tensor cores, then a radix top-k per token: dsa_index_kernels.cu; also DeepSeek-V4's indexer_topk
// over compressed keys, the same kernels) and attention_mla_sparse (the
// MLA decode kernels over each token's selected positions: the tensor-core design of mla_tc_kernels.cu for
// V3's shape on a bf16 cache, else the CUDA-core kernel of mla_kernels.cu). Host-side checks, workspace
// sizes that follow the CUDA graph's context bucket, and the launches.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/dsa_index_kernels.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/plan_checks.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/v4_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::dev_bf16;
using cuda::dev_f32;

namespace {

// Most floats of index scores one launch pair holds ([tokens, context] f32, 256 MiB): longer prefills are
// scored and selected in groups of tokens.
constexpr int64_t kMaxScoreFloats = int64_t{64} << 20;

// The cache layer a DSA op reads: a bf16 (or, for sparse MLA, float32) layer of the GPU cache.
const Tensor& gpu_cache_layer(const KvCache& cache, int64_t layer, const char* op) {
  DSI_CHECK(cache.device() == Device::kCuda, op, ": the KV cache is not on the GPU");
  DSI_CHECK(layer >= 0 && layer < cache.num_layers(), op, ": layer ", layer, " of ", cache.num_layers());
  return cache.storage(layer);
}

// An indexer call's checked shapes: q [T, Hi, D], weights [T, Hi] for the plan's tokens, top_k > 0, and the
// keys' cache layer: bf16 rows of D values the score kernel takes for Hi heads.
struct IndexQueries {
  int64_t T = 0, Hi = 0, D = 0;
  const Tensor* keys = nullptr;
  const float* q = nullptr;  // [T, Hi, D] on the GPU
  const float* w = nullptr;  // [T, Hi] on the GPU
};

IndexQueries index_queries(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                           const BatchPlan& plan, int64_t top_k) {
  DSI_CHECK(q.ndim() == 3, "indexer_topk: q must be [T, Hi, D], got ", shape_str(q.shape()));
  IndexQueries iq;
  iq.T = q.dim(0);
  iq.Hi = q.dim(1);
  iq.D = q.dim(2);
  DSI_CHECK(weights.ndim() == 2 && weights.dim(0) == iq.T && weights.dim(1) == iq.Hi,
            "indexer_topk: weights ", shape_str(weights.shape()), " do not match q ", shape_str(q.shape()));
  DSI_CHECK(iq.T == plan.num_tokens(), "indexer_topk: ", iq.T, " query tokens for a plan of ",
            plan.num_tokens());
  DSI_CHECK(top_k > 0, "indexer_topk: top_k must be positive");
  const Tensor& storage = gpu_cache_layer(cache, layer, "indexer_topk");
  DSI_CHECK(cache.width(layer) == iq.D, "indexer_topk: cache row width ", cache.width(layer), " != ", iq.D);
  DSI_CHECK(storage.dtype() == DType::BF16, "indexer_topk: the GPU kernel reads a bf16 cache, not ",
            dtype_name(storage.dtype()));
  DSI_CHECK(cuda::dsa_index_scores_supported(iq.Hi, iq.D, reinterpret_cast<uintptr_t>(storage.raw())),
            "indexer_topk: no GPU kernel for ", iq.Hi, " heads of ", iq.D,
            " values (D a multiple of 16 up to 512, "
            "at most 128 heads, within shared memory)");
  cuda::check_positions(plan, "indexer_topk");
  iq.keys = &storage;
  iq.q = dev_f32(q, "indexer_topk", "q");
  iq.w = dev_f32(weights, "indexer_topk", "weights");
  return iq;
}

// The indexer's score and top-k launches for iq's T query tokens, token t seeing keys 0 .. view.positions[t];
// max_keys bounds that count over the launch (the scores' row width). out [T, top_k].
void index_topk_launches(const IndexQueries& iq, const cuda::DevicePlanView& view, int64_t max_keys,
                         float scale, float weight_scale, int64_t top_k, int32_t* out) {
  const int64_t T = iq.T;
  const int64_t ld =
      std::max<int64_t>(1, (max_keys + cuda::kIndexKeysPerBlock - 1) / cuda::kIndexKeysPerBlock) *
      cuda::kIndexKeysPerBlock;
  const bool scored = max_keys > top_k;  // otherwise every token takes all it sees: no scores
  const int64_t group = std::clamp<int64_t>(kMaxScoreFloats / ld, 1, T);
  Tensor scores;
  if (scored) scores = Tensor::empty_on(Device::kCuda, DType::F32, {group, ld});  // [group, ld]
  cuda::IndexScoresArgs a;
  a.q = iq.q;
  a.w = iq.w;
  a.keys = static_cast<const uint16_t*>(iq.keys->raw());
  a.plan = view;
  a.Hi = iq.Hi;
  a.D = iq.D;
  a.scale = scale;
  a.weight_scale = weight_scale;
  a.top_k = top_k;
  a.scores = scored ? scores.data<float>() : nullptr;
  a.ld = ld;
  for (int64_t t0 = 0; t0 < T; t0 += group) {
    a.t0 = t0;
    a.count = std::min(group, T - t0);
    if (scored) cuda::launch_dsa_index_scores(a);
    cuda::launch_dsa_topk(a.scores, ld, view.positions, t0, a.count, top_k, out);
  }
}

}  // namespace

Tensor CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  // x [T, H] (any leading shape) -> same shape, normalised over the last dimension.
  const int64_t H = x.dim(-1), T = H ? x.numel() / H : 0;
  DSI_CHECK(weight.numel() == H, "layer_norm: weight has ", weight.numel(), " values for rows of ", H);
  DSI_CHECK(!bias || bias.numel() == H, "layer_norm: bias has ", bias.numel(), " values for rows of ", H);
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, x.shape());  // [..., H]
  cuda::launch_layer_norm(dev_f32(x, "layer_norm", "x"), dev_bf16(weight, "layer_norm", "the weight"),
                          bias ? dev_bf16(bias, "layer_norm", "the bias") : nullptr, out.data<float>(), T, H,
                          eps);
  return out;
}

Tensor CudaBackend::dsa_indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache,
                                     int64_t layer, const BatchPlan& plan, float scale, float weight_scale,
                                     int64_t top_k) {
  // q [T, Hi, D], weights [T, Hi]; cache rows of `layer` [D] (bf16) -> positions [T, top_k] (I32)
  const IndexQueries iq = index_queries(q, weights, cache, layer, plan, top_k);
  Tensor out = Tensor::empty_on(Device::kCuda, DType::I32, {iq.T, top_k});  // [T, top_k]
  if (iq.T == 0) return out;
  bool lone_call = false;
  const cuda::DevicePlanView view = plan_view(plan, lone_call);
  // Scores rows as wide as the longest context the launch may meet: this step's, or the CUDA graph's context
  // bucket (a captured launch serves every step of its bucket).
  int64_t max_ctx = std::max<int64_t>(step_.device().max_context, context_bound_);
  for (int32_t p : plan.positions) max_ctx = std::max<int64_t>(max_ctx, int64_t{p} + 1);
  index_topk_launches(iq, view, max_ctx, scale, weight_scale, top_k, out.data<int32_t>());
  if (lone_call) step_.clear_host();
  return out;
}

Tensor CudaBackend::indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                                 const BatchPlan& plan, int64_t ratio, int64_t top_k, float scale,
                                 float weights_scale) {
  // DeepSeek-V4: q [T, Hi, D], weights [T, Hi]; compressed keys (row j in the slot of position j) of cache
  // layer `layer` -> rows [T, top_k] (I32). dsa_indexer_topk's kernels with each token's last visible row
  // (pos + 1) / ratio - 1 in place of its position.
  DSI_CHECK(ratio > 0, "indexer_topk: ratio must be positive");
  const IndexQueries iq = index_queries(q, weights, cache, layer, plan, top_k);
  Tensor out = Tensor::empty_on(Device::kCuda, DType::I32, {iq.T, top_k});  // [T, top_k]
  if (iq.T == 0) return out;
  bool lone_call = false;
  cuda::DevicePlanView view = plan_view(plan, lone_call);
  Tensor visible = Tensor::empty_on(Device::kCuda, DType::I32, {iq.T});  // [T] last visible row, -1: none
  cuda::launch_compressed_visible(view.positions, visible.data<int32_t>(), iq.T, ratio);
  view.positions = visible.data<int32_t>();
  // Score rows for as many compressed keys as the launch may meet: this step's, or those of the CUDA graph's
  // context bucket (a captured launch serves every step of its bucket).
  int64_t max_rows = std::max<int64_t>(step_.device().max_context, context_bound_) / ratio;
  for (int32_t p : plan.positions) max_rows = std::max<int64_t>(max_rows, (int64_t{p} + 1) / ratio);
  index_topk_launches(iq, view, max_rows, scale, weights_scale, top_k, out.data<int32_t>());
  if (lone_call) step_.clear_host();
  return out;
}

Tensor CudaBackend::attention_mla_sparse(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                         int64_t layer, const BatchPlan& plan, const Tensor& selected,
                                         float scale) {
  // q_lat [T, H, R], q_pe [T, H, P], selected [T, K] (I32) -> [T, H, R]
  DSI_CHECK(
      q_lat.ndim() == 3 && q_pe.ndim() == 3 && q_lat.dim(0) == q_pe.dim(0) && q_lat.dim(1) == q_pe.dim(1),
      "attention_mla_sparse: q_lat ", shape_str(q_lat.shape()), " and q_pe ", shape_str(q_pe.shape()),
      " must be [T, H, R] and [T, H, P]");
  const int64_t T = q_lat.dim(0), H = q_lat.dim(1), R = q_lat.dim(2), P = q_pe.dim(2);
  const Tensor& storage = gpu_cache_layer(cache, layer, "attention_mla_sparse");
  DSI_CHECK(cache.width(layer) == R + P, "attention_mla_sparse: cache row width ", cache.width(layer),
            " != ", R + P);
  DSI_CHECK(storage.dtype() == DType::F32 || storage.dtype() == DType::BF16, "attention_mla_sparse: a ",
            dtype_name(storage.dtype()), " cache");
  DSI_CHECK(T == plan.num_tokens(), "attention_mla_sparse: ", T, " query tokens for a plan of ",
            plan.num_tokens());
  DSI_CHECK(selected.dtype() == DType::I32 && selected.ndim() == 2 && selected.dim(0) == T,
            "attention_mla_sparse: selected must be I32 [", T, ", K], got ", shape_str(selected.shape()));
  cuda::check_positions(plan, "attention_mla_sparse");
  const int64_t K = selected.dim(1);
  // A host selection is checked here (the CPU reference's error); a device one (the indexer's) is trusted,
  // and the kernel still skips entries past their sequence's context rather than read outside it.
  Tensor sel = selected;
  if (selected.is_cpu()) {
    for (int32_t s = 0; s < plan.num_seqs(); ++s) {
      for (int64_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) {
        for (int64_t i = 0; i < K; ++i) {
          const int32_t p = selected.data<int32_t>()[t * K + i];
          DSI_CHECK(p < plan.context_lens[s], "attention_mla_sparse: position ", p,
                    " is beyond the sequence's ", plan.context_lens[s], " cached tokens");
        }
      }
    }
    if (K > 0) sel = cuda::to_device(selected);
  }
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, R});  // [T, H, R]
  if (T == 0 || H == 0 || R == 0) return out;
  if (K == 0) {  // nothing selected: zeros, as the reference
    cuda::memset_async(out.data<float>(), 0, out.nbytes());
    return out;
  }
  bool lone_call = false;
  cuda::MlaPlanView view = mla_plan_view(plan, storage, lone_call);
  view.selected = sel.data<int32_t>();
  view.selected_k = K;
  view.context_lens = step_.device().context_lens;
  // Tensor cores where the dense decode kernels would use them (V2/V3's shape, a bf16 cache); splits over the
  // list (fixed by next_pow2(T) and K, so a captured launch serves every step of its bucket).
  const bool bf16 = storage.dtype() == DType::BF16;
  const bool tensor_cores = cuda::mla_tc_supported(R, P, bf16, reinterpret_cast<uintptr_t>(storage.raw()),
                                                   reinterpret_cast<uintptr_t>(q_lat.raw()),
                                                   reinterpret_cast<uintptr_t>(q_pe.raw()));
  const cuda::MlaSplit split = cuda::mla_choose_split(T, H, R, std::max<int64_t>(K, 1), tensor_cores);
  const size_t ws_floats = cuda::mla_workspace_floats(T, H, R, split);
  Tensor workspace;
  if (ws_floats) workspace = Tensor::empty_on(Device::kCuda, DType::F32, {static_cast<int64_t>(ws_floats)});
  cuda::launch_attention_mla(dev_f32(q_lat, "attention_mla_sparse", "q_lat"),
                             dev_f32(q_pe, "attention_mla_sparse", "q_pe"), storage.raw(), bf16,
                             cache.width(layer), view, out.data<float>(),
                             ws_floats ? workspace.data<float>() : nullptr, T, H, R, P, scale, split);
  if (lone_call) step_.clear_host();
  return out;
}

}  // namespace dsinfer
