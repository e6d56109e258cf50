// Multi-query tensor-core MLA for sequences with many query tokens (prefill, chunked context), over a bf16
// latent cache of the DeepSeek-V2/V3 shape (R = 512, P = 64). One block of 8 warps per (multi-query block of
// the step split, group of 16 heads): up to 4 consecutive query tokens of ONE sequence (mla_step_split.cu
// never lets a block straddle two), whose 64 MMA rows (token i, head h: row 16 i + h) share every cached
// tile, so a cached row is read once per 4 tokens instead of once per token. The block streams the context
// its last token sees, [0, last position]; the earlier tokens mask the few positions past their own.
// Queries live in shared memory as bf16 (single part, like the probabilities: FlashMLA's precision), tiles of
// 32 cached rows [latent | rope key] stream in with cp.async (two stages). S = Q K^T: warp w computes rows
// 16 (w % 4) .. + 16 x positions 16 (w / 4) .. + 16 over all 576 columns; online softmax in shared memory
// (warp w: rows 8w .. 8w + 8); O += P V: warp w owns latent columns [64 w, 64 w + 64) of all 64 rows (128
// fp32 accumulators a thread). mma.sync m16n8k16, bf16 in, fp32 accumulate: runs on sm_80 and sm_90 (needs
// ~166 KiB of shared memory, so not on an A100, which keeps the CUDA-core kernels).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_mma_frag.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using frag::cp_async16;
using frag::cp_async_commit;
using frag::cp_async_wait;
using frag::ldmatrix_a;
using frag::ldmatrix_bt;
using frag::ldmatrix_v;

constexpr int kR = 512, kP = 64, kD = kR + kP;
constexpr int kHeads = 16, kTok = kMlaPrefillTokens, kM = kTok * kHeads;  // 64 MMA rows
constexpr int kNT = 32, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kLd = kD + 8;    // bf16 row stride of Q and the cached tiles (73 16-byte chunks: no conflicts)
constexpr int kLdS = kNT + 4;  // fp32 row stride of the scores
constexpr int kLdP = kNT + 8;  // bf16 row stride of the probabilities (5 16-byte chunks)
constexpr int kChunks = kD / 8;  // 16-byte chunks per cached row
static_assert(kM == 64 && kWarps == 8 && kNT == 32 && kD % 32 == 0,
              "S: 4 x 2 warp tiles of 16 x 16; softmax: 8 rows a warp");
static_assert(kR == 64 * kWarps, "PV: 64 latent columns a warp");

struct Smem {
  __nv_bfloat16 k[2][kNT * kLd];  // [stage][32 rows][576 (+8)] cached rows
  __nv_bfloat16 q[kM * kLd];      // [64 rows][576 (+8)] queries [q_lat | q_pe] as bf16
  float s[kM * kLdS];             // [64 rows][32] scores of the tile
  __nv_bfloat16 p[kM * kLdP];     // [64 rows][32] probabilities
  float m[kM], l[kM], c[kM];      // running max, running sum, this tile's rescale
  int lim[kM];                    // positions a row sees in the current segment ([0, lim)); 0: none
  int64_t slot[2][kNT];           // [stage][row] cache slot (-1: past the end)
};

__global__ void __launch_bounds__(kThreads, 1)
    mla_prefill_kernel(const float* q_lat, const float* q_pe, const uint16_t* cache, MlaPlanView plan,
                       float* out, int H, float scale) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  // Head groups of one token block are adjacent block indices (they share each cached tile through L2).
  const int groups = (H + kHeads - 1) / kHeads;
  const int tok0 = plan.blocks[blockIdx.x / groups];
  const int h0 = static_cast<int>(blockIdx.x % groups) * kHeads;
  const int seq = plan.token_seq[tok0];
  const int tok_end = min(tok0 + kTok, plan.cu_seqlens[seq + 1]);  // the block's tokens: one sequence
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, tq = lane & 3;
  const int64_t bs = plan.block_size;

  // Queries -> bf16 rows of sm.q (rows past the last token or head: zeros; they are masked anyway).
