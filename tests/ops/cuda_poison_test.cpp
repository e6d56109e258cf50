// The allocation-poisoning check mode (DSINFER_CUDA_POISON=1, backend/cuda/runtime.h): a fresh device tensor
// and one handed out again by the caching allocator both read as 0xFF bytes (NaN) until written. Runs only
// under that mode (`scripts/gpu_check.sh --poison` sets it), where it proves the mode is on; otherwise it
// skips.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_tensor.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

// How many of the tensor's bytes are not 0xFF.
int64_t unpoisoned_bytes(const Tensor& device_tensor) {
  std::vector<uint8_t> host(device_tensor.nbytes());
  cuda::synchronize();
  cuda::copy_to_host(host.data(), device_tensor.raw(), host.size());
  int64_t count = 0;
  for (uint8_t b : host) count += b != 0xFF;
  return count;
}

TEST(CudaPoisonTest, AllocationsReadAsNaNUntilWritten) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  if (!cuda::poison_allocations()) GTEST_SKIP() << "DSINFER_CUDA_POISON is not 1";
  cuda::register_allocator();
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty_on(Device::kCuda, DType::F32, {3, 1000});  // [3, 1000]
    first = t.raw();
    EXPECT_EQ(unpoisoned_bytes(t), 0);
    std::vector<float> zeros(3000, 0.0f);
    cuda::copy_to_device(t.raw(), zeros.data(), zeros.size() * sizeof(float));
    EXPECT_EQ(unpoisoned_bytes(t), 3000 * 4);  // written: no longer poisoned
  }
  // The same size class again: the caching allocator hands the freed block back, poisoned once more.
  Tensor again = Tensor::empty_on(Device::kCuda, DType::BF16, {6000});  // [6000]
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(unpoisoned_bytes(again), 0);
}

#endif

}  // namespace
}  // namespace dsinfer
