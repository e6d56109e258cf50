// Absorbed-form MLA over the paged latent cache. One block per (query token, split of its context, group of
// up to 16 heads): the block stages 16 cached rows [latent | rope key] at a time in shared memory, so every
// head of the group reads each cached byte once, scores them against the group's queries, and keeps an
// online softmax and the weighted latent sum [heads, R] in registers. With several splits each block
// writes its partial state (max, sum, latent sum) and the last block of its (token, head group) to arrive
// merges them (mla_merge.cuh; arrival counters from decode_arrivals), or, where no counters are available
// (a capture that would need a larger counter buffer) or the splits are many, a second kernel with the same
// merge.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 16;    // cache positions per shared-memory tile
constexpr int kMaxAcc = 32;  // latent outputs each thread accumulates
constexpr int kMaxGroupHeads = 16;
constexpr int64_t kMinChunk = 64;       // fewest positions a split handles
constexpr int64_t kTargetBlocks = 528;  // 4 per SM of an H100 / H200
// Tensor-core kernel (mla_tc_kernels.cu): blocks of 16 heads; tiles of 64 rows with one block resident per
// SM, or of 32 rows with two.
constexpr int64_t kTcHeads = 16, kTcSMs = 132;  // 132 SMs: H100 SXM / H200
// Most splits the last-arriving block merges itself (it reads splits x 32 KiB for 16 heads of R 512 alone,
// so many splits are merged faster by the separate combine kernel's T x H blocks). Off by default: on the
// H200 (2026-12-01) V2-Lite decode at batch 1 took 3.54 ms/token with the fused merge (4 splits) and 3.41 ms
// with the combine kernel.
constexpr int kDefaultFusedMergeSplits = 0;

__device__ __forceinline__ float load_elem(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_elem(const uint16_t* p) {
  return __uint_as_float(static_cast<uint32_t>(*p) << 16);
}

__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 load4(const uint16_t* p) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                     __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
}

struct MlaParams {
  const float* q_lat;  // [T, H, R]
  const float* q_pe;   // [T, H, P]
  int64_t width;
  MlaPlanView plan;
  float* out;     // [T, H, R]
  float* ws_acc;  // [T, splits, H, R]
  float* ws_ml;   // [T, splits, H, 2]
  int H, R, P, D, HG;
  float scale;
  int splits;
  int64_t chunk;
  bool vec4;      // R and P multiples of 4: vector loads
  int* arrivals;  // [T, groups] zeroed arrival counters (fused merge), or null (separate combine kernel)
};

int heads_per_group(int64_t H, int64_t R) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({H, kMaxGroupHeads, kThreads * kMaxAcc / R})));
}

size_t smem_bytes(int HG, int D) {
  const int ld = D + 1;
  return static_cast<size_t>(2 * kTile + HG * ld + kTile * ld + HG * kTile + 3 * HG) * sizeof(float);
}