#pragma unroll 4
  for (int i = tid; i < kM * (kD / 4); i += kThreads) {
    const int r = i / (kD / 4), d = (i % (kD / 4)) * 4;
    const int t = tok0 + r / kHeads, h = h0 + r % kHeads;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (t < tok_end && h < H) {
      const int64_t row = static_cast<int64_t>(t) * H + h;
      v = *reinterpret_cast<const float4*>(d < kR ? q_lat + row * kR + d : q_pe + row * kP + (d - kR));
    }
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(sm.q + r * kLd + d);
    dst[0] = __floats2bfloat162_rn(v.x, v.y);
    dst[1] = __floats2bfloat162_rn(v.z, v.w);
  }
  if (tid < kM) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }

  float acc[4][8][4];  // O [64 rows: 16 mi + g (+8)][this warp's columns 64 warp + 8 j + 2 tq (+1)]
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][j][c] = 0.0f;

  const int rw = 16 * (warp % 4), cw = 16 * (warp / 4);  // this warp's S tile: rows rw.., positions cw..
  // The context of the block's last token (positions rise within a chunk; max for safety).
  int64_t ctx = 0;
  for (int t = tok0; t < tok_end; ++t) ctx = max(ctx, static_cast<int64_t>(plan.positions[t]) + 1);
  const int ntiles = static_cast<int>((ctx + kNT - 1) / kNT);
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[seq];
  auto slot_of = [&](int it) -> int64_t {  // threads < kNT: slot of their row of tile it (-1: past the end)
    const int64_t pos = static_cast<int64_t>(it) * kNT + tid;
    return it < ntiles && pos < ctx ? static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs : -1;
  };
  auto issue_tile = [&](int it) {  // tile it into stage it % 2, rows past the end zero-filled
    const int st = it % 2;
#pragma unroll 4
    for (int i = tid; i < kNT * kChunks; i += kThreads) {
      const int j = i / kChunks, c = i % kChunks;
      const int64_t slot = sm.slot[st][j];
      cp_async16(sm.k[st] + j * kLd + c * 8, cache + (slot >= 0 ? slot : 0) * kD + c * 8, slot >= 0);
    }
    cp_async_commit();
  };
  if (tid < kM) {  // rows past the last token or head see nothing
    const int t = tok0 + tid / kHeads;
    sm.lim[tid] = t < tok_end && h0 + tid % kHeads < H ? plan.positions[t] + 1 : 0;
  }
  int64_t next_slot = -1;  // threads < kNT: slot of their row of tile it + 2
  if (tid < kNT) {
    sm.slot[0][tid] = slot_of(0);
    sm.slot[1][tid] = slot_of(1);
  }
  __syncthreads();
  if (ntiles > 0) issue_tile(0);
  if (tid < kNT) next_slot = slot_of(2);

  for (int it = 0; it < ntiles; ++it) {
    const int j0 = it * kNT;
    cp_async_wait<0>();
    __syncthreads();  // tile it visible; every warp is done with tile it - 1 (its stage, s and p)
    if (it + 1 < ntiles) issue_tile(it + 1);
    const __nv_bfloat16* kt = sm.k[it % 2];
    // S [16 rows rw.., 16 positions cw..] over all 36 k-steps; even and odd k-steps accumulate apart
    // (four independent MMA chains a warp), summed at the end.
    {
      float s[2][2][4] = {};  // [k-step parity][n tile][fragment]
#pragma unroll 3
      for (int k0 = 0; k0 < kD; k0 += 32) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          uint32_t a[4], b[4];
          ldmatrix_a(a, sm.q, kLd, rw, k0 + 16 * e, lane);
          ldmatrix_bt(b, kt, kLd, cw, k0 + 16 * e, lane);
          mma_bf16(s[e][0], a, b);
          mma_bf16(s[e][1], a, b + 2);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = cw + j * 8 + 2 * tq;
        *reinterpret_cast<float2*>(&sm.s[(rw + g) * kLdS + col]) =
            make_float2(s[0][j][0] + s[1][j][0], s[0][j][1] + s[1][j][1]);
        *reinterpret_cast<float2*>(&sm.s[(rw + g + 8) * kLdS + col]) =
            make_float2(s[0][j][2] + s[1][j][2], s[0][j][3] + s[1][j][3]);
      }
    }
    // Slots of tile it + 2 into the stage whose tile it's loads were issued last iteration; then the
    // block table for tile it + 3.
    if (tid < kNT) {
      sm.slot[it % 2][tid] = next_slot;
      next_slot = slot_of(it + 3);
    }
    __syncthreads();
    // Online softmax: warp w updates rows 8w .. 8w + 8, lane = position j0 + lane. The sum adds the
    // bf16-rounded probabilities that P V uses, so every row's weights sum to exactly its 1 / l.
