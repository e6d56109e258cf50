// The copy bandwidth of the decode roofline (backend/cuda/copy_bandwidth.h): a finite positive rate, the
// buffers given back to the device (free memory as before), and 0 without an error when they do not fit
// (runs where a GPU is visible; CI compiles it and skips).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#ifdef DSINFER_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/copy_bandwidth.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

size_t free_bytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

TEST(CudaCopyBandwidthTest, MeasuresAPositiveRateAndGivesTheMemoryBack) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const size_t before = free_bytes();
  const double gbs = cuda::measure_copy_gbs(int64_t{256} << 20, 4);
  EXPECT_TRUE(std::isfinite(gbs));
  EXPECT_GT(gbs, 10.0);      // any GPU this runs on copies faster than 10 GB/s
  EXPECT_LT(gbs, 100000.0);  // and slower than 100 TB/s
  // Within 64 MiB of what was free before (the driver's own bookkeeping may move a little).
  EXPECT_LE(static_cast<double>(before) - static_cast<double>(free_bytes()), 64.0 * (1 << 20));
}

TEST(CudaCopyBandwidthTest, BuffersThatDoNotFitGiveZero) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(cuda::measure_copy_gbs(static_cast<int64_t>(total), 1), 0.0);  // two of them never fit
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);                              // and no error is left behind
  EXPECT_GT(cuda::measure_copy_gbs(int64_t{16} << 20, 2), 0.0);            // the device still works
}

#endif

}  // namespace
}  // namespace dsinfer
