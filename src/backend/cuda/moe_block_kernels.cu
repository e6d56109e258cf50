// One token's DeepSeekMoE block as one launch (moe_block.h; the plan and its segments in moe_block_plan.h).
// Every block: (before the PDL wait) its shared units' table and the first stages of its first gate/up tile,
// the norm weights and, on a logit block, its router row; then x = rms_norm(h) into shared memory with
// norm_moe_route's sums; on a logit block one warp computes its experts' logits, and the last logit block to
// arrive selects the top k with one warp (route_select_token) and publishes ids and weights through a
// release flag; meanwhile all warps run the block's stages. Each warp streams its stages through one ring of
// kMoeBlockStages stages in the plan's order, issuing as far ahead as the ring allows; a stage whose weights
// depend on the routing waits, at issue, for the flag (one warp per block resolves the routed units' table
// from it). Barrier A (every shared gate/up tile stored) comes before the down stages over the shared
// columns, barrier C (every gate/up tile stored) before the rest; a block waits at a barrier only when it
// has down work after it. The sums are those of gemv_persistent.cuh's units instances (same MMAs, same K
// order, same reductions and epilogues), so the residual gets the bits of norm_moe_route + the two units
// launches. The counters (logit arrivals, routing flag, barriers A and C, exits) are zero before the launch;
// the last logit block and the last block to leave zero them again, so a captured graph replays.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/gemv_device.cuh"
#include "backend/cuda/gemv_units.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_block.h"
#include "backend/cuda/moe_block_plan.h"
#include "backend/cuda/moe_select.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using gemv_detail::copy_async16;
using gemv_detail::copy_async_commit;
using gemv_detail::copy_async_wait;

constexpr int kWarps = kMoeBlockWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = kMoeBlockStages;
constexpr int kGuU = kMoeBlockGateUpUnroll;
constexpr int kDnU = kMoeBlockDownUnroll;
constexpr int kSplits = 2;                 // bf16 parts per activation, as the units launches
constexpr int kStage = kGuU * 2 * 2 * 32;  // uint4 of one warp's stage: [U][TILES][2][32]
static_assert(kDnU * 1 * 2 * 32 == kStage, "gate/up and down stages are the same size");
constexpr int kNormThreads = 256;  // norm_moe_route's block: its sums of squares follow 256 threads
constexpr int kRouterPreload = 8;  // 16-byte router chunks per lane copied before the PDL wait

// Counter slots.
constexpr int kLogitArrivals = 0, kRoutingFlag = 1, kBarrierA = 2, kBarrierC = 3, kExits = 4;
static_assert(kExits + 1 == kMoeBlockCounters, "the counters moe_block.h allots");

// The block's state in static shared memory (the ring, x and the selection's scratch are dynamic).
struct BlockState {
  float red[kWarps][8][32];                    // the cross-warp sums of a tile (gate/up: 8 outputs a lane)
  const uint16_t* gu_w[kMoeBlockMaxUnits][2];  // unit u's gate / up rows (row stride H)
  const uint16_t* dn_w[kMoeBlockMaxUnits];     // unit u's down columns
  int64_t dn_ld[kMoeBlockMaxUnits];            // ... and their row stride
  float scale[kMoeBlockMaxUnits];              // unit u's output factor (shared 1; routed: its weight)
  float part[kNormThreads / 32];               // per-warp sums of squares
  float inv;                                   // 1 / rms(h)
  int routed;                                  // 0: routing unknown; 1: a warp resolves it; 2: resolved
};

__device__ __forceinline__ float bf16f(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

__device__ __forceinline__ void arrive_release(int32_t* p) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(p) : "memory");
}

// Thread 0 waits until `target` arrivals are in; the block leaves together.
__device__ __forceinline__ void grid_wait(const int32_t* counter, int target) {
  if (threadIdx.x == 0)
    while (static_cast<int>(load_acquire_gpu(reinterpret_cast<const unsigned*>(counter))) < target) {
    }
  __syncthreads();
}

// This block's part of a grid barrier: every warp's stores are done, then (after a device-wide fence, as
// cooperative groups' grid sync) one release arrival.
__device__ __forceinline__ void grid_arrive(int32_t* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    arrive_release(counter);
  }
}

