// The weight-streaming probe (backend/cuda/stream_probe.h): every load path reads every byte of every block's
// span exactly once (the blocks' word sums against the host's); and (disabled, a benchmark) how fast each
// path streams as the number of SMs streaming grows, to tell a per-SM ceiling from the memory's (runs where a
// GPU is visible; CI compiles it and skips).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream_probe.h"
#include "backend/cuda/timing.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda::StreamPath;

const char* name(StreamPath p) {
  switch (p) {
    case StreamPath::kCpAsyncRing:
      return "cp.async ring (GEMV)";
    case StreamPath::kCpAsyncFlat:
      return "cp.async ring, 4 KB flat stages";
    case StreamPath::kBulkRows:
      return "bulk, 32 x 512 B rows";
    case StreamPath::kBulkFlat4K:
      return "bulk, 4 x 4 KB flat";
    case StreamPath::kTmaBox:
      return "TMA box 256 x 32";
    case StreamPath::kTmaBox64:
      return "TMA box 64 x 32 x 4, swizzled";
    case StreamPath::kBulkFlat:
      return "bulk, 16 KB flat";
    case StreamPath::kBulkWarpPieces:
      return "GEMV ring, 2 x 2 KB bulk a stage, packed";
    case StreamPath::kRegisterLoads:
      return "register loads";
  }
  return "?";
}

constexpr StreamPath kPaths[] = {
    StreamPath::kCpAsyncRing, StreamPath::kCpAsyncFlat,    StreamPath::kBulkRows,
    StreamPath::kBulkFlat,    StreamPath::kBulkFlat4K,     StreamPath::kTmaBox,
    StreamPath::kTmaBox64,    StreamPath::kBulkWarpPieces, StreamPath::kRegisterLoads};

class CudaStreamProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaStreamProbeTest, EveryPathReadsEveryWordOnce) {
  constexpr int kBlocks = 5;
  constexpr int64_t kSpan = 3 * cuda::kStreamProbeTileBytes;
  const int64_t words = kBlocks * kSpan / 4;
  std::vector<uint32_t> host(static_cast<size_t>(words));
  uint32_t x = 12345;
  for (auto& w : host) {
    x = x * 1664525u + 1013904223u;  // a different word everywhere: a missed or repeated chunk changes a sum
    w = x;
  }
  std::vector<uint32_t> want(kBlocks, 0);
  for (int64_t i = 0; i < words; ++i)
    want[static_cast<size_t>(i / (kSpan / 4))] += host[static_cast<size_t>(i)];
  void* src = cuda::device_alloc(static_cast<size_t>(words) * 4);
  auto* sums = static_cast<uint32_t*>(cuda::device_alloc(sizeof(uint32_t) * kBlocks));
  ASSERT_TRUE(src && sums);
  cuda::copy_to_device(src, host.data(), static_cast<size_t>(words) * 4);
  for (StreamPath p : kPaths) {
    if (!cuda::stream_probe_supported(p)) continue;
    std::vector<uint32_t> got(kBlocks, 0);
    cuda::copy_to_device(sums, got.data(), sizeof(uint32_t) * kBlocks);
    cuda::launch_stream_probe(p, kBlocks, src, kSpan, sums);
    cuda::copy_to_host(got.data(), sums, sizeof(uint32_t) * kBlocks);
    EXPECT_EQ(got, want) << name(p);
  }
  cuda::device_free(src);
  cuda::device_free(sums);
}

TEST_F(CudaStreamProbeTest, RejectsASpanThatIsNotWholeTiles) {
  void* src = cuda::device_alloc(cuda::kStreamProbeTileBytes);
  auto* sums = static_cast<uint32_t*>(cuda::device_alloc(sizeof(uint32_t)));
  ASSERT_TRUE(src && sums);
  EXPECT_ANY_THROW(cuda::launch_stream_probe(StreamPath::kCpAsyncRing, 1, src, 4096, sums));
  cuda::device_free(src);
  cuda::device_free(sums);
}

TEST_F(CudaStreamProbeTest, DISABLED_BenchStreamPaths) {
  constexpr int64_t kSpan = 128 * cuda::kStreamProbeTileBytes;  // 32 MB a block
  constexpr int kMaxBlocks = 132;
  void* src = cuda::device_alloc(static_cast<size_t>(kSpan) * kMaxBlocks);
  auto* sums = static_cast<uint32_t*>(cuda::device_alloc(sizeof(uint32_t) * kMaxBlocks));
  ASSERT_TRUE(src && sums);
  std::printf("| path | blocks (1 per SM) | GB/s in all | GB/s per block |\n|---|---|---|---|\n");
  for (StreamPath p : kPaths) {
    if (!cuda::stream_probe_supported(p)) continue;
    for (int blocks : {1, 2, 8, 33, 66, 99, 116, 132}) {
      const double ms =
          cuda::time_stream_ms([&] { cuda::launch_stream_probe(p, blocks, src, kSpan, sums); }, 5);
      const double gbs = static_cast<double>(kSpan) * blocks / (ms * 1e6);
      std::printf("| %s | %d | %.0f | %.1f |\n", name(p), blocks, gbs, gbs / blocks);
    }
  }
  cuda::device_free(src);
  cuda::device_free(sums);
}

#endif

}  // namespace
}  // namespace dsinfer
