// The CUDA graph batch buckets (graph_batch_buckets): ascending, the last covers max_batch, and every batch
// of T sequences pads to a bucket b with T <= b <= next_pow2(T), the rounding the kernels' launch choices
// assume (batch_bucket.h) so that replayed and eager decode steps compute the same sums. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_graph_model.h"
#include "core/error.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

TEST(GraphBucketsTest, NextPow2) {
  EXPECT_EQ(cuda::next_pow2(0), 1);
  EXPECT_EQ(cuda::next_pow2(1), 1);
  EXPECT_EQ(cuda::next_pow2(2), 2);
  EXPECT_EQ(cuda::next_pow2(3), 4);
  EXPECT_EQ(cuda::next_pow2(64), 64);
  EXPECT_EQ(cuda::next_pow2(65), 128);
  EXPECT_EQ(cuda::next_pow2(int64_t{1} << 40), int64_t{1} << 40);
}

TEST(GraphBucketsTest, EveryBatchPadsWithinItsPowerOfTwo) {
  for (int32_t max_batch = 1; max_batch <= 1100; ++max_batch) {
    const std::vector<int32_t> b = graph_batch_buckets(max_batch);
    ASSERT_FALSE(b.empty());
    EXPECT_GE(b.back(), max_batch) << max_batch;
    for (size_t i = 1; i < b.size(); ++i) ASSERT_LT(b[i - 1], b[i]) << max_batch;
    for (int32_t t = 1; t <= max_batch; ++t) {
      const auto it = std::lower_bound(b.begin(), b.end(), t);
      ASSERT_NE(it, b.end()) << "batch " << t << " of max " << max_batch;
      EXPECT_LE(*it, cuda::next_pow2(t)) << "batch " << t << " of max " << max_batch;
    }
  }
}

TEST(GraphBucketsTest, SmallAndLargeBatchBuckets) {
  EXPECT_EQ(graph_batch_buckets(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(graph_batch_buckets(8), (std::vector<int32_t>{1, 2, 4, 8}));
  const std::vector<int32_t> b = graph_batch_buckets(256);
  EXPECT_EQ(b.back(), 256);
  EXPECT_EQ(b[b.size() - 2], 224);
  EXPECT_THROW(graph_batch_buckets(0), Error);
}

#else

TEST(GraphBucketsTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
