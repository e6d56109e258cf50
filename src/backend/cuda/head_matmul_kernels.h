// Launcher of the per-head matmul of the absorbed MLA (W_UK into the query, W_UV out of the latent) on raw
// device pointers (CUDA-header free). Semantics of CpuBackend::head_matmul (cpu_basic_ops.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// y [T, H, B] for x [T, H, A] float32 and bf16 weights w: transpose_w false: w [H, B, A], y[t, h] = w[h] x[t,
// h]; transpose_w true: w [H, A, B], y[t, h] = w[h]^T x[t, h]. fp32 accumulation, x not rounded.
void launch_head_matmul(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                        int64_t B, bool transpose_w);

// The same on tensor cores (mma.sync bf16, x split into three bf16 parts: ~fp32 products), for any T.
// head_matmul_mma_supported: A % 64 == 0, B % 32 == 0, x 8-byte and w 16-byte aligned.
bool head_matmul_mma_supported(const float* x, const uint16_t* w, int64_t A, int64_t B);
void launch_head_matmul_mma(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                            int64_t B, bool transpose_w);

}  // namespace dsinfer::cuda
