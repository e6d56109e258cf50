// The Hopper (sm_90a) variants of the grouped expert GEMMs (moe_wgmma_kernels.cu): the same operands, tiles
// and outputs as the mma.sync variants of moe_grouped_kernels.cu, on wgmma.mma_async with both operands read
// from 128-byte-swizzled shared memory through matrix descriptors. launch_moe_gate_up_grouped /
// launch_moe_down_grouped dispatch here for variants kMoeWgmmaFirstVariant.. on the Hopper path; on the
// Ampere path a wgmma variant runs its mma.sync twin (the same tile rows, so the permutation stays valid).
// CUDA-header free.
#pragma once
#include <cstdint>

#include "backend/cuda/moe_kernels.h"

namespace dsinfer::cuda {

// 5: 128 x 128 (2 consumer warpgroups), K steps of 64, 4 stages (129 KiB, 1 block per SM);
// 6: 128 x 256, 4 stages (193 KiB, 1 block per SM);
// 7: 64 x 128 (1 warpgroup), 4 stages (97 KiB, 2 blocks per SM; decode batches of 24-64 rows per expert);
// 8: 128 x 128, 3 stages (97 KiB, 2 blocks per SM).
inline constexpr int kMoeWgmmaFirstVariant = 5;
inline constexpr int kMoeWgmmaLastVariant = 8;

inline bool moe_wgmma_variant(int variant) {
  return variant >= kMoeWgmmaFirstVariant && variant <= kMoeWgmmaLastVariant;
}

// Rows per tile (the permutation's tile_rows) of a wgmma variant.
int moe_wgmma_tile_rows(int variant);
// The mma.sync variant (1..4) with the same tile rows, run on the Ampere path.
int moe_wgmma_ampere_twin(int variant);

// gate_up: out = act bf16 [pairs, N] = silu(a_r w1_e^T) * (a_r w2_e^T), a_r = a[slot_pair[r] / topk] of a
// bf16 [T, K]; else out = y f32 [pairs, N] = a_r w1_e^T for the permuted rows of a bf16 [pairs, K]. Operands
// checked by the caller (moe_grouped_supported); pairs > 0, N > 0. Hopper path only.
void launch_moe_grouped_wgmma(int variant, bool gate_up, const uint16_t* a, int topk, const int32_t* offsets,
                              const int32_t* tiles, const int32_t* slot_pair, StackedWeights w1,
                              StackedWeights w2, void* out, int64_t pairs, int64_t E, int64_t K, int64_t N,
                              float limit);

}  // namespace dsinfer::cuda
