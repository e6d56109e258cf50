// The fused split-KV combine's arrival counters (decode_arrivals in attention_kernels.h): one process-wide,
// zeroed int32 buffer that decode kernels leave zeroed. It grows only outside CUDA graph capture, to at least
// kMinSlots (num_queries * Hq: far more than any step with several splits needs, so the first eager decode
// step sizes it for good); growing frees the old buffer, which synchronises the device, and invalidates the
// graphs that baked its address in.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int64_t kMinSlots = 1 << 16;  // 256 KiB

std::mutex g_mutex;
int32_t* g_buffer = nullptr;
int64_t g_slots = 0;

}  // namespace

int32_t* decode_arrivals(int64_t slots) {
  if (slots <= 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (slots <= g_slots) return g_buffer;
  if (capturing()) return nullptr;  // the caller runs the combine kernel instead
  int64_t grown = std::max<int64_t>(kMinSlots, g_slots);
  while (grown < slots) grown *= 2;
  if (g_buffer) {
    cudaFree(g_buffer);  // synchronises: no kernel still counts in the old buffer
    invalidate_graphs();
  }
  g_buffer = nullptr;
  g_slots = 0;
  void* p = nullptr;
  const size_t bytes = static_cast<size_t>(grown) * sizeof(int32_t);
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    fail("attention decode: cannot allocate ", bytes, " bytes of arrival counters");
  }
  if (cudaMemsetAsync(p, 0, bytes, stream()) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    fail("attention decode: cannot zero the arrival counters");
  }
  g_buffer = static_cast<int32_t*>(p);
  g_slots = grown;
  return g_buffer;
}

}  // namespace dsinfer::cuda