// Point `point` of this block's timeline now (thread 0; when the launch records stamps).
__device__ __forceinline__ void stamp(const MoeBlockArgs& a, int point, bool any_thread = false) {
  if (a.stamps != nullptr && (any_thread || threadIdx.x == 0)) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    a.stamps[static_cast<int64_t>(blockIdx.x) * kMoeBlockStampPoints + point] = t;
  }
}

// cp.async.wait_group with a run-time count (0 .. kStages - 1).
__device__ __forceinline__ void wait_groups(int pending) {
  if (pending <= 0)
    copy_async_wait<0>();
  else if (pending == 1)
    copy_async_wait<1>();
  else
    copy_async_wait<kStages - 1>();
}

// x = rms_norm(h) into xs [H] with norm_moe_route's sums (threads 0..255 in its order) and expression.
__device__ void form_x(const MoeBlockArgs& a, int H, float* xs, BlockState& s) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid < kNormThreads) {
    // norm_moe_route's loop at one token: rounds of 32 columns a thread, each squared and summed in order.
    constexpr int kB = 32;
    float ss = 0.0f;
    for (int i0 = tid; i0 < H; i0 += kB * kNormThreads)
      for (int b = 0; b < kB; ++b) {
        const int i = i0 + b * kNormThreads;
        if (i < H) {
          const float v = a.residual[i];
          ss += v * v;
        }
      }
    const float w = detail::route_warp_sum(ss);
    if (lane == 0) s.part[warp] = w;
  }
  __syncthreads();
  if (warp == 0) {
    float v = lane < kNormThreads / 32 ? s.part[lane] : 0.0f;
    v = detail::route_warp_sum(v);
    if (lane == 0) s.inv = rsqrtf(v / static_cast<float>(H) + a.eps);
  }
  __syncthreads();
  const float inv = s.inv;
  for (int i = tid; i < H; i += kThreads) xs[i] = bf16f(a.norm[i]) * (a.residual[i] * inv);
  __syncthreads();
}

// One expert's logit by one warp, moe_logits_kernel's order (lane l takes the 16-byte chunks l, l + 32, ...,
// eight inputs each in order, then the butterfly). rs: the block's copy of the row's first kRouterPreload
// chunks of every lane (each lane reads only the chunks it copied), or null to read the row itself.
__device__ float expert_logit(const uint16_t* row, const uint4* rs, const float* xs, int H) {
  const int lane = threadIdx.x % 32;
  const int hc = H / 8;
  float dot = 0.0f;
  for (int c = lane; c < hc; c += 32) {
    const uint4 wv =
        rs != nullptr && c < 32 * kRouterPreload ? rs[c] : __ldg(reinterpret_cast<const uint4*>(row) + c);
    const uint32_t w4[4] = {wv.x, wv.y, wv.z, wv.w};
    const float* xc = xs + 8 * c;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float x0 = xc[2 * q], x1 = xc[2 * q + 1];
      dot += x0 * bf16f(w4[q] & 0xffffu);
      dot += x1 * __uint_as_float(w4[q] & 0xffff0000u);
    }
  }
  return detail::route_warp_sum(dot);
}

// The first expert's router row of a logit block into rs (warp 0, before the PDL wait): one cp.async group of
// each lane, older than the lane's ring stages.
__device__ void preload_router_row(const uint16_t* row, int H, uint4* rs) {
  const int lane = threadIdx.x % 32;
  const WeightL2 plain{0, false};
#pragma unroll
  for (int m = 0; m < kRouterPreload; ++m) {
    const int c = lane + 32 * m;
    if (c < H / 8) copy_async16(rs + c, reinterpret_cast<const uint4*>(row) + c, true, plain);
  }
  copy_async_commit();
}

