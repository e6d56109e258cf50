// Launchers of the elementwise CUDA kernels (embedding rows, RMSNorm, LayerNorm, SiLU-mul, add, row gather)
// on raw device pointers; CUDA-header free. Activations are float32, weights bf16 (raw uint16 bits). Each
// launch checks for errors.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// out[t, :] = table[ids[t], :] for ids [T] (device), table [V, H] bf16 -> out [T, H] f32.
void launch_embed(const uint16_t* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t V);
// out[t, :] = x[t, :] / rms(x[t, :]) * w for x [T, H] f32, w [H] bf16.
void launch_rms_norm(const float* x, const uint16_t* w, float* out, int64_t T, int64_t H, float eps);
// out[t, :] = (x[t, :] - mean) / sqrt(biased variance + eps) * w + b for x [T, H] f32, w and b (may be
// null) [H] bf16: torch.nn.LayerNorm.
void launch_layer_norm(const float* x, const uint16_t* w, const uint16_t* b, float* out, int64_t T, int64_t H,
                       float eps);
// out[i] = silu(gate[i]) * up[i] over n values; limit > 0 first clamps gate to (-inf, limit] and up to
// [-limit, limit] (swiglu_limit).
void launch_silu_mul(const float* gate, const float* up, float* out, int64_t n, float limit = 0.0f);
// a[i] += b[i] over n values.
void launch_add_inplace(float* a, const float* b, int64_t n);
// out[r, :] = x[rows[r], :] for rows [R] (device), x [*, H] -> out [R, H].
void launch_gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H);

}  // namespace dsinfer::cuda
