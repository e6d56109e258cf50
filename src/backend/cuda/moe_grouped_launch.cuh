// One launch of a grouped expert GEMM kernel (moe_grouped_kernels.cu's mma.sync kernels,
// moe_wgmma_kernels.cu's wgmma kernels): the kernel's dynamic shared memory configured once, a grid of N /
// (columns per block) x the most expert tiles `pairs` rows can make (every expert may start a partial tile),
// launched with PDL. Tile shape C: BM rows, BN columns (gate/up: BN / 2 outputs, gate and up interleaved),
// kSmem bytes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/pdl.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

template <typename C, bool kGateUp, typename Kernel>
void launch_grouped_kernel(Kernel* kernel, int threads, const char* what, const uint16_t* a, int topk,
                           const int32_t* offsets, const int32_t* tiles, const int32_t* slot_pair,
                           StackedWeights w1, StackedWeights w2, void* out, int64_t pairs, int64_t E,
                           int64_t K, int64_t N, float limit) {
  static const bool configured = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(C::kSmem)) == cudaSuccess;
  DSI_CHECK(configured, "moe_experts: ", what, " cannot have ", C::kSmem, " bytes of shared memory");
  const int64_t max_tiles = (pairs + C::BM - 1) / C::BM + E;
  const int64_t per_block = kGateUp ? C::BN / 2 : C::BN;
  DSI_CHECK(max_tiles <= 65535 && pairs * K < (int64_t{1} << 31), "moe_experts: ", pairs,
            " routed rows are too many for one grouped launch");
  const dim3 grid(static_cast<unsigned>((N + per_block - 1) / per_block), static_cast<unsigned>(max_tiles));
  launch_pdl(kernel, grid, threads, C::kSmem, reinterpret_cast<const __nv_bfloat16*>(a), topk, offsets, tiles,
             slot_pair, w1, w2, out, static_cast<int>(E), static_cast<int>(K), static_cast<int>(N), limit);
  check_launch(what);
}

}  // namespace dsinfer::cuda
