// Elementwise kernels that write bf16 activations for the cuBLASLt GEMM path (M > 8), so that the fp32 ->
// bf16 rounding of the GEMM input happens inside the kernel that produces it: RMSNorm before the
// q/k/v and gate/up projections, SiLU-mul before the down projection. CUDA-header free; bf16 as uint16 bits.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// out[t, :] = bf16(x[t, :] / rms(x[t, :]) * w) for x [T, H] f32, w [H] bf16 -> out [T, H] bf16.
void launch_rms_norm_bf16(const float* x, const uint16_t* w, uint16_t* out, int64_t T, int64_t H, float eps);
// out[i] = bf16(silu(gate[i]) * up[i]) over n values, limit > 0 clamps as launch_silu_mul.
void launch_silu_mul_bf16(const float* gate, const float* up, uint16_t* out, int64_t n, float limit);

}  // namespace dsinfer::cuda
