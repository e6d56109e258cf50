// The decode routing of a DeepSeekMoE layer in one launch: RMSNorm of the residual, router logits, top-k
// selection and the permutation of the (token, slot) pairs by expert, for up to kMoeNormRouteMaxTokens
// tokens. Many small blocks (one to eight experts each, about 64 to 128 blocks) so the router's bytes are in
// flight at once: every thread loads its share of the block's router rows and of the norm weight before the
// PDL wait (weights depend on no earlier kernel), then each block normalises every token itself (the sum of
// squares in launch_rms_norm's order, all of a thread's loads issued together), writes one slice of x and
// computes its experts' logits in moe_logits_kernel's order (x formed on the fly, the weights from shared
// memory). The last block to arrive (an arrival counter it resets, as the MLA fused merge) selects every
// token's experts with all its warps (route_select_block, the bits of moe_select_kernel) and builds the
// permutation (every pair's row and every expert's offsets counted directly from the ids, no atomics, no
// serial scan), its pairs in pair order within an expert. In the cluster form (Hopper, routers of at most
// 64 experts: one thread block cluster of up to 8 CTAs) every CTA sends its logits into the first CTA's
// shared memory by asynchronous remote stores that complete on that CTA's mbarrier, and the first CTA
// selects once they have all landed: no device-wide fence, arrival atomic or L2 round trip for the logits.
// Outputs equal, bit for bit, launch_rms_norm + launch_moe_route + launch_moe_permute in either form.
// While GEMV stamps are on (gemv_stamps.h) a one-token launch runs the STAMPS instance (same bits), as a
// launch of 0 rows, K = E and H as its tiles: thread 0 of each CTA records start, waited (the PDL wait
// returned), normed (1 / rms known), arrived (its logits out; the selecting CTA: every logit there), selected
// and end (the selecting CTA; the others repeat arrived); one row more (grid + 1 "blocks") holds the
// selection's steps (route_select_block's marks 0-4: scored, groups masked, candidates, ranked, weights
// written).
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/cluster_common.cuh"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_merge.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_select.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "backend/cuda/tma_common.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;  // the RMSNorm kernel's block: its sums of squares follow these 256 threads
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRouterChunks = 8;  // 16-byte router chunks per thread loaded before the PDL wait
constexpr int kMaxNormChunks = 4;    // 16-byte norm chunks per thread (hidden up to 8192)
constexpr int kBlocksTarget = 128;   // experts per block double (up to 8) while there would be more blocks
constexpr int kDotBatch = 4;         // 256-column steps of a logit whose loads go out together
constexpr size_t kSmemLimit = 47 * 1024;
// The stamped instance's points (gemv_stamps.h's six slots, in this kernel's meaning).
constexpr int kPtStart = 0, kPtWaited = 1, kPtNormed = 2, kPtArrived = 3, kPtSelected = 4, kPtEnd = 5;
static_assert(kStampPoints == 6, "moe_norm_route stamps six points");
// Experts a cluster CTA takes at hidden 2048 (each router row 2048 / 8 chunks of 16 bytes).
constexpr int kClusterMaxEpb = kMaxRouterChunks * kThreads / (2048 / 8);
constexpr int kClusterMaxExperts = kMoeRouteClusterCtas * kClusterMaxEpb;

// Shared memory of the logits phase: the block's router rows [epb, H] and the norm weight [H], bf16.
size_t weights_smem(int epb, int H) {
  return static_cast<size_t>(epb + 1) * H * sizeof(uint16_t);
}

// Shared memory of the last block: route_select_block's scratch, then per pair its expert's count and
// whether it is the expert's first pair.
size_t select_smem(int T, int E, const MoeRouteParams& p) {
  const int G = std::max(p.n_group, 1);
  return (static_cast<size_t>(detail::select_block_scratch_floats(T, E, G, p.top_k)) +
          2 * static_cast<size_t>(T) * p.top_k) *
         sizeof(float);
}

