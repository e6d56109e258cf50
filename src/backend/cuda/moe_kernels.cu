// DeepSeekMoE kernels. Routing: one block per token computes the router logits (one warp per expert, the
// same summation order for every expert, so equal router rows tie exactly), then warp 0 scores, masks
// groups and picks the top k by repeated arg-max (ties: lower index). Experts: a one-block permutation
// builds per-expert row offsets and tile offsets on the device; the grouped kernels launch an upper bound
// of tiles and each block finds its expert by binary search over the tile offsets (blocks past the last
// tile exit), so no expert count ever reaches the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kRouteBatch = 8;  // experts a warp scores at once
constexpr int kPermuteThreads = 1024;
constexpr int kRowsThreads = 256;
// Weight rows each warp streams: fewer for tall tiles, whose accumulators take more registers.
template <int TM>
__host__ __device__ constexpr int cols_per_warp() {
  return TM >= 8 ? 2 : 4;
}
template <int TM>
__host__ __device__ constexpr int cols_per_block() {
  return cols_per_warp<TM>() * kRowsThreads / 32;
}

__device__ __forceinline__ float bf16f(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ bool better(float v1, int i1, float v2, int i2) {
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

// Index of the largest vals[i], i < n, not taken (ties: lower index), on every lane of the warp; -1 if none.
__device__ int warp_argmax(const float* vals, const unsigned char* taken, int n) {
  const int lane = threadIdx.x % 32;
  float bv = 0.0f;
  int bi = -1;
  for (int i = lane; i < n; i += 32) {
    if (!taken[i] && (bi < 0 || better(vals[i], i, bv, bi))) {
      bv = vals[i];
      bi = i;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || better(ov, oi, bv, bi))) {
      bv = ov;
      bi = oi;
    }
  }
  return bi;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kRouteThreads)
    moe_route_kernel(const float* x, const uint16_t* router, const float* bias, int32_t* ids, float* wout,
                     int H, int E, MoeRouteParams p, bool vec) {
  extern __shared__ float smem[];
  const int G = p.n_group > 0 ? p.n_group : 1, K = p.top_k;
  float* xs = smem;                                                     // [H]
  float* score = xs + H;                                                // [E] logits, then scores
  float* sel = score + E;                                               // [E] selection values
  float* gscore = sel + E;                                              // [G]
  int* chosen = reinterpret_cast<int*>(gscore + G);                     // [K]
  unsigned char* taken = reinterpret_cast<unsigned char*>(chosen + K);  // [max(E, G)]
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
#pragma unroll 4
  for (int i = tid; i < H; i += kRouteThreads) xs[i] = x[t * H + i];
  __syncthreads();
  if (vec) {
    // Each warp takes kRouteBatch experts at a time (their weight loads in flight together), each lane 8
    // inputs per step: every expert's dot product is summed in the same order.
    for (int e0 = warp * kRouteBatch; e0 < E; e0 += kRouteThreads / 32 * kRouteBatch) {
      float dot[kRouteBatch];
#pragma unroll
      for (int j = 0; j < kRouteBatch; ++j) dot[j] = 0.0f;
      for (int kk = lane * 8; kk < H; kk += 256) {
        const float4 x0 = *reinterpret_cast<const float4*>(xs + kk);
        const float4 x1 = *reinterpret_cast<const float4*>(xs + kk + 4);
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int j = 0; j < kRouteBatch; ++j) {
          if (e0 + j < E) {
            const uint4 v = *reinterpret_cast<const uint4*>(router + static_cast<int64_t>(e0 + j) * H + kk);
            const uint32_t b[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              dot[j] += xv[2 * i] * __uint_as_float(b[i] << 16);
              dot[j] += xv[2 * i + 1] * __uint_as_float(b[i] & 0xffff0000u);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kRouteBatch; ++j) {
        const float d = warp_sum(dot[j]);
        if (lane == 0 && e0 + j < E) score[e0 + j] = d;
      }
    }
  } else {
    for (int e = warp; e < E; e += kRouteThreads / 32) {
      const uint16_t* w = router + static_cast<int64_t>(e) * H;
      float dot = 0.0f;
      for (int i = lane; i < H; i += 32) dot += xs[i] * bf16f(w[i]);
      dot = warp_sum(dot);
      if (lane == 0) score[e] = dot;
    }
  }
  __syncthreads();
  if (warp != 0) return;

  if (p.scoring == MoeScoring::kSoftmax) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, score[e]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (score[e] = expf(score[e] - mx));
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) score[e] /= sum;
  } else if (p.scoring == MoeScoring::kSigmoid) {
    for (int e = lane; e < E; e += 32) score[e] = 1.0f / (1.0f + expf(-score[e]));
  } else {
    for (int e = lane; e < E; e += 32) {
      const float s = score[e];
      score[e] = sqrtf(s > 20.0f ? s : log1pf(expf(s)));
    }
  }
  for (int e = lane; e < E; e += 32) {
    sel[e] = score[e] + (p.method == MoeTopk::kNoauxTc && bias ? bias[e] : 0.0f);
    taken[e] = 0;
  }
  __syncwarp();

  if (p.method != MoeTopk::kGreedy) {
    const int per = E / G;
    for (int g = lane; g < G; g += 32) {
      const float* grp = sel + g * per;
      float m1 = -INFINITY, m2 = -INFINITY;
      int i1 = -1;
      for (int i = 0; i < per; ++i)
        if (i1 < 0 || grp[i] > m1) {
          m1 = grp[i];
          i1 = i;
        }
      if (p.method == MoeTopk::kNoauxTc && per >= 2) {
        int i2 = -1;
        for (int i = 0; i < per; ++i)
          if (i != i1 && (i2 < 0 || grp[i] > m2)) {
            m2 = grp[i];
            i2 = i;
          }
        gscore[g] = m1 + m2;
      } else {
        gscore[g] = m1;
      }
    }
    __syncwarp();
    for (int r = 0; r < p.topk_group && r < G; ++r) {
      const int gi = warp_argmax(gscore, taken, G);
      if (lane == 0 && gi >= 0) taken[gi] = 1;
      __syncwarp();
    }
    for (int e = lane; e < E; e += 32) {
      const int g = e / per;
      if (!(g < G && taken[g])) sel[e] = 0.0f;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32) taken[e] = 0;
    __syncwarp();
  }

  for (int k = 0; k < K; ++k) {
    const int ei = warp_argmax(sel, taken, E);
    if (lane == 0) {
      chosen[k] = ei;
      taken[ei] = 1;
    }
    __syncwarp();
  }
  if (lane == 0) {
    float denom = 0.0f;
    for (int k = 0; k < K; ++k) denom += score[chosen[k]];
    const bool norm = p.norm_topk_prob && (K > 1 || p.scoring != MoeScoring::kSoftmax);
    for (int k = 0; k < K; ++k) {
      float w = score[chosen[k]];
      if (norm) w /= (denom + 1e-20f);
      ids[t * K + k] = chosen[k];
      wout[t * K + k] = w * p.routed_scaling_factor;
    }
  }
}

__global__ void __launch_bounds__(kPermuteThreads)
    moe_permute_kernel(const int32_t* ids, int pairs, int E, int tile_rows, int32_t* offsets, int32_t* tiles,
                       int32_t* slot_pair, int32_t* pair_slot) {
  extern __shared__ int32_t counts[];  // [E] counts, then [E] cursors
  int32_t* cursor = counts + E;
  for (int e = threadIdx.x; e < E; e += kPermuteThreads) counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += kPermuteThreads) {
    const int e = ids[i];
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t off = 0, tl = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = off;
      tiles[e] = tl;
      cursor[e] = off;
      off += counts[e];
      tl += (counts[e] + tile_rows - 1) / tile_rows;
    }
    offsets[E] = off;
    tiles[E] = tl;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += kPermuteThreads) {
    const int e = ids[i];
    if (e >= 0 && e < E) {
      const int32_t slot = atomicAdd(&cursor[e], 1);
      slot_pair[slot] = i;
      pair_slot[i] = slot;
    } else {
      pair_slot[i] = -1;
    }
  }
}

