// DeepSeek-V4's hyper-connection pre-step at decode in one launch (launch_hc_pre_fused), optionally with the
// previous sublayer's write-back (hc_post) in front: for each token one thread block cluster of kCtas CTAs
// (Hopper). CTA r bulk-copies its slice of the mixing weights fn [24, 4H] (columns [r S, (r + 1) S), S = 4H /
// kCtas) into shared memory before the PDL wait; after it, each thread forms one float4 of the token's
// streams in that slice (kPost: hc_post's expression from the old streams, y, post and comb; block r stores
// them) and the new values of its collapse column, then the CTA's 24 partial dots and sum of squares
// (block-reduced in a fixed order) go to every CTA of the cluster by asynchronous remote stores. Each CTA
// sums the kCtas partials in rank order (the same bits everywhere), forms the 24 mixes, the pre gates and its
// H / kCtas columns of the collapse; rank 0's last warp makes post and comb (hc::post_comb). One launch for
// hc_post + hc_mixes + hc_pre_finish (three); the collapse, post and comb differ from the separate kernels'
// by the mixes' reduction order only (float32 rounding), the new streams are hc_post's bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/cluster_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tma_common.cuh"
#include "backend/cuda/v4_hc_device.cuh"
#include "backend/cuda/v4_kernels.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kN = 4;              // streams (DeepSeek-V4's hc_mult)
constexpr int kM = (2 + kN) * kN;  // mixes a token
constexpr int kParts = kM + 1;     // a CTA's partial sums: the kM dots and the sum of squares
constexpr int kCtas = 8;           // CTAs of a token's cluster (the portable cluster size)
constexpr int kThreads = 512;      // one float4 of the slice and one collapse column a thread
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHidden = 4 * kThreads * kCtas / kN;  // S / 4 <= kThreads: 4096
constexpr int kMaxTokens = 64;

// Dynamic shared memory: the fn slice [kM, S] floats (reused for the partials [kParts, kThreads]).
size_t weights_smem(int64_t H) {
  const size_t slice = static_cast<size_t>(kN * H / kCtas);
  const size_t partials = static_cast<size_t>(kParts) * kThreads;
  return (kM * slice > partials ? kM * slice : partials) * sizeof(float);
}

template <bool kPost>
__global__ void __launch_bounds__(kThreads) hc_pre_fused_kernel(HcFusedArgs a) {
  extern __shared__ float4 smem4[];
  float* s_fn = reinterpret_cast<float*>(smem4);  // [kM, S]; then the partials [kParts, kThreads]
  __shared__ float s_inbox[kCtas][kParts];        // every CTA's partial sums, by rank
  __shared__ float s_mix[kM];
  __shared__ __align__(8) uint64_t s_fn_bar;
  __shared__ __align__(8) uint64_t s_inbox_bar;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int rank = detail::cluster_rank();
  const int64_t t = blockIdx.y;
  const int H = a.H, F = kN * H, S = F / kCtas, Hc = H / kCtas;
  const uint32_t fn_bar = detail::smem_addr(&s_fn_bar), inbox_bar = detail::smem_addr(&s_inbox_bar);

  // Weights, before the wait: the fn slice by bulk copies (one row segment each), the gates' weights.
  if (tid == 0) {
    tma::mbar_init(fn_bar, 1);
    tma::mbar_init(inbox_bar, 1);
    tma::mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    tma::mbar_arrive_expect_tx(fn_bar, static_cast<uint32_t>(kM * S * sizeof(float)));
    for (int m = 0; m < kM; ++m)
      tma::bulk_load(detail::smem_addr(s_fn + m * S), a.fn + static_cast<int64_t>(m) * F + rank * S,
                     static_cast<uint32_t>(S * sizeof(float)), fn_bar);
    tma::mbar_arrive_expect_tx(inbox_bar, static_cast<uint32_t>(kCtas * kParts * sizeof(float)));
  }
  const bool comb_warp = rank == 0 && warp == kWarps - 1;
  hc::PostCombWeights<kN> pw;
  if (comb_warp) pw.load(a.base, a.scale);
  const float s0 = a.scale[0];
  float bpre[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) bpre[j] = a.base[j];
  detail::cluster_arrive_relaxed();
  pdl_wait();
  pdl_trigger();

  // The slice's float4 q = tid (flat value e = r S + 4 q of the token's [n, H] streams: stream k, column i)
  // and the collapse column ci = r Hc + tid, formed after the wait with all loads in flight together.
  const float* xt = a.x + t * F;  // [n, H]
  const bool has_q = tid < S / 4, has_col = tid < Hc;
  const int e = rank * S + 4 * tid, k = e / H, i = e - k * H, ci = rank * Hc + tid;
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float xn[kN];
  if constexpr (kPost) {
    const float* yt = a.y + t * H;           // [H]
    const float* pt = a.post + t * kN;       // [n]
    const float* ct = a.comb + t * kN * kN;  // [n, n]
    if (has_q) {
      float4 xv[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) xv[j] = *reinterpret_cast<const float4*>(xt + j * H + i);
      const float4 yv = *reinterpret_cast<const float4*>(yt + i);
      const float p = pt[k];
      v = make_float4(p * yv.x, p * yv.y, p * yv.z, p * yv.w);  // hc_post's expression
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float c = ct[j * kN + k];
        v = make_float4(fmaf(c, xv[j].x, v.x), fmaf(c, xv[j].y, v.y), fmaf(c, xv[j].z, v.z),
                        fmaf(c, xv[j].w, v.w));
      }
      *reinterpret_cast<float4*>(a.streams + t * F + e) = v;
    }
    if (has_col) {
      float xo[kN], pv[kN], cv[kN][kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        xo[j] = xt[j * H + ci];
        pv[j] = pt[j];
#pragma unroll
        for (int c = 0; c < kN; ++c) cv[j][c] = ct[j * kN + c];
      }
      const float yc = yt[ci];
#pragma unroll
      for (int c = 0; c < kN; ++c) {
        float acc = pv[c] * yc;
#pragma unroll
        for (int j = 0; j < kN; ++j) acc = fmaf(cv[j][c], xo[j], acc);
        xn[c] = acc;
      }
    }
  } else {
    if (has_q) v = *reinterpret_cast<const float4*>(xt + e);
#pragma unroll
    for (int j = 0; j < kN; ++j) xn[j] = has_col ? xt[j * H + ci] : 0.0f;
  }

  // The 24 partial dots and the sum of squares of this thread's float4 (hc_mixes' expression).
  float part[kParts];
  tma::mbar_wait(fn_bar, 0u);
  const float4* fn4 = reinterpret_cast<const float4*>(s_fn);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float4 u = has_q ? fn4[m * (S / 4) + tid] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    part[m] = fmaf(v.w, u.w, fmaf(v.z, u.z, fmaf(v.y, u.y, v.x * u.x)));
  }
  part[kM] = fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, v.x * v.x)));
  __syncthreads();  // every thread is done with the fn slice: its memory takes the partials
