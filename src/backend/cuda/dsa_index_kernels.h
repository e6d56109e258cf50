// Launchers of DeepSeek-V3.2's lightning-indexer kernels (dsa_index_kernels.cu) on raw device pointers
// (CUDA-header free): index scores of query tokens against their sequences' cached indexer keys, then the
// top-k cache positions per token. Semantics of CpuBackend::dsa_indexer_topk with
// IndexTies::kLowestPosition (cpu_indexer.cpp).
#pragma once
#include <cstdint>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda {

// One launch over query tokens [t0, t0 + count) of a step.
struct IndexScoresArgs {
  const float* q = nullptr;        // [T, Hi, D] indexer queries (rope applied)
  const float* w = nullptr;        // [T, Hi] per-head weights
  const uint16_t* keys = nullptr;  // the cache entry's rows [slots, D] bf16 (LayerNorm + rope applied)
  DevicePlanView plan;             // the step plan's arrays (attention_kernels.h)
  int64_t t0 = 0, count = 0;
  int64_t Hi = 0, D = 0;
  float scale = 1.0f;         // on q . k
  float weight_scale = 1.0f;  // on the weights
  int64_t top_k = 0;          // tokens that see at most top_k positions need no scores
  float* scores = nullptr;    // [count, ld]: row i is token t0 + i
  int64_t ld = 0;             // a multiple of kIndexKeysPerBlock, at least the longest context of the launch
};

// Keys one block of the score kernel scores (the row stride of the scores buffer is a multiple of it).
inline constexpr int64_t kIndexKeysPerBlock = 64;

// Whether the score kernel takes these shapes: D a multiple of 16 (up to 512), at most 128 heads, 16-byte
// aligned keys, and queries + keys staged within 200 KiB of shared memory (128 heads of 128, 64 of 512).
bool dsa_index_scores_supported(int64_t Hi, int64_t D, uintptr_t keys);

// scores[i, j] = sum_h (w[t, h] * weight_scale) * max(q[t, h] . k_j * scale, 0) for every cached position
// j <= positions[t] of token t = t0 + i (the dots on tensor cores, q as bf16 high + low parts, so the scores
// are within float32 rounding of the reference's); tokens that see at most top_k positions are skipped.
void launch_dsa_index_scores(const IndexScoresArgs& a);

// out[t0 + i, :] = the top_k positions of token t0 + i by scores row i, ascending, padded with -1; ties at
// the boundary keep the lowest positions. A token that sees at most top_k positions gets all of them
// (0 .. positions[t]) without reading scores.
void launch_dsa_topk(const float* scores, int64_t ld, const int32_t* positions, int64_t t0, int64_t count,
                     int64_t top_k, int32_t* out);

}  // namespace dsinfer::cuda
