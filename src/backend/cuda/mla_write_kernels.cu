// The MLA cache write in one kernel, one block of 256 threads per token: the token's rope angles once into
// shared memory (the same float32 cosf/sinf products as rope_kernel, so the same bits), then the RMSNorm of
// the latent (block_inv_rms over 256 threads, as rms_norm_kernel), the rotation of k_pe and of every head's
// q_pe in place, and the cache row [normalised latent | rotated k_pe] as float32 or bf16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_write_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;       // block_inv_rms's sums follow the block size: rms_norm_kernel's 256
constexpr int kMaxRopePairs = 256;  // P / 2 the shared angle table holds

__device__ __forceinline__ void rotate(float* v, int a, int b, float c, float s) {
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * c - x1 * s;
  v[b] = x1 * c + x0 * s;
}

template <typename KV>
__global__ void __launch_bounds__(kThreads)
    mla_rope_write_kv_kernel(float* q_pe, float* k_pe, const float* latent, const uint16_t* norm, float eps,
                             KV* cache, int64_t width, const int32_t* positions, const int64_t* slot_mapping,
                             const float* inv_freq, int H, int R, int P, float scaling, bool interleaved) {
  pdl_wait();
  pdl_trigger();
  __shared__ float cos_s[kMaxRopePairs], sin_s[kMaxRopePairs];
  const int64_t t = blockIdx.x;
  const int half = P / 2;
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float freq = inv_freq[i] * pos;
    cos_s[i] = cosf(freq) * scaling;
    sin_s[i] = sinf(freq) * scaling;
  }
  // block_inv_rms synchronises, which also publishes the angles.
  const float* lat = latent + t * R;
  const float inv = block_inv_rms(lat, R, eps);
  KV* row = cache + slot_mapping[t] * width;
  for (int i = threadIdx.x; i < R; i += kThreads)
    row[i] = attn::from_float<KV>(__uint_as_float(static_cast<uint32_t>(norm[i]) << 16) * (lat[i] * inv));
  float* k = k_pe + t * P;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    rotate(k, a, b, cos_s[i], sin_s[i]);
    row[R + a] = attn::from_float<KV>(k[a]);
    row[R + b] = attn::from_float<KV>(k[b]);
  }
  float* q = q_pe + t * H * P;
  for (int idx = threadIdx.x; idx < H * half; idx += kThreads) {
    const int h = idx / half, i = idx % half;
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    rotate(q + h * P, a, b, cos_s[i], sin_s[i]);
  }
}

}  // namespace

void launch_mla_rope_write_kv(float* q_pe, float* k_pe, const float* latent, const uint16_t* norm, float eps,
                              const DeviceCacheView& cache, const int32_t* positions,
                              const int64_t* slot_mapping, const float* inv_freq, int64_t T, int64_t H,
                              int64_t R, int64_t P, float attention_scaling, bool interleaved) {
  DSI_CHECK(P >= 0 && P % 2 == 0 && P / 2 <= kMaxRopePairs && R > 0, "mla_rope_write_kv: R ", R, ", P ", P);
  DSI_CHECK(cache.width == R + P, "mla_rope_write_kv: cache rows of ", cache.width, " values for ", R, " + ",
            P);
  if (T == 0) return;
  const int args[] = {static_cast<int>(H), static_cast<int>(R), static_cast<int>(P)};
  if (cache.bf16) {
    launch_pdl(mla_rope_write_kv_kernel<__nv_bfloat16>, static_cast<unsigned>(T), kThreads, 0, q_pe, k_pe,
               latent, norm, eps, static_cast<__nv_bfloat16*>(cache.data), cache.width, positions,
               slot_mapping, inv_freq, args[0], args[1], args[2], attention_scaling, interleaved);
  } else {
    launch_pdl(mla_rope_write_kv_kernel<float>, static_cast<unsigned>(T), kThreads, 0, q_pe, k_pe, latent,
               norm, eps, static_cast<float*>(cache.data), cache.width, positions, slot_mapping, inv_freq,
               args[0], args[1], args[2], attention_scaling, interleaved);
  }
  attn::check_launch("mla_rope_write_kv");
}

}  // namespace dsinfer::cuda
