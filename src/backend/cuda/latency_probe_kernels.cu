// The latency probe's kernel (see latency_probe.h). Block 0's thread 0 chases; the other blocks stream with
// the handoff probe's loop (4 streaming loads a thread in flight, grid-strided) and look at the done flag
// once per round of loads; the chaser sets it after its timed hops. Every block must be resident, or a
// streamer could hold an SM the chaser never gets: the launch is refused beyond the occupancy query.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/latency_probe.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kThreads = 256;

// Scratch layout: [0] cycles, [8] nanoseconds (int64 each), [16] last element, [20] done flag, [24..] one
// float per block (what the block loaded, summed, so that no load is dead).
constexpr size_t kScratchHead = 24;
struct Scratch {
  long long* cycles;
  long long* ns;
  unsigned* last;
  unsigned* done;
  float* sink;
};

Scratch scratch_of(void* base) {
  auto* b = static_cast<char*>(base);
  return {reinterpret_cast<long long*>(b), reinterpret_cast<long long*>(b + 8),
          reinterpret_cast<unsigned*>(b + 16), reinterpret_cast<unsigned*>(b + 20),
          reinterpret_cast<float*>(b + kScratchHead)};
}

__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned hop(const uint32_t* chain, unsigned at) {
  return __ldcg(chain + at);
}

__global__ void __launch_bounds__(kThreads)
    hop_probe_kernel(const uint32_t* chain, long long hops, const float4* src, long long n4, Scratch s) {
  if (blockIdx.x == 0) {
    if (threadIdx.x != 0) return;
    unsigned at = 0;
    for (long long h = 0; h < hops; ++h) at = hop(chain, at);  // warm: the chain's lines into L2
    s.sink[0] = __uint_as_float(at);                           // (keeps the warm pass)
    at = 0;
    const long long n0 = global_ns(), t0 = clock64();
    for (long long h = 0; h < hops; ++h) at = hop(chain, at);
    const long long t1 = clock64(), n1 = global_ns();
    *s.cycles = t1 - t0;
    *s.ns = n1 - n0;
    *s.last = at;
    __threadfence();
    atomicExch(s.done, 1u);
    return;
  }
  // A streamer: rounds of kUnroll loads a thread, grid-strided over the streaming blocks, wrapping.
  constexpr int kUnroll = 4;
  const long long blocks = gridDim.x - 1;
  const long long stride = blocks * kThreads;
  long long k = static_cast<long long>(blockIdx.x - 1) * kThreads + threadIdx.x;
  float acc = 0.0f;
  const int lane = threadIdx.x % 32;
  // One look at the flag a warp per round, so the streamers add little L2 traffic of their own.
  auto done = [&] {
    unsigned d = lane == 0 ? *reinterpret_cast<volatile unsigned*>(s.done) : 0u;
    return __shfl_sync(0xffffffffu, d, 0) != 0u;
  };
  while (!done()) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = __ldcs(src + k);
      k += stride;
      if (k >= n4) k -= n4;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  if (threadIdx.x == 0) s.sink[blockIdx.x] = acc;  // keeps the loads
}

}  // namespace

size_t hop_probe_scratch_bytes(int stream_blocks) {
  return kScratchHead + sizeof(float) * static_cast<size_t>(stream_blocks + 1);
}

int hop_probe_max_blocks() {
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hop_probe_kernel, kThreads, 0),
             "latency probe: occupancy");
  return per_sm * device_sm_count(0);
}

HopTiming run_hop_probe(const uint32_t* chain, int64_t hops, int stream_blocks, const void* src, int64_t n4,
                        void* scratch) {
  DSI_CHECK(hops >= 1 && stream_blocks >= 0, "latency probe: bad shape");
  DSI_CHECK(stream_blocks == 0 || (src != nullptr && n4 >= int64_t{kThreads} * stream_blocks),
            "latency probe: the streamers need at least one float4 a thread");
  const int most = hop_probe_max_blocks();
  DSI_CHECK(stream_blocks + 1 <= most, "latency probe: ", stream_blocks + 1, " blocks, but only ", most,
            " can be resident at once (the streamers wait for the chaser)");
  check_cuda(cudaMemsetAsync(scratch, 0, hop_probe_scratch_bytes(stream_blocks), stream()),
             "latency probe: zero the scratch");
  hop_probe_kernel<<<stream_blocks + 1, kThreads, 0, stream()>>>(
      chain, static_cast<long long>(hops), static_cast<const float4*>(src), static_cast<long long>(n4),
      scratch_of(scratch));
  check_cuda(cudaGetLastError(), "latency probe launch");
  synchronize();
  HopTiming t;
  long long head[2] = {0, 0};
  unsigned last = 0;
  auto* b = static_cast<char*>(scratch);
  copy_to_host(head, b, sizeof(head));
  copy_to_host(&last, b + 16, sizeof(last));
  t.cycles = head[0];
  t.ns = head[1];
  t.last = last;
  return t;
}

}  // namespace dsinfer::cuda