// The logit warp of a logit block (warp 0): its experts' logits, the arrival, and in the last block to
// arrive the selection and the release of the routing flag.
__device__ void route(const MoeBlockArgs& a, const MoeRouteParams& p, const MoeBlockShape& sh,
                      const uint4* rs, int ring_groups, const float* xs, float* scratch) {
  const int lane = threadIdx.x % 32, b = blockIdx.x;
  wait_groups(ring_groups);  // the preloaded row (older than the ring's groups) has landed
  for (int e = moe_block_first_expert(b, sh.grid); e < sh.E; e += sh.grid) {
    const uint16_t* row = a.router + static_cast<int64_t>(e) * sh.H;
    const float logit = expert_logit(row, e == moe_block_first_expert(b, sh.grid) ? rs : nullptr, xs, sh.H);
    if (lane == 0) a.logits[e] = logit;
  }
  int last = 0;
  if (lane == 0) {
    __threadfence();  // the logits are visible device-wide before the arrival counts
    last = atomicAdd(a.counters + kLogitArrivals, 1) == moe_block_logit_blocks(sh) - 1;
    if (last) {
      atomicExch(a.counters + kLogitArrivals, 0);  // every logit block has arrived: nobody else adds
      __threadfence();
    }
  }
  last = __shfl_sync(0xffffffffu, last, 0);
  if (!last) return;
  __threadfence();  // every lane's reads of the other blocks' logits after their arrivals
  detail::route_select_token(a.logits, a.bias, a.ids, a.weights, sh.E, p, scratch);
  if (lane == 0) {
    __threadfence();  // ids and weights before the flag
    atomicExch(a.counters + kRoutingFlag, 1);
    stamp(a, kMoeBlockStampPublished, true);
  }
}

// Whether the routing is visible to this block; the first warp to see the flag resolves the routed units'
// table (unit u >= known: expert ids[u - known], an id outside the experts reading expert 0 with factor 0,
// as resolve_unit and the row units' epilogue do). spin: wait for it.
__device__ bool routing_ready(const MoeBlockArgs& a, const MoeBlockShape& sh, BlockState& s, bool spin) {
  volatile int* state = &s.routed;
  const int lane = threadIdx.x % 32;
  const unsigned* flag = reinterpret_cast<const unsigned*>(a.counters + kRoutingFlag);
  for (;;) {
    if (*state == 2) {
      __threadfence_block();
      return true;
    }
    int seen = 0;
    if (lane == 0) seen = load_acquire_gpu(flag) != 0;
    seen = __shfl_sync(0xffffffffu, seen, 0);
    if (seen) {
      int won = 0;
      if (lane == 0) won = atomicCAS(&s.routed, 0, 1) == 0;
      won = __shfl_sync(0xffffffffu, won, 0);
      if (won) {
        const GemvMoeUnits& q = a.units;
        const int routed = sh.count - sh.known;
        (void)load_acquire_gpu(flag);  // every lane's reads of the routing after the flag
        if (lane < routed) {
          const int u = sh.known + lane;
          const int id = __ldcg(a.ids + lane);
          const bool valid = id >= 0 && id < q.experts;
          const int64_t e = valid ? id : 0;
          s.gu_w[u][0] = q.gate + e * q.gate_stride;
          s.gu_w[u][1] = q.up + e * q.up_stride;
          s.dn_w[u] = q.down + e * q.down_stride;
          s.dn_ld[u] = q.len;
          s.scale[u] = valid ? __ldcg(a.weights + lane) : 0.0f;
        }
        __threadfence_block();
        __syncwarp();
        if (lane == 0) {
          atomicExch(&s.routed, 2);
          stamp(a, kMoeBlockStampRouted, true);
        }
        return true;
      }
      while (*state != 2) {
      }
      __threadfence_block();
      return true;
    }
    if (!spin) return false;
  }
}

// A warp's weight stream: its stages in the plan's order (moe_block_plan.h) through its ring of kStages
// slots (MoeBlockRing's bookkeeping), this lane's pieces of a slot at `mine` + slot x kStage.
struct Stream {
  const MoeBlockArgs* a;
  const MoeBlockShape* sh;
  const MoeBlockWork* w;
  BlockState* s;
  uint4* mine;
  MoeBlockRing ring;
  WeightL2 l2;