// Experts per block: powers of two up to 8, as few as keep the grid at kBlocksTarget blocks or fewer, and
// within the chunks a thread preloads and the shared memory.
int experts_per_block(int E, int H) {
  int epb = 1;
  while (epb < 8 && (E + epb - 1) / epb > kBlocksTarget) epb *= 2;
  while (epb > 1 && (epb * (H / 8) > kMaxRouterChunks * kThreads || weights_smem(epb, H) > kSmemLimit))
    epb /= 2;
  return epb;
}

// The cluster form's experts per CTA: the E experts over at most kMoeRouteClusterCtas CTAs.
int cluster_experts_per_block(int E) {
  return (E + kMoeRouteClusterCtas - 1) / kMoeRouteClusterCtas;
}

// CLUSTER: the grid is one thread block cluster (the cluster form above). STAMPS: the stamped instance.
template <int kT, bool CLUSTER, bool STAMPS>
__global__ void __launch_bounds__(kThreads)
    moe_norm_route_kernel(MoeNormRouteArgs a, MoeRouteParams p, int epb, uint64_t* stamps) {
  // Row `row` of the launch's slot: a CTA's points, or (row gridDim.x) the selection's steps.
  auto stamp = [stamps](int64_t row, int point) {
    if constexpr (STAMPS) {
      if (threadIdx.x == 0) {
        uint64_t now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        stamps[row * kGemvStampFields + point] = now;
      }
    }
  };
  auto st = [&](int point) { stamp(blockIdx.x, point); };
  // Points 3 to 5 of a CTA that does not select: the time its logits are out.
  auto st_done = [&]() {
    st(kPtArrived);
    st(kPtSelected);
    st(kPtEnd);
  };
  st(kPtStart);
  extern __shared__ uint4 smem[];
  __shared__ float s_part[kT][kWarps];  // per-warp sums of squares
  __shared__ float s_inv[kT];           // 1 / rms of each token
  __shared__ int s_flag;
  // The cluster form: the first CTA's inbox, logits [T, E] and the mbarrier their stores complete on.
  __shared__ float s_logits[CLUSTER ? kT * kClusterMaxExperts : 1];
  __shared__ __align__(8) uint64_t s_inbox;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int T = a.T, H = a.H, E = a.E, hc = H / 8;  // hc: 16-byte chunks of a row
  const int e0 = blockIdx.x * epb, ne = min(epb, E - e0);
  const int rchunks = ne * hc;
  int rank = 0;
  if constexpr (CLUSTER) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap();  // clusters are Hopper's: the launch takes this form on the Hopper path only
#endif
    rank = detail::cluster_rank();
    if (rank == 0 && tid == 0) {
      const uint32_t bar = detail::smem_addr(&s_inbox);
      tma::mbar_init(bar, 1);
      tma::mbar_init_fence();
      tma::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(T * E * sizeof(float)));
    }
    detail::cluster_arrive_relaxed();
  }

  // The block's router rows [ne, H] (contiguous) and the norm weight: loads issued before the wait.
  const uint4* rsrc = reinterpret_cast<const uint4*>(a.router + static_cast<int64_t>(e0) * H);
  const uint4* nsrc = reinterpret_cast<const uint4*>(a.norm);
  uint4 rv[kMaxRouterChunks], nv[kMaxNormChunks];
#pragma unroll
  for (int m = 0; m < kMaxRouterChunks; ++m) {
    const int c = tid + m * kThreads;
    if (c < rchunks) rv[m] = __ldg(rsrc + c);
  }
