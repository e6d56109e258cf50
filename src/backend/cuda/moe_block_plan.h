// The work plan of the one-launch DeepSeekMoE block at batch 1 (moe_block_kernels.cu, moe_block.h), in host +
// device code so that the CPU tests check what the kernel runs (tests/unit/moe_block_plan_test.cpp): which
// gate/up row tiles and down row tiles each block takes, how a warp's down iterations split at the boundary
// between the shared experts' columns and the routed experts', the order of a warp's weight stages across
// the launch's four segments, a warp's ring of stages, and which blocks compute router logits.
//
// The launch (grid blocks of kMoeBlockWarps warps, all resident) runs, per block:
//   segment 0: its gate/up tiles of the shared units (tiles b, b + grid, ... below the shared tiles);
//   barrier A (every block's shared tiles are in act), then
//   segment 1: its down tiles over the shared units' columns (the first known * len of K);
//   segment 2: its gate/up tiles of the routed units (issued once the routing is visible);
//   barrier C (every gate/up tile is in act), then
//   segment 3: its down tiles over the routed units' columns, and their epilogue.
// A warp's weight stages follow that order through one ring of kMoeBlockStages stages, so the weights of the
// next segment load while a block waits at a barrier or for the routing. The tiles and their sums are those
// of the two units launches (gemv_persistent.cuh, units_config's 16-warp shapes): gate/up in 16-row tiles
// over all of H with 2 32-column chunks a stage, down in 16-row tiles over all units' columns with 4 a stage.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSI_MOE_BLOCK_FN __host__ __device__ __forceinline__
#else
#define DSI_MOE_BLOCK_FN inline
#endif

namespace dsinfer::cuda {

inline constexpr int kMoeBlockWarps = 16;        // warps per block (the units launches' 16-warp shapes)
inline constexpr int kMoeBlockStages = 3;        // ring stages per warp (4 KiB each)
inline constexpr int kMoeBlockGateUpUnroll = 2;  // 32-column chunks per gate/up stage (x 2 tiles: gate, up)
inline constexpr int kMoeBlockDownUnroll = 4;    // 32-column chunks per down stage (1 tile)
inline constexpr int kMoeBlockMaxDownTiles = 1;  // down tiles one block may own (accumulators kept)
inline constexpr int kMoeBlockMaxLogits = 4;     // router logits one block may compute
inline constexpr int kMoeBlockMaxUnits = 16;     // shared slices + routed experts (kGemvMaxUnits)

// The launch's shape: H hidden (gate/up's K, down's rows), len the routed intermediate size (a unit's rows of
// gate/up, columns of down), known shared units, count units in all (known + top k), E routed experts. Every
// count fits an int (moe_block_plan_covers bounds count * len and H).
struct MoeBlockShape {
  int H = 0;
  int len = 0;
  int known = 0;
  int count = 0;
  int E = 0;
  int grid = 0;
};

DSI_MOE_BLOCK_FN int moe_block_gate_up_tiles(const MoeBlockShape& s) {
  return s.count * s.len / 16;
}
DSI_MOE_BLOCK_FN int moe_block_shared_tiles(const MoeBlockShape& s) {
  return s.known * s.len / 16;
}
DSI_MOE_BLOCK_FN int moe_block_down_tiles(const MoeBlockShape& s) {
  return s.H / 16;
}
// down's K: every unit's columns, the shared ones first.
DSI_MOE_BLOCK_FN int moe_block_down_columns(const MoeBlockShape& s) {
  return s.count * s.len;
}

// Tiles b, b + grid, ... below `total`: how many block b takes.
DSI_MOE_BLOCK_FN int moe_block_tiles_of(int total, int grid, int b) {
  return b < total ? (total - 1 - b) / grid + 1 : 0;
}

// A warp's iterations over K columns with `unroll` 32-column chunks a stage: warp w starts at column
// 32 unroll w and steps by kMoeBlockWarps x 32 unroll (gemv_persistent.cuh's split of K over the warps).
DSI_MOE_BLOCK_FN int moe_block_first_column(int warp, int unroll) {
  return warp * 32 * unroll;
}
DSI_MOE_BLOCK_FN int moe_block_step(int unroll) {
  return kMoeBlockWarps * 32 * unroll;
}
DSI_MOE_BLOCK_FN int moe_block_iterations(int K, int warp, int unroll) {
  const int first = moe_block_first_column(warp, unroll), step = moe_block_step(unroll);
  return first < K ? (K - first + step - 1) / step : 0;
}
// Of a warp's down iterations, those over the shared units' columns (a prefix: the shared columns come first,
// and with len % (32 kMoeBlockDownUnroll) == 0 no iteration holds both kinds).
DSI_MOE_BLOCK_FN int moe_block_shared_down_iterations(const MoeBlockShape& s, int warp) {
  const int shared = s.known * s.len, first = moe_block_first_column(warp, kMoeBlockDownUnroll);
  const int all = moe_block_iterations(moe_block_down_columns(s), warp, kMoeBlockDownUnroll);
  if (first >= shared) return 0;
  const int step = moe_block_step(kMoeBlockDownUnroll);
  const int n = (shared - first + step - 1) / step;
  return n < all ? n : all;
}

// Block b's share and warp w's stages in it.
struct MoeBlockWork {
  int gate_up = 0;      // gate/up tiles of the block (b, b + grid, ...)
  int shared = 0;       // of them, the first `shared` are shared units' tiles (segment 0)
  int down = 0;         // down tiles (b, b + grid, ...)
  int gu_iters = 0;     // the warp's stages per gate/up tile
  int down_shared = 0;  // the warp's stages per down tile in segment 1
  int down_iters = 0;   // ... in all (segment 3 takes the rest)
  int stages = 0;       // the warp's stages in all segments
  int routed_from = 0;  // the first stage whose weights depend on the routing (segment 2's first)
};

DSI_MOE_BLOCK_FN MoeBlockWork moe_block_work(const MoeBlockShape& s, int b, int warp) {
  MoeBlockWork w;
  w.gate_up = moe_block_tiles_of(moe_block_gate_up_tiles(s), s.grid, b);
  w.shared = moe_block_tiles_of(moe_block_shared_tiles(s), s.grid, b);
  w.down = moe_block_tiles_of(moe_block_down_tiles(s), s.grid, b);
  w.gu_iters = moe_block_iterations(s.H, warp, kMoeBlockGateUpUnroll);
  w.down_shared = moe_block_shared_down_iterations(s, warp);
  w.down_iters = moe_block_iterations(moe_block_down_columns(s), warp, kMoeBlockDownUnroll);
  w.routed_from = w.shared * w.gu_iters + w.down * w.down_shared;
  w.stages = w.gate_up * w.gu_iters + w.down * w.down_iters;
  return w;
}

// What a warp's stage loads: a gate/up tile's iteration or a down tile's. `tile` is the launch-wide tile
// index (gate/up: of count * len / 16; down: of H / 16), `slot` the block's down tile it accumulates into (0
// for the block's first), `routed` whether its weights depend on the routing.
struct MoeBlockStage {
  bool down;
  bool routed;
  int tile;
  int slot;
  int iteration;
};

// A warp's walk over its stages in order of use (segment 0: shared gate/up tiles; 1: down tiles over the
// shared columns; 2: routed gate/up tiles; 3: down tiles over the routed columns), one stage a step, without
// divisions. seg == 4: past the last stage.
struct MoeBlockCursor {
  int seg = 0;
  int ord = 0;  // the segment's tile: gate/up tiles k (the block's k-th), down: the slot
  int it = 0;   // the tile's iteration

