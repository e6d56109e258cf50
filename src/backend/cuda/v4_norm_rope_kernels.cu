// DeepSeek-V4's attention inputs in one launch (launch_norm_rope_write_kv): block (t, y) takes query head y
// of token t (y < H) or the token's K = V row (y == H). The row is RMS-normalised (block_inv_rms over 256
// threads and rms_norm_kernel's expression: launch_rms_norm's bits), its last rope_dim dims are rotated at
// the token's position (rope_math::rotate_pair, rope_kernel's arithmetic) in shared memory, and the query
// head is stored, the K = V row written to its cache slot (write_kv's conversion). The same bits as
// launch_rms_norm, launch_rope and launch_write_kv run one after another, in one launch instead of five. The
// norm weight and the rope frequencies are loaded before the PDL wait.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_device.cuh"
#include "backend/cuda/v4_kernels.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;  // launch_rms_norm's block: block_inv_rms's sum order follows it
constexpr int kPreload = 4;    // norm weight values a thread loads before the wait (head dims up to 1024)

template <typename KV>
__global__ void __launch_bounds__(kThreads)
    norm_rope_write_kv_kernel(const float* q, const float* kv, const uint16_t* q_norm,
                              const uint16_t* kv_norm, float* q_out, KV* cache, int64_t width,
                              const int64_t* slot_mapping, const int32_t* positions, const float* inv_freq,
                              int H, int D, int rope_dim, float scaling, float eps) {
  extern __shared__ float s_row[];  // [D] the normalised row, rotated in place
  const int64_t t = blockIdx.x;
  const int y = blockIdx.y;
  const bool is_q = y < H;
  const uint16_t* w = is_q ? q_norm : kv_norm;  // [D]
  // The norm weight's first kPreload values a thread scales and its first rope frequency, loaded before the
  // wait (weights depend on no earlier kernel).
  float wv[kPreload];
#pragma unroll
  for (int k = 0; k < kPreload; ++k) {
    const int i = threadIdx.x + k * kThreads;
    wv[k] = i < D ? bf16_bits_to_float(w[i]) : 0.0f;
  }
  const int half = rope_dim / 2, offset = D - rope_dim;
  const float freq0 = threadIdx.x < half ? inv_freq[threadIdx.x] : 0.0f;
  pdl_wait();
  pdl_trigger();
  const float* row = is_q ? q + (t * H + y) * D : kv + t * D;  // [D]
  const float pos = static_cast<float>(positions[t]);          // (in flight during the sum of squares)
  const float inv = block_inv_rms(row, D, eps);
#pragma unroll
  for (int k = 0; k < kPreload; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < D) s_row[i] = wv[k] * (row[i] * inv);
  }
  for (int i = threadIdx.x + kPreload * kThreads; i < D; i += kThreads)
    s_row[i] = bf16_bits_to_float(w[i]) * (row[i] * inv);
  __syncthreads();
  // Interleaved pairs (2p, 2p + 1) of the last rope_dim dims.
  for (int p = threadIdx.x; p < half; p += kThreads) {
    float x0 = s_row[offset + 2 * p], x1 = s_row[offset + 2 * p + 1];
    rope_math::rotate_pair(x0, x1, p == threadIdx.x ? freq0 : inv_freq[p], pos, scaling, 1.0f);
    s_row[offset + 2 * p] = x0;
    s_row[offset + 2 * p + 1] = x1;
  }
  __syncthreads();
  if (is_q) {
    float* out = q_out + (t * H + y) * D;  // [D]
    for (int i = threadIdx.x; i < D; i += kThreads) out[i] = s_row[i];
  } else {
    KV* slot = cache + slot_mapping[t] * width;  // [D]
    for (int i = threadIdx.x; i < D; i += kThreads) slot[i] = attn::from_float<KV>(s_row[i]);
  }
}

}  // namespace

void launch_norm_rope_write_kv(const float* q, const float* kv, const uint16_t* q_norm,
                               const uint16_t* kv_norm, float* q_out, const DeviceCacheView& cache,
                               const int64_t* slot_mapping, const int32_t* positions, const float* inv_freq,
                               int64_t T, int64_t H, int64_t D, int64_t rope_dim, float attention_scaling,
                               float eps) {
  DSI_CHECK(D >= 1 && rope_dim >= 0 && rope_dim % 2 == 0 && rope_dim <= D && cache.width == D,
            "norm_rope_write_kv: head dim ", D, ", rope_dim ", rope_dim, ", cache rows of ", cache.width);
  DSI_CHECK(H >= 1 && H + 1 <= 65535 && D * sizeof(float) <= 48 * 1024, "norm_rope_write_kv: ", H,
            " heads of ", D);
  if (T == 0) return;
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(H + 1));
  const size_t smem = static_cast<size_t>(D) * sizeof(float);
  const int args[] = {static_cast<int>(H), static_cast<int>(D), static_cast<int>(rope_dim)};
  if (cache.bf16) {
    launch_pdl(norm_rope_write_kv_kernel<__nv_bfloat16>, grid, kThreads, smem, q, kv, q_norm, kv_norm, q_out,
               static_cast<__nv_bfloat16*>(cache.data), cache.width, slot_mapping, positions, inv_freq,
               args[0], args[1], args[2], attention_scaling, eps);
  } else {
    launch_pdl(norm_rope_write_kv_kernel<float>, grid, kThreads, smem, q, kv, q_norm, kv_norm, q_out,
               static_cast<float*>(cache.data), cache.width, slot_mapping, positions, inv_freq, args[0],
               args[1], args[2], attention_scaling, eps);
  }
  check_launch("norm_rope_write_kv");
}

}  // namespace dsinfer::cuda