#pragma unroll
  for (int m = 0; m < kMaxNormChunks; ++m) {
    const int c = tid + m * kThreads;
    if (c < hc) nv[m] = __ldg(nsrc + c);
  }
  pdl_wait();
  pdl_trigger();
  st(kPtWaited);

  // Sums of squares, block_inv_rms's order: thread tid over columns tid + 256 j in order, kB columns of
  // every token loaded at once, then a butterfly per warp and one warp per token over the warps' sums.
  constexpr int kB = 32 / kT;
  float ss[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) ss[t] = 0.0f;
  for (int i0 = tid; i0 < H; i0 += kB * kThreads) {
    float v[kT][kB];
#pragma unroll
    for (int t = 0; t < kT; ++t)
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const int i = i0 + b * kThreads;
        v[t][b] = t < T && i < H ? a.h[static_cast<int64_t>(t) * H + i] : 0.0f;
      }
#pragma unroll
    for (int t = 0; t < kT; ++t)
#pragma unroll
      for (int b = 0; b < kB; ++b)
        if (t < T && i0 + b * kThreads < H) ss[t] += v[t][b] * v[t][b];
  }
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const float s = detail::route_warp_sum(ss[t]);
    if (lane == 0) s_part[t][warp] = s;
  }
  uint4* s_router = smem;           // [ne, hc] this block's router rows
  uint4* s_norm = smem + epb * hc;  // [hc] the norm weight
#pragma unroll
  for (int m = 0; m < kMaxRouterChunks; ++m) {
    const int c = tid + m * kThreads;
    if (c < rchunks) s_router[c] = rv[m];
  }
