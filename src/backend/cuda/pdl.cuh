// Programmatic dependent launch (Hopper): a kernel launched through launch_pdl may start while the kernel
// before it on the stream is finishing, so its launch latency and any prologue that reads only constant
// data (weights) overlap the previous kernel's tail. Such a kernel must call pdl_wait() before it reads
// anything an earlier kernel wrote or writes anything an earlier kernel reads; pdl_trigger() lets the next
// kernel launch early. Both are no-ops where PDL is off (sm_80 code, the Ampere path, DSINFER_CUDA_PDL=0),
// and a plain launch of the same kernel stays correct. Captured CUDA graphs keep the programmatic edges.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/stream.h"

namespace dsinfer::cuda {

// Whether launch_pdl asks for programmatic serialization: compute capability >= 9.0, the Hopper kernel
// path, and DSINFER_CUDA_PDL not "0". Decided once.
bool pdl_enabled();

// Gives `kernel` the carveout preference DSINFER_CUDA_SMEM_CARVEOUT names, once per kernel (unset: 100;
// "driver": none, the driver's choice). An SM runs its resident blocks under one L1 / shared memory split,
// chosen when an idle SM takes a block, from that kernel's needs and preference: a small-smem kernel left to
// the driver gets a small split, and a GEMV block that needs ~100 KiB cannot join it until the SM drains. At
// 100 (the most shared memory) the next kernel's blocks land beside the one before and put their weights in
// flight during its tail. Before the GEMV spread (gemv_set_spread) that measured slower on an H200
// (thirty-second session); with it, V2-Lite's o starts ~3 us before its wait and ends ~1.7 us sooner while
// the MLA merge before it takes ~1.4 us longer: -17 to -24 us a token on three H100s (bench/decode_b1_ab.py,
// sixty-third and sixty-fourth sessions; not yet measured on an H200 since the spread).
void prefer_shared_carveout(const void* kernel);

// Waits until the previous kernel on the stream has finished and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Allows the next kernel on the stream to launch (its pdl_wait still waits for this grid to finish).
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream()>>>(args...) in thread block clusters of `cluster` CTAs (1 x 1 x 1: no
// clusters; others need compute capability 9.0), with programmatic serialization when pdl_enabled().
template <typename... Params, typename... Args>
cudaError_t launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, dim3 cluster,
                               Args&&... args) {
  prefer_shared_carveout(reinterpret_cast<const void*>(kernel));
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream();
  cudaLaunchAttribute attribute[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = cluster.x;
    attribute[n].val.clusterDim.y = cluster.y;
    attribute[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  config.attrs = attribute;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(std::forward<Args>(args))...);
}

// kernel<<<grid, block, smem, stream()>>>(args...), with programmatic serialization when pdl_enabled().
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  return launch_pdl_cluster(kernel, grid, block, smem, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace dsinfer::cuda
