// Tensor-core MLA decode over a bf16 latent cache (R = 512, P = 64, the DeepSeek-V2/V3 shape): one block of
// 8 warps per (query token, split of its context, group of 16 heads); the head groups of a token are adjacent
// blocks, so they share each cached tile through L2. Tiles of 64 cached rows [latent | rope key] stream into
// shared memory with cp.async (two stages, the block table read two tiles ahead). S = Q K^T: each warp takes
// 4-5 of the 36 k-steps for all 64 positions with its Q fragments in registers, and the partial scores are
// summed across warps in a fixed order; online softmax in shared memory; O += P V: each warp owns 64 of the
// 512 latent columns. mma.sync m16n8k16 (bf16 in, fp32 accumulate) with Q and P split into bf16 hi + lo, so
// only the cache's own rounding remains. Partial states have the layout of mla_kernels.cu's combine; with
// arrival counters the last split block of a (token, head group) merges them (mla_merge.cuh). Over a row
// list (the decode rows of a mixed step) launch token i is query token rows[i]: the same blocks and sums as
// a launch of those rows alone.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/mla_mma_frag.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kR = 512, kP = 64, kD = kR + kP;
constexpr int kHeads = 16, kNT = 64, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kLdK = kD + 8, kLdP = kNT + 8, kLdRed = kNT + 8;
constexpr int kChunks = kD * 2 / 16;  // 16-byte chunks per cached row
constexpr int kKSteps = kD / 16;      // k-steps of S = Q K^T, spread over the warps (4 or 5 each)
static_assert(kKSteps > 4 * kWarps && kKSteps <= 5 * kWarps, "each warp takes 4 or 5 k-steps");
static_assert(kHeads == 2 * kWarps && kR == 64 * kWarps, "softmax: 2 heads per warp; PV: 64 columns");

struct Smem {
  __nv_bfloat16 k[2][kNT * kLdK];                          // [stage][64 rows][576 (+8 pad)] cached rows
  float red[kWarps][kHeads][kLdRed];                       // [warp][16 heads][64 positions] partial scores
  __nv_bfloat16 p_hi[kHeads * kLdP], p_lo[kHeads * kLdP];  // [16 heads][64] probabilities
  float m[kHeads], l[kHeads], c[kHeads];                   // running max, running sum, this tile's rescale
  int64_t slot[2][kNT];                                    // [stage][row] cache slot (-1: past the end)
  int last;                                                // mla_arrive_last's verdict
};
static_assert(sizeof(Smem::red) / sizeof(float) == kTcMergeFloats, "the fused merge's scratch is red");

using frag::cp_async16;
using frag::cp_async_commit;
using frag::cp_async_wait;
using frag::ldmatrix_a;

