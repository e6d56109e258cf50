// Launcher of the DeepSeek-V2/V3 MLA cache-write kernel (kv_a_norm RMSNorm of the latent, rope of the query's
// and the key's rope dims, the cache row write: one kernel) on raw device pointers (CUDA-header free).
// Semantics of Backend::mla_rope_write_kv's default (rms_norm, rope, rope, write_kv).
#pragma once
#include <cstdint>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda {

// The arguments of the MLA cache write (device pointers).
struct MlaWriteArgs {
  float* q_pe = nullptr;                  // [T, H, P] f32, rotated in place
  float* k_pe = nullptr;                  // [T, P] f32, rotated in place
  const float* latent = nullptr;          // [T, R] f32
  const uint16_t* norm = nullptr;         // [R] bf16
  float eps = 0.0f;                       // of the latent's RMSNorm
  DeviceCacheView cache;                  // rows of R + P values
  const int32_t* positions = nullptr;     // [T]
  const int64_t* slot_mapping = nullptr;  // [T]
  const float* inv_freq = nullptr;        // [P / 2]
  int64_t T = 0, H = 0, R = 0, P = 0;
  float attention_scaling = 1.0f;  // cos and sin are multiplied by it
  bool interleaved = true;         // rope pairs (2i, 2i + 1), else (i, i + P / 2)
};

// Whether launch_mla_rope_write_kv takes a latent of R values and P rope dims (R <= 1024, P even, P <= 512).
bool mla_rope_write_kv_supported(int64_t R, int64_t P);

// q_pe and k_pe rotated in place (angle inv_freq[i] * pos, cos and sin times attention_scaling), then row
// slot_mapping[t] of the cache gets [latent[t] / rms(latent[t]) * norm | k_pe[t]]. One block per token.
void launch_mla_rope_write_kv(const MlaWriteArgs& a);

}  // namespace dsinfer::cuda
