// Launcher of the DeepSeek-V2/V3 MLA cache-write kernel (kv_a_norm RMSNorm of the latent, rope of the query's
// and the key's rope dims, the cache row write: one kernel) on raw device pointers (CUDA-header free).
// Semantics of Backend::mla_rope_write_kv's default (rms_norm, rope, rope, write_kv).
#pragma once
#include <cstdint>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda {

// q_pe [T, H, P] and k_pe [T, P] (f32) rotated in place (interleaved pairs (2i, 2i + 1), else
// (i, i + P / 2); angle inv_freq[i] * pos, cos and sin times attention_scaling), then row slot_mapping[t] of
// `cache` (width R + P) gets [latent[t] / rms(latent[t]) * norm | k_pe[t]] for latent [T, R] (f32) and norm
// [R] (bf16). positions, slot_mapping and inv_freq [P / 2] are device arrays.
void launch_mla_rope_write_kv(float* q_pe, float* k_pe, const float* latent, const uint16_t* norm, float eps,
                              const DeviceCacheView& cache, const int32_t* positions,
                              const int64_t* slot_mapping, const float* inv_freq, int64_t T, int64_t H,
                              int64_t R, int64_t P, float attention_scaling, bool interleaved);

}  // namespace dsinfer::cuda
