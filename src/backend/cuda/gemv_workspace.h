// The split-K GEMV's scratch (gemv_kernels.cu): fp32 partial sums per (row tile, split) and one int32
// arrival counter per row tile, both process-wide and reused by every split launch. Counters start at zero
// and the kernels leave them at zero (the last arriving block resets its tile's counter). The buffers grow
// only outside CUDA graph capture; growing frees the old buffers (which synchronises the device) and
// invalidates the graphs that baked their addresses in.
#pragma once

#include <cstdint>

namespace dsinfer::cuda {

struct GemvWorkspace {
  float* partials = nullptr;    // at least the floats asked for
  int32_t* counters = nullptr;  // at least the tiles asked for, all zero
};

// Buffers holding `floats` partial sums and `tiles` counters, or nulls (partials == nullptr) when they are
// too small and a graph is being captured: the caller then launches without a split.
GemvWorkspace gemv_workspace(int64_t floats, int64_t tiles);

}  // namespace dsinfer::cuda
