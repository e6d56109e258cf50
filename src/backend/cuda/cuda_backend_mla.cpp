// CudaBackend's MLA ops: attention_mla (absorbed form over the paged latent cache, float32 or bf16 rows),
// attention_mla_uv (the same with W_UV applied, inside the split merge at decode sizes) and head_matmul.
// Host-side checks, the kernel choice (multi-query prefill kernel or the split decode kernels) and split
// choice, then the kernels of mla_prefill_kernels.cu / mla_kernels.cu / mla_uv_kernels.cu /
// head_matmul_kernels.cu.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/mla_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::dev_bf16;
using cuda::dev_f32;

Tensor CudaBackend::attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                  int64_t layer, const BatchPlan& plan, float scale) {
  return run_attention_mla(q_lat, q_pe, cache, layer, plan, scale, nullptr);  // [T, H, R]
}

Tensor CudaBackend::attention_mla_uv(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                     int64_t layer, const BatchPlan& plan, float scale, const Tensor& w_uv) {
  DSI_CHECK(
      w_uv.ndim() == 3 && q_lat.ndim() == 3 && w_uv.dim(0) == q_lat.dim(1) && w_uv.dim(2) == q_lat.dim(2),
      "attention_mla_uv: w_uv ", shape_str(w_uv.shape()), " must be [H, V, R] for q_lat ",
      shape_str(q_lat.shape()));
  DSI_CHECK(w_uv.device() == Device::kCuda && w_uv.dtype() == DType::BF16,
            "attention_mla_uv: w_uv must be a bf16 CUDA tensor (loaded through prepare_weight)");
  return run_attention_mla(q_lat, q_pe, cache, layer, plan, scale, &w_uv);  // [T, H, V]
}

cuda::MlaPlanView CudaBackend::mla_plan_view(const BatchPlan& plan, const Tensor& storage, bool& lone) {
  const cuda::DevicePlanView gqa_view = plan_view(plan, lone);
  cuda::MlaPlanView view;
  view.positions = gqa_view.positions;
  view.token_seq = gqa_view.token_seq;
  view.block_table = gqa_view.block_table;
  view.block_table_indptr = gqa_view.block_table_indptr;
  view.cu_seqlens = step_.device().cu_seqlens;
  view.block_size = plan.block_size;
  view.cache_rows = storage.dim(0);
  return view;
}

