// The stream-K GEMV kernel (gemv_stream_k.cu), internal to gemv_kernels.cu: a fixed grid of SMs x blocks per
// SM, each block streaming an equal share of the launch's (row tile, K slice) iterations without draining
// its cp.async pipeline between tiles; a tile split between blocks is finished by the last of them to
// arrive, which adds the blocks' partial sums in block order (deterministic, independent of M).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/gemv_kernels.h"

namespace dsinfer::cuda::gemv {

struct Params;

// Launches the stream-K kernel over `tiles` row tiles (16 rows each for SwiGLU, 16 * c.tiles otherwise;
// p.mats[i].first_block = matrix i's first tile). Needs K % 8 == 0, 16-byte aligned x, norm and weights.
void launch_stream_k(const Params& p, int64_t tiles, GemvConfig c, bool swiglu);

// The compiled stream-K kernel shapes.
std::vector<GemvConfig> stream_k_configs(bool swiglu);

}  // namespace dsinfer::cuda::gemv