  // Copies the stage at cursor `at` into slot `slot` and commits its group.
  __device__ void copy_stage(const MoeBlockCursor& at, int slot_index) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const MoeBlockStage st = at.stage(*sh, blockIdx.x);
    uint4* slot = mine + slot_index * kStage;
    if (!st.down) {
      // Rows of gate and up of the tile's unit; columns past H read as zeros.
      const int per_unit = sh->len / 16, unit = st.tile / per_unit;
      const int row = (st.tile - unit * per_unit) * 16;
      const int col = moe_block_first_column(warp, kGuU) + st.iteration * moe_block_step(kGuU);
#pragma unroll
      for (int u = 0; u < kGuU; ++u) {
        const int k0 = col + 32 * u + 8 * t;
        const bool kin = k0 < sh->H;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            copy_async16(slot + ((u * 2 + j) * 2 + h) * 32,
                         s->gu_w[unit][j] + static_cast<int64_t>(row + g + 8 * h) * sh->H + (kin ? k0 : 0),
                         kin, l2);
      }
    } else {
      // The stage's 32 kDnU columns lie in one unit (its first column and len are multiples of 32 kDnU) and
      // below K (moe_block_iterations), as the units launches' copies of them.
      const int col = moe_block_first_column(warp, kDnU) + st.iteration * moe_block_step(kDnU);
      const int unit = col / sh->len, local = col - unit * sh->len;
      const uint16_t* base = s->dn_w[unit] + local + 8 * t;
      const int64_t ld = s->dn_ld[unit];
#pragma unroll
      for (int u = 0; u < kDnU; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          copy_async16(slot + (u * 2 + h) * 32, base + 32 * u + (st.tile * 16 + g + 8 * h) * ld, true, l2);
    }
    copy_async_commit();
  }

  // Issues what the ring allows; a stage of the routed units only once the routing is visible (never
  // waiting for it here).
  __device__ void fill() {
    ring.fill(
        *w, [&](const MoeBlockCursor& at, int slot) { copy_stage(at, slot); },
        [&](bool spin) { return routing_ready(*a, *sh, *s, spin); });
  }

  // The next stage's slot once it has landed (this lane's pieces), waiting for the routing if the stage
  // could not be issued yet.
  __device__ const uint4* next() {
    int newer = 0;
    const int slot = ring.next(
        *w, [&](const MoeBlockCursor& at, int s_) { copy_stage(at, s_); },
        [&](bool spin) { return routing_ready(*a, *sh, *s, spin); }, &newer);
    wait_groups(newer);
    return mine + slot * kStage;
  }
};

// A gate/up tile's sums and its epilogue (gemv_persistent.cuh's row units: the SwiGLU of gate and up, the
// routed units' factor, act[unit len + row] stored).
__device__ void gate_up_tile(const MoeBlockArgs& a, const MoeBlockShape& sh, const MoeBlockWork& w,
                             Stream& stream, BlockState& s, const float* xs, int tile) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float acc[2][kSplits][4];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int l = 0; l < kSplits; ++l) acc[j][l][0] = acc[j][l][1] = acc[j][l][2] = acc[j][l][3] = 0.0f;
  float sumsq = 0.0f;
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  for (int i = 0; i < w.gu_iters; ++i) {
    const int col = moe_block_first_column(warp, kGuU) + i * moe_block_step(kGuU);
    float4 xv[kGuU][2];
    uint4 nv[kGuU];
#pragma unroll
    for (int u = 0; u < kGuU; ++u) {
      const int k0 = col + 32 * u + 8 * t;
      const bool xin = k0 < sh.H && g == 0;  // activation row 0 only (M = 1)
      xv[u][0] = xin ? *reinterpret_cast<const float4*>(xs + k0) : make_float4(0, 0, 0, 0);
      xv[u][1] = xin ? *reinterpret_cast<const float4*>(xs + k0 + 4) : make_float4(0, 0, 0, 0);
      nv[u] = zero4;
    }
    const uint4* slot = stream.next();
    gemv_detail::mma_stage<2, kGuU, kSplits>(xv, nv, false, slot, acc, sumsq);
  }
  __syncthreads();  // red is free: every warp is past the previous tile's epilogue
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) s.red[warp][j * 4 + i][lane] = gemv_detail::part_sum<2, kSplits>(acc, j, i);
  __syncthreads();
  const int per_unit = sh.len / 16, unit = tile / per_unit;
  const int row0 = unit * sh.len + (tile - unit * per_unit) * 16;  // the tile's first row of act
  const float unit_scale = s.scale[unit];
  gemv_detail::Params p{};
  p.limit = a.limit;
  p.accumulate = false;
  const gemv_detail::MatDesc d{nullptr, nullptr, a.act, sh.count * sh.len, 0, nullptr};
  for (int o = warp; o < 4; o += kWarps) {
    const int i = o;
    float v = 0.0f, up = 0.0f;
    for (int ww = 0; ww < kWarps; ++ww) v += s.red[ww][i][lane];
    for (int ww = 0; ww < kWarps; ++ww) up += s.red[ww][4 + i][lane];
    const int m = 2 * t + (i & 1);
    const int n = row0 + g + 8 * (i >> 1);
    if (m < 1 && n < d.N) gemv_detail::store_output<true, true>(p, d, m, n, v, up, 1.0f, unit_scale);
  }
}

