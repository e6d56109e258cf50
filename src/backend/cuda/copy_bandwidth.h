// The device's copy bandwidth, the figure the decode rooflines divide by (docs/benchmarks.md):
// device-to-device copies of one buffer into another on stream(), timed by CUDA events, counting the bytes
// read and written. CUDA-header free.
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// GB/s (1e9 bytes) of `reps` copies of `bytes` after one warmup copy; 0 when the two buffers cannot be
// allocated (nothing is left allocated either way).
double measure_copy_gbs(int64_t bytes, int reps);

}  // namespace dsinfer::cuda
