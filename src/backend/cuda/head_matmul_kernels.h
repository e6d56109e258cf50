// Launcher of the per-head matmul of the absorbed MLA (W_UK into the query, W_UV out of the latent) on raw
// device pointers (CUDA-header free). Semantics of CpuBackend::head_matmul (cpu_basic_ops.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// y [T, H, B] for x [T, H, A] float32 and bf16 weights w: transpose_w false: w [H, B, A], y[t, h] = w[h] x[t,
// h]; transpose_w true: w [H, A, B], y[t, h] = w[h]^T x[t, h]. fp32 accumulation, x not rounded.
// gemv_tile picks the decode GEMV kernels' tiling (next_pow2(T) <= 8; see launch_head_gemv_tiled): 0 the
// default, kHeadGemvLegacy the older untiled GEMV kernels (kept for benchmarks only).
constexpr int kHeadGemvLegacy = -1;
void launch_head_matmul(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                        int64_t B, bool transpose_w, int gemv_tile = 0);

// The tiled decode GEMV kernels (head_gemv_kernels.cu) for next_pow2(T) <= 8; false (nothing launched) when
// the shape is not taken: w^T x needs B % 8 == 0 and NT * A + 512 * tile floats of x and partial sums in
// 48 KiB of shared memory (NT = next_pow2(T)), w x A % 8 == 0, x 16-byte aligned and NT * A floats of x in
// 48 KiB; both a 16-byte aligned w. tile: 0 the default (DSINFER_CUDA_HEAD_GEMV may change it, see
// docs/configuration.md); w^T x: 16-byte column chunks per block row (4, 8 or 16: 32, 64 or 128 outputs a
// block), w x: rows per warp (1, 2 or 4: 8, 16 or 32 outputs a block).
bool launch_head_gemv_tiled(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                            int64_t B, bool transpose_w, int tile = 0);
// The tile launch_head_gemv_tiled takes for tile 0 (DSINFER_CUDA_HEAD_GEMV or the default); kHeadGemvLegacy
// when that asks for the older kernels (launch_head_gemv_tiled then declines every call).
int head_gemv_default_tile(bool transpose_w);

// The same on tensor cores (mma.sync bf16, x split into three bf16 parts: ~fp32 products), for any T.
// head_matmul_mma_supported: A % 64 == 0, B % 32 == 0, x 8-byte and w 16-byte aligned.
bool head_matmul_mma_supported(const float* x, const uint16_t* w, int64_t A, int64_t B);
void launch_head_matmul_mma(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A,
                            int64_t B, bool transpose_w);

}  // namespace dsinfer::cuda