// A down tile's stages [from, to) of this warp into its accumulators.
__device__ void down_stages(const MoeBlockArgs& a, const MoeBlockShape& sh, Stream& stream, int from, int to,
                            float (&acc)[1][kSplits][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int K = moe_block_down_columns(sh);
  float sumsq = 0.0f;
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  for (int i = from; i < to; ++i) {
    const int col = moe_block_first_column(warp, kDnU) + i * moe_block_step(kDnU);
    float4 xv[kDnU][2];
    uint4 nv[kDnU];
#pragma unroll
    for (int u = 0; u < kDnU; ++u) {
      const int k0 = col + 32 * u + 8 * t;
      const bool xin = k0 < K && g == 0;
      // act was written by other blocks of this launch: read through L2.
      xv[u][0] = xin ? __ldcg(reinterpret_cast<const float4*>(a.act + k0)) : make_float4(0, 0, 0, 0);
      xv[u][1] = xin ? __ldcg(reinterpret_cast<const float4*>(a.act + k0 + 4)) : make_float4(0, 0, 0, 0);
      nv[u] = zero4;
    }
    const uint4* slot = stream.next();
    gemv_detail::mma_stage<1, kDnU, kSplits>(xv, nv, false, slot, acc, sumsq);
  }
}

// A down tile's epilogue: the warps' sums in order, added to the residual (the column units' epilogue).
__device__ void down_epilogue(const MoeBlockArgs& a, const MoeBlockShape& sh, BlockState& s, int tile,
                              const float (&acc)[1][kSplits][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; ++i) s.red[warp][i][lane] = gemv_detail::part_sum<1, kSplits>(acc, 0, i);
  __syncthreads();
  gemv_detail::Params p{};
  p.accumulate = true;
  const gemv_detail::MatDesc d{nullptr, nullptr, a.residual, sh.H, 0, nullptr};
  for (int o = warp; o < 4; o += kWarps) {
    const int i = o;
    float v = 0.0f;
    for (int ww = 0; ww < kWarps; ++ww) v += s.red[ww][i][lane];
    const int m = 2 * t + (i & 1);
    const int n = tile * 16 + g + 8 * (i >> 1);
    if (m < 1 && n < d.N) gemv_detail::store_output<false>(p, d, m, n, v, 0.0f, 1.0f);
  }
}

// Every block's part of the grid barrier `counter` after a segment; a block with down work after it waits
// there, its ring filled first so that the next segment's weights load meanwhile, and stamps `passed` past
// it.
__device__ void segment_barrier(const MoeBlockArgs& a, const MoeBlockShape& sh, const MoeBlockWork& w,
                                Stream& stream, int counter, int passed) {
  grid_arrive(a.counters + counter);
  if (w.down > 0) {
    stream.fill();
    grid_wait(a.counters + counter, sh.grid);
    stamp(a, passed);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    moe_block_kernel(const MoeBlockArgs a, const MoeRouteParams p) {
  extern __shared__ uint4 smem[];  // ring [kWarps][kStages][kStage], router row, x [H], selection scratch
  __shared__ BlockState s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, b = blockIdx.x;
  const GemvMoeUnits& q = a.units;
  MoeBlockShape sh;
  sh.H = static_cast<int>(a.H);
  sh.len = static_cast<int>(q.len);
  sh.known = q.known;
  sh.count = q.count;
  sh.E = a.E;
  sh.grid = static_cast<int>(gridDim.x);
  uint4* rs = smem + static_cast<int64_t>(kWarps) * kStages * kStage;  // [32 kRouterPreload]
  float* xs = reinterpret_cast<float*>(rs + 32 * kRouterPreload);      // [H]
  float* scratch = xs + sh.H;
  const MoeBlockWork w = moe_block_work(sh, b, warp);
  stamp(a, kMoeBlockStampStart);

  // The shared units' table (their addresses need nothing from earlier kernels).
  if (threadIdx.x == 0) s.routed = 0;
  if (threadIdx.x < q.known) {
    const int u = threadIdx.x;
    s.gu_w[u][0] = q.shared_gate + u * q.len * sh.H;
    s.gu_w[u][1] = q.shared_up + u * q.len * sh.H;
    s.dn_w[u] = q.shared_down + u * q.len;
    s.dn_ld[u] = static_cast<int64_t>(q.known) * q.len;
    s.scale[u] = 1.0f;
  }
  __syncthreads();

  // The logit warp's router row and the first stages of the shared units' tiles, before the PDL wait.
  const bool logit_block = moe_block_logits_of(sh, b) > 0;
  if (logit_block && warp == 0)
    preload_router_row(a.router + static_cast<int64_t>(moe_block_first_expert(b, sh.grid)) * sh.H, sh.H, rs);
  Stream stream{&a, &sh, &w, &s, smem + static_cast<int64_t>(warp) * kStages * kStage + lane};
  stream.ring = MoeBlockRing::start(w);
  stream.l2 = weight_l2(a.weights_evict_first);
  stream.ring.prime(
      w, [&](const MoeBlockCursor& at, int slot) { stream.copy_stage(at, slot); }, kStages - 1);
  pdl_trigger();
  pdl_wait();

  form_x(a, sh.H, xs, s);
  stamp(a, kMoeBlockStampX);
  if (logit_block && warp == 0) route(a, p, sh, rs, stream.ring.issued, xs, scratch);

  // Segment 0: the shared units' gate/up tiles.
  for (int k = 0; k < w.shared; ++k) gate_up_tile(a, sh, w, stream, s, xs, b + k * sh.grid);
  stamp(a, kMoeBlockStampShared);
  segment_barrier(a, sh, w, stream, kBarrierA, kMoeBlockStampBarrierA);
  // Segment 1: the down tiles over the shared columns, after every block's shared tiles.
  float acc[kMoeBlockMaxDownTiles][1][kSplits][4];
#pragma unroll
  for (int d = 0; d < kMoeBlockMaxDownTiles; ++d)
#pragma unroll
    for (int l = 0; l < kSplits; ++l)
      acc[d][0][l][0] = acc[d][0][l][1] = acc[d][0][l][2] = acc[d][0][l][3] = 0.0f;
#pragma unroll
  for (int d = 0; d < kMoeBlockMaxDownTiles; ++d)
    if (d < w.down) down_stages(a, sh, stream, 0, w.down_shared, acc[d]);
  stamp(a, kMoeBlockStampDownShared);
  // Segment 2: the routed units' gate/up tiles.
  for (int k = w.shared; k < w.gate_up; ++k) gate_up_tile(a, sh, w, stream, s, xs, b + k * sh.grid);
  stamp(a, kMoeBlockStampGateUp);
  segment_barrier(a, sh, w, stream, kBarrierC, kMoeBlockStampBarrierC);
  // Segment 3: the down tiles over the routed columns, after every gate/up tile, and their epilogues.
#pragma unroll
  for (int d = 0; d < kMoeBlockMaxDownTiles; ++d)
    if (d < w.down) {
      down_stages(a, sh, stream, w.down_shared, w.down_iters, acc[d]);
      down_epilogue(a, sh, s, b + d * sh.grid, acc[d]);
    }

  // The last block to leave zeroes the flag and the barriers (every block is past its waits).
  copy_async_wait<0>();
  __syncthreads();
  stamp(a, kMoeBlockStampEnd);
  if (threadIdx.x == 0 && atomicAdd(a.counters + kExits, 1) == sh.grid - 1) {
    atomicExch(a.counters + kRoutingFlag, 0);
    atomicExch(a.counters + kBarrierA, 0);
    atomicExch(a.counters + kBarrierC, 0);
    atomicExch(a.counters + kExits, 0);
  }
}

// Dynamic shared memory of a launch: the ring, x [H] and the selection's scratch.
size_t dynamic_smem(int64_t H, int E, const MoeRouteParams& p) {
  const int G = p.n_group > 0 ? p.n_group : 1;
  return static_cast<size_t>(kWarps) * kStages * kStage * sizeof(uint4) +
         static_cast<size_t>(32 * kRouterPreload) * sizeof(uint4) + static_cast<size_t>(H) * sizeof(float) +
         static_cast<size_t>(detail::select_scratch_floats(E, G, p.top_k)) * sizeof(float);
}

// Whether the device runs the kernel with `smem` bytes of dynamic shared memory at one block per SM; asked
// once per size. The kernel's dynamic shared memory limit (one value per kernel, which a launch above it
// fails) is only ever raised, to the largest size asked so far.
bool kernel_fits(size_t smem) {
  static std::mutex mutex;
  static std::map<size_t, bool> known;
  static size_t allowed = 0;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(smem);
  if (it != known.end()) return it->second;
  bool fits = true;
  if (smem > allowed) {
    fits = cudaFuncSetAttribute(moe_block_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem)) == cudaSuccess;
    if (fits) allowed = smem;
  }
  int per_sm = 0;
  fits = fits &&
         cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_block_kernel, kThreads, smem) ==
             cudaSuccess &&
         per_sm >= 1;
  if (!fits) cudaGetLastError();
  known.emplace(smem, fits);
  return fits;
}

std::atomic<int64_t>& launches() {
  static std::atomic<int64_t> n{0};
  return n;
}

bool aligned_base(const uint16_t* w, int64_t stride) {
  return w != nullptr && aligned16(w) && stride % 8 == 0;
}

}  // namespace

