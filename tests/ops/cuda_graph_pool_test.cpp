// The CUDA graphs' shared pool (backend/cuda/runtime.h, graph_arena.h) on the GPU: graphs captured one after
// another, each giving its output back to the pool once captured (as CudaGraphModel does), hold about the
// largest capture's memory instead of the sum, every replay still writes its own output whole, and the pool's
// memory goes back once no graph exists. Runs on a GPU; skips elsewhere (CI compiles it).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

constexpr size_t kMiB = size_t{1} << 20;

// The first and last byte of a device buffer.
std::vector<uint8_t> ends(const void* p, size_t bytes) {
  std::vector<uint8_t> out(2);
  cuda::copy_to_host(out.data(), p, 1);
  cuda::copy_to_host(out.data() + 1, static_cast<const uint8_t*>(p) + bytes - 1, 1);
  return out;
}

TEST(CudaGraphPoolTest, GraphsShareThePoolAndEachReplayWritesItsOwnOutput) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const size_t base = cuda::graph_pool_bytes();  // other tests' graphs, if any are still alive
  constexpr int kGraphs = 8;
  // Graph i: a temporary of i x 8 MiB (freed inside the capture) and an output of i x 48 MiB set to i.
  auto out_bytes = [](int i) { return static_cast<size_t>(i) * 48 * kMiB; };
  const size_t largest = out_bytes(kGraphs) + kGraphs * 8 * kMiB;
  ASSERT_TRUE(cuda::graph_pool_reserve(largest));
  std::vector<cuda::GraphHandle> graphs;
  std::vector<void*> outs;
  size_t sum = 0;
  for (int i = 1; i <= kGraphs; ++i) {
    cuda::begin_capture();
    void* temp = cuda::device_alloc(static_cast<size_t>(i) * 8 * kMiB);
    void* out = cuda::device_alloc(out_bytes(i));
    const bool allocated = temp != nullptr && out != nullptr;
    if (allocated) {
      cuda::memset_async(temp, 0, static_cast<size_t>(i) * 8 * kMiB);
      cuda::memset_async(out, i, out_bytes(i));
    }
    cuda::device_free(temp);
    cuda::GraphHandle g = cuda::end_capture(allocated);
    ASSERT_TRUE(allocated) << "graph " << i;
    graphs.push_back(g);
    outs.push_back(out);
    cuda::device_free(out);  // the output's block is shared with later captures from here on
    sum += out_bytes(i) + static_cast<size_t>(i) * 8 * kMiB;
  }
  const size_t pool = cuda::graph_pool_bytes() - base;
  EXPECT_LE(pool, largest + 64 * kMiB) << "pool " << (pool >> 20) << " MiB, captures' sum " << (sum >> 20);
  EXPECT_LT(pool, sum / 2);
  // Outputs overlap each other's memory, but each replay writes its own whole.
  for (int i : {3, 8, 1, 5, 5, 2, 8}) {
    cuda::launch_graph(graphs[i - 1]);
    cuda::synchronize();
    EXPECT_EQ(ends(outs[i - 1], out_bytes(i)), std::vector<uint8_t>(2, static_cast<uint8_t>(i)))
        << "graph " << i;
  }
  for (cuda::GraphHandle g : graphs) cuda::destroy_graph(g);
  if (base == 0) {
    EXPECT_EQ(cuda::graph_pool_bytes(), 0u);  // no graph left: the memory went back
  }
}

#endif

}  // namespace
}  // namespace dsinfer
