// Launchers of the rotary-embedding CUDA kernels (plain, and fused with the KV-cache write) on raw device
// pointers (CUDA-header free); semantics of CpuBackend::rope (cpu_rope.cpp): float32 angle inv_freq[i] * pos,
// cos and sin times attention_scaling.
#pragma once
#include <cstdint>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda {

// Rotates dims [offset, offset + rope_dim) of every head of x [T, heads, head_dim] (f32) in place.
// positions [T] and inv_freq [rope_dim / 2] are device arrays. interleaved: pairs (2i, 2i + 1), else
// (i, i + rope_dim / 2). inverse rotates by -angle.
void launch_rope(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                 int64_t head_dim, int64_t offset, int64_t rope_dim, float attention_scaling,
                 bool interleaved, bool inverse);

// Fused rope + cache write: rotates dims [0, rope_dim) of every head of q [T, Hq, D] and k [T, Hkv, D]
// (f32, in place; interleaved pairs (2i, 2i + 1), else (i, i + rope_dim / 2); angle inv_freq[i] * pos,
// cos and sin times attention_scaling), then row slot_mapping[t] of `cache` gets [k[t] | v[t]] with
// v [T, Hkv * Dv]. positions, slot_mapping and inv_freq [rope_dim / 2] are device arrays.
void launch_rope_write_kv(float* q, float* k, const float* v, const DeviceCacheView& cache,
                          const int32_t* positions, const int64_t* slot_mapping, const float* inv_freq,
                          int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv, int64_t rope_dim,
                          float attention_scaling, bool interleaved);

}  // namespace dsinfer::cuda
