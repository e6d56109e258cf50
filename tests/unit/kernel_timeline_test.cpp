// attribute_timeline: wall and idle-before shares of overlapping, nested, disjoint and unsorted kernels;
// last_in_start_order: the trace's timeline tail.
#include "backend/kernel_timeline.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsinfer {
namespace {

uint64_t total(const std::vector<KernelWall>& w) {
  uint64_t sum = 0;
  for (const KernelWall& k : w) sum += k.wall_ns + k.idle_before_ns;
  return sum;
}

TEST(KernelTimeline, BackToBackKernelsAreChargedTheirDurations) {
  const auto w = attribute_timeline({{0, 10, 0}, {10, 25, 1}, {25, 30, 0}}, 2);
  EXPECT_EQ(w[0].wall_ns, 15u);
  EXPECT_EQ(w[1].wall_ns, 15u);
  EXPECT_EQ(w[0].idle_before_ns + w[1].idle_before_ns, 0u);
  EXPECT_EQ(total(w), 30u);
}

TEST(KernelTimeline, AnOverlappingKernelIsChargedOnlyWhatItAdds) {
  // Kernel 1 starts early (programmatic dependent launch) and waits: only its last 5 ns extend the timeline.
  const auto w = attribute_timeline({{0, 20, 0}, {5, 25, 1}}, 2);
  EXPECT_EQ(w[0].wall_ns, 20u);
  EXPECT_EQ(w[1].wall_ns, 5u);
  EXPECT_EQ(total(w), 25u);
}

TEST(KernelTimeline, NestedKernelsAddNothingAndGapsAreIdle) {
  const auto w = attribute_timeline({{0, 50, 0}, {10, 20, 1}, {60, 70, 2}, {65, 68, 1}}, 3);
  EXPECT_EQ(w[0].wall_ns, 50u);
  EXPECT_EQ(w[1].wall_ns, 0u);
  EXPECT_EQ(w[1].idle_before_ns, 0u);
  EXPECT_EQ(w[2].idle_before_ns, 10u);  // 50 .. 60, no kernel running
  EXPECT_EQ(w[2].wall_ns, 10u);
  EXPECT_EQ(total(w), 70u);
}

TEST(KernelTimeline, OrderOfTheRecordsDoesNotMatter) {
  const std::vector<KernelSpan> spans = {{100, 140, 1}, {0, 30, 0}, {20, 60, 2}, {90, 95, 0}};
  std::vector<KernelSpan> reversed(spans.rbegin(), spans.rend());
  const auto a = attribute_timeline(spans, 3), b = attribute_timeline(reversed, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i].wall_ns, b[i].wall_ns);
    EXPECT_EQ(a[i].idle_before_ns, b[i].idle_before_ns);
  }
  EXPECT_EQ(a[0].wall_ns, 30u + 5u);
  EXPECT_EQ(a[2].wall_ns, 30u);         // 30 .. 60
  EXPECT_EQ(a[0].idle_before_ns, 30u);  // 60 .. 90
  EXPECT_EQ(a[1].idle_before_ns, 5u);   // 95 .. 100
  EXPECT_EQ(total(a), 140u);
}

TEST(KernelTimeline, EmptyTraceAndBadRecords) {
  const auto w = attribute_timeline({}, 2);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(total(w), 0u);
  EXPECT_THROW(attribute_timeline({{0, 1, 2}}, 2), Error);
  EXPECT_THROW(attribute_timeline({{5, 1, 0}}, 1), Error);
}

TEST(KernelTimeline, TailKeepsTheLatestStartsInOrder) {
  // Records arrive out of order (CUPTI buffers); ties in start order by end.
  const std::vector<KernelSpan> spans = {{50, 60, 2}, {0, 10, 0}, {30, 45, 1}, {30, 35, 3}, {10, 40, 1}};
  const auto tail = last_in_start_order(spans, 3);
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[0].start, 30u);
  EXPECT_EQ(tail[0].end, 35u);
  EXPECT_EQ(tail[1].end, 45u);
  EXPECT_EQ(tail[2].name, 2u);
  const auto all = last_in_start_order(spans, 99);  // more than there are: every span
  ASSERT_EQ(all.size(), spans.size());
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].start, all[i].start);
  EXPECT_TRUE(last_in_start_order(spans, 0).empty());
  EXPECT_TRUE(last_in_start_order({}, 4).empty());
}

}  // namespace
}  // namespace dsinfer