Tensor CudaBackend::run_attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                      int64_t layer, const BatchPlan& plan, float scale, const Tensor* w_uv) {
  // q_lat [T, H, R], q_pe [T, H, P] -> [T, H, R]; with w_uv [H, V, R]: -> [T, H, V]
  DSI_CHECK(cache.device() == Device::kCuda, "attention_mla: the KV cache is not on the GPU");
  DSI_CHECK(
      q_lat.ndim() == 3 && q_pe.ndim() == 3 && q_lat.dim(0) == q_pe.dim(0) && q_lat.dim(1) == q_pe.dim(1),
      "attention_mla: q_lat ", shape_str(q_lat.shape()), " and q_pe ", shape_str(q_pe.shape()),
      " must be [T, H, R] and [T, H, P]");
  const int64_t T = q_lat.dim(0), H = q_lat.dim(1), R = q_lat.dim(2), P = q_pe.dim(2);
  DSI_CHECK(cache.width(layer) == R + P, "attention_mla: cache row width ", cache.width(layer),
            " != ", R + P);
  DSI_CHECK(T == plan.num_tokens(), "attention_mla: ", T, " query tokens for a plan of ", plan.num_tokens());
  const Tensor& storage = cache.storage(layer);
  DSI_CHECK(storage.dtype() == DType::F32 || storage.dtype() == DType::BF16, "attention_mla: a ",
            dtype_name(storage.dtype()), " cache");
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, R});  // [T, H, R]
  if (T == 0) return w_uv ? Tensor::empty_on(Device::kCuda, DType::F32, {T, H, w_uv->dim(1)}) : out;
  // With w_uv: [T, H, V], written by the split launch when it applies W_UV in its merge.
  Tensor y;
  bool y_done = false;
  bool lone_call = false;
  cuda::MlaPlanView view = mla_plan_view(plan, storage, lone_call);
  const cuda::DevicePlan& dp = step_.device();
  const bool bf16 = storage.dtype() == DType::BF16;
  const bool tensor_cores = cuda::mla_tc_supported(R, P, bf16, reinterpret_cast<uintptr_t>(storage.raw()),
                                                   reinterpret_cast<uintptr_t>(q_lat.raw()),
                                                   reinterpret_cast<uintptr_t>(q_pe.raw()));
  const float* ql = dev_f32(q_lat, "attention_mla", "q_lat");
  const float* qp = dev_f32(q_pe, "attention_mla", "q_pe");
  // The split decode kernel over n tokens: `rows` (null: all T tokens) whose longest context is max_ctx. Its
  // splits are sized for the bucket of max_ctx or the CUDA graph's context bucket, whichever is larger, and
  // for next_pow2(n), so that a captured launch serves every step of the bucket, an eager step splits the
  // work exactly as the graph of its bucket does (same sums, same tokens), and the decode rows of a mixed
  // step run exactly the launch a decode-only step of those rows runs.
  // With uv (the whole step, no row list), W_UV may be applied in the merge (returns whether it was).
  auto run_split_kernel = [&](const int32_t* rows, int64_t n, int64_t max_ctx, const cuda::MlaUv* uv) {
    if (n == 0) return false;
    max_ctx = std::max<int64_t>({1, max_ctx, context_bound_});
    const cuda::MlaSplit split =
        cuda::mla_choose_split(n, H, R, cuda::attention_max_context_bucket(max_ctx), tensor_cores);
    const size_t ws_floats = cuda::mla_workspace_floats(n, H, R, split);
    Tensor workspace;
    if (ws_floats) workspace = Tensor::empty_on(Device::kCuda, DType::F32, {static_cast<int64_t>(ws_floats)});
    cuda::MlaPlanView v = view;
    v.rows = rows;
    return cuda::launch_attention_mla(ql, qp, storage.raw(), bf16, cache.width(layer), v, out.data<float>(),
                                      ws_floats ? workspace.data<float>() : nullptr, n, H, R, P, scale, split,
                                      uv);
  };
  // The longest context of the sequences with fewer than min_query query tokens (min_query 0: all), and
  // how many tokens they have: what a decode-only step of them would see (context_lens and positions).
  auto short_seqs = [&](int32_t min_query, int64_t* tokens) {
    int64_t max_ctx = 0;
    *tokens = 0;
    for (int32_t s = 0; s < plan.num_seqs(); ++s) {
      const int32_t begin = plan.cu_seqlens[s], end = plan.cu_seqlens[s + 1];
      if (min_query > 0 && end - begin >= min_query) continue;
      *tokens += end - begin;
      max_ctx = std::max<int64_t>(max_ctx, plan.context_lens[s]);
      for (int32_t t = begin; t < end; ++t)
        max_ctx = std::max<int64_t>(max_ctx, static_cast<int64_t>(plan.positions[t]) + 1);
    }
    return max_ctx;
  };
  // A step with sequences of many query tokens (prefill, chunked context; never a decode-only step, hence
  // never a captured one) is split by sequence when the step plan carries the split (mla_split_step) and
  // the multi-query blocks fill the GPU: those sequences on the multi-query kernel, every other token (the
  // decode rows of a mixed step, short chunks) on the split decode kernel over a row list. Both write
  // disjoint rows of `out`.
  if (tensor_cores && dp.num_mla_blocks > 0 && cuda::mla_prefill_chosen(dp.num_mla_blocks, H) &&
      cuda::mla_prefill_supported()) {
    view.blocks = dp.mla_blocks;
    cuda::launch_attention_mla_prefill(ql, qp, static_cast<const uint16_t*>(storage.raw()), view,
                                       out.data<float>(), dp.num_mla_blocks, H, scale);
    view.blocks = nullptr;
    int64_t rows = 0;
    const int64_t max_ctx = short_seqs(cuda::mla_prefill_min_query(), &rows);
    DSI_CHECK(rows == dp.num_mla_rows, "attention_mla: the step plan's MLA split is stale");
    run_split_kernel(dp.mla_rows, rows, max_ctx, nullptr);
  } else {
    int64_t rows = 0;
    cuda::MlaUv uv;
    if (w_uv) {
      y = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, w_uv->dim(1)});  // [T, H, V]
      uv.w = w_uv->data<uint16_t>();
      uv.y = y.data<float>();
      uv.V = w_uv->dim(1);
    }
    // A decode-only step (one token per sequence) staged by begin_step: tiles may be requested early.
    bool one_each = !lone_call && plan.num_seqs() == T && cuda::mla_early_tiles();
    for (int32_t s = 0; one_each && s < plan.num_seqs(); ++s)
      one_each = plan.cu_seqlens[s + 1] - plan.cu_seqlens[s] == 1;
    view.early_rows = one_each;
    y_done = run_split_kernel(nullptr, T, std::max<int64_t>(dp.max_context, short_seqs(0, &rows)),
                              w_uv ? &uv : nullptr);
  }
  if (lone_call) step_.clear_host();
  if (!w_uv) return out;
  if (y_done) return y;
  return head_matmul(out, *w_uv, /*transpose_w=*/false);  // [T, H, V]
}