  DSI_MOE_BLOCK_FN static int tiles_end(const MoeBlockWork& w, int seg) {
    return seg == 0 ? w.shared : seg == 2 ? w.gate_up : w.down;
  }
  DSI_MOE_BLOCK_FN static int iter_begin(const MoeBlockWork& w, int seg) {
    return seg == 3 ? w.down_shared : 0;
  }
  DSI_MOE_BLOCK_FN static int iter_end(const MoeBlockWork& w, int seg) {
    return seg == 1 ? w.down_shared : seg == 3 ? w.down_iters : w.gu_iters;
  }
  // Moves to segment `next`'s first stage, or past the segments that have none.
  DSI_MOE_BLOCK_FN void enter(const MoeBlockWork& w, int next) {
    for (seg = next; seg < 4; ++seg) {
      ord = seg == 2 ? w.shared : 0;
      it = iter_begin(w, seg);
      if (ord < tiles_end(w, seg) && it < iter_end(w, seg)) return;
    }
  }
  DSI_MOE_BLOCK_FN static MoeBlockCursor first(const MoeBlockWork& w) {
    MoeBlockCursor c;
    c.enter(w, 0);
    return c;
  }
  DSI_MOE_BLOCK_FN void advance(const MoeBlockWork& w) {
    if (++it < iter_end(w, seg)) return;
    it = iter_begin(w, seg);
    if (++ord < tiles_end(w, seg)) return;
    enter(w, seg + 1);
  }
  DSI_MOE_BLOCK_FN MoeBlockStage stage(const MoeBlockShape& s, int b) const {
    const bool down = seg == 1 || seg == 3;
    return MoeBlockStage{down, seg >= 2, b + ord * s.grid, down ? ord : 0, it};
  }
};

// A warp's ring bookkeeping: which stage goes into which of the kMoeBlockStages slots and when, shared by the
// kernel (its issue copies a stage and commits one cp.async group) and the CPU tests (which check that no
// slot is overwritten before its stage is used, that a routed stage is never issued before the routing is
// visible, and that the pending-group count the kernel waits with is right).
struct MoeBlockRing {
  MoeBlockCursor at;  // the next stage to issue
  int issued = 0;     // stages issued
  int used = 0;       // stages handed out for use
  int issue_slot = 0, use_slot = 0;

