// Launchers of the multi-head latent attention kernels (absorbed form) over the paged latent cache, on raw
// device pointers (CUDA-header free). Semantics of CpuBackend::attention_mla (cpu_attention.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsinfer::cuda {

// The paged BatchPlan arrays the MLA kernels read, all on the device.
struct MlaPlanView {
  const int32_t* positions = nullptr;           // [T] position of each token in its sequence
  const int32_t* token_seq = nullptr;           // [T] sequence of each token
  const int32_t* block_table = nullptr;         // block ids of every sequence, concatenated
  const int32_t* block_table_indptr = nullptr;  // [S + 1] offsets into block_table
  const int32_t* cu_seqlens = nullptr;          // [S + 1] (the multi-query kernel: where a sequence ends)
  // Optional row list of a split-kernel launch over part of a step: launch token i is query token rows[i]
  // (its q, out row, position and sequence); partial states and arrival counters follow i. Null: i itself.
  const int32_t* rows = nullptr;
  // The multi-query kernel's blocks: block i takes tokens [blocks[i], blocks[i] + kMlaPrefillTokens) of one
  // sequence, cut at the sequence's end (never two sequences).
  const int32_t* blocks = nullptr;
  int64_t block_size = 0;
  // Rows (slots) of the cache storage: the TMA design's tensor map (mla_wgmma_tma_kernels.cu); 0 (unknown)
  // keeps launches on the other designs.
  int64_t cache_rows = 0;
  // Sparse MLA (DeepSeek-V3.2, attention_mla_sparse; the CUDA-core kernel and the first tensor-core design,
  // mla_tc_kernel, whatever design the split names): token t attends to the
  // cache positions selected[t * selected_k + i], i < selected_k, instead of [0, positions[t]]; entries
  // below 0 or at or past their sequence's context_lens are skipped. Null: dense.
  const int32_t* selected = nullptr;      // [T, selected_k]
  const int32_t* context_lens = nullptr;  // [S] (sparse only)
  int64_t selected_k = 0;
  // Every query token is its sequence's only one in the step and the plan was uploaded before the step's
  // first kernel (never a lone op call): the plan and the cache rows before each token's own position
  // (written by earlier steps) may be read before the wait for the kernels before. The wgmma + TMA design
  // then requests its first two tiles there (mla_early_tiles); the others ignore it.
  bool early_rows = false;
};

// How one attention_mla launch is split: `splits` chunks of `chunk` cache positions per query token (a
// partial softmax state per chunk; when splits > 1 the last split block of a (token, head group) to finish
// merges them, or a second kernel does: see launch_attention_mla).
struct MlaSplit {
  int splits = 1;
  int64_t chunk = 0;
  bool tensor_cores = false;  // run the tensor-core kernel (chunk a multiple of its tile)
  int tile_rows = 64;         // tensor cores: the instance (64: one block per SM; 32: two)
  bool bf16_qp = false;       // tensor cores: Q and P rounded to bf16 (else bf16 hi + lo parts)
  // Tensor cores: 0 runs mla_tc_kernel (the instance of tile_rows); 1 or 2 the second design
  // (mla_tc_v2_kernels.cu, Hopper, tile_rows 32) with that many resident blocks per SM.
  int v2_blocks = 0;
  // Tensor cores: run the third design (mla_wgmma_tma_kernels.cu, Hopper, tile_rows 64, one block per SM).
  bool wgmma = false;
};

// A split for T query tokens whose longest context is max_ctx, H heads of latent width R. CUDA cores: enough
// blocks to fill the GPU, chunks of at least 64 positions. Tensor cores: for each instance (64-row tiles, one
// resident block per SM; 32-row tiles, two) the split count that minimises waves x tiles per block plus the
// combine pass, chunks of whole tiles; the 32-row instance when its plan has more blocks than the GPU has
// SMs (so that two blocks share an SM) and at least 8 tiles per block, else the 64-row one. Depends only on
// (next_pow2(T), H, R, max_ctx, tensor_cores, mla_tile_rows()), so a CUDA graph serves its whole bucket.
MlaSplit mla_choose_split(int64_t T, int64_t H, int64_t R, int64_t max_ctx, bool tensor_cores);

// The tensor-core instance forced by DSINFER_MLA_TILE_ROWS (read once): 64 or 32, 0 (unset, default): chosen
// per launch by mla_choose_split.
int mla_tile_rows();
// Tests and benchmarks only (between steps, never while CUDA graphs of the model are captured).
void mla_set_tile_rows(int tile_rows);

// The tensor-core kernels' query and probability precision, DSINFER_MLA_QP (read once): "split" (default:
// each fp32 value as bf16 hi + lo parts, two MMAs per product, so only the cache's rounding remains) or
// "bf16" (one bf16 value, one MMA: half the tensor-core work, FlashMLA's precision).
bool mla_bf16_qp();
// Tests and benchmarks only (between steps, never while CUDA graphs of the model are captured).
void mla_set_bf16_qp(bool bf16);

