// Launchers of the DeepSeekMoE kernels on raw device pointers (CUDA-header free): routing, the permutation
// of (token, slot) pairs by expert computed on the device (no host sync, so decode stays capturable), the
// grouped expert GEMMs and the weighted un-permute. Semantics of CpuBackend::moe_route (cpu_moe_route.cpp)
// and CpuBackend::moe_experts (cpu_mlp.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

enum class MoeScoring { kSoftmax, kSigmoid, kSqrtSoftplus };
enum class MoeTopk { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct MoeRouteParams {
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopk method = MoeTopk::kGreedy;
  int top_k = 1;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

// Largest expert count launch_moe_route takes.
inline constexpr int64_t kMaxRoutedExperts = 1024;

// ids [T, k] I32 and weights [T, k] F32 for x [T, H] f32, router [E, H] bf16, bias [E] f32 or null;
// logits [T, E] f32 is scratch. Ties go to the lower expert (and group) index, in the reference's order.
void launch_moe_route(const float* x, const uint16_t* router, const float* bias, float* logits, int32_t* ids,
                      float* weights, int64_t T, int64_t H, int64_t E, const MoeRouteParams& p);

// The decode routing of one MoE layer in a single launch (moe_norm_route_kernels.cu), for 1 to
// kMoeNormRouteMaxTokens tokens: x [T, H] = rms_norm(h [T, H], norm [H] bf16, eps) with launch_rms_norm's
// bits; ids / weights [T, k] for that x with launch_moe_route's bits (logits [T, E] f32 scratch); and with
// tile_rows > 0 the permutation of launch_moe_permute for those ids and that tile size (offsets, tiles
// [E + 1]; slot_pair, pair_slot [T * k]; the pairs of an expert in pair order). arrivals: one int32 counter,
// zero before and after the launch (decode_arrivals). moe_norm_route_supported: whether the kernel takes the
// shape (H a multiple of 8 and at most 8192; 16-byte aligned h, norm, router and x; the last block's
// selection scratch for T tokens in 47 KiB).
inline constexpr int64_t kMoeNormRouteMaxTokens = 8;
// The backend takes the fused launch while next_pow2(T) x experts stays within this (V3's 256 experts: up
// to 8 tokens). Every block normalises every token itself, so the redundant reads of h grow with T x blocks;
// the first fused kernel (one warp per token selecting) lost to the separate kernels at V3 T 8 (88 vs 69 us,
// DISABLED_BenchNormMoeRoute, H200 2026-12-01) and was limited to 1024; the current one selects with the
// whole block and measured faster there too (V3 T 8: 42 vs 68 us, same benchmark in a graph).
inline constexpr int64_t kMoeNormRouteMaxTokenExperts = 2048;
struct MoeNormRouteArgs {
  const float* h = nullptr;
  const uint16_t* norm = nullptr;
  float eps = 0.0f;
  const uint16_t* router = nullptr;
  const float* bias = nullptr;
  float* x = nullptr;
  float* logits = nullptr;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  int tile_rows = 0;
  int32_t* offsets = nullptr;
  int32_t* tiles = nullptr;
  int32_t* slot_pair = nullptr;
  int32_t* pair_slot = nullptr;
  int32_t* arrivals = nullptr;
  int T = 0, H = 0, E = 0;
  // The launch as one thread block cluster (Hopper; moe_norm_route_cluster_supported): every CTA sends its
  // logits into the first CTA's shared memory (st.async on its mbarrier) and the first CTA selects; no
  // arrival counter, no logits scratch (arrivals and logits may be null). The same bits.
  bool cluster = false;
};
bool moe_norm_route_supported(const MoeNormRouteArgs& a, const MoeRouteParams& p);
// Whether the cluster form takes the shape: the Hopper path, moe_norm_route_supported, and the router's E
// rows spread over at most kMoeRouteClusterCtas CTAs within the chunks a thread preloads and 47 KiB of
// shared memory (DeepSeek-V2-Lite: 64 experts x hidden 2048, 8 CTAs of 8 experts; not V2's or V3's
// routers).
inline constexpr int kMoeRouteClusterCtas = 8;  // the portable cluster size
bool moe_norm_route_cluster_supported(const MoeNormRouteArgs& a, const MoeRouteParams& p);
void launch_moe_norm_route(const MoeNormRouteArgs& a, const MoeRouteParams& p);

// Rows of one expert handled per tile by the tensor-core kernels (many rows per expert); the CUDA-core
// kernels (few rows, weight streaming) take 1, 2, 4 or 8 (moe_rows_per_tile: the average rows of an
// active expert rounded up, at most 8).
inline constexpr int kMoeMmaTileRows = 64;
int moe_rows_per_tile(int64_t pairs, int64_t E);

// Orders the T*k (token, slot) pairs of `ids` [T, k] by expert (within an expert in no fixed order):
// offsets [E + 1] (rows of each expert), tiles [E + 1] (prefix sums of ceil(rows / tile_rows)),
// slot_pair [pairs] (the pair at each permuted row), pair_slot [pairs] (the row of each pair, -1 for ids
// outside [0, E)). One block; no host sync.
void launch_moe_permute(const int32_t* ids, int64_t pairs, int64_t E, int tile_rows, int32_t* offsets,
                        int32_t* tiles, int32_t* slot_pair, int32_t* pair_slot);

// Expert weights stacked with a fixed stride between experts (elements): expert e's [N, K] matrix starts at
// base + e * stride.
struct StackedWeights {
  const uint16_t* base = nullptr;
  int64_t stride = 0;
};

// act [pairs, I] (permuted rows) = silu(x_r gate_e^T) * (x_r up_e^T) with x_r = x[slot_pair[r] / k] for
// x [T, H]; limit > 0 clamps gate above and up on both sides first (swiglu_limit).
void launch_moe_gate_up(int tile_rows, const float* x, int64_t k, const int32_t* offsets,
                        const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                        StackedWeights up, float* act, int64_t pairs, int64_t E, int64_t H, int64_t I,
                        float limit);

// y [pairs, H] = act_r down_e^T for the permuted rows of act [pairs, I].
void launch_moe_down(int tile_rows, const float* act, const int32_t* offsets, const int32_t* tiles,
                     StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I);

// The same two GEMMs on tensor cores (tiles of kMoeMmaTileRows rows: permute with that tile size); split:
// activations as bf16 hi + lo (two MMAs, ~16 bits kept) instead of rounded to bf16.
// moe_mma_supported: whether the kernels take inner dimension K, activations at address a and weights w
// at stride `stride` (K a multiple of 32, 16-byte aligned operands).
bool moe_mma_supported(int64_t K, uintptr_t a, const uint16_t* w, int64_t stride);
void launch_moe_gate_up_mma(bool split, const float* x, int64_t k, const int32_t* offsets,
                            const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                            StackedWeights up, float* act, int64_t pairs, int64_t E, int64_t H, int64_t I,
                            float limit);
void launch_moe_down_mma(bool split, const float* act, const int32_t* offsets, const int32_t* tiles,
                         StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I);

// The same two GEMMs streaming the weights at decode batch sizes (moe_stream_kernels.cu): tiles of
// tile_rows = moe_stream_tile_rows(average rows per expert) rows (8, 16, 32 or 64: the average plus its
// square root rounded up; 0 above kMoeStreamMaxRows: use the kernels above), each expert tile's weights read
// once, activations split into bf16 hi + lo (~16 bits). moe_stream_supported: whether they take inner
// dimension K, activations at address a and weights w at stride `stride` (K a multiple of 8, 16-byte aligned
// operands).
//
// Shared experts may ride along in the same launches (MoeSharedUnits: a DeepSeekMoE block's shared MLP as
// `units` experts of the routed intermediate size that every token visits): unit u's matrices are [N, K]
// at base + u * stride with rows `ld` elements apart (gate/up: rows [uI, (u + 1)I) of the shared gate and
// up weights, ld = H; down: columns [uI, (u + 1)I) of the shared down weight, ld = units * I). Their rows
// follow the routed ones in act and y: unit u, token t at row pairs + u * tokens + t (gate/up reads x row
// t); the blocks of the shared tiles (ceil(tokens / tile_rows) per unit) come first in the grid.
// moe_stream_shared_supported: whether the kernels take such units.
inline constexpr int64_t kMoeStreamMaxRows = 64;
int moe_stream_tile_rows(int64_t rows_per_expert);
bool moe_stream_supported(int64_t K, uintptr_t a, const uint16_t* w, int64_t stride);
struct MoeSharedUnits {
  StackedWeights w1;  // gate/up: the gate rows; down: the down columns
  StackedWeights w2;  // gate/up: the up rows
  int64_t ld = 0;     // elements between a unit's weight rows
  int64_t units = 0;  // 0: no shared units
  int64_t tokens = 0;
};
bool moe_stream_shared_supported(int64_t K, const MoeSharedUnits& s);
void launch_moe_gate_up_stream(int tile_rows, const float* x, int64_t k, const int32_t* offsets,
                               const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                               StackedWeights up, float* act, int64_t pairs, int64_t E, int64_t H, int64_t I,
                               float limit, const MoeSharedUnits& shared = {});
void launch_moe_down_stream(int tile_rows, const float* act, const int32_t* offsets, const int32_t* tiles,
                            StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I,
                            const MoeSharedUnits& shared = {});

// The grouped GEMMs for many rows per expert (moe_grouped_kernels.cu; from moe_grouped_min_rows): both
// operands bf16 (x rounded to bf16 once by launch_moe_x_bf16, the SiLU-mul output act kept as bf16 [pairs,
// I]), block tiles of BM permuted rows x BN columns (permute with tile_rows = moe_grouped_tile_rows(variant))
// on mma.sync through a cp.async pipeline. Variants (1-based, kMoeGroupedVariants): 1: 128 x 128, K steps of
// 32, 4 stages; 2: 128 x 128, K steps of 64, 3 stages; 3: 64 x 128, K steps of 64, 4 stages; 4: 128 x 256, K
// steps of 32, 4 stages (one block per SM); 5..8: the Hopper wgmma kernels (moe_wgmma.h; on the Ampere path
// their mma.sync twin of the same tile rows). moe_grouped_variant_for picks one from the (bucketed) average
// rows per expert (the wgmma ones on the Hopper path unless DSINFER_CUDA_MOE_WGMMA=0).
// moe_grouped_supported: whether the kernels take inner dimension K, activations at address a and weights w
// at stride `stride` (K a multiple of 8, 16-byte aligned operands; any N, rows and expert counts).
inline constexpr int kMoeGroupedVariants = 8;
int moe_grouped_variant_for(int64_t rows_per_expert);
int moe_grouped_tile_rows(int variant);
bool moe_grouped_supported(int64_t K, uintptr_t a, const uint16_t* w, int64_t stride);
// out [n] bf16 = x [n] f32 rounded to nearest (n a multiple of 8, both 16-byte aligned).
void launch_moe_x_bf16(const float* x, uint16_t* out, int64_t n);
// act [pairs, I] bf16 = silu(x_r gate_e^T) * (x_r up_e^T) with x_r = xb[slot_pair[r] / k] for xb [T, H] bf16.
void launch_moe_gate_up_grouped(int variant, const uint16_t* xb, int64_t k, const int32_t* offsets,
                                const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                                StackedWeights up, uint16_t* act, int64_t pairs, int64_t E, int64_t H,
                                int64_t I, float limit);
// y [pairs, H] f32 = act_r down_e^T for the permuted rows of act [pairs, I] bf16.
void launch_moe_down_grouped(int variant, const uint16_t* act, const int32_t* offsets, const int32_t* tiles,
                             StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I);

// out [T, H] = sum_j weights[t, j] * y[pair_slot[t * k + j]] (in slot order j); accumulate: out += that sum
// (added once, after the sum). shared_units > 0: the shared experts' rows shared_y [shared_units, T, H]
// (unit u, token t at (u * T + t) * H) are added to out first, in unit order, then the routed sum:
// out = (out + shared_0 + shared_1 ...) + routed.
void launch_moe_combine(const float* y, const int32_t* pair_slot, const float* weights, float* out, int64_t T,
                        int64_t k, int64_t H, bool accumulate = false, const float* shared_y = nullptr,
                        int64_t shared_units = 0);

}  // namespace dsinfer::cuda
