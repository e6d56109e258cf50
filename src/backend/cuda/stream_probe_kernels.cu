// The weight-streaming probe's kernels (see stream_probe.h). Every kernel sums the 32-bit words of its
// block's span with wrap-around adds, so that the host can check that every byte was read exactly once, and
// asks for ~200 KB of shared memory so that one block lands on each SM.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/stream.h"
#include "backend/cuda/stream_probe.h"
#include "backend/cuda/tensor_map_encoder.h"
#include "backend/cuda/tma_common.cuh"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kWarps = 16;
constexpr int kRowBytes = 8192;             // a 4096-column bf16 row
constexpr int kRowChunks = kRowBytes / 16;  // [512] 16-byte chunks of a row
constexpr int kTileRows = 32;
constexpr size_t kOneBlockPerSm = 200 * 1024;  // dynamic shared memory every kernel asks for

__device__ __forceinline__ uint32_t add_words(uint32_t acc, uint4 v) {
  return acc + v.x + v.y + v.z + v.w;
}

// The block's sum of its threads' sums (thread 0 stores it).
__device__ void store_block_sum(uint32_t acc, uint32_t* sums) {
  __shared__ uint32_t red[32];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  const int warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t s = 0;
    for (int w = 0; w < warps; ++w) s += red[w];
    sums[blockIdx.x] = s;
  }
}

// The GEMV's ring: warp w's stage i of a tile holds, for u, j, h < 2, lane (g, t)'s 16 bytes of row
// 16 j + 8 h + g at chunk (i * 16 + w) * 8 + 4 u + t; 4 stages cover a tile's 512 chunks a row. FLAT: warp
// w's n-th stage is instead the block's 4 KB at (16 n + w) * 4 KB, lane l copying its chunks 32 c + l.
constexpr int kRingStages = 3;
constexpr int kStageChunks = 8 * 32;  // [8][32] uint4 of a warp's stage
template <bool FLAT>
__global__ void __launch_bounds__(kWarps * 32, 1)
    cp_async_ring_kernel(const uint4* src, int64_t tiles, uint32_t* sums) {
  extern __shared__ uint4 pipe[];  // [kWarps][kRingStages][8][32]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr int kIters = kRowChunks / (kWarps * 8);
  const int64_t total = tiles * kIters;
  const uint4* span = src + static_cast<int64_t>(blockIdx.x) * tiles * kTileRows * kRowChunks;
  uint4* mine = pipe + warp * kRingStages * kStageChunks + lane;
  int64_t issued = 0;
  int issue_stage = 0;
  auto issue_next = [&] {
    if (issued < total) {
      const int64_t tile = issued / kIters, i = issued % kIters;
      uint4* stage = mine + issue_stage * kStageChunks;
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c = (u * 2 + j) * 2 + h;
            const int64_t row = tile * kTileRows + 16 * j + 8 * h + g;
            const int64_t chunk = (i * kWarps + warp) * 8 + 4 * u + t;
            const uint4* from = FLAT ? span + (issued * kWarps + warp) * kStageChunks + c * 32 + lane
                                     : span + row * kRowChunks + chunk;
            const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(stage + c * 32));
            asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(d), "l"(from)
                         : "memory");
          }
      ++issued;
      issue_stage = issue_stage + 1 == kRingStages ? 0 : issue_stage + 1;
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  for (int s = 0; s < kRingStages - 1; ++s) issue_next();
  uint32_t acc = 0;
  int use_stage = 0;
  for (int64_t n = 0; n < total; ++n) {
    issue_next();
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kRingStages - 1) : "memory");
    const uint4* stage = mine + use_stage * kStageChunks;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc = add_words(acc, stage[c * 32]);
    use_stage = use_stage + 1 == kRingStages ? 0 : use_stage + 1;
  }
  store_block_sum(acc, sums);
}