// The tensor-core kernel design, DSINFER_MLA_KERNEL (read once): unset (-1, default) the first design
// (mla_tc_kernel) except where mla_choose_split picks the 32-row two-blocks-per-SM plan unforced, which the
// second design's two-block instance runs on Hopper; "v1" (0) the first design only; "v2" (1) the second
// design with one block per SM and five stages for every launch; "v2x2" (2) its two-block instance for every
// launch; "wg" (3) the third design (warpgroup MMAs, 64-row tiles, one block per SM) for every launch. Where
// the second or third design cannot run (not Hopper) mla_choose_split keeps the first.
int mla_kernel_v2();
// Tests and benchmarks only (between steps, never while CUDA graphs of the model are captured).
void mla_set_kernel_v2(int v2_blocks);

// Floats of the workspace a split launch needs (0 when splits == 1).
size_t mla_workspace_floats(int64_t T, int64_t H, int64_t R, const MlaSplit& split);

// Most splits whose states the MLA kernels merge themselves (the last split block to arrive, counted in
// decode_arrivals): above, a separate combine kernel (the same merge, the same bits).
// DSINFER_MLA_FUSED_SPLITS (read once; 0 turns the fused merge off) overrides the default of 0 (off: measured
// slower than the combine kernel on V2-Lite decode).
int mla_fused_merge_max_splits();
// Tests and benchmarks only (between steps, never while CUDA graphs of the model are captured).
void mla_set_fused_merge_max_splits(int max_splits);

// Floats of the tensor-core kernel's shared memory its fused merge may use (weights [16, splits] + [16]):
// the partial-score buffer of its smaller (32-row) instance, [8 warps][16 heads][32 + 8].
inline constexpr int64_t kTcMergeFloats = 8 * 16 * 40;

// W_UV to apply inside a split launch's merge (launch_attention_mla): y [T, H, V] = w [H, V, R] (bf16) x the
// merged latent of each (token, head).
struct MlaUv {
  const uint16_t* w = nullptr;  // [H, V, R] bf16, 16-byte aligned
  float* y = nullptr;           // [T, H, V]
  int64_t V = 0;
};

// out [T, H, R] = softmax((q_lat . latent + q_pe . rope_key) * scale) latent over cache positions
// [0, positions[t]] of token t's sequence. q_lat [T, H, R], q_pe [T, H, P] float32; cache rows of
// `width` = R + P values, float32 or (cache_bf16) bf16 bits. Every head group of a token reads each cached
// row once. `workspace` holds mla_workspace_floats floats. With `uv` (not null), no row list, several splits
// that the separate combine kernel would merge (not the fused last-block merge), mla_uv_fused() and a shape
// mla_merge_uv_supported takes, the merge + W_UV kernel replaces the combine kernel: uv->y is written, `out`
// is not, and it returns true; otherwise it returns false and `out` holds the latent (uv->y untouched). The
// choice depends only on (next_pow2(T), H, R, V, the split, w's alignment), so eager and replayed steps
// choose alike.
bool launch_attention_mla(const float* q_lat, const float* q_pe, const void* cache, bool cache_bf16,
                          int64_t width, const MlaPlanView& plan, float* out, float* workspace, int64_t T,
                          int64_t H, int64_t R, int64_t P, float scale, const MlaSplit& split,
                          const MlaUv* uv = nullptr);

// DSINFER_MLA_UV_FUSED (read once; "1" default, "0" off): the merge + W_UV kernel at decode sizes.
bool mla_uv_fused();
// Tests and benchmarks only (between steps, never while CUDA graphs of the model are captured).
void mla_set_uv_fused(bool on);

// The merge + W_UV kernel (mla_uv_kernels.cu): y [T, H, V] = w_uv[h] (merge of the split states of (t, h)),
// the combine kernel's merge and head_matmul's decode GEMV sums (the composition's bits). Takes next_pow2(T)
// <= 8, splits >= 2, R % 8 == 0, w_uv 16-byte aligned, next_pow2(T) (R + splits + 1) floats within 48 KiB.
bool mla_merge_uv_supported(int64_t T, int64_t H, int64_t R, int64_t V, int splits, uintptr_t w);
void launch_mla_merge_uv(const float* ws_acc, const float* ws_ml, const uint16_t* w_uv, float* y, int64_t T,
                         int64_t H, int64_t R, int64_t V, int splits);

// The tensor-core kernel (mla_tc_kernels.cu), which launch_attention_mla runs when split.tensor_cores: a bf16
// cache of the DeepSeek-V2/V3 shape (R = 512, P = 64), cache and queries at 16-byte aligned addresses, and a
// GPU with the shared memory it needs (Hopper; not an A100). It writes `out` directly when split.splits == 1,
// else the partial states ws_acc [T, splits, H, R] and ws_ml [T, splits, H, 2], which the last split block of
// each (token, group of 16 heads) merges into `out` when `arrivals` ([T, groups] zeroed counters, left
// zeroed) is given.
bool mla_tc_supported(int64_t R, int64_t P, bool cache_bf16, uintptr_t cache, uintptr_t q_lat,
                      uintptr_t q_pe);