// kSparse: the positions are token t's list plan.selected (attention_mla_sparse), skipped entries masked
// (a tile with none left is skipped whole; a head that saw no position writes zeros); the dense kernel's
// arithmetic is unchanged.
template <typename Elem, bool kSparse>
__global__ void __launch_bounds__(kThreads) mla_kernel(MlaParams p, const Elem* cache) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float smem[];
  const int D = p.D, ld = D + 1, HG = p.HG;
  int64_t* slot_s = reinterpret_cast<int64_t*>(smem);  // [kTile] cache slots of the tile's rows
  float* q_s = smem + 2 * kTile;                       // [HG][ld] queries [latent | rope] of the group
  float* k_s = q_s + HG * ld;                          // [kTile][ld] cached rows
  float* p_s = k_s + kTile * ld;                       // [HG][kTile] scores, then probabilities
  float* m_s = p_s + HG * kTile;                       // [HG] running max
  float* l_s = m_s + HG;                               // [HG] running sum
  float* c_s = l_s + HG;                               // [HG] this tile's rescale factor
  const int64_t t = blockIdx.x;
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * HG;
  const int hg = min(HG, p.H - h0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t n = kSparse ? p.plan.selected_k : static_cast<int64_t>(p.plan.positions[t]) + 1;
  const int64_t begin = split * p.chunk;
  const int64_t end = min(n, begin + p.chunk);
  const int32_t* blocks = p.plan.block_table + p.plan.block_table_indptr[p.plan.token_seq[t]];
  const int64_t bs = p.plan.block_size;
  const int64_t ctx = kSparse ? p.plan.context_lens[p.plan.token_seq[t]] : 0;  // sparse: cached positions

  if (p.vec4) {  // 4 values per load, several loads in flight
    const int D4 = D / 4;
#pragma unroll 4
    for (int i = tid; i < hg * D4; i += kThreads) {
      const int h = i / D4, d = (i % D4) * 4;
      const int64_t row = t * p.H + h0 + h;
      const float4 v = *reinterpret_cast<const float4*>(d < p.R ? p.q_lat + row * p.R + d
                                                                : p.q_pe + row * p.P + (d - p.R));
      float* q = q_s + h * ld + d;
      q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
    }
  } else {
    for (int i = tid; i < hg * D; i += kThreads) {
      const int h = i / D, d = i % D;
      const int64_t row = t * p.H + h0 + h;
      q_s[h * ld + d] = d < p.R ? p.q_lat[row * p.R + d] : p.q_pe[row * p.P + (d - p.R)];
    }
  }
  for (int h = tid; h < hg; h += kThreads) {
    m_s[h] = -INFINITY;
    l_s[h] = 0.0f;
  }
  const int outs = hg * p.R;
  float acc[kMaxAcc];
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) acc[i] = 0.0f;
  __syncthreads();

  for (int64_t j0 = begin; j0 < end; j0 += kTile) {
    const int nt = static_cast<int>(min(static_cast<int64_t>(kTile), end - j0));
    if constexpr (kSparse) {
      // -1: a skipped entry (its row reads as zeros and scores -inf).
      bool any = false;
      if (tid < nt) {
        const int64_t pos = p.plan.selected[t * p.plan.selected_k + j0 + tid];
        any = pos >= 0 && pos < ctx;
        slot_s[tid] = any ? static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs : -1;
      }
      if (!__syncthreads_or(any)) continue;  // nothing selected in this tile (uniform across the block)
      for (int i = tid; i < nt * D; i += kThreads) {
        const int j = i / D, d = i % D;
        k_s[j * ld + d] = slot_s[j] < 0 ? 0.0f : load_elem(cache + slot_s[j] * p.width + d);
      }
    } else if (tid < nt) {
      const int64_t pos = j0 + tid;
      slot_s[tid] = static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs;
    }
    __syncthreads();
    if (kSparse) {
      // rows staged above
    } else if (p.vec4) {
      const int D4 = D / 4;
#pragma unroll 4
      for (int i = tid; i < nt * D4; i += kThreads) {
        const int j = i / D4, d = (i % D4) * 4;
        const float4 v = load4(cache + slot_s[j] * p.width + d);
        float* k = k_s + j * ld + d;
        k[0] = v.x, k[1] = v.y, k[2] = v.z, k[3] = v.w;
      }
    } else {
      for (int i = tid; i < nt * D; i += kThreads) {
        const int j = i / D, d = i % D;
        k_s[j * ld + d] = load_elem(cache + slot_s[j] * p.width + d);
      }
    }
    __syncthreads();
    for (int i = tid; i < hg * kTile; i += kThreads) {
      const int h = i / kTile, j = i % kTile;
      float s = -INFINITY;
      if (j < nt && (!kSparse || slot_s[j] >= 0)) {
        const float* qv = q_s + h * ld;
        const float* kv = k_s + j * ld;
        float lat = 0.0f, rot = 0.0f;
        for (int d = 0; d < p.R; ++d) lat += qv[d] * kv[d];
        for (int d = p.R; d < D; ++d) rot += qv[d] * kv[d];
        s = (lat + rot) * p.scale;
      }
      p_s[h * kTile + j] = s;
    }
    __syncthreads();
    for (int h = warp; h < hg; h += kThreads / 32) {
      const float s = lane < kTile ? p_s[h * kTile + lane] : -INFINITY;
      float mx = s;
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, mx);  // dense: finite (the tile has at least one position)
      const float e = s == -INFINITY ? 0.0f : expf(s - m_new);
      float sum = e;
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane < kTile) p_s[h * kTile + lane] = e;
      if (lane == 0) {
        // 0 on the first tile; sparse: 1 while the head has seen no position (m still -inf)
        const float corr = kSparse && m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
        c_s[h] = corr;
        l_s[h] = l_s[h] * corr + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMaxAcc; ++i) {
      const int o = i * kThreads + tid;
      if (o < outs) {
        const int h = o / p.R, r = o % p.R;
        const float* ph = p_s + h * kTile;
        float a = acc[i] * c_s[h];
        for (int j = 0; j < nt; ++j) a += ph[j] * k_s[j * ld + r];
        acc[i] = a;
      }
    }
    __syncthreads();
  }

  if (p.splits == 1) {
#pragma unroll
    for (int i = 0; i < kMaxAcc; ++i) {
      const int o = i * kThreads + tid;
      if (o < outs) {
        const int h = o / p.R, r = o % p.R;
        p.out[((t * p.H) + h0 + h) * p.R + r] = kSparse && l_s[h] == 0.0f ? 0.0f : acc[i] / l_s[h];
      }
    }
    return;
  }
  const int64_t base = (t * p.splits + split) * p.H + h0;
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) {
    const int o = i * kThreads + tid;
    if (o < outs) {
      const int h = o / p.R, r = o % p.R;
      p.ws_acc[(base + h) * p.R + r] = acc[i];
    }
  }
  for (int h = tid; h < hg; h += kThreads) {
    p.ws_ml[(base + h) * 2] = m_s[h];
    p.ws_ml[(base + h) * 2 + 1] = l_s[h];
  }
  // Fused merge: the last split block of (t, head group) merges every split. The shared memory is free once
  // every thread has passed arrive's barrier (m_s, l_s were read above); w [hg, splits] + inv [hg] fit
  // (checked on the host).
  __shared__ int last_flag;
  if (p.arrivals && detail::mla_arrive_last(p.arrivals + t * gridDim.z + blockIdx.z, p.splits, &last_flag))
    detail::mla_merge(p.ws_acc, p.ws_ml, t, t, p.H, p.R, h0, hg, p.splits, p.out, smem, smem + hg * p.splits);
}

