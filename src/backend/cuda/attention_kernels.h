// Launchers of the paged-KV-cache CUDA kernels (cache writes, causal GQA) on raw device pointers
// (CUDA-header free). The cache is float32 rows of `width` values, one row per slot; semantics of
// CpuBackend::write_kv / attention_gqa (cpu_attention.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// Largest head_dim / v_head_dim launch_attention_gqa takes.
inline constexpr int64_t kMaxAttentionHeadDim = 256;

// Row slot_mapping[t] of `cache` gets [a[t] (wa values) | b[t] (wb values)] for t < T; b may be null (wb 0).
void launch_write_kv(float* cache, int64_t width, const int64_t* slot_mapping, const float* a, int64_t wa,
                     const float* b, int64_t wb, int64_t T);

// The paged BatchPlan arrays a kernel reads, all on the device.
struct DevicePlanView {
  const int32_t* positions = nullptr;           // [T] position of each token in its sequence
  const int32_t* token_seq = nullptr;           // [T] sequence of each token
  const int32_t* block_table = nullptr;         // block ids of every sequence, concatenated
  const int32_t* block_table_indptr = nullptr;  // [S + 1] offsets into block_table
  int64_t block_size = 0;
};

// out [T, Hq * Dv] = softmax(q . K^T * scale) V for q [T, Hq, D] over cache positions [0, positions[t]]
// of token t's sequence; slot rows [K (Hkv * D) | V (Hkv * Dv)]; head h reads kv head h / (Hq / Hkv).
// D, Dv <= kMaxAttentionHeadDim.
void launch_attention_gqa(const float* q, const float* cache, int64_t width, const DevicePlanView& plan,
                          float* out, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv, float scale);

}  // namespace dsinfer::cuda
