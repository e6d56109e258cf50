// The split-K choice of the decode GEMV (gemv_kernels.cu): how many blocks share one row tile's K range.
// Pure host code (no CUDA headers), so that the model is unit-tested without a GPU
// (tests/unit/gemv_plan_test.cpp).
//
// Model (times in microseconds). A block streams rows_per_block weight rows over its K slice; per warp
// `stages - 1` pipeline stages are in flight, each taking about one DRAM latency, so a block alone needs
// (iterations / (stages - 1) + 1) latencies. Blocks are spread evenly over the SMs; the busiest SM holds
// ceil(blocks / sms) of them, blocks_per_sm at a time, and cannot stream faster than one SM can pull; and
// all weights cannot stream faster than the device's bandwidth. The launch takes the largest of the three
// bounds; a split adds a fix-up (the last block of a tile sums the partials from L2). Calibration: on the
// H200 the unsplit Llama-8B qkv (192 blocks, 60 SMs with two) and o (256 blocks, balanced) took about
// bytes / 4.29 TB/s + 5-6 us each, so the busiest SM's bytes are not what bounds them: one SM may pull
// well over its fair share, and the device bound keeps such launches unsplit. A split must win by kMinGain or
// the unsplit kernel stays, so the auto choice only moves away from the old kernel where the model predicts a
// clear gain (few tiles: too few blocks, long serial K loops, uneven blocks per SM).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/gemv_kernels.h"

namespace dsinfer::cuda {

constexpr int kGemvMaxKSplit = 16;  // the most blocks one row tile's K range is split over

// A launch as the split choice sees it (the kernel shape is already chosen).
struct GemvSplitInput {
  int64_t tiles = 0;           // blocks at split 1 (row tiles, all matrices of the launch)
  int64_t rows_per_block = 0;  // weight rows one block streams (SwiGLU: gate + up rows)
  int64_t K = 0;
  int64_t m_bucket = 1;  // next_pow2(M); unused: see choose_gemv_ksplit
  int warps = 8, unroll = 2, stages = 4;
  int sms = 132;          // multiprocessors
  int blocks_per_sm = 2;  // resident blocks of this kernel per SM (occupancy)
  int forced = 0;         // > 0: this split (DSINFER_GEMV_SPLITK), clamped to what K allows
};

// The K columns one warp iteration covers.
inline int64_t gemv_k_step(int warps, int unroll) {
  return static_cast<int64_t>(warps) * 32 * unroll;
}

// How a split count maps onto K: each of `splits` blocks covers `columns` (a multiple of the warp
// iteration step), the last one what is left. The split is clamped to [1, kGemvMaxKSplit] and to the
// iterations there are, then lowered to the fewest blocks with the same columns each, so no block is empty.
struct GemvSplitLayout {
  int splits = 1;
  int64_t columns = 0;
};
inline GemvSplitLayout gemv_split_layout(int64_t K, int warps, int unroll, int splits) {
  const int64_t step = gemv_k_step(warps, unroll);
  const int64_t iters = std::max<int64_t>(1, (K + step - 1) / step);
  const int64_t s = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kGemvMaxKSplit, iters));
  const int64_t per = (iters + s - 1) / s;  // iterations per block
  GemvSplitLayout out;
  out.splits = static_cast<int>((iters + per - 1) / per);
  out.columns = out.splits == 1 ? K : per * step;
  return out;
}

// Shared memory one block of an MMA GEMV shape takes: the weight pipeline (per warp `stages` stages of
// `unroll` 32-column chunks x `tiles` 16-row MMA tiles x rows g and g + 8 x 32 lanes x 16 bytes; SwiGLU:
// tiles = 2, gate and up) and the cross-warp reduction's static arrays (per warp tiles x 4 x 32 sums and 32
// sums of squares, fp32). A shape whose block needs more than the device's per-block limit cannot be launched
// there.
constexpr int64_t gemv_pipeline_smem(int warps, int tiles, int unroll, int stages) {
  return int64_t{warps} * stages * unroll * tiles * 2 * 32 * 16;
}
constexpr int64_t gemv_block_smem(int warps, int tiles, int unroll, int stages) {
  return gemv_pipeline_smem(warps, tiles, unroll, stages) + int64_t{warps} * (tiles * 4 * 32 + 32) * 4;
}

// The 16-row MMA tiles one block of shape c holds: SwiGLU 2 (gate + up), else c.tiles.
inline int gemv_mma_tiles(const GemvConfig& c, bool swiglu) {
  return swiglu ? 2 : c.tiles;
}

