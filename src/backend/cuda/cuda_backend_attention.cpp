// CudaBackend's attention-side ops: rope, cache writes (float32 or bf16 cache), the fused rope + cache write,
// rope_attention_gqa (a pure decode step's rope, cache write and attention in one kernel) and GQA attention,
// which routes each sequence of the plan to a kernel: query_len 1 (decode) -> split-KV
// decode kernel (splits merged in the kernel, decode_arrivals); longer chunks -> tensor-core flash kernel
// (bf16 cache, head dim 64 or 128) or, for other shapes, the decode kernel run per token; shapes neither
// takes -> the simple kernel. The split is made on the host from the plan, so nothing waits for the GPU.
#include <algorithm>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/mla_write_kernels.h"
#include "backend/cuda/plan_checks.h"
#include "backend/cuda/rope_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::cache_view;
using cuda::check_positions;
using cuda::check_slots;
using cuda::dev_bf16;
using cuda::dev_f32;

void CudaBackend::rope(Tensor& x, const std::vector<int32_t>& positions, const RopeTable& table,
                       int64_t offset, RopeLayout layout, bool inverse) {
  // x [T, heads, head_dim]; rotate dims [offset, offset + rope_dim).
  DSI_CHECK(x.ndim() == 3, "rope: x must be [T, heads, head_dim], got ", shape_str(x.shape()));
  const int64_t T = x.dim(0), heads = x.dim(1), D = x.dim(2), R = table.rope_dim;
  DSI_CHECK(static_cast<int64_t>(positions.size()) == T, "rope: ", positions.size(), " positions for ", T,
            " tokens");
  DSI_CHECK(offset >= 0 && offset + R <= D, "rope: rope dims exceed the head dimension");
  DSI_CHECK(static_cast<int64_t>(table.inv_freq.size()) == R / 2, "rope: table has ", table.inv_freq.size(),
            " frequencies for rope_dim ", R);
  cuda::launch_rope(dev_f32(x, "rope", "x"), device_array(positions, positions_),
                    inv_freq_.upload(table.inv_freq), T, heads, D, offset, R, table.attention_scaling,
                    layout == RopeLayout::kInterleaved, inverse);
}

void CudaBackend::write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a,
                           const Tensor& b) {
  const cuda::DeviceCacheView view = cache_view(cache, layer, "write_kv");
  const int64_t T = plan.num_tokens();
  const int64_t wa = a.numel() / std::max<int64_t>(T, 1);
  const int64_t wb = b ? b.numel() / std::max<int64_t>(T, 1) : 0;
  DSI_CHECK(wa + wb == cache.width(layer), "write_kv: rows of ", wa + wb, " values for a cache row of ",
            cache.width(layer));
  check_slots(cache, plan, "write_kv");
  cuda::launch_write_kv(view, device_array(plan.slot_mapping, slot_mapping_), dev_f32(a, "write_kv", "a"), wa,
                        b ? dev_f32(b, "write_kv", "b") : nullptr, wb, T);
}

int64_t CudaBackend::check_rope_write_kv(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const RopeTable& table, const KvCache& cache, int64_t layer,
                                         const BatchPlan& plan) {
  const int64_t T = plan.num_tokens();
  DSI_CHECK(q.ndim() == 3 && k.ndim() == 3 && q.dim(0) == T && k.dim(0) == T && q.dim(2) == k.dim(2),
            "rope_write_kv: q ", shape_str(q.shape()), " and k ", shape_str(k.shape()), " for ", T,
            " tokens");
  const int64_t Hkv = k.dim(1), D = q.dim(2), R = table.rope_dim;
  DSI_CHECK(Hkv > 0 && v.numel() % std::max<int64_t>(T * Hkv, 1) == 0, "rope_write_kv: v ",
            shape_str(v.shape()), " for ", Hkv, " kv heads");
  const int64_t Dv = T ? v.numel() / (T * Hkv) : cache.width(layer) / Hkv - D;
  DSI_CHECK(Hkv * (D + Dv) == cache.width(layer), "rope_write_kv: rows of ", Hkv * (D + Dv),
            " values for a cache row of ", cache.width(layer));
  DSI_CHECK(R % 2 == 0 && R <= D && static_cast<int64_t>(table.inv_freq.size()) == R / 2,
            "rope_write_kv: rope table of ", table.inv_freq.size(), " frequencies for rope_dim ", R,
            " and head_dim ", D);
  DSI_CHECK(static_cast<int64_t>(plan.positions.size()) == T, "rope_write_kv: positions for ", T, " tokens");
  check_slots(cache, plan, "rope_write_kv");
  return Dv;
}