Tensor CudaBackend::head_matmul(const Tensor& x, const Tensor& w, bool transpose_w) {
  // x [T, H, A]; w [H, B, A] (y = w x) or [H, A, B] with transpose_w (y = w^T x) -> [T, H, B]
  DSI_CHECK(x.ndim() == 3 && w.ndim() == 3, "head_matmul: x ", shape_str(x.shape()), " and w ",
            shape_str(w.shape()), " must be 3-D");
  const int64_t T = x.dim(0), H = x.dim(1), A = x.dim(2);
  DSI_CHECK(w.dim(0) == H, "head_matmul: weight has ", w.dim(0), " heads, input ", H);
  const int64_t B = transpose_w ? w.dim(2) : w.dim(1);
  DSI_CHECK((transpose_w ? w.dim(1) : w.dim(2)) == A, "head_matmul: inner dimension mismatch");
  DSI_CHECK(w.device() == Device::kCuda && w.dtype() == DType::BF16,
            "head_matmul: the weight must be a bf16 CUDA tensor (loaded through prepare_weight)");
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, B});  // [T, H, B]
  // From 256 (bucketed) tokens: cuBLASLt over bf16-rounded x, like the other GEMMs over more than 8 rows
  // (DSINFER_CUDA_GEMM=split keeps fp32 x on the tensor-core kernel instead). DISABLED_BenchDecodeOps on the
  // H200 (2026-12-01, V2-Lite W_UK / W_UV): T 512 13.1 / 17.3 us, T 256 15.1 / 13.4 us; the tensor-core
  // kernel is faster at T 64 (6.6 / 13.5 us against 15.0 / 15.6).
  if (cuda::next_pow2(T) >= 256 && !options_.split_gemm_activations &&
      cuda::head_linear_bf16(dev_f32(x, "head_matmul", "x"), w.data<uint16_t>(), out.data<float>(), T, H, A,
                             B, transpose_w))
    return out;
  cuda::launch_head_matmul(dev_f32(x, "head_matmul", "x"), w.data<uint16_t>(), out.data<float>(), T, H, A, B,
                           transpose_w);
  return out;
}

}  // namespace dsinfer
