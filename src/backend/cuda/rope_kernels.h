// Launcher of the rotary-embedding CUDA kernel on raw device pointers (CUDA-header free); semantics of
// CpuBackend::rope (cpu_rope.cpp): float32 angle inv_freq[i] * pos, cos and sin times attention_scaling.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// Rotates dims [offset, offset + rope_dim) of every head of x [T, heads, head_dim] (f32) in place.
// positions [T] and inv_freq [rope_dim / 2] are device arrays. interleaved: pairs (2i, 2i + 1), else
// (i, i + rope_dim / 2). inverse rotates by -angle.
void launch_rope(float* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                 int64_t head_dim, int64_t offset, int64_t rope_dim, float attention_scaling,
                 bool interleaved, bool inverse);

}  // namespace dsinfer::cuda
