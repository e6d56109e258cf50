// Per-block timelines of the persistent decode GEMV (a diagnostic). While stamps are on, every persistent
// GEMV launch runs a stamped instance of its kernel (same instructions for the sums, so the same bits):
// thread 0 of each block records the GPU's global nanosecond clock at six points, with its SM and its row
// tile count, into the launch's slot of a device buffer. Slots go to launches in launch order; a captured
// CUDA graph keeps the slots of its capture, so each replay overwrites them and the buffer ends up holding
// the last replay of every captured launch. With DSINFER_GEMV_STAMPS=FILE the CUDA backend turns stamps on at
// start-up and FILE receives every stamped launch at process exit. The GQA decode warp kernel
// (decode_attention_warp.cu) takes slots too while stamps are on, as a launch of 1 row, K = head dim and 0
// tiles, one "block" per CTA: start, cache rows issued before the wait, waited, rows scored, the CTA's
// warps merged, end. So does the one-token decode routing (moe_norm_route_kernels.cu), as a launch of 0 rows,
// K = experts and tiles = hidden size: start, waited, normed, logits out, selected, end. And the MLA decode
// wgmma + TMA kernel (mla_wgmma_tma_kernels.cu), as a launch of T rows, K = 576 and 0 tiles, one "block" per
// CTA: start, early tiles requested, waited, queries staged, O done, end; and the merge + W_UV kernel after
// it (mla_uv_kernels.cu), as a launch of T rows, K = R, tiles = V: start, W_UV rows requested, waited,
// merged, W_UV done, end. CUDA-header free.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::cuda {

// The stamps of one block, in nanoseconds of the GPU's global timer.
enum GemvStampPoint : int {
  kStampStart = 0,      // the block runs
  kStampIssued = 1,     // its first pipeline stages are issued (before the PDL wait)
  kStampWaited = 2,     // the PDL wait returned: the kernel that wrote x is done
  kStampConsumed = 3,   // warp 0 consumed its first stage (x loaded, MMAs of stage 0 done)
  kStampLastIssue = 4,  // warp 0 issued its last weight stage
  kStampEnd = 5,        // the block's last tile is stored
  kStampPoints = 6,
};
// Per block in the device buffer: the six points, then the SM id and the row tiles it walked.
constexpr int kStampFieldSm = kStampPoints, kStampFieldTiles = kStampPoints + 1,
              kGemvStampFields = kStampPoints + 2;

struct GemvStampBlock {
  uint64_t t[kStampPoints] = {};
  uint32_t sm = 0;
  uint32_t tiles = 0;
};

// One stamped launch: its shape as launched and its blocks (index = blockIdx.x).
struct GemvStampLaunch {
  int64_t rows = 0, K = 0, grid = 0, tiles = 0;
  bool swiglu = false;
  std::vector<GemvStampBlock> blocks;
};

// Allocates room for `slots` launches of up to kGemvStampMaxBlocks blocks and turns stamps on (false, and
// off, when the device memory is not there). Replaces any earlier buffer and its records.
constexpr int64_t kGemvStampMaxBlocks = 1024;
bool enable_gemv_stamps(int slots);
// Frees the buffer (and invalidates the captured graphs, whose stamped launches point into it); launches run
// the plain kernels again.
void disable_gemv_stamps();

// Whether stamps are on (a buffer is there).
bool gemv_stamps_on();

// The slot of the launch about to be made, or null when stamps are off or the grid is larger than a slot.
// Slots are handed out round robin and zeroed only by enable_gemv_stamps (a memset per launch would sit
// between the kernels of a captured graph); the host keeps each slot's launch shape.
uint64_t* next_gemv_stamp_slot(int64_t rows, int64_t K, bool swiglu, int64_t grid, int64_t tiles);

// Every slot handed out since enable_gemv_stamps, oldest first (a slot reused by the round robin holds its
// latest launch), with the device buffer copied back (waits for the device). Blocks that never ran read zero.
std::vector<GemvStampLaunch> read_gemv_stamps();

// With DSINFER_GEMV_STAMPS=FILE: enables stamps (DSINFER_GEMV_STAMP_SLOTS launches, default 2048) and writes
// FILE at exit (write_gemv_stamps). Once per process; later calls do nothing.
void start_gemv_stamps_from_env();

// Writes `launches` as text: one header line per launch, then one line per block (times in microseconds from
// the earliest stamp of all launches). False when the file cannot be written.
bool write_gemv_stamps(const char* path, const std::vector<GemvStampLaunch>& launches);

}  // namespace dsinfer::cuda
