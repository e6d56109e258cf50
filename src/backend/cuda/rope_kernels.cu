// Rotary embedding: one block per token, one thread per (head, pair). Precise cosf/sinf (no fast math) so
// the angles match the CPU reference to float32 rounding.
#include <cuda_runtime.h>

#include "backend/cuda/rope_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, int64_t heads,
                            int64_t head_dim, int64_t offset, int64_t half, float scaling, bool interleaved,
                            float sign) {
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    const float freq = inv_freq[i] * pos;
    const float c = cosf(freq) * scaling;
    const float s = sign * sinf(freq) * scaling;
    float* v = x + (t * heads + h) * head_dim + offset;
    const int64_t a = interleaved ? 2 * i : i;
    const int64_t b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x1 * c + x0 * s;
  }
}

}  // namespace

void launch_rope(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                 int64_t head_dim, int64_t offset, int64_t rope_dim, float attention_scaling,
                 bool interleaved, bool inverse) {
  if (T == 0 || heads == 0 || rope_dim < 2) return;
  rope_kernel<<<static_cast<unsigned>(T), 128, 0, stream()>>>(x, positions, inv_freq, heads, head_dim, offset,
                                                              rope_dim / 2, attention_scaling, interleaved,
                                                              inverse ? -1.0f : 1.0f);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel rope failed to launch: ", cudaGetErrorString(err));
}

}  // namespace dsinfer::cuda
