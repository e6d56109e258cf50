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

// kernel<<<grid, block, smem, stream()>>>(args...), with programmatic serialization when pdl_enabled().
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream();
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(std::forward<Args>(args))...);
}

}  // namespace dsinfer::cuda
