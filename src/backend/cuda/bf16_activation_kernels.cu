// RMSNorm and SiLU-mul writing bf16 (see bf16_activation_kernels.h); the arithmetic is that of the fp32
// kernels in elementwise_kernels.cu, only the final store rounds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/bf16_activation_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

__device__ __forceinline__ uint16_t to_bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return *reinterpret_cast<const uint16_t*>(&b);
}

// One block per row, warp-shuffle reduction of the sum of squares.
__global__ void rms_norm_bf16_kernel(const float* x, const uint16_t* w, uint16_t* out, int64_t H, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* row = x + t * H;
  const float inv = block_inv_rms(row, H, eps);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    out[t * H + i] = to_bf16_bits(__uint_as_float(static_cast<uint32_t>(w[i]) << 16) * (row[i] * inv));
}

__global__ void silu_mul_bf16_kernel(const float* gate, const float* up, uint16_t* out, int64_t n,
                                     float limit) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    out[i] = to_bf16_bits(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

void launch_rms_norm_bf16(const float* x, const uint16_t* w, uint16_t* out, int64_t T, int64_t H, float eps) {
  if (T == 0) return;
  launch_pdl(rms_norm_bf16_kernel, static_cast<unsigned>(T), 256, 0, x, w, out, H, eps);
  check_launch("rms_norm_bf16");
}

void launch_silu_mul_bf16(const float* gate, const float* up, uint16_t* out, int64_t n, float limit) {
  if (n == 0) return;
  const int threads = 256;
  launch_pdl(silu_mul_bf16_kernel, static_cast<unsigned>((n + threads - 1) / threads), threads, 0, gate, up,
             out, n, limit);
  check_launch("silu_mul_bf16");
}

}  // namespace dsinfer::cuda