#pragma unroll
    for (int rr = 0; rr < 8; ++rr) {  // unrolled: the 8 rows' shuffle chains interleave
      const int r = 8 * warp + rr;
      const float x = j0 + lane < sm.lim[r] ? sm.s[r * kLdS + lane] * scale : -INFINITY;
      float mx = x;
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sm.m[r];
      const float m_new = fmaxf(m_old, mx);  // -inf only for a row with nothing seen yet
      const __nv_bfloat16 p = __float2bfloat16_rn(x == -INFINITY ? 0.0f : expf(x - m_new));
      sm.p[r * kLdP + lane] = p;
      float sum = __bfloat162float(p);
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        const float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);  // 0 on a row's first tile
        sm.c[r] = corr;
        sm.l[r] = sm.l[r] * corr + sum;
        sm.m[r] = m_new;
      }
    }
    __syncthreads();
    // O [64, 512] += P [64, 32] V [32, 512]: warp w owns latent columns [64 w, 64 w + 64).
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      const float c_lo = sm.c[16 * mi + g], c_hi = sm.c[16 * mi + g + 8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        acc[mi][j][0] *= c_lo;
        acc[mi][j][1] *= c_lo;
        acc[mi][j][2] *= c_hi;
        acc[mi][j][3] *= c_hi;
      }
    }
#pragma unroll
    for (int k0 = 0; k0 < kNT; k0 += 16) {
      uint32_t b[4][4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) ldmatrix_v(b[jj], kt, kLd, k0, warp * 64 + jj * 16, lane);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        uint32_t a[4];
        ldmatrix_a(a, sm.p, kLdP, 16 * mi, k0, lane);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          mma_bf16(acc[mi][2 * jj], a, b[jj]);
          mma_bf16(acc[mi][2 * jj + 1], a, b[jj] + 2);
        }
      }
    }
  }
  __syncthreads();  // sm.l of the last tile is visible

  // Fragment rows g and g + 8 of row tile mi are rows 16 mi + g (+8): token tok0 + mi, head g (+8).
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
    const int t = tok0 + mi;
    if (t >= tok_end) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = g + 8 * half, r = 16 * mi + h;
      if (h0 + h >= H) continue;
      const float l = sm.l[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      float* dst = out + (static_cast<int64_t>(t) * H + h0 + h) * kR;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = warp * 64 + j * 8 + 2 * tq;
        *reinterpret_cast<float2*>(dst + col) =
            make_float2(acc[mi][j][2 * half] * inv, acc[mi][j][2 * half + 1] * inv);
      }
    }
  }
}

}  // namespace

bool mla_prefill_supported() {
  static const bool fits = [] {
    const bool ok = cudaFuncSetAttribute(mla_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(sizeof(Smem))) == cudaSuccess;
    if (!ok) cudaGetLastError();
    return ok;
  }();
  return fits;
}

void launch_attention_mla_prefill(const float* q_lat, const float* q_pe, const uint16_t* cache,
                                  const MlaPlanView& plan, float* out, int64_t num_blocks, int64_t H,
                                  float scale) {
  if (num_blocks == 0 || H == 0) return;
  const int64_t groups = (H + kHeads - 1) / kHeads;
  DSI_CHECK(plan.blocks != nullptr && plan.cu_seqlens != nullptr && num_blocks * groups < (int64_t{1} << 31),
            "attention_mla (prefill): bad launch shape");
  DSI_CHECK(mla_prefill_supported(), "attention_mla (prefill): the GPU lacks the kernel's shared memory");
  launch_pdl(mla_prefill_kernel, dim3(static_cast<unsigned>(num_blocks * groups)), kThreads, sizeof(Smem),
             q_lat, q_pe, cache, plan, out, static_cast<int>(H), scale);
  check_launch("attention_mla (prefill)");
}

}  // namespace dsinfer::cuda