// out[t, h] = merge of the splits' states (detail::mla_merge: the fused merge's arithmetic, same bits);
// t = rows[launch token] over a row list.
__global__ void mla_combine_kernel(const float* ws_acc, const float* ws_ml, float* out, const int32_t* rows,
                                   int H, int R, int splits) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float weight[];  // [splits] weights, then [1] 1 / their sum
  const int64_t t = blockIdx.x, t_out = rows ? rows[t] : t;
  detail::mla_merge(ws_acc, ws_ml, t, t_out, H, R, static_cast<int>(blockIdx.y), 1, splits, out, weight,
                    weight + splits);
}

template <typename Elem, bool kSparse>
void launch_typed_as(const MlaParams& p, const Elem* cache, int64_t T, int groups) {
  const size_t smem = smem_bytes(p.HG, p.D);
  static size_t configured = 0;  // the largest dynamic shared memory size set so far
  if (smem > configured) {
    const cudaError_t err = cudaFuncSetAttribute(
        mla_kernel<Elem, kSparse>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess)
      fail("attention_mla: cannot use ", smem, " bytes of shared memory: ", cudaGetErrorString(err));
    configured = smem;
  }
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(p.splits), static_cast<unsigned>(groups));
  launch_pdl(mla_kernel<Elem, kSparse>, grid, kThreads, smem, p, cache);
  check_launch(kSparse ? "attention_mla_sparse" : "attention_mla");
}