// One block: a tile of up to TM (1, 2, 4 or 8) permuted rows of one expert x cols_per_block<TM>() outputs;
// each warp streams kCW weight rows (of w1, and of w2 for gate/up) once for all the tile's rows.
// kGateUp: rows of a are x[slot_pair[r] / topk], out = silu(a w1^T) * (a w2^T); else rows of a are the
// permuted rows themselves and out = a w1^T.
template <bool kGateUp, bool kVec, int TM>
__global__ void __launch_bounds__(kRowsThreads)
    moe_rows_kernel(const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                    const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int E, int K,
                    int N, float limit) {
  constexpr int kCW = cols_per_warp<TM>();
  const int tile = blockIdx.x;
  if (tile >= tiles[E]) return;
  int lo = 0, hi = E;  // tiles[lo] <= tile < tiles[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tiles[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int e = lo;
  const int row0 = offsets[e] + (tile - tiles[e]) * TM;
  const int nr = min(TM, offsets[e + 1] - row0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = blockIdx.y * cols_per_block<TM>() + warp * kCW;
  if (n0 >= N) return;
  const float* arow[TM];
#pragma unroll
  for (int r = 0; r < TM; ++r) {
    const int rr = row0 + min(r, nr - 1);
    const int src = kGateUp ? slot_pair[rr] / topk : rr;
    arow[r] = a + static_cast<int64_t>(src) * K;
  }
  const uint16_t* w1r[kCW];
  const uint16_t* w2r[kCW];
#pragma unroll
  for (int c = 0; c < kCW; ++c) {
    const int n = min(n0 + c, N - 1);
    w1r[c] = w1.base + e * w1.stride + static_cast<int64_t>(n) * K;
    w2r[c] = kGateUp ? w2.base + e * w2.stride + static_cast<int64_t>(n) * K : nullptr;
  }
  float acc1[kCW][TM], acc2[kCW][TM];
#pragma unroll
  for (int c = 0; c < kCW; ++c)
#pragma unroll
    for (int r = 0; r < TM; ++r) acc1[c][r] = acc2[c][r] = 0.0f;

  if (kVec) {
#pragma unroll 2
    for (int kk = lane * 8; kk < K; kk += 256) {
      float av[TM][8];
#pragma unroll
      for (int r = 0; r < TM; ++r) {
        if (r < nr) {
          const float4 lo4 = *reinterpret_cast<const float4*>(arow[r] + kk);
          const float4 hi4 = *reinterpret_cast<const float4*>(arow[r] + kk + 4);
          av[r][0] = lo4.x, av[r][1] = lo4.y, av[r][2] = lo4.z, av[r][3] = lo4.w;
          av[r][4] = hi4.x, av[r][5] = hi4.y, av[r][6] = hi4.z, av[r][7] = hi4.w;
        }
      }
#pragma unroll
      for (int c = 0; c < kCW; ++c) {
        const uint4 v1 = *reinterpret_cast<const uint4*>(w1r[c] + kk);
        const uint32_t b1[4] = {v1.x, v1.y, v1.z, v1.w};
        float f1[8], f2[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          f1[2 * i] = __uint_as_float(b1[i] << 16);
          f1[2 * i + 1] = __uint_as_float(b1[i] & 0xffff0000u);
        }
        if (kGateUp) {
          const uint4 v2 = *reinterpret_cast<const uint4*>(w2r[c] + kk);
          const uint32_t b2[4] = {v2.x, v2.y, v2.z, v2.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            f2[2 * i] = __uint_as_float(b2[i] << 16);
            f2[2 * i + 1] = __uint_as_float(b2[i] & 0xffff0000u);
          }
        }
#pragma unroll
        for (int r = 0; r < TM; ++r) {
          if (r < nr) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              acc1[c][r] += f1[i] * av[r][i];
              if (kGateUp) acc2[c][r] += f2[i] * av[r][i];
            }
          }
        }
      }
    }
  } else {
    for (int kk = lane; kk < K; kk += 32) {
#pragma unroll
      for (int c = 0; c < kCW; ++c) {
        const float f1 = bf16f(w1r[c][kk]);
        const float f2 = kGateUp ? bf16f(w2r[c][kk]) : 0.0f;
#pragma unroll
        for (int r = 0; r < TM; ++r) {
          if (r < nr) {
            const float av = arow[r][kk];
            acc1[c][r] += f1 * av;
            if (kGateUp) acc2[c][r] += f2 * av;
          }
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kCW; ++c) {
#pragma unroll
    for (int r = 0; r < TM; ++r) {
      const float g = warp_sum(acc1[c][r]);
      const float u = kGateUp ? warp_sum(acc2[c][r]) : 0.0f;
      const int n = n0 + c;
      if (lane == 0 && r < nr && n < N) {
        float v = g;
        if (kGateUp) {
          float gv = g, uv = u;
          if (limit > 0.0f) {
            gv = fminf(gv, limit);
            uv = fminf(fmaxf(uv, -limit), limit);
          }
          v = gv / (1.0f + expf(-gv)) * uv;
        }
        out[static_cast<int64_t>(row0 + r) * N + n] = v;
      }
    }
  }
}

__global__ void moe_combine_kernel(const float* y, const int32_t* pair_slot, const float* weights, float* out,
                                   int k, int H) {
  const int64_t t = blockIdx.x;
  for (int h = threadIdx.x; h < H; h += blockDim.x) {
    float o = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int32_t slot = pair_slot[t * k + j];
      if (slot >= 0) o += weights[t * k + j] * y[static_cast<int64_t>(slot) * H + h];
    }
    out[t * H + h] = o;
  }
}

template <bool kGateUp, int TM>
void launch_rows_tm(const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                    const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int64_t pairs,
                    int64_t E, int64_t K, int64_t N, float limit) {
  // Every tile holds at least one row: at most min(pairs, ceil(pairs / TM) + E) tiles.
  const int64_t max_tiles = std::min(pairs, (pairs + TM - 1) / TM + E);
  const dim3 grid(static_cast<unsigned>(max_tiles),
                  static_cast<unsigned>((N + cols_per_block<TM>() - 1) / cols_per_block<TM>()));
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = K % 8 == 0 && aligned(a) && aligned(w1.base) && w1.stride % 8 == 0 &&
                   (!kGateUp || (aligned(w2.base) && w2.stride % 8 == 0));
  if (vec) {
    moe_rows_kernel<kGateUp, true, TM><<<grid, kRowsThreads, 0, stream()>>>(
        a, topk, offsets, tiles, slot_pair, w1, w2, out, static_cast<int>(E), static_cast<int>(K),
        static_cast<int>(N), limit);
  } else {
    moe_rows_kernel<kGateUp, false, TM><<<grid, kRowsThreads, 0, stream()>>>(
        a, topk, offsets, tiles, slot_pair, w1, w2, out, static_cast<int>(E), static_cast<int>(K),
        static_cast<int>(N), limit);
  }
  check_launch(kGateUp ? "moe gate/up" : "moe down");
}

template <bool kGateUp>
void launch_rows(int tile_rows, const float* a, int topk, const int32_t* offsets, const int32_t* tiles,
                 const int32_t* slot_pair, StackedWeights w1, StackedWeights w2, float* out, int64_t pairs,
                 int64_t E, int64_t K, int64_t N, float limit) {
  switch (tile_rows) {
    case 1:
      return launch_rows_tm<kGateUp, 1>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    case 2:
      return launch_rows_tm<kGateUp, 2>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    case 4:
      return launch_rows_tm<kGateUp, 4>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    case 8:
      return launch_rows_tm<kGateUp, 8>(a, topk, offsets, tiles, slot_pair, w1, w2, out, pairs, E, K, N,
                                        limit);
    default:
      fail("moe_experts: ", tile_rows, " rows per tile (1, 2, 4 or 8)");
  }
}

}  // namespace

