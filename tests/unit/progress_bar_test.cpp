// Tests for ProgressBar: formatting helpers, the rendered line, disabled mode and thread-safe counting.
#include "core/progress_bar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

namespace dsinfer {
namespace {

TEST(ProgressFormatTest, Durations) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(5.4), "0:05");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "--:--");
  EXPECT_EQ(format_duration(INFINITY), "--:--");
  EXPECT_EQ(format_duration(NAN), "--:--");
}

TEST(ProgressFormatTest, AmountsAndRates) {
  EXPECT_EQ(format_amount(1234, ProgressUnit::kItems), "1234");
  EXPECT_EQ(format_amount(512, ProgressUnit::kBytes), "512 B");
  EXPECT_EQ(format_amount(1536, ProgressUnit::kBytes), "1.50 KB");
  EXPECT_EQ(format_amount(int64_t{12} << 20, ProgressUnit::kBytes), "12.0 MB");
  EXPECT_EQ(format_amount(int64_t{3} << 29, ProgressUnit::kBytes), "1.50 GB");
  EXPECT_EQ(format_amount(int64_t{700} << 30, ProgressUnit::kBytes), "700 GB");
  EXPECT_EQ(format_rate(12.34, ProgressUnit::kItems), "12.3 it/s");
  EXPECT_EQ(format_rate(1500, ProgressUnit::kItems), "1500 it/s");
  EXPECT_EQ(format_rate(2.5 * (1 << 30), ProgressUnit::kBytes), "2.50 GB/s");
  EXPECT_EQ(format_rate(-1, ProgressUnit::kItems), "? it/s");
}

TEST(ProgressFormatTest, RenderedLine) {
  EXPECT_EQ(render_progress("load", 5, 10, 2.0, ProgressUnit::kItems, 10),
            "load [#####-----]  50% 5/10 2.5 it/s ETA 0:02");
  EXPECT_EQ(render_progress("load", 10, 10, 4.0, ProgressUnit::kItems, 4),
            "load [####] 100% 10/10 2.5 it/s ETA 0:00");
  EXPECT_EQ(render_progress("scan", 7, 0, 0.0, ProgressUnit::kItems, 10), "scan 7 ? it/s");
  EXPECT_EQ(render_progress("dl", int64_t{1} << 30, int64_t{4} << 30, 2.0, ProgressUnit::kBytes, 4),
            "dl [#---]  25% 1.00 GB/4.00 GB 512 MB/s ETA 0:06");
}

TEST(ProgressBarTest, DisabledPrintsNothing) {
  testing::internal::CaptureStderr();
  {
    ProgressBar bar("quiet", 100, /*enabled=*/false);
    for (int i = 0; i < 100; ++i) bar.advance();
    EXPECT_EQ(bar.done(), 100);
    bar.finish();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(ProgressBarTest, EnabledDrawsAndEndsTheLine) {
  testing::internal::CaptureStderr();
  {
    ProgressBar bar("weights", 4, /*enabled=*/true, ProgressUnit::kItems);
    bar.update(1);
    bar.update(4);
    bar.finish();
    bar.finish();  // idempotent
  }
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("weights"), std::string::npos) << out;
  EXPECT_NE(out.find("100% 4/4"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
}

TEST(ProgressBarTest, ThrottlesRedraws) {
  testing::internal::CaptureStderr();
  {
    ProgressBar bar("fast", 100000, /*enabled=*/true);
    for (int i = 0; i < 100000; ++i) bar.advance();
  }
  const std::string out = testing::internal::GetCapturedStderr();
  // A tight loop finishes well within a second: a handful of redraws, not 100000.
  EXPECT_LT(std::count(out.begin(), out.end(), '\r'), 20);
}

TEST(ProgressBarTest, ConcurrentAdvancesAreCounted) {
  ProgressBar bar("threads", 0, /*enabled=*/false);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) bar.advance(2);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(bar.done(), 80000);
}

}  // namespace
}  // namespace dsinfer