template <typename Elem>
void launch_typed(const MlaParams& p, const Elem* cache, int64_t T, int groups) {
  if (p.plan.selected)
    launch_typed_as<Elem, true>(p, cache, T, groups);
  else
    launch_typed_as<Elem, false>(p, cache, T, groups);
}

}  // namespace

namespace {
int& fused_merge_max_splits() {
  static int max_splits = env_int("DSINFER_MLA_FUSED_SPLITS", kDefaultFusedMergeSplits);
  return max_splits;
}
}  // namespace

int mla_fused_merge_max_splits() {
  return fused_merge_max_splits();
}

void mla_set_fused_merge_max_splits(int max_splits) {
  fused_merge_max_splits() = std::max(0, max_splits);
}

namespace {

int& tile_rows_setting() {
  static int tile_rows =
      std::array<int, 3>{0, 64, 32}[env_choice("DSINFER_MLA_TILE_ROWS", {"64", "32"}, -1) + 1];
  return tile_rows;
}

bool& bf16_qp_setting() {
  static bool bf16 = env_choice("DSINFER_MLA_QP", {"split", "bf16"}, 0) == 1;
  return bf16;
}

// -1: automatic; 0: the first design only; 1, 2: the second design with that many blocks per SM; 3: the
// third (wgmma) design.
int& kernel_v2_setting() {
  static int v2 = env_choice("DSINFER_MLA_KERNEL", {"v1", "v2", "v2x2", "wg"}, -1);
  return v2;
}

// The tensor-core split of `blocks` (token, head group) blocks over contexts of max_ctx for the instance of
// `tile` rows with `slots` resident blocks on the GPU. Cost in tile times of one block: waves of resident
// blocks x (tiles per block + ~1 for the queries and the epilogue), plus for a split launch the combine (a
// launch, and the partial states written and read back: ~0.9 (64-row) tile of bytes per block, spread over
// the SMs).
MlaSplit tc_split(int64_t blocks, int64_t max_ctx, int64_t tile, int64_t slots) {
  const int64_t tiles = (max_ctx + tile - 1) / tile;
  const double combine = 0.9 * static_cast<double>(64 / tile);  // in this instance's tiles
  int64_t best_tiles = tiles;
  double best_cost = 0.0;
  for (int64_t sp = 1; sp <= std::min<int64_t>(tiles, 4096); ++sp) {
    const int64_t per = (tiles + sp - 1) / sp;
    if (sp > 1 && (tiles + per - 1) / per < sp) continue;  // the same chunk as a smaller split count
    const int64_t waves = (blocks * sp + slots - 1) / slots;
    double cost = static_cast<double>(waves * (per + 1));
    if (sp > 1) cost += 1.0 + combine * static_cast<double>(blocks * sp) / slots;
    if (sp == 1 || cost < best_cost) best_cost = cost, best_tiles = per;
  }
  MlaSplit s;
  s.tensor_cores = true;
  s.tile_rows = static_cast<int>(tile);
  s.bf16_qp = bf16_qp_setting();
  s.chunk = best_tiles * tile;
  s.splits = static_cast<int>((max_ctx + s.chunk - 1) / s.chunk);
  return s;
}

}  // namespace

int mla_tile_rows() {
  return tile_rows_setting();
}

void mla_set_tile_rows(int tile_rows) {
  tile_rows_setting() = tile_rows == 32 || tile_rows == 64 ? tile_rows : 0;
}

bool mla_bf16_qp() {
  return bf16_qp_setting();
}

void mla_set_bf16_qp(bool bf16) {
  bf16_qp_setting() = bf16;
}

