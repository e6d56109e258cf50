// Device buffers of a probe chain (handoff_probe.h, phase_probe.h): values [steps, blocks], one flag per step
// (the handoff's arrival flags, or the phase barrier's counter in flags[0]) and `steps` slices of float4s to
// stream, zeros so that they leave the values alone. Allocation failures leave null pointers (ok() says).
#pragma once
#ifdef DSINFER_HAVE_CUDA
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/handoff_probe.h"
#include "backend/cuda/runtime.h"

namespace dsinfer {

struct ProbeBuffers {
  int steps, blocks;
  int64_t float4_per_step;
  float* vals = nullptr;      // [steps, blocks]
  unsigned* flags = nullptr;  // [steps]
  void* src = nullptr;        // [steps, float4_per_step] float4s
  ProbeBuffers(int s, int b, int64_t n4) : steps(s), blocks(b), float4_per_step(n4) {
    vals = static_cast<float*>(cuda::device_alloc(sizeof(float) * s * b));
    flags = static_cast<unsigned*>(cuda::device_alloc(sizeof(unsigned) * s));
    const size_t bytes = 16 * static_cast<size_t>(std::max<int64_t>(1, n4 * s));
    src = cuda::device_alloc(bytes);
    if (src) cuda::zero_handoff_source(src, bytes);
  }
  ProbeBuffers(const ProbeBuffers&) = delete;
  ProbeBuffers& operator=(const ProbeBuffers&) = delete;
  ~ProbeBuffers() {
    cuda::device_free(vals);
    cuda::device_free(flags);
    cuda::device_free(src);
  }
  bool ok() const { return vals && flags && src; }
  // The last step's values.
  std::vector<float> last() const {
    std::vector<float> out(blocks);
    cuda::copy_to_host(out.data(), vals + static_cast<int64_t>(steps - 1) * blocks, sizeof(float) * blocks);
    return out;
  }
};

}  // namespace dsinfer
#endif