// The output rows of one row tile of shape c: SwiGLU 16 (its 16 gate and 16 up weight rows give 16
// outputs), else 16 per MMA tile.
inline int64_t gemv_tile_rows(const GemvConfig& c, bool swiglu) {
  return swiglu ? 16 : 16 * c.tiles;
}

// Whether shape c's block (SwiGLU: gate + up tiles) fits a device allowing smem_limit bytes per block.
inline bool gemv_shape_fits(const GemvConfig& c, bool swiglu, int64_t smem_limit) {
  return gemv_block_smem(c.warps, gemv_mma_tiles(c, swiglu), c.unroll, c.stages) <= smem_limit;
}

// The shape a launch runs on a device allowing smem_limit bytes per block: `preferred` when it fits, else the
// first that fits of `per_launch` (choose_shape's), the 8-warp 4-stage shape (69 KiB; SwiGLU: the 4-warp
// 3-stage one, 52.5 KiB) and the 4-warp 4-stage one-chunk shapes (34.5-37 KiB), keeping preferred.persist.
// On Hopper (227 KiB) every preferred shape fits; the 16-warp SwiGLU shape (210 KiB) does not on sm_80 (163
// KiB), nor the 96 KiB-pipeline 8-warp shapes on sm_86 / sm_89 (99 KiB). When nothing fits, the smallest is
// returned and its launch reports the shortfall.
inline GemvConfig fit_gemv_shape(const GemvConfig& preferred, const GemvConfig& per_launch, bool swiglu,
                                 int64_t smem_limit) {
  if (gemv_shape_fits(preferred, swiglu, smem_limit)) return preferred;
  const GemvConfig fallbacks[] = {
      per_launch,
      swiglu ? GemvConfig{2, 2, 3, 2, false, 4} : GemvConfig{1, 2, 4, 2, false, 8},
      swiglu ? GemvConfig{2, 1, 4, 2, false, 4} : GemvConfig{1, 2, 4, 2, false, 4},
  };
  GemvConfig out = fallbacks[2];
  for (const GemvConfig& c : fallbacks) {
    if (gemv_shape_fits(c, swiglu, smem_limit)) {
      out = c;
      break;
    }
  }
  out.persist = preferred.persist;
  out.ksplit = preferred.ksplit;
  return out;
}

// Model constants (H200-like: 4.29 TB/s over 132 SMs; an SM alone may pull 2x its fair share).
constexpr double kGemvLatencyUs = 1.0;          // one pipeline stage's DRAM round trip under load
constexpr double kGemvBytesPerUs = 4.29e6;      // the device's copy bandwidth
constexpr double kGemvBytesPerUsPerSm = 6.5e4;  // 2 x 4.29e6 B/us / 132
constexpr double kGemvFixupUs = 0.4;            // partials to L2, arrival atomic, last block's sums
constexpr double kGemvMinGain = 0.10;           // a split must be predicted 10% faster than no split

// Predicted microseconds of one launch at `splits` (after gemv_split_layout).
inline double gemv_split_cost_us(const GemvSplitInput& in, int splits) {
  const GemvSplitLayout l = gemv_split_layout(in.K, in.warps, in.unroll, splits);
  const int64_t step = gemv_k_step(in.warps, in.unroll);
  const int64_t iters = (l.columns + step - 1) / step;  // per warp, the longest block
  const int64_t blocks = in.tiles * l.splits;
  const int sms = std::max(1, in.sms), per_sm = std::max(1, in.blocks_per_sm);
  const int64_t busiest = (blocks + sms - 1) / sms;  // blocks on the busiest SM
  const int64_t waves = (busiest + per_sm - 1) / per_sm;
  const double in_flight = std::max(1, in.stages - 1);
  const double latency =
      static_cast<double>(waves) * (static_cast<double>(iters) / in_flight + 1.0) * kGemvLatencyUs;
  const double bytes = static_cast<double>(busiest) * static_cast<double>(in.rows_per_block) *
                       static_cast<double>(l.columns) * 2.0;
  const double sm_bound = bytes / kGemvBytesPerUsPerSm;
  const double device = static_cast<double>(in.tiles) * static_cast<double>(in.rows_per_block) *
                        static_cast<double>(in.K) * 2.0 / kGemvBytesPerUs;
  return std::max({latency, sm_bound, device}) + (l.splits > 1 ? kGemvFixupUs : 0.0);
}