int mla_kernel_v2() {
  return kernel_v2_setting();
}

void mla_set_kernel_v2(int v2_blocks) {
  kernel_v2_setting() = v2_blocks >= 0 && v2_blocks <= 3 ? v2_blocks : -1;
}

MlaSplit mla_choose_split(int64_t T, int64_t H, int64_t R, int64_t max_ctx, bool tensor_cores) {
  MlaSplit s;
  s.tensor_cores = tensor_cores;
  max_ctx = std::max<int64_t>(1, max_ctx);
  // T rounded up to a power of two: a CUDA graph pads the batch to a bucket b with T <= b <= that power, so
  // eager and replayed steps choose the same splits (and sum in the same order).
  if (tensor_cores) {
    const int64_t blocks = next_pow2(T) * ((H + kTcHeads - 1) / kTcHeads);
    // The second design forced (DSINFER_MLA_KERNEL=v2|v2x2, Hopper): 32-row tiles, its own blocks per SM,
    // the same split cost model.
    // The third design's plan (Hopper): 64-row tiles, one block per SM.
    auto wgmma_plan = [&] {
      MlaSplit w = tc_split(blocks, max_ctx, 64, kTcSMs);
      w.wgmma = true;
      return w;
    };
    if (mla_kernel_v2() == 3 && mla_wgmma_supported()) return wgmma_plan();  // DSINFER_MLA_KERNEL=wg
    if (const int v2 = mla_kernel_v2(); v2 > 0 && v2 < 3 && mla_tc_v2_supported()) {
      MlaSplit s2 = tc_split(blocks, max_ctx, 32, v2 * kTcSMs);
      s2.v2_blocks = v2;
      return s2;
    }
    const int forced = mla_tile_rows();
    if (forced == 0 && mla_kernel_v2() < 0 && mla_wgmma_supported()) {
      // Unforced on Hopper: the third design (its TMA instance) wherever its one block per SM is not left
      // waiting on short blocks in several waves: one wave of blocks, at least 8 tiles per block, or 64+
      // heads (head groups of a token share their tiles in L2). Measured on the H200 (graph us, wg3 vs
      // v2x2): batch 64 x 4096 90.4 vs 104.4 (16 heads), 503 vs 667 (128); 64 x 256 16.2 vs 18.6;
      // 256 x 256 x 128 219.7 vs 227.5; but 256 x 256 x 16 (2 waves of 4 tiles) 40.1 vs 35.0.
      const MlaSplit w = wgmma_plan();
      if (H >= 64 || blocks * w.splits <= kTcSMs || w.chunk >= 8 * 64) return w;
    }
    if (forced == 64) return tc_split(blocks, max_ctx, 64, kTcSMs);
    // Two resident blocks per SM pay off where one block's barriers and softmax can hide behind the
    // other's loads and MMAs: more blocks than SMs, each running at least 8 tiles (measured on the H200:
    // 64 x 4096 and 256 x 256 gain 10-16%; with 2-4 tiles per block, 64 x 256 and 4-8 x 4096, they lose).
    MlaSplit two = tc_split(blocks, max_ctx, 32, 2 * kTcSMs);
    if (forced == 32) return two;
    if (blocks * two.splits > kTcSMs && two.chunk >= 8 * 32) {
      // Unforced, on Hopper the second design's two-block instance takes this plan (the same split; H200,
      // batch 64 x 4096: 103.7 vs 119 us; 256 x 256: 35.4 vs 40.3).
      if (forced == 0 && mla_kernel_v2() < 0 && mla_tc_v2_supported()) two.v2_blocks = 2;
      return two;
    }
    return tc_split(blocks, max_ctx, 64, kTcSMs);
  }
  const int64_t HG = heads_per_group(H, R);
  const int64_t blocks = std::max<int64_t>(1, next_pow2(T) * ((H + HG - 1) / HG));
  int64_t splits = 1;
  if (blocks < kTargetBlocks) {
    splits = std::min((kTargetBlocks + blocks - 1) / blocks, (max_ctx + kMinChunk - 1) / kMinChunk);
    splits = std::max<int64_t>(1, splits);
  }
  int64_t chunk = (max_ctx + splits - 1) / splits;
  chunk = std::max<int64_t>(kTile, (chunk + kTile - 1) / kTile * kTile);
  s.splits = static_cast<int>(std::max<int64_t>(1, (max_ctx + chunk - 1) / chunk));
  s.chunk = chunk;
  return s;
}

