// Linear layers on the GPU through cuBLASLt (CUDA-header free): bf16 weights, float32 activations in and out,
// fp32 accumulation. The activations are rounded to bf16 for the tensor cores; with `split` they are
// split into hi = bf16(x) and lo = bf16(x - hi) and two GEMMs add up W hi + W lo, which keeps about 16
// bits of every activation (the products of bf16 values are exact in fp32). One algorithm per shape is
// chosen by the cuBLASLt heuristic and cached; shapes it has no algorithm for (or unaligned operands) run a
// simple fp32 kernel.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// y [M, N] = x [M, K] w^T (+ bias) for w [N, K] bf16 and bias [N] bf16 or null; with accumulate
// y += x w^T (+ bias) (the residual add rides on the GEMM's beta). x is converted into the context's
// scratch (see gemm_reserve).
void linear_bf16(const float* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M, int64_t N,
                 int64_t K, bool split, bool accumulate = false);

// The same for activations already in bf16 (x [M, K] bf16 bits, e.g. from launch_rms_norm_bf16): one GEMM,
// no conversion, no scratch.
void gemm_bf16(const uint16_t* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M, int64_t N,
               int64_t K, bool accumulate = false);

// The per-head matmul of the absorbed MLA for many tokens: y [T, H, B] float32, per head h y[t, h] = w[h]
// x[t, h] (w [H, B, A]) or with transpose_w w[h]^T x[t, h] (w [H, A, B]), for x [T, H, A] float32 rounded to
// bf16 into the scratch; one strided-batched cuBLASLt GEMM over the heads, whose algorithm is the one chosen
// for next_pow2(T) tokens where cuBLASLt accepts it (rows sum alike for every T of a bucket). false (nothing
// launched) when there is no algorithm or the operands are not aligned for one.
bool head_linear_bf16(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B,
                      bool transpose_w);

// Sizes the conversion scratch of linear_bf16 for max_M x max_K activations (hi and lo halves) now, so that
// no later call reallocates it (a reallocation synchronizes the device and must not happen while a CUDA
// graph is being captured). The scratch only grows; call it at startup with the largest step's shape.
void gemm_reserve(int64_t max_M, int64_t max_K);

// The same through the fallback kernel alone (tests).
void linear_bf16_reference(const float* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M,
                           int64_t N, int64_t K);

}  // namespace dsinfer::cuda
