// The decode GEMV's split-K choice (src/backend/cuda/gemv_plan.h): split layouts cover K with no empty
// block, the model keeps the unsplit kernel for launches that already fill the GPU and splits launches of
// few row tiles, the override wins, and M does not enter the choice; the persistent kernel's blocks per SM
// balance its row tiles; a shape whose block does not fit the device's shared memory falls back to one that
// does. Runs without a GPU.
#include "backend/cuda/gemv_plan.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace dsinfer::cuda {
namespace {

// A launch of `rows` weight rows in blocks of 16 (8 warps, 2 chunks a stage, 4 stages, 2 blocks per SM).
GemvSplitInput launch_of(int64_t rows, int64_t K) {
  GemvSplitInput in;
  in.tiles = (rows + 15) / 16;
  in.rows_per_block = 16;
  in.K = K;
  in.warps = 8;
  in.unroll = 2;
  in.stages = 4;
  in.sms = 132;
  in.blocks_per_sm = 2;
  return in;
}

TEST(GemvPlanTest, LayoutCoversKWithoutEmptyBlocks) {
  for (int64_t K : {8, 64, 512, 520, 1288, 2048, 4096, 14336}) {
    for (int warps : {4, 8}) {
      for (int unroll : {1, 2, 4}) {
        const int64_t step = gemv_k_step(warps, unroll);
        for (int s = 1; s <= 20; ++s) {
          const GemvSplitLayout l = gemv_split_layout(K, warps, unroll, s);
          ASSERT_GE(l.splits, 1);
          ASSERT_LE(l.splits, kGemvMaxKSplit);
          ASSERT_LE(l.splits, s);
          if (l.splits == 1) {
            EXPECT_EQ(l.columns, K);
            continue;
          }
          EXPECT_EQ(l.columns % step, 0) << "K " << K << " s " << s;
          EXPECT_GE(l.columns * l.splits, K);        // covers K
          EXPECT_LT(l.columns * (l.splits - 1), K);  // the last block is not empty
        }
      }
    }
  }
  EXPECT_EQ(gemv_split_layout(4096, 8, 2, 3).splits, 3);   // 8 iterations: 3 + 3 + 2
  EXPECT_EQ(gemv_split_layout(4096, 8, 2, 5).splits, 4);   // 2 each: 4 blocks suffice
  EXPECT_EQ(gemv_split_layout(4096, 8, 2, 16).splits, 8);  // one iteration each at most
  EXPECT_EQ(gemv_split_layout(1288, 8, 2, 2).columns, 1024);
}

TEST(GemvPlanTest, FullLaunchesStayUnsplit) {
  EXPECT_EQ(choose_gemv_ksplit(launch_of(4096, 4096)), 1);   // Llama o: 256 tiles, one wave
  EXPECT_EQ(choose_gemv_ksplit(launch_of(4096, 14336)), 1);  // Llama down
  GemvSplitInput lm = launch_of(128256, 4096);               // lm_head: many waves
  lm.tiles = (128256 + 31) / 32;
  lm.rows_per_block = 32;
  lm.unroll = 1;
  EXPECT_EQ(choose_gemv_ksplit(lm), 1);
}

TEST(GemvPlanTest, FewTilesSplit) {
  const GemvSplitInput kv_a = launch_of(576, 2048);  // V2-Lite kv_a: 36 tiles
  const int s = choose_gemv_ksplit(kv_a);
  EXPECT_GT(s, 1);
  EXPECT_LT(gemv_split_cost_us(kv_a, s), gemv_split_cost_us(kv_a, 1));
}

TEST(GemvPlanTest, ForcedSplitWinsAndIsClamped) {
  GemvSplitInput in = launch_of(4096, 4096);
  in.forced = 1;
  EXPECT_EQ(choose_gemv_ksplit(in), 1);
  in.forced = 4;
  EXPECT_EQ(choose_gemv_ksplit(in), 4);
  in.forced = 16;
  EXPECT_EQ(choose_gemv_ksplit(in), 8);  // K 4096 has 8 warp iterations
  in.forced = 0;
  in.K = 64;  // one iteration: nothing to split
  EXPECT_EQ(choose_gemv_ksplit(in), 1);
}

TEST(GemvPlanTest, BatchSizeDoesNotChangeTheChoice) {
  for (int64_t rows : {64, 576, 2048, 3072, 4096, 20000}) {
    for (int64_t K : {1024, 2048, 4096}) {
      GemvSplitInput in = launch_of(rows, K);
      const int s1 = choose_gemv_ksplit(in);
      for (int64_t m : {2, 4, 8}) {
        in.m_bucket = m;
        EXPECT_EQ(choose_gemv_ksplit(in), s1) << "rows " << rows << " K " << K << " m " << m;
      }
    }
  }
}

// Persistent GEMV blocks per SM: enough bytes in flight per SM, then the most even tile walk (Llama-8B on
// 132 SMs: gate_up 896 tiles, one 64 KiB block per SM; o 256 tiles, two; the LM head 4008 tiles of 24 KiB
// blocks, four).
TEST(GemvPlanTest, PersistentBlocksBalanceTheTiles) {
  EXPECT_DOUBLE_EQ(gemv_persist_balance(256, 132, 2), 1.0);  // one tile each
  EXPECT_NEAR(gemv_persist_balance(896, 132, 1), 896.0 / (132 * 7), 1e-12);
  EXPECT_EQ(gemv_persist_grid(100, 132, 2), 100);
  EXPECT_EQ(gemv_persist_grid(4008, 132, 4), 528);
  EXPECT_EQ(choose_gemv_persist_blocks(896, 132, 2, 65536), 1);
  EXPECT_EQ(choose_gemv_persist_blocks(384, 132, 2, 65536), 1);
  EXPECT_EQ(choose_gemv_persist_blocks(256, 132, 2, 65536), 2);
  EXPECT_EQ(choose_gemv_persist_blocks(4008, 132, 6, 24576), 4);
  // Too few bytes in flight at any count: the occupancy.
  EXPECT_EQ(choose_gemv_persist_blocks(4008, 132, 2, 1024), 2);
  EXPECT_EQ(choose_gemv_persist_blocks(0, 132, 3, 65536), 3);
}

// One padded block per SM (DSINFER_GEMV_SPREAD) for launches of few tiles: V2-Lite's o and dense down (128
// tiles) at 1 tile per SM, its q / kv_a (228) only at 2, never an LM head, a kernel that fits one block per
// SM anyway, or with the rule off.
TEST(GemvPlanTest, FewTilesSpreadOneBlockPerSm) {
  EXPECT_TRUE(gemv_spread_one_per_sm(128, 132, 2, 1));
  EXPECT_TRUE(gemv_spread_one_per_sm(132, 132, 2, 1));
  EXPECT_FALSE(gemv_spread_one_per_sm(133, 132, 2, 1));
  EXPECT_FALSE(gemv_spread_one_per_sm(228, 132, 2, 1));
  EXPECT_TRUE(gemv_spread_one_per_sm(228, 132, 2, 2));
  EXPECT_FALSE(gemv_spread_one_per_sm(265, 132, 2, 2));
  EXPECT_FALSE(gemv_spread_one_per_sm(6400, 132, 2, 2));
  EXPECT_FALSE(gemv_spread_one_per_sm(128, 132, 1, 1));
  EXPECT_FALSE(gemv_spread_one_per_sm(128, 132, 2, 0));
  EXPECT_FALSE(gemv_spread_one_per_sm(0, 132, 2, 1));
}

// Shared memory per block, as ptxas and the launches count it (static reduction arrays + dynamic pipeline):
// ptxas reports 18,432 static bytes for the 16-warp SwiGLU kernels, 5,120 for the 8-warp one-tile ones and
// 4,608 for the 4-warp SwiGLU ones.
TEST(GemvPlanTest, BlockSharedMemoryMatchesTheKernels) {
  EXPECT_EQ(gemv_pipeline_smem(16, 2, 2, 3), 196608);
  EXPECT_EQ(gemv_block_smem(16, 2, 2, 3), 196608 + 18432);
  EXPECT_EQ(gemv_block_smem(8, 1, 4, 3), 98304 + 5120);
  EXPECT_EQ(gemv_block_smem(4, 2, 2, 3), 49152 + 4608);
}

// A model SM: 233,472 bytes of shared memory, 1,024 reserved per block (Hopper's figures).
int model_occupancy(int64_t block_smem, int64_t pad) {
  return static_cast<int>(233472 / (block_smem + pad + 1024));
}

// The padding that caps a persistent GEMV at `cap` blocks per SM: exactly cap fit with it (the qkv shape's
// 4-warp one-tile blocks, 51,712 bytes: 4 fit unpadded), the pad sits inside the range that gives cap, none
// when cap already holds, -1 when no pad gives exactly cap.
TEST(GemvPlanTest, CapPaddingLeavesExactlyCapBlocks) {
  const int64_t block = gemv_block_smem(4, 1, 4, 3);
  EXPECT_EQ(block, 49152 + 2560);
  ASSERT_EQ(model_occupancy(block, 0), 4);
  const int64_t max_pad = 232448 - block;
  for (int cap : {1, 2, 3}) {
    const int64_t pad = gemv_cap_padding([&](int64_t p) { return model_occupancy(block, p); }, cap, max_pad);
    EXPECT_GT(pad, 0) << cap;
    EXPECT_EQ(pad % 1024, 0) << cap;
    EXPECT_EQ(model_occupancy(block, pad), cap) << cap;
    EXPECT_EQ(model_occupancy(block, pad - 1024), cap) << cap;  // not at the edge
    EXPECT_EQ(model_occupancy(block, pad + 1024), cap) << cap;
  }
  EXPECT_EQ(gemv_cap_padding([&](int64_t p) { return model_occupancy(block, p); }, 4, max_pad), 0);
  EXPECT_EQ(gemv_cap_padding([&](int64_t p) { return model_occupancy(block, p); }, 5, max_pad), 0);
  // Steps of 2 blocks at a time: 3 is never exact.
  EXPECT_EQ(gemv_cap_padding([](int64_t p) { return p < 10240 ? 4 : 2; }, 3, max_pad), -1);
}

// Per-block opt-in limits: sm_90 232,448 bytes, sm_80 166,912, sm_86 / sm_89 101,376.
TEST(GemvPlanTest, ShapesFallBackToWhatTheDeviceFits) {
  constexpr int64_t kHopper = 232448, kA100 = 166912, kAda = 101376;
  GemvConfig gate_up{2, 2, 3, 2, false, 16};  // the 8B gate_up's persistent shape
  gate_up.persist = 1;
  const GemvConfig gate_up_launch{2, 2, 3, 2, false, 4};
  GemvConfig got = fit_gemv_shape(gate_up, gate_up_launch, true, kHopper);
  EXPECT_EQ(got.warps, 16);
  got = fit_gemv_shape(gate_up, gate_up_launch, true, kA100);  // 210 KiB does not fit: the per-launch shape
  EXPECT_EQ(got.warps, 4);
  EXPECT_EQ(got.tiles, 2);
  EXPECT_EQ(got.stages, 3);
  EXPECT_EQ(got.persist, 1);  // still the persistent kernel
  EXPECT_TRUE(gemv_shape_fits(got, true, kAda));

  // The 8B o / down shape (101 KiB) and qkv (105 KiB) on sm_86: the 8-warp 4-stage shape (69 KiB).
  for (const GemvConfig c : {GemvConfig{1, 4, 3, 2, false, 8}, GemvConfig{2, 2, 3, 2, false, 8}}) {
    EXPECT_TRUE(gemv_shape_fits(c, false, kA100));
    EXPECT_FALSE(gemv_shape_fits(c, false, kAda));
    got = fit_gemv_shape(c, c, false, kAda);
    EXPECT_EQ(got.warps, 8);
    EXPECT_EQ(got.tiles, 1);
    EXPECT_EQ(got.unroll, 2);
    EXPECT_EQ(got.stages, 4);
    EXPECT_EQ(gemv_block_smem(got.warps, got.tiles, got.unroll, got.stages), 65536 + 5120);
  }

  // Nothing fits: the smallest shape, whose launch then reports the shortfall.
  got = fit_gemv_shape(gate_up, gate_up_launch, true, 16 * 1024);
  EXPECT_EQ(got.warps, 4);
  EXPECT_EQ(got.unroll, 1);
  EXPECT_EQ(got.stages, 4);
}

}  // namespace
}  // namespace dsinfer::cuda