void CudaBackend::rope_write_kv(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table,
                                RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan) {
  // q [T, Hq, D], k [T, Hkv, D] (rotated in place), v [T, Hkv * Dv] -> cache rows [k | v].
  const cuda::DeviceCacheView view = cache_view(cache, layer, "rope_write_kv");
  const int64_t Dv = check_rope_write_kv(q, k, v, table, cache, layer, plan);
  const int64_t T = plan.num_tokens();
  if (T == 0) return;
  cuda::launch_rope_write_kv(
      dev_f32(q, "rope_write_kv", "q"), dev_f32(k, "rope_write_kv", "k"), dev_f32(v, "rope_write_kv", "v"),
      view, device_array(plan.positions, positions_), device_array(plan.slot_mapping, slot_mapping_),
      table.rope_dim ? inv_freq_.upload(table.inv_freq) : nullptr, T, q.dim(1), k.dim(1), q.dim(2), Dv,
      table.rope_dim, table.attention_scaling, layout == RopeLayout::kInterleaved);
}

Tensor CudaBackend::rope_attention_gqa(Tensor& q, Tensor& k, const Tensor& v, const RopeTable& table,
                                       RopeLayout layout, KvCache& cache, int64_t layer,
                                       const BatchPlan& plan, int64_t v_head_dim, float scale) {
  // q [T, Hq, D], k [T, Hkv, D], v [T, Hkv * Dv] -> out [T, Hq * Dv]
  const int64_t T = plan.num_tokens();
  const bool interleaved = layout == RopeLayout::kInterleaved;
  bool fused = options_.rope_attention_fused && T > 0 && plan.num_seqs() == T && q.ndim() == 3 &&
               k.ndim() == 3 && cache.device() == Device::kCuda && cache.dtype() == DType::BF16;
  for (int32_t s = 0; fused && s < plan.num_seqs(); ++s)  // a pure decode step: one new token per sequence
    fused = plan.cu_seqlens[s + 1] - plan.cu_seqlens[s] == 1;
  const cuda::GqaShape shape{fused ? q.dim(1) : 0, fused ? k.dim(1) : 0, fused ? q.dim(2) : 0, v_head_dim,
                             scale};
  if (!fused || !cuda::decode_rope_supported(shape, true, table.rope_dim, interleaved))
    return Backend::rope_attention_gqa(q, k, v, table, layout, cache, layer, plan, v_head_dim, scale);

  const cuda::DeviceCacheView cv = cache_view(cache, layer, "rope_attention_gqa");
  const int64_t Dv = check_rope_write_kv(q, k, v, table, cache, layer, plan);
  DSI_CHECK(Dv == v_head_dim && shape.Hq % shape.Hkv == 0, "rope_attention_gqa: v heads of ", Dv,
            " values for v_head_dim ", v_head_dim, ", ", shape.Hq, " q heads for ", shape.Hkv, " kv heads");
  DSI_CHECK(plan.block_size == cache.block_size(), "rope_attention_gqa: plan block size ", plan.block_size,
            " for a cache of ", cache.block_size());
  check_positions(plan, "rope_attention_gqa");
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, shape.Hq * Dv});
  bool lone = false;
  const cuda::DevicePlanView view = plan_view(plan, lone);
  int64_t max_context = std::max<int64_t>(1, context_bound_);  // a CUDA graph's context bucket
  for (int32_t p : plan.positions) max_context = std::max<int64_t>(max_context, p + 1);
  cuda::DecodeRopeArgs rope;
  rope.k = dev_f32(k, "rope_attention_gqa", "k");
  rope.v = dev_f32(v, "rope_attention_gqa", "v");
  rope.slot_mapping = device_array(plan.slot_mapping, slot_mapping_);
  rope.inv_freq = table.rope_dim ? inv_freq_.upload(table.inv_freq) : nullptr;
  rope.rope_dim = table.rope_dim;
  rope.attention_scaling = table.attention_scaling;
  rope.interleaved = interleaved;
  std::vector<int32_t>& dec = decode_tokens_host_;
  dec.resize(static_cast<size_t>(T));
  for (int32_t t = 0; t < T; ++t) dec[t] = t;
  launch_gqa_decode(dev_f32(q, "rope_attention_gqa", "q"), cv, view, dec, T, max_context, out.data<float>(),
                    shape, &rope);
  if (lone) step_.clear_host();
  return out;
}

