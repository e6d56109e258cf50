// The kernel-handoff probe (backend/cuda/handoff_probe.h): every way of handing a value from one kernel to
// the next delivers it, launched directly and replayed from a CUDA graph; and (disabled, a benchmark) what
// one handoff costs, alone and with each kernel streaming weights after it (runs where a GPU is visible; CI
// compiles it and skips).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/handoff_probe.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#include "cuda_probe_buffers.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda::Handoff;

const char* name(Handoff h) {
  switch (h) {
    case Handoff::kPlain:
      return "plain";
    case Handoff::kPdlWait:
      return "pdl wait";
    case Handoff::kPdlFlag:
      return "pdl flag";
  }
  return "?";
}

// A chain of `kernels` kernels over probe buffers.
struct Chain : ProbeBuffers {
  using ProbeBuffers::ProbeBuffers;
  void launch(Handoff h) const {
    cuda::launch_handoff_chain(h, steps, blocks, vals, flags, src, float4_per_step);
  }
};

class CudaHandoffProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaHandoffProbeTest, EveryHandoffDeliversEveryValue) {
  // One block per SM and more blocks than fit at once beside the next kernel's (3000: several waves).
  for (int blocks : {132, 3000}) {
    for (Handoff h : {Handoff::kPlain, Handoff::kPdlWait, Handoff::kPdlFlag}) {
      Chain c(48, blocks, 4096);
      ASSERT_TRUE(c.ok());
      c.launch(h);
      cuda::synchronize();
      for (float v : c.last()) ASSERT_EQ(v, 48.0f) << name(h) << ", " << blocks << " blocks, direct";
      cuda::time_graph_ms([&] { c.launch(h); }, 3);
      cuda::synchronize();
      for (float v : c.last()) ASSERT_EQ(v, 48.0f) << name(h) << ", " << blocks << " blocks, graph";
    }
  }
}

TEST_F(CudaHandoffProbeTest, DISABLED_BenchHandoff) {
  constexpr int kKernels = 64;
  std::printf(
      "| handoff | blocks | MB streamed per kernel | us per kernel | us per kernel over the stream at 4.23 "
      "TB/s |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int64_t mb : {0, 4, 16}) {
    for (int blocks : {132, 264}) {
      const int64_t n4 = mb * 1024 * 1024 / 16;
      Chain c(kKernels, blocks, n4);
      ASSERT_TRUE(c.ok());
      for (Handoff h : {Handoff::kPlain, Handoff::kPdlWait, Handoff::kPdlFlag}) {
        const double us = cuda::time_graph_ms([&] { c.launch(h); }, 20) * 1e3 / kKernels;
        for (float v : c.last()) ASSERT_EQ(v, static_cast<float>(kKernels)) << name(h);
        const double stream_us = static_cast<double>(mb) * 1024 * 1024 / 4.23e6;
        std::printf("| %s | %d | %lld | %.2f | %.2f |\n", name(h), blocks, static_cast<long long>(mb), us,
                    us - stream_us);
      }
    }
  }
}

#endif

}  // namespace
}  // namespace dsinfer
