// The register-resident decode kernel behind launch_attention_decode (decode_attention_kernels.cu) for the
// common shapes: bf16 cache, D == Dv in {64, 128, 256}. Same split layout and partials as the generic kernel
// (the caller runs the combine kernel unless it passes arrival counters). CUDA-header free.
#pragma once
#include <cstdint>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda::detail {

bool decode_warp_supported(const GqaShape& shape, bool bf16_cache);
// Whether launches with arrival counters and 2..8 splits merge inside a thread block cluster instead
// (decode_cluster_merge.cuh; the same bits): the Hopper path, unless DSINFER_CUDA_DECODE_CLUSTER=0.
// (The switch itself: decode_cluster_merge / decode_set_cluster_merge, attention_kernels.h.)
bool decode_cluster_merge_enabled();
// One CTA per (query, kv head x chunk of up to max_heads (1, 2, 4 or 8) of its q heads, split); split sp
// covers positions [sp * chunk, (sp + 1) * chunk). partials as in decode_attention_kernels.cu (splits > 1
// only); arrivals (splits > 1, or null): num_queries * Hkv * ceil(G / max_heads) <= num_queries * Hq zeros,
// the fused combine's counters. Fewer heads per CTA: more CTAs, each with less work after its wait.
// rope (or null): the fused rope + cache write of a pure decode step (DecodeRopeArgs; tokens must be null).
void launch_decode_warp(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                        const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                        int64_t splits, int64_t chunk, float* partials, int32_t* arrivals, int max_heads,
                        const DecodeRopeArgs* rope);

}  // namespace dsinfer::cuda::detail