__global__ void __launch_bounds__(kThreads, 1)
    mla_tc_kernel(const float* q_lat, const float* q_pe, const uint16_t* cache, MlaPlanView plan, float* out,
                  float* ws_acc, float* ws_ml, int* arrivals, int H, float scale, int splits, int64_t chunk) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  // Head groups of one (token, split) are adjacent block indices, so they run together and share L2.
  const int groups = (H + kHeads - 1) / kHeads;
  const int64_t tl = blockIdx.x / groups;            // launch token: partial states and arrival counters
  const int64_t t = plan.rows ? plan.rows[tl] : tl;  // query token: q, out, position, sequence
  const int h0 = static_cast<int>(blockIdx.x % groups) * kHeads;
  const int split = blockIdx.y;
  const int hg = min(kHeads, H - h0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tq = lane & 3;
  const int64_t n = static_cast<int64_t>(plan.positions[t]) + 1;
  const int64_t begin = split * chunk;
  const int64_t end = min(n, begin + chunk);
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[plan.token_seq[t]];
  const int64_t bs = plan.block_size;
  const int ntiles = begin < end ? static_cast<int>((end - begin + kNT - 1) / kNT) : 0;

  // Cache slot of row `tid` of tile `it` (-1 past the end); read by threads < kNT only.
  auto slot_of = [&](int it) -> int64_t {
    const int64_t pos = begin + static_cast<int64_t>(it) * kNT + tid;
    return it < ntiles && pos < end ? static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs : -1;
  };
  // Tile `it` into stage it % 2 (rows past the end zero-filled, so P = 0 never meets garbage).
  auto issue_tile = [&](int it) {
    const int st = it % 2;
#pragma unroll 6
    for (int i = tid; i < kNT * kChunks; i += kThreads) {
      const int j = i / kChunks, c = i % kChunks;
      const int64_t slot = sm.slot[st][j];
      cp_async16(sm.k[st] + j * kLdK + c * 8, cache + (slot >= 0 ? slot : 0) * kD + c * 8, slot >= 0);
    }
    cp_async_commit();
  };

  int64_t next_slot = -1;  // threads < kNT: slot of their row of tile it + 2
  if (tid < kNT) {
    sm.slot[0][tid] = slot_of(0);
    sm.slot[1][tid] = slot_of(1);
  }
  if (tid < kHeads) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  __syncthreads();
  if (ntiles > 0) issue_tile(0);
  if (tid < kNT) next_slot = slot_of(2);

  // This warp's k-steps of S = Q K^T: k0 = 16 (warp + 8 i), i < nk (36 k-steps over 8 warps). Its Q
  // fragments (hi + lo bf16 parts of the fp32 queries; heads past the last are zero) stay in registers.
  const int nk = warp < kKSteps - 4 * kWarps ? 5 : 4;
  uint32_t qh[5][4], ql[5][4];
#pragma unroll
  for (int i = 0; i < 5; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int h = g + (r % 2) * 8, d = 16 * (warp + kWarps * i) + (r / 2) * 8 + 2 * tq;
      float2 v = make_float2(0.0f, 0.0f);
      if (i < nk && h < hg) {
        const int64_t row = t * H + h0 + h;
        v = *reinterpret_cast<const float2*>(d < kR ? q_lat + row * kR + d : q_pe + row * kP + (d - kR));
      }
      const __nv_bfloat162 hi = __floats2bfloat162_rn(v.x, v.y);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x - __low2float(hi), v.y - __high2float(hi));
      qh[i][r] = *reinterpret_cast<const uint32_t*>(&hi);
      ql[i][r] = *reinterpret_cast<const uint32_t*>(&lo);
    }
  }

  float acc[8][4];  // O [16 heads, this warp's 64 latent columns 64 warp + 8 j + ...]
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.0f;

  for (int it = 0; it < ntiles; ++it) {
    const int64_t j0 = begin + static_cast<int64_t>(it) * kNT;
    cp_async_wait<0>();
    __syncthreads();  // tile it visible; every warp is done with tile it - 1 (its stage, P and red)
    if (it + 1 < ntiles) issue_tile(it + 1);
    const __nv_bfloat16* kt = sm.k[it % 2];
    // Partial S [16, 64] over this warp's k-steps, then to red[warp].
    {
      float s[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[j][c] = 0.0f;
#pragma unroll
      for (int i = 0; i < 5; ++i) {
        if (i < nk) {
          const int k0 = 16 * (warp + kWarps * i);
#pragma unroll
          for (int j = 0; j < 8; j += 2) {
            uint32_t b[4];
            frag::ldmatrix_bt(b, kt, kLdK, j * 8, k0, lane);
            mma_bf16(s[j], qh[i], b);
            mma_bf16(s[j], ql[i], b);
            mma_bf16(s[j + 1], qh[i], b + 2);
            mma_bf16(s[j + 1], ql[i], b + 2);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = j * 8 + 2 * tq;
        *reinterpret_cast<float2*>(&sm.red[warp][g][col]) = make_float2(s[j][0], s[j][1]);
        *reinterpret_cast<float2*>(&sm.red[warp][g + 8][col]) = make_float2(s[j][2], s[j][3]);
      }
    }
    // Slots of tile it + 2 into the stage tile it's slots used (issued last iteration), then prefetch the
    // block table for tile it + 3: its latency hides behind this tile.
    if (tid < kNT) {
      sm.slot[it % 2][tid] = next_slot;
      next_slot = slot_of(it + 3);
    }
    __syncthreads();
    // Online softmax: warp w updates heads 2w and 2w + 1, positions lane and lane + 32. S sums the warps'
    // partials in a fixed order.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int h = 2 * warp + hh;
      float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        s0 += sm.red[w][h][lane];
        s1 += sm.red[w][h][lane + 32];
      }
      s0 = j0 + lane < end ? s0 * scale : -INFINITY;
      s1 = j0 + lane + 32 < end ? s1 * scale : -INFINITY;
      float mx = fmaxf(s0, s1);
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[h];
      const float m_new = fmaxf(m_old, mx);  // finite: position j0 < end
      const float p0 = s0 == -INFINITY ? 0.0f : expf(s0 - m_new);
      const float p1 = s1 == -INFINITY ? 0.0f : expf(s1 - m_new);
      float sum = p0 + p1;
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const __nv_bfloat16 hi0 = __float2bfloat16_rn(p0), hi1 = __float2bfloat16_rn(p1);
      sm.p_hi[h * kLdP + lane] = hi0;
      sm.p_lo[h * kLdP + lane] = __float2bfloat16_rn(p0 - __bfloat162float(hi0));
      sm.p_hi[h * kLdP + lane + 32] = hi1;
      sm.p_lo[h * kLdP + lane + 32] = __float2bfloat16_rn(p1 - __bfloat162float(hi1));
      if (lane == 0) {
        const float corr = expf(m_old - m_new);  // 0 on the first tile
        sm.c[h] = corr;
        sm.l[h] = sm.l[h] * corr + sum;
        sm.m[h] = m_new;
      }
    }
    __syncthreads();
    // O [16, 512] += P [16, 64] V [64, 512]: warp w owns latent columns [64w, 64w + 64).
    {
      const float c_lo = sm.c[g], c_hi = sm.c[g + 8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        acc[j][0] *= c_lo;
        acc[j][1] *= c_lo;
        acc[j][2] *= c_hi;
        acc[j][3] *= c_hi;
      }
#pragma unroll
      for (int k0 = 0; k0 < kNT; k0 += 16) {
        uint32_t ah[4], al[4];
        ldmatrix_a(ah, sm.p_hi, kLdP, 0, k0, lane);
        ldmatrix_a(al, sm.p_lo, kLdP, 0, k0, lane);
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          uint32_t b[4];
          frag::ldmatrix_v(b, kt, kLdK, k0, warp * 64 + j * 8, lane);
          mma_bf16(acc[j], ah, b);
          mma_bf16(acc[j], al, b);
          mma_bf16(acc[j + 1], ah, b + 2);
          mma_bf16(acc[j + 1], al, b + 2);
        }
      }
    }
  }
  __syncthreads();  // sm.l of the last tile (or the initial state of an empty split) is visible

  // Rows g and g + 8 of the fragments are heads g and g + 8; columns 64w + 8j + 2tq (+1).
  const int64_t base = (tl * splits + split) * H + h0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int h = g + 8 * half;
    if (h >= hg) continue;
    const float inv = splits == 1 ? 1.0f / sm.l[h] : 1.0f;
    float* dst = splits == 1 ? out + (t * H + h0 + h) * kR : ws_acc + (base + h) * kR;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = warp * 64 + j * 8 + 2 * tq;
      *reinterpret_cast<float2*>(dst + col) = make_float2(acc[j][2 * half] * inv, acc[j][2 * half + 1] * inv);
    }
  }
  if (splits > 1 && tid < hg) {
    ws_ml[(base + tid) * 2] = sm.m[tid];
    ws_ml[(base + tid) * 2 + 1] = sm.l[tid];
  }
  // Fused merge: the last split block of (t, head group) merges every split, its weights in sm.red (free
  // after the last tile; hg * splits <= kTcMergeFloats - 16, checked on the host), 1 / sums in sm.c.
  if (splits > 1 && arrivals && detail::mla_arrive_last(arrivals + blockIdx.x, splits, &sm.last))
    detail::mla_merge(ws_acc, ws_ml, tl, t, H, kR, h0, hg, splits, out, &sm.red[0][0][0], sm.c);
}

}  // namespace

