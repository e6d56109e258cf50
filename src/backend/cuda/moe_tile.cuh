// The tiles of the grouped expert kernels (moe_kernels.cu, moe_mma_kernels.cu, moe_stream_kernels.cu): the
// permutation kernel leaves, on the device, each expert's first row (`offsets`, [E + 1]) and first tile
// (`tiles`, [E + 1]); a block of a grouped launch finds its expert by binary search over `tiles`.
#pragma once

#include <cstdint>

namespace dsinfer::cuda {

struct ExpertTile {
  int expert;  // the tile's expert
  int row0;    // its first permuted row
  int rows;    // rows it holds (1..tile_rows)
};

// Tile `tile` of tiles of `tile_rows` rows; false for a block past the last tile (grids are upper bounds).
__device__ __forceinline__ bool find_expert_tile(const int32_t* offsets, const int32_t* tiles, int E,
                                                 int tile, int tile_rows, ExpertTile* out) {
  if (tile >= tiles[E]) return false;
  int lo = 0, hi = E;  // tiles[lo] <= tile < tiles[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tiles[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  out->expert = lo;
  out->row0 = offsets[lo] + (tile - tiles[lo]) * tile_rows;
  out->rows = min(tile_rows, offsets[lo + 1] - out->row0);
  return true;
}

}  // namespace dsinfer::cuda
