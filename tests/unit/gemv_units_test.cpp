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

// packed_chunk_offset against gemv_packed.h's layout as its packing kernel writes it (piece ((r C + c) 2 + h)
// 32 + lane of 8 values holds row 16 r + lane / 4 + 8 h, columns 32 c + 8 (lane % 4) on): the chunk's first
// value (lane 0, half 0) for every row group and chunk of [N, K] matrices with K a multiple of 32; a stacked
// expert's chunk at its matrix's offset e N K in the stack; a shared unit's chunk at unit u's column u len;
// the U chunks of a stage back to back.
TEST(GemvUnitsTest, PackedChunkOffsetsFollowThePackedLayout) {
  auto layout = [](int64_t row, int64_t col, int64_t K) {  // the packing kernel's piece of (row, col), x 8
    const int64_t C = K / 32, r = row / 16, c = col / 32;
    return ((r * C + c) * 2 + 0) * 32 * 8;
  };
  for (int64_t K : {256, 1408, 2048, 2816, 11264}) {
    for (int64_t N : {64, 1408, 2048}) {
      for (int64_t row = 0; row < N; row += 16)
        for (int64_t col = 0; col < K; col += 32)
          ASSERT_EQ(packed_chunk_offset(row, col, K), layout(row, col, K)) << N << " " << K << " " << row;
    }
  }
  // Stacked experts [E N, K]: expert e's row group `row` is the stack's row group e N + row.
  for (int64_t e : {0, 1, 5, 63})
    for (int64_t row : {0, 16, 2032})
      for (int64_t col : {0, 32, 1376})
        EXPECT_EQ(e * 2048 * 1408 + packed_chunk_offset(row, col, 1408), layout(e * 2048 + row, col, 1408));
  // Shared down [H, known len]: unit u's base packed_chunk_offset(0, u len, .), then its local columns.
  const int64_t len = 1408, known = 2, H = 2048;
  for (int64_t u = 0; u < known; ++u)
    for (int64_t row : {int64_t{0}, int64_t{16}, H - 16})
      for (int64_t local = 0; local < len; local += 128)
        EXPECT_EQ(packed_chunk_offset(0, u * len, 0) + packed_chunk_offset(row, local, known * len),
                  layout(row, u * len + local, known * len));
  // A stage of U chunks: one contiguous run of 512 U values.
  for (int u = 0; u < 4; ++u)
    EXPECT_EQ(packed_chunk_offset(32, 128 + 32 * u, 1408), packed_chunk_offset(32, 128, 1408) + 512 * u);
}

}  // namespace
}  // namespace dsinfer::cuda
