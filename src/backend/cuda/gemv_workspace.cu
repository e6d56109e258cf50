// The split-K GEMV's partial sums and arrival counters (see gemv_workspace.h). The first sizes are large
// enough for every split the auto choice makes on the models we run (it splits only launches of few
// tiles), so the first eager step sizes them for good and graph capture never has to fall back.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "backend/cuda/gemv_workspace.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int64_t kMinFloats = int64_t{1} << 22;  // 16 MiB of partials
constexpr int64_t kMinTiles = int64_t{1} << 14;   // 64 KiB of counters

std::mutex g_mutex;
float* g_partials = nullptr;
int32_t* g_counters = nullptr;
int64_t g_floats = 0, g_tiles = 0;

int64_t grown_size(int64_t have, int64_t want, int64_t min) {
  int64_t n = std::max(min, have);
  while (n < want) n *= 2;
  return n;
}

}  // namespace

GemvWorkspace gemv_workspace(int64_t floats, int64_t tiles) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (floats <= g_floats && tiles <= g_tiles) return {g_partials, g_counters};
  if (capturing()) return {};  // the caller launches without a split
  const int64_t new_floats = grown_size(g_floats, floats, kMinFloats);
  const int64_t new_tiles = grown_size(g_tiles, tiles, kMinTiles);
  if (g_partials || g_counters) {
    cudaFree(g_partials);  // synchronises: no kernel still uses the old buffers
    cudaFree(g_counters);
    invalidate_graphs();
  }
  g_partials = nullptr;
  g_counters = nullptr;
  g_floats = g_tiles = 0;
  void* p = nullptr;
  void* c = nullptr;
  const size_t pbytes = static_cast<size_t>(new_floats) * sizeof(float);
  const size_t cbytes = static_cast<size_t>(new_tiles) * sizeof(int32_t);
  if (cudaMalloc(&p, pbytes) != cudaSuccess || cudaMalloc(&c, cbytes) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    fail("gemv: cannot allocate ", pbytes + cbytes, " bytes of split-K workspace");
  }
  if (cudaMemsetAsync(c, 0, cbytes, stream()) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(p);
    cudaFree(c);
    fail("gemv: cannot zero the split-K arrival counters");
  }
  g_partials = static_cast<float*>(p);
  g_counters = static_cast<int32_t*>(c);
  g_floats = new_floats;
  g_tiles = new_tiles;
  return {g_partials, g_counters};
}

}  // namespace dsinfer::cuda