  DSI_MOE_BLOCK_FN static MoeBlockRing start(const MoeBlockWork& w) {
    MoeBlockRing r;
    r.at = MoeBlockCursor::first(w);
    return r;
  }
  DSI_MOE_BLOCK_FN static int next_slot(int slot) { return slot + 1 == kMoeBlockStages ? 0 : slot + 1; }
  // Issues (issue(cursor, slot)) the stages the ring has room for: a slot is free once the stage before it
  // there was handed out (and used before the next call). A stage from w.routed_from on only while
  // routed(false) says the routing is visible; never waits.
  template <class Issue, class Routed>
  DSI_MOE_BLOCK_FN void fill(const MoeBlockWork& w, Issue&& issue, Routed&& routed) {
    while (issued < w.stages && issued < used + kMoeBlockStages) {
      if (issued >= w.routed_from && !routed(false)) return;
      issue_one(w, issue);
    }
  }
  // Issues up to `most` stages that need no routing (the kernel's before its PDL wait).
  template <class Issue>
  DSI_MOE_BLOCK_FN void prime(const MoeBlockWork& w, Issue&& issue, int most) {
    while (issued < w.routed_from && issued < most && issued < used + kMoeBlockStages) issue_one(w, issue);
  }
  template <class Issue>
  DSI_MOE_BLOCK_FN void issue_one(const MoeBlockWork& w, Issue&& issue) {
    issue(at, issue_slot);
    at.advance(w);
    ++issued;
    issue_slot = next_slot(issue_slot);
  }
  // The slot of the next stage to use, after filling (waiting for the routing through routed(true) when the
  // stage itself could not be issued); *newer: stages issued after it (the groups that may stay pending).
  template <class Issue, class Routed>
  DSI_MOE_BLOCK_FN int next(const MoeBlockWork& w, Issue&& issue, Routed&& routed, int* newer) {
    fill(w, issue, routed);
    if (issued == used) {
      routed(true);
      fill(w, issue, routed);
    }
    *newer = issued - used - 1;
    const int slot = use_slot;
    ++used;
    use_slot = next_slot(use_slot);
    return slot;
  }
};

// The router logits: expert e's on block grid - 1 - e % grid (the highest blocks, which round-robin leaves
// with the fewest gate/up tiles). Blocks that compute any: min(E, grid); block b computes experts
// grid - 1 - b, grid - 1 - b + grid, ... below E.
DSI_MOE_BLOCK_FN int moe_block_logit_block(int e, int grid) {
  return grid - 1 - e % grid;
}
DSI_MOE_BLOCK_FN int moe_block_logit_blocks(const MoeBlockShape& s) {
  return s.E < s.grid ? s.E : s.grid;
}
DSI_MOE_BLOCK_FN int moe_block_first_expert(int b, int grid) {
  return grid - 1 - b;
}
DSI_MOE_BLOCK_FN int moe_block_logits_of(const MoeBlockShape& s, int b) {
  const int e0 = moe_block_first_expert(b, s.grid);
  return e0 < s.E ? (s.E - 1 - e0) / s.grid + 1 : 0;
}

// Whether the plan covers the shape (the kernel's shared memory and the activations' alignment aside,
// moe_block_supported): 16-row tiles of H and of every unit; len a multiple of 32 x kMoeBlockDownUnroll, so
// that no down iteration mixes shared and routed columns; at most kMoeBlockMaxUnits units (so count * len <
// 2^31); every block has at least one gate/up tile, at most kMoeBlockMaxDownTiles down tiles and
// kMoeBlockMaxLogits logits.
DSI_MOE_BLOCK_FN bool moe_block_plan_covers(const MoeBlockShape& s) {
  if (s.H < 16 || s.H % 16 != 0 || s.H > (1 << 24) || s.len < 128 ||
      s.len % (32 * kMoeBlockDownUnroll) != 0 || s.len > (1 << 24) || s.known < 0 || s.count <= s.known ||
      s.count > kMoeBlockMaxUnits || s.E < 1 || s.grid < 1)
    return false;
  return moe_block_gate_up_tiles(s) >= s.grid &&
         moe_block_down_tiles(s) <= static_cast<int64_t>(kMoeBlockMaxDownTiles) * s.grid &&
         s.E <= kMoeBlockMaxLogits * s.grid;
}

}  // namespace dsinfer::cuda

#undef DSI_MOE_BLOCK_FN
