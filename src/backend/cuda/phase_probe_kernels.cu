// The phase probe's kernel (see phase_probe.h). The barrier: a monotonic arrival counter, zeroed before the
// launch; a block's thread 0 adds one with release semantics once the block's value is stored, and before
// phase i spins on an acquire load until i x blocks arrivals are in, then releases the block (bar.sync).
// Every block must be resident at once, so the launch refuses more blocks than the occupancy query allows.
// The ring (kRing): each thread copies its own 16-byte pieces of a stage with the decode GEMV's cp.async copy
// (gemv_device.cuh: L2 only, evict-first) and reads back only those, so the ring needs no block-wide
// synchronisation; stage g + S - 1 is issued as stage g is used, so S - 1 stages are in flight whenever the
// block waits, at a barrier, on its own copies or on the phase's dependent loads.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_device.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/phase_probe.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using gemv_detail::copy_async16;
using gemv_detail::copy_async_commit;
using gemv_detail::copy_async_wait;

constexpr int kThreads = 256;
constexpr int kChunks = kPhaseRingStageBytes / (kThreads * 16);  // 16-byte pieces a thread copies per stage
static_assert(kChunks * kThreads * 16 == kPhaseRingStageBytes, "a stage is whole pieces of every thread");

struct PhaseArgs {
  float* vals;        // [phases, blocks]
  unsigned* counter;  // the barrier's arrivals
  const float4* src;  // [phases, n4]
  int64_t n4;         // float4s of a phase's slice
  int phases;
  const uint32_t* chain;  // a hop chain (latency_probe.h) or null
  int hops;               // dependent loads along it at the start of every phase
};

__device__ __forceinline__ void arrive_release(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(p) : "memory");
}

// Waits until `target` blocks have arrived; the whole block leaves together.
__device__ __forceinline__ void grid_wait(const unsigned* counter, unsigned target) {
  if (threadIdx.x == 0)
    while (load_acquire_gpu(counter) < target) {
    }
  __syncthreads();
}

__device__ __forceinline__ int64_t min64(int64_t x, int64_t y) {
  return x < y ? x : y;
}

__device__ __forceinline__ float sum4(const float4& v) {
  return v.x + v.y + v.z + v.w;
}

// The block's sum of acc; thread 0 gets it. red[] is free again once thread 0 has read it.
__device__ __forceinline__ float block_sum(float acc, float* red) {
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  float sum = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) sum += red[w];
  return sum;
}

// Phase i's slice loaded after the barrier, grid-strided, kUnroll loads of a thread in flight (the handoff
// probe's loop, so the two probes differ only in the boundary).
__device__ float stream_after_barrier(const PhaseArgs& a, int i) {
  const float4* mine = a.src + static_cast<int64_t>(i) * a.n4;
  constexpr int kUnroll = 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  float acc = 0.0f;
  for (int64_t k0 = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k0 < a.n4;
       k0 += kUnroll * stride) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      v[u] = k0 + u * stride < a.n4 ? __ldcs(mine + k0 + u * stride) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += sum4(v[u]);
  }
  return acc;
}

