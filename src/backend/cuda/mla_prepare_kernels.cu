// The fused MLA decode prepare kernel: one grid whose first blocks run head_matmul's w^T x GEMV tiles (the
// query's W_UK absorption, head_gemv_device.cuh) and whose last T blocks run the cache write of one token
// each (mla_write_device.cuh). Both parts depend only on the projections, so one launch (and one PDL ramp)
// replaces two; each block loads its weights (W_UK, the RMSNorm weight) before pdl_wait.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/head_gemv_device.cuh"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/mla_prepare_kernels.h"
#include "backend/cuda/mla_write_device.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kChunks = head_gemv::kDefaultChunks;  // w^T x: 16-byte column chunks per block row
constexpr int kCols = 8 * kChunks;                  // outputs per GEMV block
static_assert(head_gemv::kThreads == mla_write::kThreads, "both parts run blocks of the same size");

// The kernel's arguments: the GEMV's (x [T, H, A], w [H, A, B], y [T, H, B]; uk_blocks = H * tiles) and the
// write's.
struct PrepareParams {
  const float* x;
  const uint16_t* w;
  float* y;
  int A, B, tiles, uk_blocks;
  bool evict_first;  // W_UK's L2 policy (weight_l2_policy.cuh)
  MlaWriteArgs write;
};

template <int NT, typename KV>
__global__ void __launch_bounds__(head_gemv::kThreads) mla_prepare_kernel(PrepareParams p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int block = static_cast<int>(blockIdx.x);
  const MlaWriteArgs& a = p.write;
  if (block < p.uk_blocks) {
    head_gemv::t_tile<NT, kChunks>(p.x, p.w, p.y, static_cast<int>(a.T), static_cast<int>(a.H), p.A, p.B,
                                   p.tiles, block, smem, p.evict_first);
    return;
  }
  mla_write::rope_write_row<KV>(a.q_pe, a.k_pe, a.latent, a.norm, a.eps, static_cast<KV*>(a.cache.data),
                                a.cache.width, a.positions, a.slot_mapping, a.inv_freq, static_cast<int>(a.H),
                                static_cast<int>(a.R), static_cast<int>(a.P), a.attention_scaling,
                                a.interleaved, block - p.uk_blocks, smem);
}

template <int NT>
void launch(const PrepareParams& p, unsigned grid, size_t smem) {
  if (p.write.cache.bf16) {
    launch_pdl(mla_prepare_kernel<NT, __nv_bfloat16>, grid, head_gemv::kThreads, smem, p);
  } else {
    launch_pdl(mla_prepare_kernel<NT, float>, grid, head_gemv::kThreads, smem, p);
  }
}

// Floats of shared memory the GEMV part of next_pow2(T) = NT tokens needs.
int64_t gemv_smem_floats(int64_t NT, int64_t A) {
  switch (NT) {
    case 1:
      return head_gemv::t_smem_floats<1, kChunks>(A);
    case 2:
      return head_gemv::t_smem_floats<2, kChunks>(A);
    case 4:
      return head_gemv::t_smem_floats<4, kChunks>(A);
    default:
      return head_gemv::t_smem_floats<8, kChunks>(A);
  }
}

}  // namespace

bool mla_prepare_supported(const MlaPrepareArgs& a) {
  const MlaWriteArgs& wr = a.write;
  const int64_t T = wr.T, H = wr.H, NT = next_pow2(std::max<int64_t>(T, 1));
  // What launch_head_matmul / launch_head_gemv_tiled take with the default tile (and nothing they throw on).
  if (T < 1 || NT > 8 || H < 1 || H > 65535 || a.A < 1 || a.B < 1 || a.B % 8 != 0 ||
      reinterpret_cast<uintptr_t>(a.w_uk) % 16 != 0 || a.A > (int64_t{1} << 30) || a.B > (int64_t{1} << 30) ||
      head_gemv_default_tile(true) != kChunks || gemv_smem_floats(NT, a.A) > head_gemv::kSmemFloats)
    return false;
  if (!mla_write::supported(wr.R, wr.P) || wr.cache.width != wr.R + wr.P) return false;
  return H * ((a.B + kCols - 1) / kCols) + T < (int64_t{1} << 31);
}

void launch_mla_prepare(const MlaPrepareArgs& a) {
  DSI_CHECK(mla_prepare_supported(a), "mla_prepare: the fused kernel does not take T ", a.write.T, ", H ",
            a.write.H, ", A ", a.A, ", B ", a.B, ", R ", a.write.R, ", P ", a.write.P);
  const MlaWriteArgs& wr = a.write;
  const int64_t NT = next_pow2(wr.T);
  const int64_t tiles = (a.B + kCols - 1) / kCols, uk_blocks = wr.H * tiles;
  const PrepareParams p{a.q_nope,
                        a.w_uk,
                        a.q_lat,
                        static_cast<int>(a.A),
                        static_cast<int>(a.B),
                        static_cast<int>(tiles),
                        static_cast<int>(uk_blocks),
                        gemv_weights_evict_first(),
                        wr};
  const size_t smem =
      static_cast<size_t>(std::max<int64_t>(gemv_smem_floats(NT, a.A), mla_write::kSmemFloats)) *
      sizeof(float);
  const unsigned grid = static_cast<unsigned>(uk_blocks + wr.T);
  switch (NT) {
    case 1:
      launch<1>(p, grid, smem);
      break;
    case 2:
      launch<2>(p, grid, smem);
      break;
    case 4:
      launch<4>(p, grid, smem);
      break;
    default:
      launch<8>(p, grid, smem);
      break;
  }
  check_launch("mla_prepare (W_UK GEMV + MLA cache write)");
}

}  // namespace dsinfer::cuda
