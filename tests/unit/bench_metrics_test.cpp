// Tests for the benchmark statistics: percentiles, summaries and length ranges.
#include "engine/bench_metrics.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsinfer {
namespace {

TEST(BenchMetrics, PercentilesInterpolate) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  LatencySummary s = summarize(v);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.max, 4.0);
}

TEST(BenchMetrics, LengthRanges) {
  LengthRange fixed = LengthRange::parse("128", "--input-len");
  EXPECT_EQ(fixed.min, 128);
  EXPECT_EQ(fixed.max, 128);
  LengthRange range = LengthRange::parse("128:1024", "--input-len");
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) {
    const int32_t n = range.sample(rng);
    EXPECT_GE(n, 128);
    EXPECT_LE(n, 1024);
  }
  for (const char* bad : {"", "0", "-3", "12x", "5:2", ":4", "4:"}) {
    EXPECT_THROW(LengthRange::parse(bad, "--input-len"), Error) << bad;
  }
}

}  // namespace
}  // namespace dsinfer