void launch_moe_route(const float* x, const uint16_t* router, const float* bias, int32_t* ids, float* weights,
                      int64_t T, int64_t H, int64_t E, const MoeRouteParams& p) {
  DSI_CHECK(E > 0 && E <= kMaxRoutedExperts, "moe_route: ", E, " experts (the CUDA kernel takes 1 to ",
            kMaxRoutedExperts, ")");
  DSI_CHECK(p.top_k >= 1 && p.top_k <= E, "moe_route: top_k ", p.top_k, " for ", E, " experts");
  DSI_CHECK(p.method == MoeTopk::kGreedy || (p.n_group >= 1 && p.n_group <= E && p.topk_group >= 1),
            "moe_route: bad expert groups (n_group ", p.n_group, ", topk_group ", p.topk_group, ")");
  if (T == 0) return;
  const int64_t G = std::max(p.n_group, 1);
  const size_t smem = static_cast<size_t>(H + 2 * E + G + p.top_k) * 4 + static_cast<size_t>(std::max(E, G));
  DSI_CHECK(smem <= 48 * 1024, "moe_route: hidden size ", H, " too large for the routing kernel");
  moe_route_kernel<<<static_cast<unsigned>(T), kRouteThreads, smem, stream()>>>(
      x, router, bias, ids, weights, static_cast<int>(H), static_cast<int>(E), p,
      H % 8 == 0 && reinterpret_cast<uintptr_t>(router) % 16 == 0);
  check_launch("moe_route");
}

