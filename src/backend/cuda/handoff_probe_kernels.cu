// The handoff probe's kernels (see handoff_probe.h). The flag handoff: the producer's thread 0 stores its
// value, fences and adds one to the kernel's arrival counter; the consumer's thread 0 spins on an acquire
// load until every producer block has arrived, then the block reads through L2. A consumer only spins once
// every producer block has started (programmatic launch waits for all of them to trigger), so it cannot
// starve one of the SM room it needs.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/handoff_probe.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;

template <Handoff kMode>
__global__ void __launch_bounds__(kThreads)
    handoff_kernel(float* vals, unsigned* flags, int i, const float4* src, int64_t n4) {
  if (kMode != Handoff::kPlain) pdl_trigger();
  if (i > 0) {
    if (kMode == Handoff::kPdlWait) pdl_wait();
    if (kMode == Handoff::kPdlFlag) {
      if (threadIdx.x == 0)
        while (load_acquire_gpu(flags + i - 1) < gridDim.x) {
        }
      __syncthreads();
    }
  }
  const float prev =
      i > 0 ? __ldcg(vals + static_cast<int64_t>(i - 1) * gridDim.x + (blockIdx.x + 1) % gridDim.x) : 0.0f;
  // [n4] float4: this kernel's slice, streamed after the handoff (the values are zeros).
  const float4* mine = src + static_cast<int64_t>(i) * n4;
  // kUnroll loads of a thread in flight at once (grid-strided, streaming: no reuse).
  constexpr int kUnroll = 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  float acc = 0.0f;
  for (int64_t k0 = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k0 < n4;
       k0 += kUnroll * stride) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      v[u] = k0 + u * stride < n4 ? __ldcs(mine + k0 + u * stride) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  __shared__ float red[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) sum += red[w];
  vals[static_cast<int64_t>(i) * gridDim.x + blockIdx.x] = prev + 1.0f + sum;
  if (kMode == Handoff::kPdlFlag) {
    __threadfence();
    atomicAdd(flags + i, 1u);
  }
}

// Launches kernel i of a chain, with programmatic serialization unless the handoff is plain.
void launch_one(Handoff mode, int blocks, float* vals, unsigned* flags, int i, const float4* src,
                int64_t n4) {
  auto* kernel = mode == Handoff::kPlain     ? handoff_kernel<Handoff::kPlain>
                 : mode == Handoff::kPdlWait ? handoff_kernel<Handoff::kPdlWait>
                                             : handoff_kernel<Handoff::kPdlFlag>;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.stream = stream();
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = mode == Handoff::kPlain ? 0 : 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, vals, flags, i, src, n4), "handoff probe launch");
}

}  // namespace

void launch_handoff_chain(Handoff mode, int kernels, int blocks, float* vals, unsigned* flags,
                          const void* src, int64_t float4_per_kernel) {
  DSI_CHECK(kernels >= 1 && blocks >= 1 && float4_per_kernel >= 0, "handoff probe: bad shape");
  check_cuda(cudaMemsetAsync(vals, 0, sizeof(float) * static_cast<size_t>(kernels) * blocks, stream()),
             "handoff probe: zero values");
  check_cuda(cudaMemsetAsync(flags, 0, sizeof(unsigned) * static_cast<size_t>(kernels), stream()),
             "handoff probe: zero flags");
  for (int i = 0; i < kernels; ++i)
    launch_one(mode, blocks, vals, flags, i, static_cast<const float4*>(src), float4_per_kernel);
}

void zero_handoff_source(void* src, size_t bytes) {
  check_cuda(cudaMemsetAsync(src, 0, bytes, stream()), "handoff probe: zero the source");
  check_cuda(cudaStreamSynchronize(stream()), "handoff probe: zero the source");
}

}  // namespace dsinfer::cuda