size_t mla_workspace_floats(int64_t T, int64_t H, int64_t R, const MlaSplit& split) {
  if (split.splits <= 1) return 0;
  return static_cast<size_t>(T) * split.splits * H * (R + 2);
}

namespace {

// Whether the last split block to arrive merges (the fused merge) for this split: few splits whose weights
// fit the kernel's shared memory. Follows the split alone (next_pow2(T), the context bucket); a capture that
// finds no counters runs the separate combine (the same bits).
bool fused_merge_chosen(int64_t H, int64_t R, int64_t D, const MlaSplit& split) {
  if (split.splits <= 1 || split.splits > mla_fused_merge_max_splits()) return false;
  const int64_t HG = heads_per_group(H, R);
  const int64_t merge_floats = (split.tensor_cores ? kTcHeads : HG) * (int64_t{split.splits} + 1);
  const int64_t smem_floats =
      split.tensor_cores
          ? kTcMergeFloats
          : static_cast<int64_t>(smem_bytes(static_cast<int>(HG), static_cast<int>(D)) / sizeof(float));
  return merge_floats <= smem_floats;
}

bool& uv_fused_setting() {
  static bool on = env_switch("DSINFER_MLA_UV_FUSED", true);
  return on;
}

}  // namespace

bool mla_uv_fused() {
  return uv_fused_setting();
}

void mla_set_uv_fused(bool on) {
  uv_fused_setting() = on;
}