void launch_moe_permute(const int32_t* ids, int64_t pairs, int64_t E, int tile_rows, int32_t* offsets,
                        int32_t* tiles, int32_t* slot_pair, int32_t* pair_slot) {
  DSI_CHECK(E > 0 && E <= 4096, "moe_experts: ", E, " experts (the CUDA kernels take up to 4096)");
  DSI_CHECK(tile_rows > 0, "moe_experts: bad tile size");
  moe_permute_kernel<<<1, kPermuteThreads, static_cast<size_t>(2 * E) * sizeof(int32_t), stream()>>>(
      ids, static_cast<int>(pairs), static_cast<int>(E), tile_rows, offsets, tiles, slot_pair, pair_slot);
  check_launch("moe_permute");
}

int moe_rows_per_tile(int64_t pairs, int64_t E) {
  const int64_t per_expert = (pairs + std::min(pairs, E) - 1) / std::max<int64_t>(1, std::min(pairs, E));
  return per_expert <= 1 ? 1 : per_expert <= 2 ? 2 : per_expert <= 4 ? 4 : 8;
}

void launch_moe_gate_up(int tile_rows, const float* x, int64_t k, const int32_t* offsets,
                        const int32_t* tiles, const int32_t* slot_pair, StackedWeights gate,
                        StackedWeights up, float* act, int64_t pairs, int64_t E, int64_t H, int64_t I,
                        float limit) {
  if (pairs == 0 || I == 0) return;
  launch_rows<true>(tile_rows, x, static_cast<int>(k), offsets, tiles, slot_pair, gate, up, act, pairs, E, H,
                    I, limit);
}

void launch_moe_down(int tile_rows, const float* act, const int32_t* offsets, const int32_t* tiles,
                     StackedWeights down, float* y, int64_t pairs, int64_t E, int64_t H, int64_t I) {
  if (pairs == 0 || H == 0) return;
  launch_rows<false>(tile_rows, act, 1, offsets, tiles, nullptr, down, StackedWeights{}, y, pairs, E, I, H,
                     0.0f);
}

void launch_moe_combine(const float* y, const int32_t* pair_slot, const float* weights, float* out, int64_t T,
                        int64_t k, int64_t H) {
  if (T == 0 || H == 0) return;
  moe_combine_kernel<<<static_cast<unsigned>(T), 256, 0, stream()>>>(
      y, pair_slot, weights, out, static_cast<int>(k), static_cast<int>(H));
  check_launch("moe_combine");
}

}  // namespace dsinfer::cuda
