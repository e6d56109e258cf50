// The index arithmetic of the persistent GEMV's units launches (gemv_persistent.cuh, GemvMoeUnits), in
// host + device code so that the CPU tests check what the kernel runs (tests/unit/gemv_units_test.cpp): which
// unit and unit-local row a row tile starts at (row units), and the issue cursor that walks a warp's columns
// over the units (column units: units of `len` columns back to back, a warp's chunks at first + i * step),
// and where the packed units instances find a chunk in a packed copy.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSI_UNITS_FN __host__ __device__ __forceinline__
#else
#define DSI_UNITS_FN inline
#endif

namespace dsinfer::cuda {

// Row units: tile `tile` (16 rows) of a launch whose units hold `len` rows each (len % 16 == 0).
struct UnitRowTile {
  int unit;
  int64_t row;  // the tile's first row within its unit
};
DSI_UNITS_FN UnitRowTile unit_row_tile(int64_t tile, int64_t len) {
  const int64_t per_unit = len / 16;
  const int unit = static_cast<int>(tile / per_unit);
  return {unit, (tile - unit * per_unit) * 16};
}

// Column units: the unit and unit-local column of the cursor's column (starting at `first`, advanced by
// `step` per issued stage). Needs len % 32 == 0 and offsets below len.
struct UnitColumnCursor {
  int unit;
  int64_t local;
  DSI_UNITS_FN static UnitColumnCursor at(int64_t column, int64_t len) {
    const int unit = static_cast<int>(column / len);
    return {unit, column - unit * len};
  }
  DSI_UNITS_FN void advance(int64_t step, int64_t len) {
    local += step;
    while (local >= len) {
      local -= len;
      ++unit;
    }
  }
  // The unit and unit-local column of the cursor's column + off (0 <= off < len).
  DSI_UNITS_FN UnitColumnCursor plus(int64_t off, int64_t len) const {
    UnitColumnCursor c{unit, local + off};
    if (c.local >= len) {
      c.local -= len;
      ++c.unit;
    }
    return c;
  }
};

// Packed units (gemv_packed.h's layout: row groups of 16 rows, each ceil(K / 32) chunks of 32 columns x 16
// rows = 512 values): the offset in values of the chunk at column `col` (a multiple of 32) of the row group
// starting at `row` (a multiple of 16) of a packed [N, K] matrix with K a multiple of 32. It is the row's
// row-major offset plus 16 values per column, so a unit's base and row stride keep their row-major arithmetic
// (a stacked expert's matrix starts at e N K), and a stage's chunks at col, col + 32, ... lie back to back.
DSI_UNITS_FN int64_t packed_chunk_offset(int64_t row, int64_t col, int64_t K) {
  return row * K + 16 * col;
}

}  // namespace dsinfer::cuda

#undef DSI_UNITS_FN
