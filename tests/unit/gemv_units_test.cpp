// The persistent GEMV's units index arithmetic (backend/cuda/gemv_units.h, run by the kernel's units
// instances) against plain division: the unit and row of every row tile, and the column cursor of a warp over
// every stage and chunk for the shapes the units launches take (len a multiple of 32 from 128; V2-Lite 1408,
// V3 2048) and the kernel shapes' warps x unroll.
#include "backend/cuda/gemv_units.h"

#include <gtest/gtest.h>

namespace dsinfer::cuda {
namespace {

TEST(GemvUnitsTest, RowTilesStartWhereDivisionSays) {
  for (int64_t len : {128, 160, 256, 1408, 2048}) {
    for (int64_t tile = 0; tile < 12 * len / 16; ++tile) {
      const UnitRowTile t = unit_row_tile(tile, len);
      EXPECT_EQ(t.unit, tile * 16 / len) << len << " " << tile;
      EXPECT_EQ(t.row, tile * 16 % len) << len << " " << tile;
      EXPECT_LT(t.row + 15, len);  // a tile never straddles two units
    }
  }
}

TEST(GemvUnitsTest, ColumnCursorWalksEveryChunkIntoItsUnit) {
  for (int64_t len : {128, 160, 1408, 2048}) {
    for (int units : {1, 3, 8, 16}) {
      const int64_t K = units * len;
      for (int warps : {4, 8, 16}) {
        for (int unroll : {1, 2, 4}) {
          if (32 * unroll > len) continue;  // the support check's len >= 128 covers every unroll
          const int64_t step = int64_t{warps} * 32 * unroll;
          for (int warp = 0; warp < warps; ++warp) {
            const int64_t first = int64_t{warp} * 32 * unroll;
            if (first >= K) continue;
            UnitColumnCursor c = UnitColumnCursor::at(first, len);
            for (int64_t col = first; col < K; col += step) {
              for (int u = 0; u < unroll; ++u) {
                const int64_t chunk = col + 32 * u;
                if (chunk >= K) break;
                const UnitColumnCursor at = c.plus(32 * u, len);
                ASSERT_EQ(at.unit, chunk / len) << len << " " << units << " " << warps << " " << unroll;
                ASSERT_EQ(at.local, chunk % len) << len << " " << units << " " << warps << " " << unroll;
                ASSERT_LE(at.local + 32, len);  // the chunk lies in one unit
              }
              c.advance(step, len);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsinfer::cuda
