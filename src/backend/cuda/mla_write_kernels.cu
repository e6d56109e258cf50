// The MLA cache write in one kernel, one block of 256 threads per token: mla_write_device.cuh's block code
// (loads first, one barrier; see there).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_write_device.cuh"
#include "backend/cuda/mla_write_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using mla_write::kThreads;

template <typename KV>
__global__ void __launch_bounds__(kThreads)
    mla_rope_write_kv_kernel(float* q_pe, float* k_pe, const float* latent, const uint16_t* norm, float eps,
                             KV* cache, int64_t width, const int32_t* positions, const int64_t* slot_mapping,
                             const float* inv_freq, int H, int R, int P, float scaling, bool interleaved) {
  __shared__ float smem[mla_write::kSmemFloats];
  mla_write::rope_write_row<KV>(q_pe, k_pe, latent, norm, eps, cache, width, positions, slot_mapping,
                                inv_freq, H, R, P, scaling, interleaved, blockIdx.x, smem);
}

}  // namespace

bool mla_rope_write_kv_supported(int64_t R, int64_t P) {
  return mla_write::supported(R, P);
}

void launch_mla_rope_write_kv(const MlaWriteArgs& a) {
  DSI_CHECK(mla_write::supported(a.R, a.P), "mla_rope_write_kv: R ", a.R, ", P ", a.P);
  DSI_CHECK(a.cache.width == a.R + a.P, "mla_rope_write_kv: cache rows of ", a.cache.width, " values for ",
            a.R, " + ", a.P);
  if (a.T == 0) return;
  const int H = static_cast<int>(a.H), R = static_cast<int>(a.R), P = static_cast<int>(a.P);
  const unsigned grid = static_cast<unsigned>(a.T);
  if (a.cache.bf16) {
    launch_pdl(mla_rope_write_kv_kernel<__nv_bfloat16>, grid, kThreads, 0, a.q_pe, a.k_pe, a.latent, a.norm,
               a.eps, static_cast<__nv_bfloat16*>(a.cache.data), a.cache.width, a.positions, a.slot_mapping,
               a.inv_freq, H, R, P, a.attention_scaling, a.interleaved);
  } else {
    launch_pdl(mla_rope_write_kv_kernel<float>, grid, kThreads, 0, a.q_pe, a.k_pe, a.latent, a.norm, a.eps,
               static_cast<float*>(a.cache.data), a.cache.width, a.positions, a.slot_mapping, a.inv_freq, H,
               R, P, a.attention_scaling, a.interleaved);
  }
  attn::check_launch("mla_rope_write_kv");
}

}  // namespace dsinfer::cuda