// The split for a launch: `forced` when set, else the cheapest by the model, 1 unless a split wins by
// kMinGain (ties go to fewer splits). m_bucket is deliberately not used: at M <= 8 the MMA work and the
// weight bytes do not depend on M, and a choice that did would make a row's sums depend on how many rows
// share its batch (batch invariance), so the split depends only on the weights' shape and the device.
inline int choose_gemv_ksplit(const GemvSplitInput& in) {
  if (in.forced > 0) return gemv_split_layout(in.K, in.warps, in.unroll, in.forced).splits;
  if (in.tiles <= 0 || in.K <= 0) return 1;
  const double base = gemv_split_cost_us(in, 1);
  int best = 1;
  double best_cost = base * (1.0 - kGemvMinGain);
  for (int s = 2; s <= kGemvMaxKSplit; ++s) {
    const GemvSplitLayout l = gemv_split_layout(in.K, in.warps, in.unroll, s);
    if (l.splits != s) continue;  // clamped: the same as a smaller split
    const double c = gemv_split_cost_us(in, s);
    if (c < best_cost) {
      best = s;
      best_cost = c;
    }
  }
  return best;
}

// Persistent GEMV (GemvConfig::persist): a grid of min(tiles, sms * b) blocks walks the row tiles, block i
// taking tiles i, i + grid, ...; the busiest block has ceil(tiles / grid). Balance = tiles / (grid * that):
// 1 when every block has as many tiles.
inline int64_t gemv_persist_grid(int64_t tiles, int sms, int blocks_per_sm) {
  return std::max<int64_t>(1, std::min<int64_t>(tiles, static_cast<int64_t>(sms) * blocks_per_sm));
}
inline double gemv_persist_balance(int64_t tiles, int sms, int blocks_per_sm) {
  if (tiles <= 0) return 1.0;
  const int64_t grid = gemv_persist_grid(tiles, sms, blocks_per_sm);
  const int64_t most = (tiles + grid - 1) / grid;
  return static_cast<double>(tiles) / static_cast<double>(grid * most);
}

// Dynamic shared memory to add to a persistent GEMV block so that at most `cap` of its blocks are resident on
// an SM (GemvConfig::cap_per_sm: a launch that overlaps the end of the kernel before it cannot stack more of
// its blocks on the SMs that kernel left first). occupancy(pad): the kernel's resident blocks per SM with
// `pad` extra bytes (non-increasing in pad); max_pad: the most the device allows. Returns 0 when at most cap
// blocks fit unpadded; else the middle, in 1 KiB steps, of the pads at which exactly cap fit (away from both
// edges, so allocation rounding cannot tip it); -1 when no pad gives exactly cap.
template <typename Occupancy>
int64_t gemv_cap_padding(Occupancy occupancy, int cap, int64_t max_pad) {
  if (occupancy(0) <= cap) return 0;
  constexpr int64_t kStep = 1024;
  int64_t lo = -1, hi = -1;
  for (int64_t pad = kStep; pad <= max_pad; pad += kStep) {
    const int resident = occupancy(pad);
    if (resident < cap) break;
    if (resident == cap) {
      if (lo < 0) lo = pad;
      hi = pad;
    }
  }
  if (lo < 0) return -1;
  return (lo + hi) / 2 / kStep * kStep;
}

// An SM keeps the device's bandwidth share streaming with about this many weight bytes in flight (4.29 TB/s
// x ~2 us loaded latency / 132 SMs).
constexpr int64_t kGemvPersistInflightPerSm = 64 * 1024;

// Blocks per SM for a persistent launch (1..occupancy): the best balance among the counts whose blocks
// have kGemvPersistInflightPerSm bytes in flight on an SM together (block_inflight each; the occupancy when
// none has), ties to more blocks (a shorter serial tile walk per block).
inline int choose_gemv_persist_blocks(int64_t tiles, int sms, int occupancy, int64_t block_inflight) {
  occupancy = std::max(1, occupancy);
  int best = occupancy;
  double best_balance = -1.0;
  for (int b = 1; b <= occupancy; ++b) {
    if (static_cast<int64_t>(b) * block_inflight < kGemvPersistInflightPerSm && b < occupancy) continue;
    const double balance = gemv_persist_balance(tiles, sms, b);
    if (balance >= best_balance) {
      best = b;
      best_balance = balance;
    }
  }
  return best;
}

// Whether a persistent launch of `tiles` row tiles runs one block per SM, padded so that no SM takes two
// (GemvConfig::cap_per_sm at 1; DSINFER_GEMV_SPREAD): when its kernel could put more than one block on an SM
// and it has at most `spread` tiles per SM (0: never). The block scheduler does not spread a launch planned
// at two blocks an SM; it stacks them on the SMs whose shared memory split fits them (docs/benchmarks.md,
// sixty-first session).
inline bool gemv_spread_one_per_sm(int64_t tiles, int sms, int occupancy, int spread) {
  return occupancy > 1 && spread > 0 && tiles > 0 && tiles <= static_cast<int64_t>(spread) * sms;
}

}  // namespace dsinfer::cuda