// Bulk copies: a producer warp fills a ring of kSlots slots of kSlotBytes, 16 consumer warps each sum 1 KB of
// a full slot and release it. Slot q of a block is tile q / 16's 32 row segments of 512 bytes at column
// segment q % 16 (kBulkRows: one 512-byte bulk copy a lane; kTmaBox: one TMA load of a 256 x 32 box;
// kTmaBox64: four of 64 x 32 with the 128-byte swizzle), or its 16 KB contiguous (kBulkFlat: one copy;
// kBulkFlat4K: four of 4 KB).
[[maybe_unused]] constexpr int kSlots = 12;
[[maybe_unused]] constexpr int kSlotBytes = 16 * 1024;
template <StreamPath KIND>
__global__ void __launch_bounds__((kWarps + 1) * 32, 1)
    bulk_ring_kernel(const uint8_t* src, int64_t tiles, uint32_t* sums,
                     const __grid_constant__ CUtensorMap map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) uint8_t raw[];
  __shared__ __align__(8) uint64_t full[kSlots], empty[kSlots];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // [kSlots][kSlotBytes] from the first 1024-byte boundary (the swizzled boxes' alignment)
  const uint32_t raw_s = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  const uint32_t ring_s = (raw_s + 1023u) & ~1023u;
  const uint8_t* ring = raw + (ring_s - raw_s);
  const uint32_t full_s = static_cast<uint32_t>(__cvta_generic_to_shared(full));
  const uint32_t empty_s = static_cast<uint32_t>(__cvta_generic_to_shared(empty));
  constexpr bool kTma = KIND == StreamPath::kTmaBox || KIND == StreamPath::kTmaBox64;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      tma::mbar_init(full_s + 8 * s, 1);
      tma::mbar_init(empty_s + 8 * s, kWarps);
    }
    tma::mbar_init_fence();
    if (kTma) tma::prefetch_map(&map);
  }
  __syncthreads();
  const int64_t span_bytes = tiles * kTileRows * kRowBytes;
  const uint8_t* span = src + static_cast<int64_t>(blockIdx.x) * span_bytes;
  const int64_t slots_total = span_bytes / kSlotBytes;
  uint32_t acc = 0;
  if (warp == kWarps) {  // the producer
    for (int64_t q = 0; q < slots_total; ++q) {
      const int s = static_cast<int>(q % kSlots);
      const int64_t use = q / kSlots;
      if (use > 0) tma::mbar_wait(empty_s + 8 * s, static_cast<uint32_t>((use - 1) & 1));
      if (lane == 0) tma::mbar_arrive_expect_tx(full_s + 8 * s, kSlotBytes);
      __syncwarp();
      const uint32_t dst = ring_s + s * kSlotBytes;
      const int64_t tile = q / 16, seg = q % 16;
      if constexpr (KIND == StreamPath::kBulkRows) {
        const uint8_t* from = span + (tile * kTileRows + lane) * kRowBytes + seg * 512;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 512, [%2];\n" ::
                "r"(dst + lane * 512),
            "l"(from), "r"(full_s + 8 * s)
            : "memory");
      } else if constexpr (KIND == StreamPath::kBulkFlat4K) {
        if (lane < 4)
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 4096, [%2];\n" ::
                  "r"(dst + lane * 4096),
              "l"(span + q * kSlotBytes + lane * 4096), "r"(full_s + 8 * s)
              : "memory");
      } else if constexpr (kTma) {
        const int row = static_cast<int>((static_cast<int64_t>(blockIdx.x) * tiles + tile) * kTileRows);
        const int col = static_cast<int>(seg * 256);
        if (KIND == StreamPath::kTmaBox && lane == 0) tma::load_2d(dst, &map, col, row, full_s + 8 * s);
        if (KIND == StreamPath::kTmaBox64 && lane < 4)
          tma::load_2d(dst + lane * 4096, &map, col + 64 * lane, row, full_s + 8 * s);
      } else if (lane == 0) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                dst),
            "l"(span + q * kSlotBytes), "r"(kSlotBytes), "r"(full_s + 8 * s)
            : "memory");
      }
    }
  } else {
    for (int64_t q = 0; q < slots_total; ++q) {
      const int s = static_cast<int>(q % kSlots);
      tma::mbar_wait(full_s + 8 * s, static_cast<uint32_t>((q / kSlots) & 1));
      const uint4* slot = reinterpret_cast<const uint4*>(ring + s * kSlotBytes) + warp * 64 + lane;
      acc = add_words(acc, slot[0]);
      acc = add_words(acc, slot[32]);
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(empty_s + 8 * s);
    }
  }
  store_block_sum(acc, sums);