bool mla_tc_supported(int64_t R, int64_t P, bool cache_bf16, uintptr_t cache, uintptr_t q_lat,
                      uintptr_t q_pe) {
  if (!(cache_bf16 && R == kR && P == kP && cache % 16 == 0 && q_lat % 16 == 0 && q_pe % 16 == 0))
    return false;
  // The tiles need ~188 KiB of shared memory: Hopper has it, an A100 (163 KiB) does not.
  static const bool fits = [] {
    const bool ok = cudaFuncSetAttribute(mla_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(sizeof(Smem))) == cudaSuccess;
    if (!ok) cudaGetLastError();
    return ok;
  }();
  return fits;
}

void launch_attention_mla_tc(const float* q_lat, const float* q_pe, const uint16_t* cache,
                             const MlaPlanView& plan, float* out, float* ws_acc, float* ws_ml, int* arrivals,
                             int64_t T, int64_t H, float scale, const MlaSplit& split) {
  const int64_t groups = (H + kHeads - 1) / kHeads;
  DSI_CHECK(T * groups < (int64_t{1} << 31) && split.splits < 65536 && split.chunk % kNT == 0,
            "attention_mla (tensor cores): bad launch shape");
  const dim3 grid(static_cast<unsigned>(T * groups), static_cast<unsigned>(split.splits));
  launch_pdl(mla_tc_kernel, grid, kThreads, sizeof(Smem), q_lat, q_pe, cache, plan, out, ws_acc, ws_ml,
             arrivals, static_cast<int>(H), scale, split.splits, split.chunk);
  check_launch("attention_mla (tensor cores)");
}

}  // namespace dsinfer::cuda