bool launch_attention_mla(const float* q_lat, const float* q_pe, const void* cache, bool cache_bf16,
                          int64_t width, const MlaPlanView& plan, float* out, float* workspace, int64_t T,
                          int64_t H, int64_t R, int64_t P, float scale, const MlaSplit& split,
                          const MlaUv* uv) {
  DSI_CHECK(R > 0 && P >= 0 && width == R + P, "attention_mla: cache rows of ", width, " for R ", R, " P ",
            P);
  DSI_CHECK(R <= kThreads * kMaxAcc, "attention_mla: kv_lora_rank ", R, " exceeds the kernel's ",
            kThreads * kMaxAcc);
  DSI_CHECK(split.splits >= 1 && split.chunk > 0, "attention_mla: bad split");
  DSI_CHECK(!plan.rows || split.tensor_cores, "attention_mla: a row list needs the tensor-core kernel");
  DSI_CHECK(!plan.selected || (!plan.rows && plan.context_lens && !uv),
            "attention_mla: a sparse launch runs over the whole step, without W_UV");
  if (T == 0 || H == 0) return false;
  MlaParams p{};
  p.q_lat = q_lat;
  p.q_pe = q_pe;
  p.width = width;
  p.plan = plan;
  p.out = out;
  p.H = static_cast<int>(H);
  p.R = static_cast<int>(R);
  p.P = static_cast<int>(P);
  p.D = static_cast<int>(R + P);
  p.HG = heads_per_group(H, R);
  p.scale = scale;
  p.splits = split.splits;
  p.chunk = split.chunk;
  p.vec4 = R % 4 == 0 && P % 4 == 0 && reinterpret_cast<uintptr_t>(cache) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(q_lat) % 16 == 0 && reinterpret_cast<uintptr_t>(q_pe) % 16 == 0;
  if (split.splits > 1) {
    DSI_CHECK(workspace != nullptr, "attention_mla: split launch without a workspace");
    p.ws_acc = workspace;
    p.ws_ml = workspace + static_cast<size_t>(T) * split.splits * H * R;
  }
  DSI_CHECK(smem_bytes(p.HG, p.D) <= 200 * 1024, "attention_mla: rows of ", p.D,
            " values need too much shared memory");
  const int groups = static_cast<int>((H + p.HG - 1) / p.HG);
  // Fused merge (the last split block to arrive merges) when the splits are few and their weights fit the
  // kernel's shared memory; else the separate combine kernel, or with `uv` the merge + W_UV kernel in its
  // place. Every choice follows the split alone (next_pow2(T), the context bucket) and the shapes.
  const bool fused_merge = fused_merge_chosen(H, R, R + P, split);
  const bool merge_uv =
      uv && !plan.rows && !fused_merge && split.splits > 1 && mla_uv_fused() &&
      mla_merge_uv_supported(T, H, R, uv->V, split.splits, reinterpret_cast<uintptr_t>(uv->w));
  int* arrivals = nullptr;
  if (fused_merge) {
    const int64_t kernel_groups = split.tensor_cores ? (H + kTcHeads - 1) / kTcHeads : groups;
    arrivals = reinterpret_cast<int*>(decode_arrivals(T * kernel_groups));
  }
  p.arrivals = arrivals;
  if (split.tensor_cores) {
    DSI_CHECK(mla_tc_supported(R, P, cache_bf16, reinterpret_cast<uintptr_t>(cache),
                               reinterpret_cast<uintptr_t>(q_lat), reinterpret_cast<uintptr_t>(q_pe)),
              "attention_mla: a tensor-core split for a launch the tensor-core kernel does not take");
    if (plan.selected)  // sparse: the first design (the only one with a list instance) over the same split
      launch_attention_mla_tc(q_lat, q_pe, static_cast<const uint16_t*>(cache), plan, out, p.ws_acc, p.ws_ml,
                              arrivals, T, H, scale, split);
    else if (split.wgmma && mla_wgmma_tma_usable(plan, reinterpret_cast<uintptr_t>(cache)))
      launch_attention_mla_wgmma_tma(q_lat, q_pe, static_cast<const uint16_t*>(cache), plan, out, p.ws_acc,
                                     p.ws_ml, arrivals, T, H, scale, split);
    else if (split.wgmma)  // block sizes the TMA boxes do not fit: the first design over the same split
      launch_attention_mla_tc(q_lat, q_pe, static_cast<const uint16_t*>(cache), plan, out, p.ws_acc, p.ws_ml,
                              arrivals, T, H, scale, split);
    else if (split.v2_blocks > 0)
      launch_attention_mla_tc_v2(q_lat, q_pe, static_cast<const uint16_t*>(cache), plan, out, p.ws_acc,
                                 p.ws_ml, arrivals, T, H, scale, split);
    else
      launch_attention_mla_tc(q_lat, q_pe, static_cast<const uint16_t*>(cache), plan, out, p.ws_acc, p.ws_ml,
                              arrivals, T, H, scale, split);
  } else if (cache_bf16) {
    launch_typed(p, static_cast<const uint16_t*>(cache), T, groups);
  } else {
    launch_typed(p, static_cast<const float*>(cache), T, groups);
  }
  if (merge_uv) {
    launch_mla_merge_uv(p.ws_acc, p.ws_ml, uv->w, uv->y, T, H, R, uv->V, split.splits);
    return true;
  }
  if (split.splits > 1 && !arrivals) {
    const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(H));
    launch_pdl(mla_combine_kernel, grid, 128, static_cast<size_t>(p.splits + 1) * sizeof(float), p.ws_acc,
               p.ws_ml, out, plan.rows, p.H, p.R, p.splits);
    check_launch("attention_mla combine");
  }
  return false;
}

}  // namespace dsinfer::cuda