#else
  (void)src;
  (void)tiles;
  (void)sums;
  (void)map;
#endif
}

// The GEMV's per-warp ring over weights packed in 1 KB fragments (16 rows x 32 columns, [row group][column
// chunk]): a tile is two row groups of 128 fragments (128 KB each); warp w's stage i is fragments
// (16 i + w) * 2 and + 1 of both row groups, two bulk copies of 2 KB that complete on the warp's mbarrier of
// that stage.
__global__ void __launch_bounds__(kWarps * 32, 1)
    bulk_warp_pieces_kernel(const uint8_t* src, int64_t tiles, uint32_t* sums) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint4 pipe[];  // [kWarps][kRingStages][8][32]
  __shared__ __align__(8) uint64_t bars[kWarps][kRingStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kIters = kRowChunks / (kWarps * 8);  // stages of a warp per tile
  constexpr int kGroupBytes = kTileRows / 2 * kRowBytes;
  const int64_t total = tiles * kIters;
  const uint8_t* span = src + static_cast<int64_t>(blockIdx.x) * tiles * kTileRows * kRowBytes;
  const uint4* mine = pipe + warp * kRingStages * kStageChunks;
  const uint32_t mine_s = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
  const uint32_t bar_s = static_cast<uint32_t>(__cvta_generic_to_shared(&bars[warp][0]));
  if (lane == 0)
    for (int s = 0; s < kRingStages; ++s) tma::mbar_init(bar_s + 8 * s, 1);
  tma::mbar_init_fence();
  __syncwarp();
  int64_t issued = 0;
  auto issue_next = [&] {
    if (issued < total && lane < 2) {
      const int64_t tile = issued / kIters, i = issued % kIters;
      const int s = static_cast<int>(issued % kRingStages);
      const uint32_t bar = bar_s + 8 * s;
      if (lane == 0) tma::mbar_arrive_expect_tx(bar, 4096);
      const uint8_t* from = span + tile * 2 * kGroupBytes + lane * kGroupBytes + (i * kWarps + warp) * 2048;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 2048, [%2];\n" ::"r"(
              mine_s + s * kStageChunks * 16 + lane * 2048),
          "l"(from), "r"(bar)
          : "memory");
    }
    ++issued;
  };
  for (int s = 0; s < kRingStages - 1; ++s) issue_next();
  uint32_t acc = 0;
  for (int64_t n = 0; n < total; ++n) {
    issue_next();
    const int s = static_cast<int>(n % kRingStages);
    tma::mbar_wait(bar_s + 8 * s, static_cast<uint32_t>((n / kRingStages) & 1));
    const uint4* stage = mine + s * kStageChunks + lane;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc = add_words(acc, stage[c * 32]);
    __syncwarp();
  }
  store_block_sum(acc, sums);
#else
  (void)src;
  (void)tiles;
  (void)sums;
#endif
}

// Plain loads: each thread keeps kInFlight 16-byte streaming loads in flight, block-strided over the span.
constexpr int kInFlight = 8;
__global__ void __launch_bounds__(kWarps * 32, 1)
    register_load_kernel(const uint4* src, int64_t tiles, uint32_t* sums) {
  const int64_t n = tiles * kTileRows * kRowChunks;  // [n] uint4 of the span
  const uint4* span = src + static_cast<int64_t>(blockIdx.x) * n;
  const int64_t stride = blockDim.x;
  uint32_t acc = 0;
  for (int64_t c0 = threadIdx.x; c0 < n; c0 += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = __ldcs(span + c0 + u * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc = add_words(acc, v[u]);
  }
  store_block_sum(acc, sums);
}

void allow_one_block_per_sm(const void* kernel) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kOneBlockPerSm)),
             "stream probe: shared memory");
}

template <bool FLAT>
void launch_cp_async(int blocks, const void* src, int64_t tiles, uint32_t* sums) {
  allow_one_block_per_sm(reinterpret_cast<const void*>(cp_async_ring_kernel<FLAT>));
  cp_async_ring_kernel<FLAT>
      <<<blocks, kWarps * 32, kOneBlockPerSm, stream()>>>(static_cast<const uint4*>(src), tiles, sums);
}

