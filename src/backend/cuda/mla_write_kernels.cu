// The MLA cache write in one kernel, one block of 256 threads per token. Decode runs it at batch 1, where it
// is a latency chain, so every global load comes first and in parallel (the latent and norm values a
// thread needs, the first rope pairs of k_pe and q_pe, the position, slot and frequencies; the weights
// before pdl_wait), then one barrier: the token's rope angles into shared memory (the same float32
// cosf/sinf products as rope_kernel, so the same bits) and the warps' sums of squares, which every warp
// then reduces itself in block_inv_rms's order (the same bits as rms_norm_kernel). Then the cache row
// [normalised latent | rotated k_pe] as float32 or bf16 and the rotation of k_pe and every head's q_pe in
// place.
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

constexpr int kThreads = 256;       // the sums of squares follow rms_norm_kernel's block of 256
constexpr int kMaxRopePairs = 256;  // P / 2 the shared angle table holds
constexpr int kLatRegs = 4;         // latent values per thread held in registers: R <= 1024
constexpr int kPairRegs = 4;        // rope pairs per thread loaded up front (more run a second loop)

__device__ __forceinline__ void rotated(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x1 * c + x0 * s;
}

template <typename KV>
__global__ void __launch_bounds__(kThreads)
    mla_rope_write_kv_kernel(float* q_pe, float* k_pe, const float* latent, const uint16_t* norm, float eps,
                             KV* cache, int64_t width, const int32_t* positions, const int64_t* slot_mapping,
                             const float* inv_freq, int H, int R, int P, float scaling, bool interleaved) {
  __shared__ float cos_s[kMaxRopePairs], sin_s[kMaxRopePairs];
  __shared__ float partial[kThreads / 32];
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % 32, half = P / 2;
  // Weights first (nothing earlier writes them), then, after pdl_wait, everything else at once.
  float nrm[kLatRegs];
#pragma unroll
  for (int k = 0; k < kLatRegs; ++k) {
    const int i = tid + k * kThreads;
    nrm[k] = i < R ? __uint_as_float(static_cast<uint32_t>(norm[i]) << 16) : 0.0f;
  }
  const float freq0 = tid < half ? inv_freq[tid] : 0.0f;
  pdl_wait();
  pdl_trigger();
  const float* lat = latent + t * R;
  float* k = k_pe + t * P;
  float* q = q_pe + t * H * P;
  const int pairs = (H + 1) * half;  // pair idx < half: k_pe's pair idx; then head idx / half - 1 of q_pe
  // Element offsets (into k, or into q past k's P) of pair idx.
  auto pair_at = [&](int idx, int* a, int* b, int* i) -> float* {
    const int h = idx / half - 1;
    *i = idx % half;
    *a = interleaved ? 2 * *i : *i;
    *b = interleaved ? 2 * *i + 1 : *i + half;
    return h < 0 ? k : q + h * P;
  };
  const float pos = static_cast<float>(positions[t]);
  const int64_t slot = slot_mapping[t];
  float lv[kLatRegs];
#pragma unroll
  for (int r = 0; r < kLatRegs; ++r) {
    const int i = tid + r * kThreads;
    lv[r] = i < R ? lat[i] : 0.0f;
  }
  float x0[kPairRegs], x1[kPairRegs];
#pragma unroll
  for (int r = 0; r < kPairRegs; ++r) {
    const int idx = tid + r * kThreads;
    x0[r] = x1[r] = 0.0f;
    if (idx < pairs) {
      int a, b, i;
      const float* v = pair_at(idx, &a, &b, &i);
      x0[r] = v[a];
      x1[r] = v[b];
    }
  }
  if (tid < half) {
    const float freq = freq0 * pos;
    cos_s[tid] = cosf(freq) * scaling;
    sin_s[tid] = sinf(freq) * scaling;
  }
  // Sum of squares in block_inv_rms's order: thread i sums elements i, i + 256, ...; a butterfly per warp;
  // the warps' sums (zero-padded to 32) by a second butterfly, which every warp does for itself.
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kLatRegs; ++r)
    if (tid + r * kThreads < R) ss += lv[r] * lv[r];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) partial[tid / 32] = ss;
  __syncthreads();  // angles and partial sums visible
  float tot = lane < kThreads / 32 ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o /= 2) tot += __shfl_xor_sync(0xffffffffu, tot, o);
  const float inv = rsqrtf(tot / static_cast<float>(R) + eps);
  KV* row = cache + slot * width;
#pragma unroll
  for (int r = 0; r < kLatRegs; ++r) {
    const int i = tid + r * kThreads;
    if (i < R) row[i] = attn::from_float<KV>(nrm[r] * (lv[r] * inv));
  }
  // Rotate pair idx (values v0, v1) and store it, into the cache row too for k_pe's pairs.
  auto store_pair = [&](int idx, float v0, float v1) {
    int a, b, i;
    float* v = pair_at(idx, &a, &b, &i);
    float y0, y1;
    rotated(v0, v1, cos_s[i], sin_s[i], &y0, &y1);
    v[a] = y0;
    v[b] = y1;
    if (idx < half) {
      row[R + a] = attn::from_float<KV>(y0);
      row[R + b] = attn::from_float<KV>(y1);
    }
  };
#pragma unroll
  for (int r = 0; r < kPairRegs; ++r) {
    const int idx = tid + r * kThreads;
    if (idx < pairs) store_pair(idx, x0[r], x1[r]);
  }
  for (int idx = tid + kPairRegs * kThreads; idx < pairs; idx += kThreads) {
    int a, b, i;
    const float* v = pair_at(idx, &a, &b, &i);
    store_pair(idx, v[a], v[b]);
  }
}

}  // namespace

void launch_mla_rope_write_kv(float* q_pe, float* k_pe, const float* latent, const uint16_t* norm, float eps,
                              const DeviceCacheView& cache, const int32_t* positions,
                              const int64_t* slot_mapping, const float* inv_freq, int64_t T, int64_t H,
                              int64_t R, int64_t P, float attention_scaling, bool interleaved) {
  DSI_CHECK(P >= 0 && P % 2 == 0 && P / 2 <= kMaxRopePairs && R > 0 && R <= kLatRegs * kThreads,
            "mla_rope_write_kv: R ", R, ", P ", P);
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
