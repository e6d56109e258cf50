// The per-shape summary of GEMV block stamps (src/backend/cuda/gemv_stamp_summary.h): launches group by
// shape in first-appearance order, blocks that never ran are left out, and each figure is the median over
// the shape's launches of the per-launch figure (the wait to the first stage as the block median, the tail as
// the last end minus the median end). Runs without a GPU.
#include "backend/cuda/gemv_stamp_summary.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dsinfer::cuda {
namespace {

// A block waiting at `wait` us (after a 1 us prologue), consuming its first stage `first` us later, issuing
// its last stage at `last_issue` and ending at `end` (both after the wait), on SM `sm`.
GemvStampBlock block(double wait, double first, double last_issue, double end, uint32_t sm) {
  auto ns = [](double v) { return static_cast<uint64_t>(1e6 + v * 1e3); };  // away from 0 ("did not run")
  GemvStampBlock b;
  b.t[kStampStart] = ns(wait - 1.0);
  b.t[kStampIssued] = ns(wait - 0.5);
  b.t[kStampWaited] = ns(wait);
  b.t[kStampConsumed] = ns(wait + first);
  b.t[kStampLastIssue] = ns(wait + last_issue);
  b.t[kStampEnd] = ns(wait + end);
  b.sm = sm;
  b.tiles = 1;
  return b;
}

GemvStampLaunch launch(int64_t rows, int64_t K, bool swiglu, std::vector<GemvStampBlock> blocks) {
  GemvStampLaunch l;
  l.rows = rows;
  l.K = K;
  l.swiglu = swiglu;
  l.grid = static_cast<int64_t>(blocks.size());
  l.tiles = l.grid;
  l.blocks = std::move(blocks);
  return l;
}

TEST(GemvStampSummaryTest, MediansPerShapeInFirstAppearanceOrder) {
  // Shape A (4096 x 4096) twice, shape B (SwiGLU 14336 x 4096) once, between them.
  const std::vector<GemvStampLaunch> launches = {
      // Waits at 10, 10, 11: the launch's wait is 10. Ends at 18, 19, 21: the last 11 after the wait,
      // median end 19 -> 9 after it, tail 2. First stages 1, 2, 3 -> median 2; drains 3, 1, 2 -> median 2.
      launch(4096, 4096, false, {block(10, 1, 5, 8, 0), block(10, 2, 8, 9, 1), block(11, 3, 8, 10, 1)}),
      launch(14336, 4096, true, {block(0, 4, 50, 60, 5), block(0, 4, 52, 62, 6)}),
      // Wait 0; ends 5, 7, 7: last 7, median 7, tail 0; first 1 -> 1; drains 1, 1, 1; three SMs.
      launch(4096, 4096, false, {block(0, 1, 4, 5, 0), block(0, 1, 6, 7, 1), block(0, 1, 6, 7, 2)}),
  };
  const std::vector<GemvStampShape> s = summarize_gemv_stamps(launches);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].rows, 4096);
  EXPECT_FALSE(s[0].swiglu);
  EXPECT_EQ(s[0].launches, 2);
  EXPECT_EQ(s[0].weight_bytes, int64_t{4096} * 4096 * 2);
  EXPECT_EQ(s[0].sms_min, 2);
  EXPECT_EQ(s[0].sms_max, 3);
  // Medians over two launches take the upper value: first stage max(2, 1), end max(11, 7), tail max(2, 0),
  // drain max(2, 1).
  EXPECT_NEAR(s[0].wait_to_first_us, 2.0, 1e-9);
  EXPECT_NEAR(s[0].wait_to_end_us, 11.0, 1e-9);
  EXPECT_NEAR(s[0].end_tail_us, 2.0, 1e-9);
  EXPECT_NEAR(s[0].last_issue_to_end_us, 2.0, 1e-9);
  EXPECT_EQ(s[1].rows, 14336);
  EXPECT_TRUE(s[1].swiglu);
  EXPECT_EQ(s[1].weight_bytes, int64_t{14336} * 4096 * 2 * 2);  // gate and up
  EXPECT_NEAR(s[1].wait_to_end_us, 62.0, 1e-9);
  EXPECT_NEAR(s[1].end_tail_us, 0.0, 1e-9);  // two blocks: the median is the later one
  EXPECT_NEAR(s[1].wait_to_first_us, 4.0, 1e-9);
}

TEST(GemvStampSummaryTest, BlocksThatNeverRanAreLeftOut) {
  GemvStampLaunch l = launch(64, 64, false, {block(0, 1, 2, 3, 7), GemvStampBlock{}});
  const std::vector<GemvStampShape> s = summarize_gemv_stamps({l});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].sms_max, 1);
  EXPECT_NEAR(s[0].wait_to_end_us, 3.0, 1e-9);
  EXPECT_NEAR(s[0].end_tail_us, 0.0, 1e-9);
  // A launch with no block that ran (a slot never reached) adds nothing.
  EXPECT_TRUE(summarize_gemv_stamps({launch(64, 64, false, {GemvStampBlock{}})}).empty());
  EXPECT_TRUE(summarize_gemv_stamps({}).empty());
}

// Handoffs: launches ordered by their first wait return (not by their order in the record), one median per
// (from shape, to shape) pair, pairs further apart than the bound left out.
TEST(GemvStampSummaryTest, HandoffsBetweenConsecutiveLaunchesPerShapePair) {
  // Two steps of qkv (6144) -> o (4096) -> gate_up (SwiGLU 14336), recorded out of order; 1000 us apart.
  const std::vector<GemvStampLaunch> launches = {
      launch(4096, 4096, false, {block(20, 1, 5, 8, 0), block(21, 1, 5, 9, 1)}),  // o: wait 20, ends 28, 30
      launch(6144, 4096, false, {block(0, 1, 10, 14, 0)}),                        // qkv: ends 14
      launch(14336, 4096, true, {block(29, 1, 40, 60, 0)}),    // gate_up: wait 29 (before o ends)
      launch(6144, 4096, false, {block(1000, 1, 10, 12, 0)}),  // qkv: ends 1012
      launch(4096, 4096, false, {block(1016, 1, 5, 8, 0)}),    // o: wait 1016
      launch(14336, 4096, true, {block(1025, 1, 40, 60, 0)}),  // gate_up: wait 1025
  };
  const std::vector<GemvStampHandoff> h = summarize_gemv_handoffs(launches);
  ASSERT_EQ(h.size(), 2u);  // gate_up (end 89) -> qkv (wait 1000) is 911 us: not a handoff
  EXPECT_EQ(h[0].from_rows, 6144);
  EXPECT_EQ(h[0].to_rows, 4096);
  EXPECT_FALSE(h[0].to_swiglu);
  EXPECT_EQ(h[0].count, 2);
  EXPECT_NEAR(h[0].median_us, 6.0, 1e-9);  // gaps 20 - 14 = 6 and 1016 - 1012 = 4: the upper one
  EXPECT_EQ(h[1].from_rows, 4096);
  EXPECT_EQ(h[1].to_rows, 14336);
  EXPECT_TRUE(h[1].to_swiglu);
  EXPECT_EQ(h[1].count, 2);
  EXPECT_NEAR(h[1].median_us, 1.0, 1e-9);  // gaps 29 - 30 = -1 and 1025 - 1024 = 1
  // With a larger bound the step boundary counts too.
  EXPECT_EQ(summarize_gemv_handoffs(launches, 1e4).size(), 3u);
  EXPECT_TRUE(summarize_gemv_handoffs({}).empty());
}

}  // namespace
}  // namespace dsinfer::cuda