// The blocks' spans as one [rows, 4096] bf16 matrix; boxes of `box_cols` x 32 rows.
CUtensorMap span_map(const void* src, int64_t rows, int box_cols) {
  CUtensorMap map;
  DSI_CHECK(tensor_map_encoder() != nullptr, "stream probe: no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {kRowBytes / 2, static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {kRowBytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), kTileRows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult made = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(src), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, box_cols == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DSI_CHECK(made == CUDA_SUCCESS, "stream probe: cuTensorMapEncodeTiled failed (", made, ")");
  return map;
}

template <StreamPath KIND>
void launch_bulk(int blocks, const void* src, int64_t tiles, uint32_t* sums) {
  CUtensorMap map = {};
  if (KIND == StreamPath::kTmaBox || KIND == StreamPath::kTmaBox64)
    map = span_map(src, blocks * tiles * kTileRows, KIND == StreamPath::kTmaBox ? 256 : 64);
  allow_one_block_per_sm(reinterpret_cast<const void*>(bulk_ring_kernel<KIND>));
  bulk_ring_kernel<KIND><<<blocks, (kWarps + 1) * 32, kOneBlockPerSm, stream()>>>(
      static_cast<const uint8_t*>(src), tiles, sums, map);
}

}  // namespace

bool stream_probe_supported(StreamPath path) {
  if (path == StreamPath::kCpAsyncRing || path == StreamPath::kCpAsyncFlat ||
      path == StreamPath::kRegisterLoads)
    return true;
  int dev = 0, major = 0;
  check_cuda(cudaGetDevice(&dev), "stream probe: device");
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "stream probe: arch");
  return major >= 9;
}

void launch_stream_probe(StreamPath path, int blocks, const void* src, int64_t span, uint32_t* sums) {
  DSI_CHECK(blocks >= 1 && span > 0 && span % kStreamProbeTileBytes == 0 &&
                reinterpret_cast<uintptr_t>(src) % 128 == 0,
            "stream probe: bad shape (", blocks, " blocks, span ", span, ")");
  DSI_CHECK(stream_probe_supported(path), "stream probe: this path needs sm_90");
  const int64_t tiles = span / kStreamProbeTileBytes;
  switch (path) {
    case StreamPath::kCpAsyncRing:
      launch_cp_async<false>(blocks, src, tiles, sums);
      break;
    case StreamPath::kCpAsyncFlat:
      launch_cp_async<true>(blocks, src, tiles, sums);
      break;
    case StreamPath::kBulkRows:
      launch_bulk<StreamPath::kBulkRows>(blocks, src, tiles, sums);
      break;
    case StreamPath::kBulkFlat:
      launch_bulk<StreamPath::kBulkFlat>(blocks, src, tiles, sums);
      break;
    case StreamPath::kBulkFlat4K:
      launch_bulk<StreamPath::kBulkFlat4K>(blocks, src, tiles, sums);
      break;
    case StreamPath::kTmaBox:
      launch_bulk<StreamPath::kTmaBox>(blocks, src, tiles, sums);
      break;
    case StreamPath::kTmaBox64:
      launch_bulk<StreamPath::kTmaBox64>(blocks, src, tiles, sums);
      break;
    case StreamPath::kBulkWarpPieces:
      allow_one_block_per_sm(reinterpret_cast<const void*>(bulk_warp_pieces_kernel));
      bulk_warp_pieces_kernel<<<blocks, kWarps * 32, kOneBlockPerSm, stream()>>>(
          static_cast<const uint8_t*>(src), tiles, sums);
      break;
    case StreamPath::kRegisterLoads:
      allow_one_block_per_sm(reinterpret_cast<const void*>(register_load_kernel));
      register_load_kernel<<<blocks, kWarps * 32, kOneBlockPerSm, stream()>>>(static_cast<const uint4*>(src),
                                                                              tiles, sums);
      break;
  }
  check_launch("stream probe");
}

}  // namespace dsinfer::cuda