#pragma unroll
  for (int m = 0; m < kParts; ++m) s_fn[m * kThreads + tid] = part[m];
  __syncthreads();
  detail::cluster_wait_started();  // every CTA's inbox barrier is set up
  // Warp w sums parts w, w + kWarps: lane l over threads l, l + 32, ... in order, then a butterfly; lane 0
  // stores the CTA's sum into slot [rank][part] of every CTA's inbox.
  for (int m = warp; m < kParts; m += kWarps) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kThreads / 32; ++j) s += s_fn[m * kThreads + lane + 32 * j];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (lane < kCtas)
      detail::store_async(detail::map_rank(detail::smem_addr(&s_inbox[rank][m]), lane), s,
                          detail::map_rank(inbox_bar, lane));
  }
  tma::mbar_wait(inbox_bar, 0u);
  if (tid < kM) {
    float dot = 0.0f, ss = 0.0f;
#pragma unroll
    for (int r = 0; r < kCtas; ++r) {
      dot += s_inbox[r][tid];
      ss += s_inbox[r][kM];
    }
    s_mix[tid] = dot * rsqrtf(ss / static_cast<float>(F) + a.norm_eps);
  }
  __syncthreads();

  // The collapse of column ci, then (rank 0's last warp) post and comb.
  if (has_col) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kN; ++j) acc = fmaf(hc::sigmoidf(s_mix[j] * s0 + bpre[j]) + a.hc_eps, xn[j], acc);
    a.out[t * H + ci] = acc;
  }
  if (comb_warp)
    hc::post_comb<kN>(pw, s_mix, a.post_out + t * kN, a.comb_out + t * kN * kN, a.iters, a.hc_eps);
}

// Once per kernel: asks for more than the default 48 KiB of dynamic shared memory (the most any supported H
// takes) and whether a cluster of kCtas such CTAs fits the device at all.
template <bool kPost>
bool configured_and_fits() {
  static const bool fits = [] {
    const int smem = static_cast<int>(weights_smem(kMaxHidden));
    if (cudaFuncSetAttribute(hc_pre_fused_kernel<kPost>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
        cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kCtas, 1);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kCtas;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, hc_pre_fused_kernel<kPost>, &config) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return clusters > 0;
  }();
  return fits;
}

template <bool kPost>
void launch_fused(const HcFusedArgs& a, int64_t T) {
  check_cuda(launch_pdl_cluster(hc_pre_fused_kernel<kPost>, dim3(kCtas, static_cast<unsigned>(T)), kThreads,
                                weights_smem(a.H), dim3(kCtas, 1, 1), a),
             "hc_pre_fused launch");
  check_launch("hc_pre_fused");
}

}  // namespace

bool hc_pre_fused_supported(int64_t T, int64_t n, int64_t H, int64_t M, const HcFusedArgs& a) {
  // (streams unset: the caller allocates them once the shape is known to be taken)
  const bool post_ok = a.y == nullptr || (aligned16(a.y) && (a.streams == nullptr || aligned16(a.streams)));
  return arch_path() == ArchPath::kHopper && T >= 1 && T <= kMaxTokens && n == kN && M == kM && H >= 32 &&
         H <= kMaxHidden && H % (4 * kCtas) == 0 && aligned16(a.fn) && aligned16(a.x) && post_ok &&
         (a.y != nullptr ? configured_and_fits<true>() : configured_and_fits<false>());
}

void launch_hc_pre_fused(const HcFusedArgs& a, int64_t T, int64_t n, int64_t H, int64_t M) {
  DSI_CHECK(hc_pre_fused_supported(T, n, H, M, a) && (a.y == nullptr || a.streams != nullptr),
            "hc_pre_fused: unsupported shape (", T, " tokens, ", n, " streams of ", H, ", ", M,
            " mixes), unaligned operands or not the Hopper path");
  if (a.y != nullptr) {
    launch_fused<true>(a, T);
  } else {
    launch_fused<false>(a, T);
  }
}

}  // namespace dsinfer::cuda
