// Rotary embedding: one thread per (head, pair), one block per token (per 128 pairs of a token when the step
// has few tokens); and rope fused with the KV-cache
// write (one block per (token, head): q heads rotate in place; k heads rotate in place and write their K and
// V parts of the token's cache row as float32 or bf16). Precise cosf/sinf (no fast math) so
// the angles match the CPU reference to float32 rounding; both kernels' arithmetic is rope_device.cuh's
// (each product and sum rounded on its own), which the kernels that fuse a rope (decode_attention_warp.cu,
// V4's norm + rope + cache write and attention's inverse rope) share bit for bit.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_device.cuh"
#include "backend/cuda/rope_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, int64_t heads,
                            int64_t head_dim, int64_t offset, int64_t half, float scaling, bool interleaved,
                            float sign) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  const int64_t stride = int64_t{blockDim.x} * gridDim.y;
  for (int64_t idx = int64_t{blockIdx.y} * blockDim.x + threadIdx.x; idx < heads * half; idx += stride) {
    const int64_t h = idx / half, i = idx % half;
    float* v = x + (t * heads + h) * head_dim + offset;
    const int64_t a = interleaved ? 2 * i : i;
    const int64_t b = interleaved ? 2 * i + 1 : i + half;
    float x0 = v[a], x1 = v[b];
    rope_math::rotate_pair(x0, x1, inv_freq[i], pos, scaling, sign);
    v[a] = x0;
    v[b] = x1;
  }
}

// Block (t, y): y < Hq rotates q head y; y >= Hq rotates k head y - Hq and writes its K and V parts of the
// token's cache row.
template <typename KV>
__global__ void rope_write_kv_kernel(float* q, float* k, const float* v, KV* cache, int64_t width,
                                     const int32_t* positions, const int64_t* slot_mapping,
                                     const float* inv_freq, int Hq, int Hkv, int D, int Dv, int half,
                                     float scaling, bool interleaved) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int y = blockIdx.y;
  const bool is_q = y < Hq;
  const int h = is_q ? y : y - Hq;
  float* x = is_q ? q + (t * Hq + h) * D : k + (t * Hkv + h) * D;
  KV* row = is_q ? nullptr : cache + slot_mapping[t] * width;
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float c, s;
    rope_math::cos_sin(inv_freq[i], pos, scaling, c, s);
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = x[a], x1 = x[b];
    const float y0 = rope_math::rotate(x0, x1, c, -s), y1 = rope_math::rotate(x1, x0, c, s);
    x[a] = y0;
    x[b] = y1;
    if (!is_q) {
      row[h * D + a] = attn::from_float<KV>(y0);
      row[h * D + b] = attn::from_float<KV>(y1);
    }
  }
  if (is_q) return;
  for (int d = 2 * half + threadIdx.x; d < D; d += blockDim.x)  // dims past rope_dim as they are
    row[h * D + d] = attn::from_float<KV>(x[d]);
  const float* vh = v + (t * Hkv + h) * Dv;
  KV* vrow = row + static_cast<int64_t>(Hkv) * D + static_cast<int64_t>(h) * Dv;
  for (int d = threadIdx.x; d < Dv; d += blockDim.x) vrow[d] = attn::from_float<KV>(vh[d]);
}

}  // namespace

void launch_rope_write_kv(float* q, float* k, const float* v, const DeviceCacheView& cache,
                          const int32_t* positions, const int64_t* slot_mapping, const float* inv_freq,
                          int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv, int64_t rope_dim,
                          float attention_scaling, bool interleaved) {
  DSI_CHECK(rope_dim >= 0 && rope_dim % 2 == 0 && rope_dim <= D, "rope_write_kv: rope_dim ", rope_dim,
            " for head_dim ", D);
  DSI_CHECK(cache.width == Hkv * (D + Dv), "rope_write_kv: cache rows of ", cache.width, " values for ", Hkv,
            " kv heads of ", D, " + ", Dv);
  if (T == 0) return;
  DSI_CHECK(Hq + Hkv <= 65535, "rope_write_kv: ", Hq + Hkv, " heads");
  const int half = static_cast<int>(rope_dim / 2);
  const int args[] = {static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D), static_cast<int>(Dv)};
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(Hq + Hkv));
  if (cache.bf16) {
    launch_pdl(rope_write_kv_kernel<__nv_bfloat16>, grid, 64, 0, q, k, v,
               static_cast<__nv_bfloat16*>(cache.data), cache.width, positions, slot_mapping, inv_freq,
               args[0], args[1], args[2], args[3], half, attention_scaling, interleaved);
  } else {
    launch_pdl(rope_write_kv_kernel<float>, grid, 64, 0, q, k, v, static_cast<float*>(cache.data),
               cache.width, positions, slot_mapping, inv_freq, args[0], args[1], args[2], args[3], half,
               attention_scaling, interleaved);
  }
  attn::check_launch("rope_write_kv");
}

void launch_rope(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                 int64_t head_dim, int64_t offset, int64_t rope_dim, float attention_scaling,
                 bool interleaved, bool inverse) {
  if (T == 0 || heads == 0 || rope_dim < 2) return;
  // A token's pairs over several blocks when the step has few tokens (decode: one block per 128 pairs rather
  // than one block walking all heads); each pair's arithmetic is the same either way.
  constexpr int kThreads = 128;
  const int64_t blocks_per_token = (heads * (rope_dim / 2) + kThreads - 1) / kThreads;
  const int64_t y = std::clamp<int64_t>(std::min<int64_t>(blocks_per_token, 1024 / T), 1, 65535);
  launch_pdl(rope_kernel, dim3(static_cast<unsigned>(T), static_cast<unsigned>(y)), kThreads, 0, x, positions,
             inv_freq, heads, head_dim, offset, rope_dim / 2, attention_scaling, interleaved,
             inverse ? -1.0f : 1.0f);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel rope failed to launch: ", cudaGetErrorString(err));
}

}  // namespace dsinfer::cuda
