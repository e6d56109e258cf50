// CudaBackend::mla_prepare: the MLA cache write (mla_rope_write_kv) and the query's W_UK absorption
// (head_matmul(q_nope, w_uk, true)) in one launch (mla_prepare_kernels.cu) where head_matmul would run its
// tiled decode GEMV (next_pow2(T) <= 8) and the fused kernel takes the shapes; elsewhere (or with
// DSINFER_MLA_PREPARE_FUSED=0) the two ops one after the other. Either way the same bits.
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/mla_prepare_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

Tensor CudaBackend::mla_prepare(const Tensor& q_nope, const Tensor& w_uk, Tensor& q_pe, Tensor& k_pe,
                                const Tensor& latent, const Tensor& norm, float eps, const RopeTable& table,
                                RopeLayout layout, KvCache& cache, int64_t layer, const BatchPlan& plan) {
  // q_nope [T, H, A], w_uk [H, A, B] -> q_lat [T, H, B]; q_pe [T, H, P], k_pe [T, 1, P] rotated in place;
  // latent [T, R] -> cache rows [norm(latent) | k_pe].
  const int64_t T = plan.num_tokens();
  // The decision depends on next_pow2(T) and the shapes only, so eager and replayed steps fuse alike.
  if (!options_.mla_prepare_fused || T < 1 || cuda::next_pow2(T) > 8 || q_nope.ndim() != 3 ||
      w_uk.ndim() != 3 || q_nope.dim(0) != T || w_uk.device() != Device::kCuda ||
      w_uk.dtype() != DType::BF16 || w_uk.dim(0) != q_nope.dim(1) || w_uk.dim(1) != q_nope.dim(2))
    return Backend::mla_prepare(q_nope, w_uk, q_pe, k_pe, latent, norm, eps, table, layout, cache, layer,
                                plan);  // the composition checks and reports the shapes
  cuda::MlaPrepareArgs a;
  a.write = mla_write_args(q_pe, k_pe, latent, norm, eps, table, layout, cache, layer, plan);
  const int64_t H = q_nope.dim(1);
  a.q_nope = cuda::dev_f32(q_nope, "head_matmul", "x");
  a.w_uk = w_uk.data<uint16_t>();
  a.A = q_nope.dim(2);
  a.B = w_uk.dim(2);
  if (a.write.H != H || !cuda::mla_prepare_supported(a)) {
    cuda::launch_mla_rope_write_kv(a.write);
    return head_matmul(q_nope, w_uk, /*transpose_w=*/true);
  }
  Tensor q_lat = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, a.B});  // [T, H, B]
  a.q_lat = q_lat.data<float>();
  cuda::launch_mla_prepare(a);
  return q_lat;
}

}  // namespace dsinfer