#pragma unroll
  for (int m = 0; m < kMaxNormChunks; ++m) {
    const int c = tid + m * kThreads;
    if (c < hc) s_norm[c] = nv[m];
  }
  __syncthreads();
  if (warp < T) {
    float v = lane < kWarps ? s_part[warp][lane] : 0.0f;
    v = detail::route_warp_sum(v);
    if (lane == 0) s_inv[warp] = rsqrtf(v / static_cast<float>(H) + a.eps);
  }
  __syncthreads();
  st(kPtNormed);

  // x [T, H]: this block's slice of the columns, rms_norm_kernel's expression.
  const uint16_t* s_norm16 = reinterpret_cast<const uint16_t*>(s_norm);
  for (int i = blockIdx.x * kThreads + tid; i < H; i += gridDim.x * kThreads) {
    const float nw = bf16_bits_to_float(s_norm16[i]);
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      if (t < T) {
        const int64_t at = static_cast<int64_t>(t) * H + i;
        a.x[at] = nw * (a.h[at] * s_inv[t]);
      }
    }
  }

  // logits [T, E]: one warp per (expert, token) of the block; lane l takes inputs 8l + 256i in order, x
  // formed as above, the products summed in moe_logits_kernel's order, then its butterfly. The cluster form
  // stores them into the first CTA's inbox, once every CTA has started (and the inbox is set up).
  if constexpr (CLUSTER) detail::cluster_wait_started();
  for (int item = warp; item < ne * T; item += kWarps) {
    const int j = item / T, t = item % T;
    const uint4* wr = s_router + j * hc;
    const float* ht = a.h + static_cast<int64_t>(t) * H;
    const float inv = s_inv[t];
    float dot = 0.0f;
    for (int c0 = lane; c0 < hc; c0 += 32 * kDotBatch) {
      uint4 wv[kDotBatch], nb[kDotBatch];
      float4 h0[kDotBatch], h1[kDotBatch];
#pragma unroll
      for (int b = 0; b < kDotBatch; ++b) {
        const int c = c0 + 32 * b;
        if (c < hc) {
          wv[b] = wr[c];
          nb[b] = s_norm[c];
          h0[b] = __ldg(reinterpret_cast<const float4*>(ht + 8 * c));
          h1[b] = __ldg(reinterpret_cast<const float4*>(ht + 8 * c + 4));
        }
      }
#pragma unroll
      for (int b = 0; b < kDotBatch; ++b) {
        if (c0 + 32 * b < hc) {
          const uint32_t w4[4] = {wv[b].x, wv[b].y, wv[b].z, wv[b].w};
          const uint32_t n4[4] = {nb[b].x, nb[b].y, nb[b].z, nb[b].w};
          const float hv[8] = {h0[b].x, h0[b].y, h0[b].z, h0[b].w, h1[b].x, h1[b].y, h1[b].z, h1[b].w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float x0 = bf16_bits_to_float(n4[q] & 0xffffu) * (hv[2 * q] * inv);
            const float x1 = __uint_as_float(n4[q] & 0xffff0000u) * (hv[2 * q + 1] * inv);
            dot += x0 * bf16_bits_to_float(w4[q] & 0xffffu);
            dot += x1 * __uint_as_float(w4[q] & 0xffff0000u);
          }
        }
      }
    }
    dot = detail::route_warp_sum(dot);
    if (lane == 0) {
      if constexpr (CLUSTER) {
        detail::store_async(detail::map_rank(detail::smem_addr(&s_logits[t * E + e0 + j]), 0), dot,
                            detail::map_rank(detail::smem_addr(&s_inbox), 0));
      } else {
        a.logits[static_cast<int64_t>(t) * E + e0 + j] = dot;
      }
    }
  }

  // The last block to arrive (the cluster form: the first CTA, once every logit has landed) routes every
  // token with all its warps (its shared memory reused).
  const float* logits = a.logits;
  if constexpr (CLUSTER) {
    if (rank != 0) {
      st_done();
      return;
    }
    tma::mbar_wait(detail::smem_addr(&s_inbox), 0u);
    logits = s_logits;
  } else {
    if (!detail::mla_arrive_last(a.arrivals, static_cast<int>(gridDim.x), &s_flag)) {
      st_done();
      return;
    }
  }
  st(kPtArrived);
  float* scratch = reinterpret_cast<float*>(smem);
  const int32_t* ids_s = detail::route_select_block<CLUSTER>(
      logits, a.bias, a.ids, a.weights, T, E, p, scratch, [&](int step) { stamp(gridDim.x, step); });
  st(kPtSelected);
  if (a.tile_rows <= 0) {
    st(kPtEnd);
    return;
  }

  // The permutation, counted from the ids: pair i's row is (pairs of lower experts) + (earlier pairs of its
  // expert); an expert's offsets count the pairs (and tiles of the experts) below it.
  const int G = p.n_group > 0 ? p.n_group : 1, K = p.top_k;
  const int pairs = T * K, tile_rows = a.tile_rows;
  int* s_cnt = reinterpret_cast<int*>(scratch + detail::select_block_scratch_floats(T, E, G, K));  // [pairs]
  int* s_first = s_cnt + pairs;                                                                    // [pairs]
  for (int i = tid; i < pairs; i += kThreads) {
    const int x = ids_s[i];
    int cnt = 0, before = 0, below = 0;
    for (int j = 0; j < pairs; ++j) {
      const int y = ids_s[j];
      cnt += y == x;
      before += y == x && j < i;
      below += y >= 0 && y < x;
    }
    s_cnt[i] = cnt;
    s_first[i] = before == 0;
    if (x >= 0 && x < E) {
      a.slot_pair[below + before] = i;
      a.pair_slot[i] = below + before;
    } else {
      a.pair_slot[i] = -1;
    }
  }
  __syncthreads();
  for (int x = tid; x <= E; x += kThreads) {
    int off = 0, tl = 0;
    for (int j = 0; j < pairs; ++j) {
      const int y = ids_s[j];
      if (y >= 0 && y < x) {
        ++off;
        if (s_first[j]) tl += (s_cnt[j] + tile_rows - 1) / tile_rows;
      }
    }
    a.offsets[x] = off;
    a.tiles[x] = tl;
  }
  st(kPtEnd);
}

// The launch for kT tokens (next_pow2(T)): one cluster of `blocks` CTAs or a plain grid; the stamped
// instance (one token only) where `stamps` is a slot.
template <int kT, bool STAMPS>
void launch_instance(const MoeNormRouteArgs& a, const MoeRouteParams& p, int epb, unsigned blocks,
                     size_t smem, uint64_t* stamps) {
  if (a.cluster) {
    launch_pdl_cluster(moe_norm_route_kernel<kT, true, STAMPS>, blocks, kThreads, smem, dim3(blocks, 1, 1), a,
                       p, epb, stamps);
  } else {
    launch_pdl(moe_norm_route_kernel<kT, false, STAMPS>, blocks, kThreads, smem, a, p, epb, stamps);
  }
}