cuda::MlaWriteArgs CudaBackend::mla_write_args(Tensor& q_pe, Tensor& k_pe, const Tensor& latent,
                                               const Tensor& norm, float eps, const RopeTable& table,
                                               RopeLayout layout, KvCache& cache, int64_t layer,
                                               const BatchPlan& plan) {
  // q_pe [T, H, P], k_pe [T, 1, P] (rotated in place), latent [T, R] -> cache rows [norm(latent) | k_pe].
  cuda::MlaWriteArgs a;
  a.cache = cache_view(cache, layer, "mla_rope_write_kv");
  const int64_t T = plan.num_tokens();
  DSI_CHECK(q_pe.ndim() == 3 && q_pe.dim(0) == T && k_pe.numel() == T * q_pe.dim(2) && latent.ndim() == 2 &&
                latent.dim(0) == T,
            "mla_rope_write_kv: q_pe ", shape_str(q_pe.shape()), ", k_pe ", shape_str(k_pe.shape()),
            ", latent ", shape_str(latent.shape()), " for ", T, " tokens");
  const int64_t H = q_pe.dim(1), P = q_pe.dim(2), R = latent.dim(1);
  DSI_CHECK(norm.numel() == R, "mla_rope_write_kv: norm of ", norm.numel(), " values for a latent of ", R);
  DSI_CHECK(R + P == cache.width(layer), "mla_rope_write_kv: rows of ", R + P, " values for a cache row of ",
            cache.width(layer));
  DSI_CHECK(table.rope_dim == P && static_cast<int64_t>(table.inv_freq.size()) == P / 2,
            "mla_rope_write_kv: rope table of ", table.inv_freq.size(), " frequencies for rope dims ", P);
  DSI_CHECK(static_cast<int64_t>(plan.positions.size()) == T, "mla_rope_write_kv: positions for ", T,
            " tokens");
  check_slots(cache, plan, "mla_rope_write_kv");
  a.T = T;
  a.H = H;
  a.R = R;
  a.P = P;
  if (T == 0) return a;
  a.q_pe = dev_f32(q_pe, "mla_rope_write_kv", "q_pe");
  a.k_pe = dev_f32(k_pe, "mla_rope_write_kv", "k_pe");
  a.latent = dev_f32(latent, "mla_rope_write_kv", "latent");
  a.norm = dev_bf16(norm, "mla_rope_write_kv", "norm");
  a.eps = eps;
  a.positions = device_array(plan.positions, positions_);
  a.slot_mapping = device_array(plan.slot_mapping, slot_mapping_);
  a.inv_freq = P ? inv_freq_.upload(table.inv_freq) : nullptr;
  a.attention_scaling = table.attention_scaling;
  a.interleaved = layout == RopeLayout::kInterleaved;
  return a;
}

void CudaBackend::mla_rope_write_kv(Tensor& q_pe, Tensor& k_pe, const Tensor& latent, const Tensor& norm,
                                    float eps, const RopeTable& table, RopeLayout layout, KvCache& cache,
                                    int64_t layer, const BatchPlan& plan) {
  const cuda::MlaWriteArgs a =
      mla_write_args(q_pe, k_pe, latent, norm, eps, table, layout, cache, layer, plan);
  if (a.T == 0) return;
  cuda::launch_mla_rope_write_kv(a);
}

cuda::DevicePlanView CudaBackend::plan_view(const BatchPlan& plan, bool& lone) {
  // The step plan's device arrays (uploaded by begin_step; a lone op call outside a step uploads here).
  lone = step_.host() != &plan;
  if (lone) step_.upload(plan, context_bound_);
  const cuda::DevicePlan& dp = step_.device();
  cuda::DevicePlanView view;
  view.positions = dp.positions;
  view.token_seq = dp.token_seq;
  view.block_table = dp.block_table;
  view.block_table_indptr = dp.block_table_indptr;
  view.block_size = plan.block_size;
  return view;
}

