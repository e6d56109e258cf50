// A probe of how fast one multiprocessor, and all of them, can stream weights from memory, by the load path a
// kernel uses (a benchmark and a test use it). Each block (one per SM: every path takes ~200 KB of shared
// memory) reads its own span of src and sums it. The paths (StreamPath): the persistent decode GEMV's
// per-warp cp.async ring (16 warps, 3 stages of 4 KB a warp, 16-byte copies from rows g and g + 8 of a 32-row
// tile of 8 KB rows: gemv_persistent.cuh's lane map), the same ring over contiguous stages, bulk copies
// (cp.async.bulk, the copy engine, completing on mbarriers) into a ring of twelve 16 KB slots (row segments,
// contiguous runs, TMA boxes of the span as a [rows, 4096] bf16 matrix), the GEMV's ring filled by bulk
// copies of packed weights (gemv_packed.h), and plain 16-byte loads into registers. Sweeping the block count
// separates a per-SM ceiling from the memory's. CUDA-header free.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

enum class StreamPath {
  kCpAsyncRing,     // the GEMV's ring and lane map
  kCpAsyncFlat,     // the same ring, each warp stage 4 KB contiguous
  kBulkRows,        // bulk copies of a tile's 32 row segments of 512 B
  kBulkFlat,        // bulk copies of 16 KB contiguous
  kBulkFlat4K,      // bulk copies of 4 KB contiguous, four a slot
  kTmaBox,          // TMA loads of 256 x 32 bf16 boxes of the [rows, 4096] matrix (no swizzle)
  kTmaBox64,        // TMA loads of 64 x 32 boxes (128-byte swizzle), four a slot
  kBulkWarpPieces,  // the GEMV's per-warp ring, each stage two 2 KB bulk copies of packed weights
  kRegisterLoads
};

// Bytes a block's span must be a multiple of: one 32-row tile of 8 KB rows.
inline constexpr int64_t kStreamProbeTileBytes = 32 * 8192;

// Whether this GPU runs `path` (the bulk paths need sm_90).
bool stream_probe_supported(StreamPath path);

// Launches `blocks` blocks on stream(); block b reads src bytes [b * span, (b + 1) * span) and stores the
// 32-bit wrap-around sum of the 32-bit words it read into sums[b]. span: a positive multiple of
// kStreamProbeTileBytes; src 128-byte aligned.
void launch_stream_probe(StreamPath path, int blocks, const void* src, int64_t span, uint32_t* sums);

}  // namespace dsinfer::cuda