bool moe_block_supported(const MoeBlockArgs& a, const MoeRouteParams& p) {
  const GemvMoeUnits& q = a.units;
  if (a.H < 16 || a.H > (1 << 24) || q.len < 128 || q.len > (1 << 24)) return false;
  MoeBlockShape sh;
  sh.H = static_cast<int>(a.H);
  sh.len = static_cast<int>(q.len);
  sh.known = q.known;
  sh.count = q.count;
  sh.E = a.E;
  sh.grid = device_sm_count(0);
  // The separate path must run the units launches' 16-warp shapes, whose sums the kernel repeats.
  if (arch_path() != ArchPath::kHopper || sh.grid < 1 || !moe_block_plan_covers(sh) || a.H % 8 != 0 ||
      !gemv_moe_units_wide(a.H, static_cast<int64_t>(q.count) * q.len) || q.count - q.known != p.top_k ||
      q.experts != a.E || a.E > kMaxRoutedExperts || p.top_k > a.E ||
      (p.method != MoeTopk::kGreedy && (p.n_group < 1 || p.n_group > a.E || p.topk_group < 1)))
    return false;
  if (!aligned16(a.residual) || !aligned16(a.norm) || !aligned16(a.router) || !aligned16(a.act) ||
      !aligned_base(q.gate, q.gate_stride) || !aligned_base(q.up, q.up_stride) ||
      !aligned_base(q.down, q.down_stride) ||
      (q.known > 0 && !(aligned_base(q.shared_gate, a.H) && aligned_base(q.shared_up, a.H) &&
                        aligned_base(q.shared_down, q.known * q.len))))
    return false;
  // One block a SM on every SM: the whole grid is resident, as the barriers need.
  const size_t smem = dynamic_smem(a.H, a.E, p);
  return static_cast<int64_t>(smem + sizeof(BlockState)) <= device_smem_per_block(0) && kernel_fits(smem);
}

void launch_moe_block(const MoeBlockArgs& a, const MoeRouteParams& p) {
  DSI_CHECK(moe_block_supported(a, p), "moe_block: not supported here (moe_block_supported)");
  DSI_CHECK(a.ids && a.weights && a.logits && a.counters, "moe_block: missing outputs or counters");
  const size_t smem = dynamic_smem(a.H, a.E, p);
  launch_pdl(moe_block_kernel, dim3(static_cast<unsigned>(device_sm_count(0))), dim3(kThreads), smem, a, p);
  check_launch("moe_block");
  launches().fetch_add(1);
}

int moe_block_grid() {
  return device_sm_count(0);
}

int64_t moe_block_launches() {
  return launches().load();
}

}  // namespace dsinfer::cuda