template <PhaseStream kMode, int S>
__global__ void __launch_bounds__(kThreads, 1) phase_kernel(PhaseArgs a) {
  extern __shared__ uint4 ring[];  // kRing: [S][kChunks][kThreads] 16-byte pieces
  __shared__ float red[kThreads / 32];
  __shared__ unsigned s_at;  // where thread 0's hops ended
  const int G = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x), tid = threadIdx.x;
  // This block's share of every phase's slice: [lo, lo + len) of it, in stages of kPerStage float4s.
  constexpr int64_t kPerStage = static_cast<int64_t>(kChunks) * kThreads;
  const int64_t seg = (a.n4 + G - 1) / G;
  const int64_t lo = min64(seg * b, a.n4);
  const int64_t len = min64(seg, a.n4 - lo);
  const int64_t per_phase = (seg + kPerStage - 1) / kPerStage;  // stages of every phase (the same for all)
  const int64_t total = per_phase * a.phases;
  const WeightL2 l2 = weight_l2(true);  // the decode GEMVs' copies: evict-first, as weights read once a step
  // Issues stage g (phase g / per_phase) into slot g % S; past the last stage an empty group keeps the
  // group count one per call.
  auto issue = [&](int64_t g) {
    if (kMode == PhaseStream::kRing && g < total) {
      const int64_t i = g / per_phase, s = g % per_phase;
      const float4* share = a.src + i * a.n4 + lo;
      uint4* slot = ring + (g % S) * kPerStage;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int64_t off = s * kPerStage + c * kThreads + tid;
        // A piece past the share copies zeros from an address inside the phase's slice (read nothing).
        copy_async16(slot + c * kThreads + tid, off < len ? share + off : a.src + i * a.n4, off < len, l2);
      }
    }
    copy_async_commit();
  };
  if (kMode == PhaseStream::kRing)
    for (int g = 0; g < S - 1; ++g) issue(g);

  for (int i = 0; i < a.phases; ++i) {
    if (i > 0) grid_wait(a.counter, static_cast<unsigned>(i) * static_cast<unsigned>(G));
    const float prev = i > 0 ? __ldcg(a.vals + static_cast<int64_t>(i - 1) * G + (b + 1) % G) : 0.0f;
    // The phase's latency-bound part: thread 0's dependent loads; the block uses its slice only after them.
    float acc = 0.0f;
    if (a.hops > 0) {
      if (tid == 0) {
        unsigned at = 0;
        for (int h = 0; h < a.hops; ++h) at = __ldcg(a.chain + at);
        s_at = at;
      }
      __syncthreads();
      acc = s_at == 0xffffffffu ? 1.0f : 0.0f;  // never (chain elements are multiples of 32): keeps the loads
    }
    if (kMode == PhaseStream::kRing) {
      for (int64_t s = 0; s < per_phase; ++s) {
        const int64_t g = i * per_phase + s;
        issue(g + S - 1);
        copy_async_wait<S - 1>();  // stage g has landed (this thread's pieces of it)
        const float4* slot = reinterpret_cast<const float4*>(ring + (g % S) * kPerStage);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) acc += sum4(slot[c * kThreads + tid]);
      }
    } else {
      acc += stream_after_barrier(a, i);
    }
    const float sum = block_sum(acc, red);
    if (tid == 0) {
      a.vals[static_cast<int64_t>(i) * G + b] = prev + 1.0f + sum;
      arrive_release(a.counter);
    }
  }
  if (kMode == PhaseStream::kRing) copy_async_wait<0>();  // no copy outlives the block
}

using PhaseKernel = void (*)(PhaseArgs);

PhaseKernel kernel_for(PhaseStream mode, int stages) {
  if (mode == PhaseStream::kAfterBarrier) return phase_kernel<PhaseStream::kAfterBarrier, 1>;
  switch (stages) {
    case 4:
      return phase_kernel<PhaseStream::kRing, 4>;
    case 8:
      return phase_kernel<PhaseStream::kRing, 8>;
    case 12:
      return phase_kernel<PhaseStream::kRing, 12>;
    default:
      return nullptr;
  }
}

size_t ring_bytes(PhaseStream mode, int stages) {
  return mode == PhaseStream::kRing ? static_cast<size_t>(stages) * kPhaseRingStageBytes : 0;
}

// The kernel with its dynamic shared memory allowed; null for an unsupported ring.
PhaseKernel prepared_kernel(PhaseStream mode, int stages) {
  PhaseKernel k = kernel_for(mode, stages);
  if (k != nullptr)
    check_cuda(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(ring_bytes(mode, stages))),
               "phase probe: shared memory");
  return k;
}

}  // namespace

bool phase_ring_stages_supported(int stages) {
  return stages == 4 || stages == 8 || stages == 12;
}

int phase_chain_max_blocks(PhaseStream mode, int ring_stages) {
  PhaseKernel k = prepared_kernel(mode, ring_stages);
  DSI_CHECK(k != nullptr, "phase probe: a ring of ", ring_stages, " stages is not compiled (4, 8 or 12)");
  int per_sm = 0;
  check_cuda(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, ring_bytes(mode, ring_stages)),
      "phase probe: occupancy");
  return per_sm * device_sm_count(0);
}

void launch_phase_chain(PhaseStream mode, int ring_stages, int phases, int blocks, float* vals,
                        unsigned* counter, const void* src, int64_t float4_per_phase, const uint32_t* chain,
                        int hops) {
  DSI_CHECK(phases >= 1 && blocks >= 1 && float4_per_phase >= 0 && hops >= 0, "phase probe: bad shape");
  DSI_CHECK(hops == 0 || chain != nullptr, "phase probe: hops need a chain");
  const int most = phase_chain_max_blocks(mode, ring_stages);
  DSI_CHECK(blocks <= most, "phase probe: ", blocks, " blocks, but only ", most,
            " can be resident at once (every block must be, for the barrier)");
  check_cuda(cudaMemsetAsync(vals, 0, sizeof(float) * static_cast<size_t>(phases) * blocks, stream()),
             "phase probe: zero values");
  check_cuda(cudaMemsetAsync(counter, 0, sizeof(unsigned), stream()), "phase probe: zero the counter");
  const PhaseArgs args{vals, counter, static_cast<const float4*>(src), float4_per_phase, phases, chain, hops};
  kernel_for(mode, ring_stages)<<<blocks, kThreads, ring_bytes(mode, ring_stages), stream()>>>(args);
  check_cuda(cudaGetLastError(), "phase probe launch");
}

}  // namespace dsinfer::cuda
