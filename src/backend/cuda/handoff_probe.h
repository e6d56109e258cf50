// A probe of what one kernel-to-kernel handoff costs on the GPU (a benchmark and a test use it): a chain of
// kernels, each reading a value another block of the kernel before it wrote, handed over in one of three
// ways. Plain stream order; programmatic dependent launch with griddepcontrol.wait (what every decode kernel
// does now); or programmatic launch with a device-wide arrival flag the producer's blocks release and the
// consumer's blocks acquire (no wait for the producer grid to finish). CUDA-header free.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

enum class Handoff { kPlain, kPdlWait, kPdlFlag };

// Zeroes vals [kernels * blocks] and flags [kernels] on stream(), then launches `kernels` kernels of `blocks`
// blocks x 256 threads: block b of kernel i > 0 takes kernel i - 1's value of block (b + 1) % blocks, adds
// one and stores it, so every value of the last kernel is `kernels` when each handoff delivered. After its
// handoff each kernel also streams its own float4_per_kernel float4s of src (src holds kernels times that;
// zeros leave the values alone), as a decode GEMV streams its weights. Captured graphs replay from zero.
void launch_handoff_chain(Handoff mode, int kernels, int blocks, float* vals, unsigned* flags,
                          const void* src, int64_t float4_per_kernel);

// Zeroes `bytes` of device memory at `src` (the streamed slices) and waits for it.
void zero_handoff_source(void* src, size_t bytes);

}  // namespace dsinfer::cuda