void launch_attention_mla_tc(const float* q_lat, const float* q_pe, const uint16_t* cache,
                             const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml, int* arrivals,
                             int64_t T, int64_t H, float scale, const MlaSplit& split);

// The second tensor-core design (mla_tc_v2_kernels.cu): the same cache shape, alignment, outputs and fused
// merge as launch_attention_mla_tc, 32-row tiles by bulk copies (split.v2_blocks 1: five stages, one block
// per SM; 2: two stages, two blocks per SM). Needs the Hopper path (sm_90a: cp.async.bulk, mbarriers).
bool mla_tc_v2_supported();
// The third tensor-core design (mla_wgmma_tma_kernels.cu: warpgroup MMAs, TMA tiles, a producer warp): the
// same cache shape, alignment, outputs and fused merge as launch_attention_mla_tc; 64-row tiles, one block
// per SM (split.wgmma, tile_rows 64). Needs the Hopper path (sm_90a: wgmma). launch_attention_mla runs it
// when mla_wgmma_tma_usable, else the first design's 64-row instance over the same split.
bool mla_wgmma_supported();
// Whether decode-only steps set MlaPlanView::early_rows (DSINFER_MLA_EARLY_TILES, default 1; 0 keeps every
// tile request after the wait; measured on H100s, V2-Lite batch 1: -7.9, -13.9 and -14.4 us a token in three
// runs, docs/benchmarks.md). The setter is for tests and benchmarks, between steps, outside captures.
bool mla_early_tiles();
void mla_set_early_tiles(bool on);
// Whether the TMA design takes launches over this plan and cache: block size a multiple of 8 that divides 64
// or is a multiple of it, plan.cache_rows known (< 2^31), a 16-byte aligned cache, the Hopper path and the
// driver's tensor-map encoder.
bool mla_wgmma_tma_usable(const MlaPlanView& plan, uintptr_t cache);
void launch_attention_mla_wgmma_tma(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                    const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml,
                                    int* arrivals, int64_t T, int64_t H, float scale, const MlaSplit& split);
void launch_attention_mla_tc_v2(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml,
                                int* arrivals, int64_t T, int64_t H, float scale, const MlaSplit& split);

// The multi-query kernel (mla_prefill_kernels.cu) for sequences with many query tokens (prefill, chunked
// context): one block per (multi-query block of plan.blocks, group of 16 heads) reads each cached row its
// last token sees once for its up to kMlaPrefillTokens tokens, all of one sequence. Same cache shape and
// alignment as the tensor-core kernel (mla_tc_supported); queries and probabilities in bf16 (one part), so
// results are within bf16 rounding of the reference rather than at the decode kernels' ~1e-6. Writes the
// blocks' rows of `out` directly (no splits, no workspace); other rows are left alone.
inline constexpr int kMlaPrefillTokens = 4;
bool mla_prefill_supported();
void launch_attention_mla_prefill(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                  const MlaPlanView& plan, float* out, int64_t num_blocks, int64_t H,
                                  float scale);

// The split of a step by sequence (host side, built when the step plan is packed): sequences with at least
// min_query query tokens go to the multi-query kernel in blocks of kMlaPrefillTokens consecutive tokens
// (longest context first, so that the long blocks do not make the launch's tail), every other token to the
// split decode kernel through a row list. Empty `blocks` (no such sequence, e.g. every decode-only step):
// nothing to split, and the step runs as before.
struct MlaStepSplit {
  std::vector<int32_t> rows;    // tokens for the split decode kernel, in token order
  std::vector<int32_t> blocks;  // first token of each multi-query block
};
MlaStepSplit mla_split_step(const std::vector<int32_t>& cu_seqlens, const std::vector<int32_t>& positions,
                            int32_t min_query);

// Whether a step whose split has `num_blocks` multi-query blocks runs them on the multi-query kernel:
// num_blocks x head groups must reach mla_prefill_min_blocks() (fewer leave SMs idle behind a few long
// blocks; the split decode kernel then takes the whole step, as it always does for decode-only steps).
bool mla_prefill_chosen(int64_t num_blocks, int64_t H);
// DSINFER_MLA_PREFILL_MIN_QUERY (read once; default 64): the fewest query tokens of a sequence for the
// multi-query kernel. 1 sends every token there (each decode token its own block).
int mla_prefill_min_query();
// DSINFER_MLA_PREFILL_MIN_BLOCKS (read once; default 264, two waves of H200 SMs; a huge value turns the
// kernel off, 0 runs it whenever a sequence qualifies).
int mla_prefill_min_blocks();
// Tests and benchmarks only (between steps).
void mla_set_prefill_min_query(int min_query);
void mla_set_prefill_min_blocks(int min_blocks);

}  // namespace dsinfer::cuda
