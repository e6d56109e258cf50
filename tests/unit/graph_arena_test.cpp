// GraphArena (backend/cuda/graph_arena.h), the CUDA graphs' shared pool, on host memory: blocks cut from the
// smallest free range that holds them, freed ranges coalescing, chunks added only when no range holds a
// block, a reserved range serving every capture of a ramp of growing batches, and release only when nothing
// is live.
#include "backend/cuda/graph_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace dsinfer::cuda {
namespace {

// Chunks from host memory; `budget` caps the bytes handed out (the device running out).
struct HostChunks {
  std::vector<std::unique_ptr<char[]>> live;
  std::vector<size_t> requested;
  size_t budget = SIZE_MAX;
  size_t given = 0;
  int released = 0;

  GraphArena arena(size_t min_chunk) {
    return GraphArena(
        [this](size_t bytes) -> void* {
          requested.push_back(bytes);
          if (given + bytes > budget) return nullptr;
          given += bytes;
          live.emplace_back(new char[bytes]);
          return live.back().get();
        },
        [this](void*) { ++released; }, min_chunk);
  }
};

uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

TEST(GraphArenaTest, BlocksAreAlignedAndFreedRangesCoalesce) {
  HostChunks chunks;
  GraphArena arena = chunks.arena(4096);
  void* a = arena.alloc(100);  // rounds to 256
  void* b = arena.alloc(256);
  void* c = arena.alloc(1000);  // rounds to 1024
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(arena.chunk_count(), 1u);
  EXPECT_EQ(addr(b) - addr(a), 256u);
  EXPECT_EQ(addr(c) - addr(b), 256u);
  EXPECT_EQ(a, chunks.live[0].get());  // the first block starts the chunk
  EXPECT_EQ(arena.live_bytes(), 256u + 256u + 1024u);
  // a and b back: one range of 512 at a, which a 512-byte block then takes (not the tail after c).
  EXPECT_TRUE(arena.free(b));
  EXPECT_TRUE(arena.free(a));
  void* ab = arena.alloc(512);
  EXPECT_EQ(ab, a);
  // Everything back: the chunk is one range again and holds a block of its whole size.
  EXPECT_TRUE(arena.free(ab));
  EXPECT_TRUE(arena.free(c));
  EXPECT_EQ(arena.live_bytes(), 0u);
  void* whole = arena.alloc(4096);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(arena.chunk_count(), 1u);
}

TEST(GraphArenaTest, TheSmallestRangeThatHoldsABlockIsTaken) {
  HostChunks chunks;
  GraphArena arena = chunks.arena(8192);
  void* big_hole = arena.alloc(2048);
  void* keep1 = arena.alloc(256);
  void* small_hole = arena.alloc(512);
  void* keep2 = arena.alloc(256);
  ASSERT_TRUE(big_hole && keep1 && small_hole && keep2);
  arena.free(big_hole);
  arena.free(small_hole);
  EXPECT_EQ(arena.alloc(512), small_hole);
  EXPECT_EQ(arena.alloc(1024), big_hole);
}

TEST(GraphArenaTest, ChunksAreAddedOnlyWhenNoRangeHoldsTheBlock) {
  HostChunks chunks;
  GraphArena arena = chunks.arena(4096);
  void* a = arena.alloc(3072);
  ASSERT_NE(a, nullptr);
  void* b = arena.alloc(2048);  // 1024 left in the first chunk: a second chunk of min_chunk
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(arena.chunk_count(), 2u);
  void* big = arena.alloc(10000);  // larger than min_chunk: a chunk of its own size
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(chunks.requested.size(), 3u);
  EXPECT_EQ(chunks.requested[2], GraphArena::round_up(10000));
  EXPECT_EQ(arena.reserved_bytes(), 4096u + 4096u + GraphArena::round_up(10000));
  void* fits = arena.alloc(1024);  // the first chunk's tail
  EXPECT_EQ(addr(fits), addr(a) + 3072);
  EXPECT_EQ(arena.chunk_count(), 3u);
}

TEST(GraphArenaTest, OutOfMemoryGivesNullAndAJustBigEnoughChunkWhenMinChunkDoesNotFit) {
  HostChunks chunks;
  chunks.budget = 4096 + 1024;
  GraphArena arena = chunks.arena(4096);
  ASSERT_NE(arena.alloc(4096), nullptr);
  void* small = arena.alloc(1000);  // min_chunk does not fit the budget; 1024 does
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(arena.reserved_bytes(), 4096u + 1024u);
  EXPECT_EQ(arena.alloc(256), nullptr);
  EXPECT_EQ(arena.live_bytes(), 4096u + 1024u);
}

TEST(GraphArenaTest, OnlyItsOwnLiveBlocksAreFreed) {
  HostChunks chunks;
  GraphArena arena = chunks.arena(4096);
  void* a = arena.alloc(256);
  int other = 0;
  EXPECT_FALSE(arena.free(&other));
  EXPECT_FALSE(arena.free(static_cast<char*>(a) + 256));
  EXPECT_TRUE(arena.owns(a));
  EXPECT_TRUE(arena.free(a));
  EXPECT_FALSE(arena.owns(a));
  EXPECT_FALSE(arena.free(a));  // twice
  EXPECT_EQ(arena.live_bytes(), 0u);
}

// Captures of a ramp of growing batches, each with temporaries and an output of its size that is given back
// when the capture ends (the graphs share it): with the largest working set reserved first, every capture
// runs in that one range; without, each capture whose output outgrows the free ranges adds a chunk.
TEST(GraphArenaTest, AReservedRangeServesEveryCaptureOfARampOfBatches) {
  auto ramp = [](GraphArena& arena) {
    for (size_t batch = 1; batch <= 32; ++batch) {
      std::vector<void*> temps;
      for (int layer = 0; layer < 4; ++layer) {
        void* x = arena.alloc(batch * 512);
        void* y = arena.alloc(batch * 1024);
        ASSERT_TRUE(x && y);
        arena.free(x);
        temps.push_back(y);
      }
      void* logits = arena.alloc(batch * 4096);
      ASSERT_NE(logits, nullptr);
      for (void* t : temps) arena.free(t);
      arena.free(logits);  // the output goes back to the pool when the capture ends
      ASSERT_EQ(arena.live_bytes(), 0u);
    }
  };
  const size_t largest = 32 * 512 + 4 * 32 * 1024 + 32 * 4096;  // the last capture's peak: x, 4 y, logits
  HostChunks reserved_chunks;
  GraphArena reserved = reserved_chunks.arena(4096);
  ASSERT_TRUE(reserved.reserve(largest));
  ramp(reserved);
  EXPECT_EQ(reserved.chunk_count(), 1u);
  EXPECT_EQ(reserved.reserved_bytes(), GraphArena::round_up(largest));
  EXPECT_TRUE(reserved.reserve(largest));  // the range is there: no new chunk
  EXPECT_EQ(reserved.chunk_count(), 1u);

  HostChunks grown_chunks;
  GraphArena grown = grown_chunks.arena(4096);
  ramp(grown);
  EXPECT_GT(grown.chunk_count(), 1u);
  EXPECT_GT(grown.reserved_bytes(), reserved.reserved_bytes());
}

TEST(GraphArenaTest, ReleaseGivesEveryChunkBackOnlyWhenNothingIsLive) {
  HostChunks chunks;
  GraphArena arena = chunks.arena(4096);
  void* a = arena.alloc(4096);
  void* b = arena.alloc(256);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(arena.release());
  EXPECT_EQ(chunks.released, 0);
  arena.free(a);
  EXPECT_FALSE(arena.release());
  arena.free(b);
  EXPECT_TRUE(arena.release());
  EXPECT_EQ(chunks.released, 2);
  EXPECT_EQ(arena.reserved_bytes(), 0u);
  EXPECT_EQ(arena.chunk_count(), 0u);
  EXPECT_NE(arena.alloc(256), nullptr);  // usable again: a new chunk
  EXPECT_EQ(arena.chunk_count(), 1u);
}

}  // namespace
}  // namespace dsinfer::cuda
