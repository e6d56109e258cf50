// The plan of the one-launch DeepSeekMoE block (backend/cuda/moe_block_plan.h, run by moe_block_kernels.cu):
// for DeepSeek-V2-Lite's shape on the H200's 132 SMs and other grids and shapes, every gate/up and down tile
// has exactly one block, every warp's stages walk (without divisions) the order the kernel consumes them,
// the shared units' stages come before the first that depends on the routing, down's iterations split at
// the shared columns into a prefix and the rest, and every expert's logit has one block.
#include "backend/cuda/moe_block_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsinfer::cuda {
namespace {

MoeBlockShape shape(int H, int len, int known, int count, int E, int grid) {
  MoeBlockShape s;
  s.H = H;
  s.len = len;
  s.known = known;
  s.count = count;
  s.E = E;
  s.grid = grid;
  return s;
}

// V2-Lite (2 shared units of 1408, top 6 of 64) on 132 SMs, a V2-Lite-like shape on 114; shapes with no
// shared units, one, a hidden size whose gate/up stages end past H, more experts than blocks; small grids.
std::vector<MoeBlockShape> covered_shapes() {
  std::vector<MoeBlockShape> out = {
      shape(2048, 1408, 2, 8, 64, 132), shape(1792, 1408, 2, 8, 64, 114), shape(2048, 1408, 0, 6, 64, 132),
      shape(2048, 1408, 1, 7, 64, 128), shape(1536, 1024, 2, 8, 64, 96),  shape(1040, 256, 1, 5, 160, 66),
      shape(512, 128, 1, 4, 16, 32),    shape(256, 128, 0, 2, 8, 16),
  };
  for (const MoeBlockShape& s : out)
    EXPECT_TRUE(moe_block_plan_covers(s)) << s.H << " " << s.len << " " << s.grid;
  return out;
}

// The stages of warp `warp` of block b, in the order the cursor gives them.
std::vector<MoeBlockStage> walk(const MoeBlockShape& s, int b, int warp) {
  const MoeBlockWork w = moe_block_work(s, b, warp);
  std::vector<MoeBlockStage> out;
  MoeBlockCursor c = MoeBlockCursor::first(w);
  for (int k = 0; k < w.stages + 1 && c.seg < 4; ++k) {
    out.push_back(c.stage(s, b));
    c.advance(w);
  }
  EXPECT_EQ(c.seg, 4) << "the walk did not end";
  return out;
}

TEST(MoeBlockPlanTest, EveryTileHasOneBlock) {
  for (const MoeBlockShape& s : covered_shapes()) {
    std::vector<int> gate_up(moe_block_gate_up_tiles(s), 0), down(moe_block_down_tiles(s), 0);
    for (int b = 0; b < s.grid; ++b) {
      const MoeBlockWork w = moe_block_work(s, b, 0);
      EXPECT_GE(w.gate_up, 1) << "block " << b << " idle";
      EXPECT_LE(w.down, kMoeBlockMaxDownTiles);
      for (int k = 0; k < w.gate_up; ++k) {
        const int tile = b + k * s.grid;
        ASSERT_LT(tile, static_cast<int>(gate_up.size()));
        ++gate_up[tile];
        // The first `shared` of a block's tiles are exactly its shared units' tiles.
        EXPECT_EQ(k < w.shared, tile < moe_block_shared_tiles(s)) << "block " << b << " tile " << tile;
      }
      for (int d = 0; d < w.down; ++d) ++down[b + d * s.grid];
    }
    for (int n : gate_up) EXPECT_EQ(n, 1);
    for (int n : down) EXPECT_EQ(n, 1);
  }
}

TEST(MoeBlockPlanTest, WarpsWalkTheirStagesInTheKernelsOrder) {
  for (const MoeBlockShape& s : covered_shapes()) {
    const int K = moe_block_down_columns(s), shared_columns = s.known * s.len;
    for (int b = 0; b < s.grid; ++b) {
      for (int warp = 0; warp < kMoeBlockWarps; ++warp) {
        const MoeBlockWork w = moe_block_work(s, b, warp);
        const std::vector<MoeBlockStage> stages = walk(s, b, warp);
        ASSERT_EQ(static_cast<int>(stages.size()), w.stages) << "block " << b << " warp " << warp;
        // What the kernel consumes: its shared gate/up tiles, its down tiles' shared iterations, its routed
        // gate/up tiles, its down tiles' other iterations.
        std::vector<MoeBlockStage> want;
        for (int k = 0; k < w.shared; ++k)
          for (int i = 0; i < w.gu_iters; ++i) want.push_back({false, false, b + k * s.grid, 0, i});
        for (int d = 0; d < w.down; ++d)
          for (int i = 0; i < w.down_shared; ++i) want.push_back({true, false, b + d * s.grid, d, i});
        for (int k = w.shared; k < w.gate_up; ++k)
          for (int i = 0; i < w.gu_iters; ++i) want.push_back({false, true, b + k * s.grid, 0, i});
        for (int d = 0; d < w.down; ++d)
          for (int i = w.down_shared; i < w.down_iters; ++i)
            want.push_back({true, true, b + d * s.grid, d, i});
        ASSERT_EQ(want.size(), stages.size());
        for (size_t k = 0; k < want.size(); ++k) {
          const MoeBlockStage &g = stages[k], &e = want[k];
          EXPECT_TRUE(g.down == e.down && g.routed == e.routed && g.tile == e.tile && g.slot == e.slot &&
                      g.iteration == e.iteration)
              << "block " << b << " warp " << warp << " stage " << k;
          // Only the stages from routed_from on wait for the routing.
          EXPECT_EQ(g.routed, static_cast<int>(k) >= w.routed_from) << "stage " << k;
          if (g.down) {
            // A down stage's columns lie in one unit, below K, shared exactly in segment 1.
            const int col = moe_block_first_column(warp, kMoeBlockDownUnroll) +
                            g.iteration * moe_block_step(kMoeBlockDownUnroll);
            const int last = col + 32 * kMoeBlockDownUnroll - 1;
            EXPECT_LT(last, K);
            EXPECT_EQ(col / s.len, last / s.len) << "a down stage straddles two units";
            EXPECT_EQ(col < shared_columns, !g.routed);
          }
        }
      }
    }
  }
}

TEST(MoeBlockPlanTest, DownIterationsSplitAtTheSharedColumns) {
  for (const MoeBlockShape& s : covered_shapes()) {
    for (int warp = 0; warp < kMoeBlockWarps; ++warp) {
      const int all = moe_block_iterations(moe_block_down_columns(s), warp, kMoeBlockDownUnroll);
      const int shared = moe_block_shared_down_iterations(s, warp);
      EXPECT_LE(shared, all);
      for (int i = 0; i < all; ++i) {
        const int col =
            moe_block_first_column(warp, kMoeBlockDownUnroll) + i * moe_block_step(kMoeBlockDownUnroll);
        EXPECT_EQ(i < shared, col < s.known * s.len) << "warp " << warp << " iteration " << i;
      }
    }
  }
  // V2-Lite: 2816 shared columns of 11264; warp w's columns 128 w + 2048 i: warps 0-5 two shared
  // iterations, 6-15 one; warps 0-7 six iterations in all, 8-15 five.
  const MoeBlockShape v2 = shape(2048, 1408, 2, 8, 64, 132);
  for (int warp = 0; warp < kMoeBlockWarps; ++warp) {
    EXPECT_EQ(moe_block_shared_down_iterations(v2, warp), warp < 6 ? 2 : 1) << warp;
    EXPECT_EQ(moe_block_iterations(11264, warp, kMoeBlockDownUnroll), warp < 8 ? 6 : 5) << warp;
  }
}

TEST(MoeBlockPlanTest, EveryLogitHasOneBlockAmongTheLeastLoaded) {
  for (const MoeBlockShape& s : covered_shapes()) {
    std::vector<int> owner(s.E, -1);
    int blocks = 0, fewest_other = 1 << 30, most_logit = 0;
    for (int b = 0; b < s.grid; ++b) {
      const int n = moe_block_logits_of(s, b);
      blocks += n > 0;
      for (int j = 0; j < n; ++j) {
        const int e = moe_block_first_expert(b, s.grid) + j * s.grid;
        ASSERT_LT(e, s.E);
        EXPECT_EQ(owner[e], -1) << "expert " << e << " twice";
        owner[e] = b;
        EXPECT_EQ(moe_block_logit_block(e, s.grid), b);
      }
      EXPECT_LE(n, kMoeBlockMaxLogits);
      const int tiles = moe_block_work(s, b, 0).gate_up;
      if (n > 0)
        most_logit = std::max(most_logit, tiles);
      else
        fewest_other = std::min(fewest_other, tiles);
    }
    for (int e = 0; e < s.E; ++e) EXPECT_GE(owner[e], 0) << "expert " << e << " has no block";
    EXPECT_EQ(blocks, moe_block_logit_blocks(s));
    if (blocks < s.grid) {
      EXPECT_LE(most_logit, fewest_other) << "a logit block has more gate/up tiles";
    }
  }
}

// A warp's ring as the kernel drives it (prime before the PDL wait, then next() per stage used), the routing
// becoming visible before the first stage, after stage `flag_at`, or only when a stage waits for it: every
// stage is used from the slot it was issued into, before that slot is issued again; no routed stage is issued
// before the routing is visible; the count of newer groups the kernel waits with is what is in flight.
TEST(MoeBlockPlanTest, RingNeverOverwritesAStageBeforeItsUseNorIssuesRoutedStagesEarly) {
  for (const MoeBlockShape& s : covered_shapes()) {
    for (int b : {0, s.grid / 2, s.grid - 1}) {
      for (int warp : {0, 7, kMoeBlockWarps - 1}) {
        const MoeBlockWork w = moe_block_work(s, b, warp);
        for (int flag_at : {-1, 0, 1, 3, w.routed_from, 1 << 20}) {
          std::vector<int> slot_holds(kMoeBlockStages, -1);  // the stage each slot holds
          int issued = 0, waited = 0;
          bool flag = flag_at < 0;
          auto issue = [&](const MoeBlockCursor& at, int slot) {
            ASSERT_GE(slot, 0);
            ASSERT_LT(slot, kMoeBlockStages);
            EXPECT_TRUE(issued < w.routed_from || flag) << "routed stage " << issued << " before the routing";
            EXPECT_EQ(at.stage(s, b).routed, issued >= w.routed_from);
            slot_holds[slot] = issued++;
          };
          auto routed = [&](bool spin) {
            if (spin && !flag) {
              flag = true;  // the warp waits until the routing arrives
              ++waited;
            }
            return flag;
          };
          MoeBlockRing ring = MoeBlockRing::start(w);
          ring.prime(w, issue, kMoeBlockStages - 1);
          EXPECT_LE(issued, std::min(w.routed_from, kMoeBlockStages - 1));
          for (int k = 0; k < w.stages; ++k) {
            if (k == flag_at) flag = true;
            int newer = -1;
            const int slot = ring.next(w, issue, routed, &newer);
            ASSERT_EQ(slot_holds[slot], k) << "stage " << k << ": its slot holds another";
            EXPECT_EQ(newer, issued - k - 1);
            EXPECT_GE(newer, 0);
            EXPECT_LE(newer, kMoeBlockStages - 1);
          }
          EXPECT_EQ(issued, w.stages);
          EXPECT_LE(waited, 1);
          // A warp waits for the routing only when nothing else is in flight: never when it came first.
          if (flag_at == -1 || flag_at == 0) {
            EXPECT_EQ(waited, 0);
          }
        }
      }
    }
  }
}

TEST(MoeBlockPlanTest, RefusesWhatThePlanCannotRun) {
  const MoeBlockShape v2 = shape(2048, 1408, 2, 8, 64, 132);
  EXPECT_TRUE(moe_block_plan_covers(v2));
  auto with = [&](auto change) {
    MoeBlockShape s = v2;
    change(s);
    return moe_block_plan_covers(s);
  };
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.len = 1440; }));  // a down stage would mix shared and routed
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.len = 64; }));
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.H = 2056; }));  // not whole 16-row tiles
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.H = 4096; }));  // 256 down tiles: two a block
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.count = 17; }));
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.count = s.known; }));  // no routed unit
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.grid = 705; }));       // blocks without a gate/up tile
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.E = 4 * 132 + 1; }));  // more logits than a block takes
  EXPECT_FALSE(with([](MoeBlockShape& s) { s.grid = 0; }));
}

}  // namespace
}  // namespace dsinfer::cuda