void CudaBackend::launch_gqa_decode(const float* q, const cuda::DeviceCacheView& cv,
                                    const cuda::DevicePlanView& view, const std::vector<int32_t>& dec_tokens,
                                    int64_t T, int64_t max_context, float* out, const cuda::GqaShape& shape,
                                    const cuda::DecodeRopeArgs* rope) {
  const auto n = static_cast<int64_t>(dec_tokens.size());
  // All tokens in order (a pure decode step): no token list, so a captured graph does not depend on it.
  const int32_t* tokens = n == T ? nullptr : decode_tokens_.upload(dec_tokens);
  const int64_t bucket = cuda::attention_max_context_bucket(max_context);
  const int64_t floats = cuda::decode_partial_floats(n, shape, bucket);
  Tensor partials = floats ? Tensor::empty_on(Device::kCuda, DType::F32, {floats}) : Tensor();
  // Fused combine when the counters are there (a capture that would need more runs the combine kernel).
  int32_t* arrivals = cuda::decode_arrivals(cuda::decode_arrival_slots(n, shape, bucket));
  cuda::launch_attention_decode(q, cv, view, tokens, n, out, shape, bucket,
                                floats ? partials.data<float>() : nullptr, arrivals, rope);
}

Tensor CudaBackend::attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                                  int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) {
  // q [T, Hq, D] -> out [T, Hq * Dv]
  const cuda::DeviceCacheView cv = cache_view(cache, layer, "attention_gqa");
  DSI_CHECK(q.ndim() == 3, "attention_gqa: q must be [T, Hq, D], got ", shape_str(q.shape()));
  const int64_t T = q.dim(0), Hq = q.dim(1), D = head_dim, Dv = v_head_dim;
  DSI_CHECK(q.dim(2) == D && kv_heads > 0 && Hq % kv_heads == 0, "attention_gqa: bad query shape ",
            shape_str(q.shape()));
  DSI_CHECK(cache.width(layer) == kv_heads * (D + Dv), "attention_gqa: cache row width mismatch");
  DSI_CHECK(T == plan.num_tokens(), "attention_gqa: ", T, " query tokens for a plan of ", plan.num_tokens());
  DSI_CHECK(plan.block_size == cache.block_size(), "attention_gqa: plan block size ", plan.block_size,
            " for a cache of ", cache.block_size());
  const cuda::GqaShape shape{Hq, kv_heads, D, Dv, scale};
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, Hq * Dv});
  if (T == 0) return out;

  bool lone_call = false;
  const cuda::DevicePlanView view = plan_view(plan, lone_call);
  const float* qd = dev_f32(q, "attention_gqa", "q");

  if (!cuda::decode_supported(shape, cv.bf16)) {
    cuda::launch_attention_gqa(qd, cv, view, out.data<float>(), T, shape);
    if (lone_call) step_.clear_host();
    return out;
  }
  // Route: flash tiles for the chunks of query_len > 1 (when the flash kernel takes the shape), every other
  // token to the decode kernel.
  const bool flash = cuda::flash_supported(shape, cv.bf16);
  std::vector<int32_t>& dec = decode_tokens_host_;
  std::vector<int32_t>& tiles = flash_tiles_host_;
  dec.clear();
  tiles.clear();
  int64_t max_context = std::max<int64_t>(1, context_bound_);  // a CUDA graph's context bucket
  for (int32_t s = 0; s < plan.num_seqs(); ++s) {
    const int32_t begin = plan.cu_seqlens[s], end = plan.cu_seqlens[s + 1];
    if (flash && end - begin > 1) {
      for (int32_t t0 = begin; t0 < end; t0 += static_cast<int32_t>(cuda::kFlashTileRows)) {
        const int32_t rows = std::min<int32_t>(static_cast<int32_t>(cuda::kFlashTileRows), end - t0);
        int32_t keys = 0;
        for (int32_t t = t0; t < t0 + rows; ++t) keys = std::max(keys, plan.positions[t] + 1);
        tiles.insert(tiles.end(), {s, t0, rows, keys});
      }
    } else {
      for (int32_t t = begin; t < end; ++t) {
        dec.push_back(t);
        max_context = std::max<int64_t>(max_context, plan.positions[t] + 1);
      }
    }
  }
  check_positions(plan, "attention_gqa");
  if (!tiles.empty()) {
    cuda::launch_attention_flash(qd, cv, view, flash_tiles_.upload(tiles),
                                 static_cast<int64_t>(tiles.size() / 4), out.data<float>(), shape);
  }
  if (!dec.empty()) launch_gqa_decode(qd, cv, view, dec, T, max_context, out.data<float>(), shape, nullptr);
  if (lone_call) step_.clear_host();
  return out;
}

}  // namespace dsinfer
