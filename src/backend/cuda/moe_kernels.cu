// DeepSeekMoE expert kernels (routing is in moe_route_kernels.cu): a one-block permutation builds
// per-expert row offsets and tile offsets on the device; the grouped kernels launch an upper bound of tiles
// and each block finds its expert by binary search over the tile offsets (blocks past the last tile exit),
// so no expert count ever reaches the host; the combine kernel un-permutes with the routing weights (into a
// new tensor, or added to the residual).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_tile.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kPermuteThreads = 1024;
constexpr int kRowsThreads = 256;
constexpr int kCombineThreads = 128;
constexpr int kCombineBatch = 8;  // slots whose rows a combine thread loads at once
// Weight rows each warp streams: fewer for tall tiles, whose accumulators take more registers.
template <int TM>
__host__ __device__ constexpr int cols_per_warp() {
  return TM >= 8 ? 2 : 4;
}
template <int TM>
__host__ __device__ constexpr int cols_per_block() {
  return cols_per_warp<TM>() * kRowsThreads / 32;
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kPermuteThreads)
    moe_permute_kernel(const int32_t* ids, int pairs, int E, int tile_rows, int32_t* offsets, int32_t* tiles,
                       int32_t* slot_pair, int32_t* pair_slot) {
  pdl_wait();
  pdl_trigger();
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
  pdl_wait();
  pdl_trigger();
  constexpr int kCW = cols_per_warp<TM>();
  ExpertTile et;
  if (!find_expert_tile(offsets, tiles, E, blockIdx.x, TM, &et)) return;
  const int e = et.expert, row0 = et.row0, nr = et.rows;
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
        const float f1 = bf16_bits_to_float(w1r[c][kk]);
        const float f2 = kGateUp ? bf16_bits_to_float(w2r[c][kk]) : 0.0f;
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

// Block (token, slice of kCombineThreads * (kVec ? 4 : 1) outputs): the token's k slots and weights are
// read once into shared memory, then each thread sums its outputs over j = 0..k-1 in order (the loads of 8
// slots in flight at a time). kVec: float4 rows (H % 4 == 0, 16-byte aligned y and out).
template <bool kVec>
__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_kernel(const float* y, const int32_t* pair_slot, const float* weights, float* out, int k,
                       int H, bool accumulate, const float* shared_y, int shared_units) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ int32_t slots[];                 // [k]
  float* wts = reinterpret_cast<float*>(slots + k);  // [k]
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < k; j += kCombineThreads) {
    slots[j] = pair_slot[t * k + j];
    wts[j] = weights[t * k + j];
  }
  __syncthreads();
  constexpr int kW = kVec ? 4 : 1;
  const int h = (blockIdx.y * kCombineThreads + threadIdx.x) * kW;
  if (h >= H) return;
  // What the routed sum is added to: out (accumulate), then the shared experts' rows in unit order.
  auto load = [&](const float* src, float* v) {
    if (kVec) {
      const float4 f = *reinterpret_cast<const float4*>(src);
      v[0] = f.x;
      v[kW > 1 ? 1 : 0] = f.y;
      v[kW > 2 ? 2 : 0] = f.z;
      v[kW > 3 ? 3 : 0] = f.w;
    } else {
      v[0] = *src;
    }
  };
  float* dst = out + t * H + h;
  float base[kW] = {};
  if (accumulate) load(dst, base);
  for (int u = 0; u < shared_units; ++u) {
    float v[kW];
    load(shared_y + (static_cast<int64_t>(u) * gridDim.x + t) * H + h, v);
#pragma unroll
    for (int i = 0; i < kW; ++i) base[i] = accumulate || u > 0 ? base[i] + v[i] : v[i];
  }
  const bool has_base = accumulate || shared_units > 0;
  float o[kW];