template <int kT>
void launch_tokens(const MoeNormRouteArgs& a, const MoeRouteParams& p, int epb, unsigned blocks,
                   size_t smem) {
  if constexpr (kT == 1) {
    if (uint64_t* stamps = next_gemv_stamp_slot(0, a.E, false, blocks + 1, a.H)) {
      launch_instance<kT, true>(a, p, epb, blocks, smem, stamps);
      return;
    }
  }
  launch_instance<kT, false>(a, p, epb, blocks, smem, nullptr);
}

}  // namespace

bool moe_norm_route_supported(const MoeNormRouteArgs& a, const MoeRouteParams& p) {
  if (!(a.T >= 1 && a.T <= kMoeNormRouteMaxTokens && a.H >= 8 && a.H % 8 == 0 &&
        a.H / 8 <= kMaxNormChunks * kThreads && a.E >= 1 && a.E <= kMaxRoutedExperts && p.top_k >= 1 &&
        p.top_k <= a.E &&
        (p.method == MoeTopk::kGreedy || (p.n_group >= 1 && p.n_group <= a.E && p.topk_group >= 1)) &&
        aligned16(a.h) && aligned16(a.norm) && aligned16(a.router) && aligned16(a.x)))
    return false;
  const int epb = experts_per_block(a.E, a.H);
  return epb * (a.H / 8) <= kMaxRouterChunks * kThreads && weights_smem(epb, a.H) <= kSmemLimit &&
         select_smem(a.T, a.E, p) <= kSmemLimit;
}

bool moe_norm_route_cluster_supported(const MoeNormRouteArgs& a, const MoeRouteParams& p) {
  if (arch_path() != ArchPath::kHopper || !moe_norm_route_supported(a, p) || a.E > kClusterMaxExperts)
    return false;
  const int epb = cluster_experts_per_block(a.E);
  return epb * (a.H / 8) <= kMaxRouterChunks * kThreads && weights_smem(epb, a.H) <= kSmemLimit;
}

void launch_moe_norm_route(const MoeNormRouteArgs& a, const MoeRouteParams& p) {
  DSI_CHECK(moe_norm_route_supported(a, p), "moe_norm_route: unsupported shape (T ", a.T, ", hidden ", a.H,
            ", ", a.E, " experts, top ", p.top_k, ") or unaligned operands");
  DSI_CHECK(!a.cluster || moe_norm_route_cluster_supported(a, p),
            "moe_norm_route: the cluster form does not take ", a.E, " experts at hidden ", a.H,
            " (or this is not the Hopper path)");
  DSI_CHECK(a.cluster || (a.arrivals != nullptr && a.logits != nullptr),
            "moe_norm_route: no arrival counter or logits scratch");
  const int epb = a.cluster ? cluster_experts_per_block(a.E) : experts_per_block(a.E, a.H);
  const unsigned blocks = static_cast<unsigned>((a.E + epb - 1) / epb);
  const size_t smem = std::max(weights_smem(epb, a.H), select_smem(a.T, a.E, p));
  // Chosen on next_pow2(T), as every launch of a graph bucket.
  if (a.T <= 1) {
    launch_tokens<1>(a, p, epb, blocks, smem);
  } else if (a.T <= 2) {
    launch_tokens<2>(a, p, epb, blocks, smem);
  } else if (a.T <= 4) {
    launch_tokens<4>(a, p, epb, blocks, smem);
  } else {
    launch_tokens<8>(a, p, epb, blocks, smem);
  }
  check_launch("moe_norm_route");
}

}  // namespace dsinfer::cuda