#pragma unroll
  for (int i = 0; i < kW; ++i) o[i] = 0.0f;
  for (int j0 = 0; j0 < k; j0 += kCombineBatch) {
    float v[kCombineBatch][kW];
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int32_t slot = j0 + j < k ? slots[j0 + j] : -1;
      const float* src = y + static_cast<int64_t>(slot) * H + h;
      if (kVec) {
        const float4 f = slot >= 0 ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[j][0] = f.x;
        v[j][kW > 1 ? 1 : 0] = f.y;
        v[j][kW > 2 ? 2 : 0] = f.z;
        v[j][kW > 3 ? 3 : 0] = f.w;
      } else {
        v[j][0] = slot >= 0 ? *src : 0.0f;
      }
    }
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      if (j0 + j < k && slots[j0 + j] >= 0) {
        const float wj = wts[j0 + j];
#pragma unroll
        for (int i = 0; i < kW; ++i) o[i] += wj * v[j][i];
      }
    }
  }
  if (has_base) {
#pragma unroll
    for (int i = 0; i < kW; ++i) o[i] = base[i] + o[i];
  }
  if (kVec) {
    *reinterpret_cast<float4*>(dst) =
        make_float4(o[0], o[kW > 1 ? 1 : 0], o[kW > 2 ? 2 : 0], o[kW > 3 ? 3 : 0]);
  } else {
    dst[0] = o[0];
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
    launch_pdl(moe_rows_kernel<kGateUp, true, TM>, grid, kRowsThreads, 0, a, topk, offsets, tiles, slot_pair,
               w1, w2, out, static_cast<int>(E), static_cast<int>(K), static_cast<int>(N), limit);
  } else {
    launch_pdl(moe_rows_kernel<kGateUp, false, TM>, grid, kRowsThreads, 0, a, topk, offsets, tiles, slot_pair,
               w1, w2, out, static_cast<int>(E), static_cast<int>(K), static_cast<int>(N), limit);
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

void launch_moe_permute(const int32_t* ids, int64_t pairs, int64_t E, int tile_rows, int32_t* offsets,
                        int32_t* tiles, int32_t* slot_pair, int32_t* pair_slot) {
  DSI_CHECK(E > 0 && E <= 4096, "moe_experts: ", E, " experts (the CUDA kernels take up to 4096)");
  DSI_CHECK(tile_rows > 0, "moe_experts: bad tile size");
  launch_pdl(moe_permute_kernel, 1, kPermuteThreads, static_cast<size_t>(2 * E) * sizeof(int32_t), ids,
             static_cast<int>(pairs), static_cast<int>(E), tile_rows, offsets, tiles, slot_pair, pair_slot);
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
                        int64_t k, int64_t H, bool accumulate, const float* shared_y, int64_t shared_units) {
  if (T == 0 || H == 0) return;
  DSI_CHECK(shared_units == 0 || (shared_y && shared_units < 65536), "moe_combine: ", shared_units,
            " shared units");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = H % 4 == 0 && aligned(y) && aligned(out) && (shared_units == 0 || aligned(shared_y));
  const int64_t per_block = kCombineThreads * (vec ? 4 : 1);
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>((H + per_block - 1) / per_block));
  const size_t smem = static_cast<size_t>(k) * (sizeof(int32_t) + sizeof(float));
  DSI_CHECK(smem <= 48 * 1024 && grid.y <= 65535, "moe_combine: top_k ", k, ", hidden ", H, " too large");
  if (vec) {
    launch_pdl(moe_combine_kernel<true>, grid, kCombineThreads, smem, y, pair_slot, weights, out,
               static_cast<int>(k), static_cast<int>(H), accumulate, shared_y,
               static_cast<int>(shared_units));
  } else {
    launch_pdl(moe_combine_kernel<false>, grid, kCombineThreads, smem, y, pair_slot, weights, out,
               static_cast<int>(k), static_cast<int>(H), accumulate, shared_y,
               static_cast<int>(shared_units));
  }
  check_launch("moe_combine");
}

}  // namespace dsinfer::cuda
