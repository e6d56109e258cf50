// Tests for the paged KV block pool and block tables: allocation, reference counts, copy-on-write forks,
// prefix-cache hits across sequences, LRU eviction and the pool's invariants under random use.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "kv/block_hash.h"
#include "kv/block_table.h"
#include "kv/kv_cache.h"

namespace dsinfer {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockPool, AllocatesAndReleases) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.num_free(), 4);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(pool.allocate(3, blocks));
  EXPECT_EQ(blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_used(), 3);
  EXPECT_FALSE(pool.allocate(2, blocks));  // all or nothing
  EXPECT_EQ(blocks.size(), 3u);
  EXPECT_EQ(pool.num_free(), 1);
  for (int32_t b : blocks) pool.release(b);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_THROW(pool.release(0), Error);
  pool.check_invariants();
}

TEST(BlockPool, RejectsBadSizes) {
  EXPECT_THROW(BlockPool(0, 16), Error);
  EXPECT_THROW(BlockPool(4, 0), Error);
}

TEST(BlockTable, GrowsByBlocks) {
  BlockPool pool(8, 4);
  BlockTable t;
  EXPECT_EQ(t.blocks_needed(1, 4), 1);
  ASSERT_TRUE(t.grow(pool, 5));
  EXPECT_EQ(t.num_blocks(), 2);
  ASSERT_TRUE(t.grow(pool, 8));
  EXPECT_EQ(t.num_blocks(), 2);
  EXPECT_FALSE(t.grow(pool, 100));
  EXPECT_EQ(t.num_blocks(), 2);
  t.release(pool);
  EXPECT_EQ(pool.num_used(), 0);
  pool.check_invariants();
}

TEST(BlockTable, PrefixCacheHitSharesBlocks) {
  BlockPool pool(8, 4);
  std::vector<int32_t> tokens = iota_tokens(10);  // two full blocks + 2 tokens
  BlockTable a;
  ASSERT_EQ(a.match_prefix(pool, tokens, 10), 0);
  ASSERT_TRUE(a.grow(pool, 10));
  a.register_full_blocks(pool, tokens, 10);
  EXPECT_EQ(a.num_hashed(), 2);

  BlockTable b;
  std::vector<int32_t> other = tokens;
  other[9] = 99;  // same two full blocks, different tail
  EXPECT_EQ(b.match_prefix(pool, other, 10), 8);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_EQ(pool.ref_count(a.blocks()[0]), 2);

  // The limit caps the match (the engine always recomputes at least the last prompt token).
  BlockTable c;
  EXPECT_EQ(c.match_prefix(pool, tokens, 7), 4);
  // A different first block breaks the chain even when the second block's tokens are equal.
  BlockTable d;
  std::vector<int32_t> diverged = tokens;
  diverged[0] = 77;
  EXPECT_EQ(d.match_prefix(pool, diverged, 10), 0);

  a.release(pool);
  b.release(pool);
  c.release(pool);
  d.release(pool);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_cached(), 2);  // the two registered blocks stay cached
  pool.check_invariants();

  // A later request still hits them after every holder is gone.
  BlockTable e;
  EXPECT_EQ(e.match_prefix(pool, tokens, 10), 8);
  EXPECT_EQ(pool.num_cached(), 0);
  e.release(pool);
  pool.check_invariants();
}

TEST(BlockTable, DisabledPrefixCachingNeverHits) {
  BlockPool pool(8, 4, /*enable_prefix_caching=*/false);
  std::vector<int32_t> tokens = iota_tokens(8);
  BlockTable a;
  ASSERT_TRUE(a.grow(pool, 8));
  a.register_full_blocks(pool, tokens, 8);
  BlockTable b;
  EXPECT_EQ(b.match_prefix(pool, tokens, 8), 0);
  a.release(pool);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(BlockPool, EvictsLeastRecentlyUsedCachedBlock) {
  BlockPool pool(3, 2);
  std::vector<int32_t> x = {1, 2}, y = {3, 4};
  BlockTable a, b;
  ASSERT_TRUE(a.grow(pool, 2));
  a.register_full_blocks(pool, x, 2);
  ASSERT_TRUE(b.grow(pool, 2));
  b.register_full_blocks(pool, y, 2);
  a.release(pool);  // x cached first (least recently used)
  b.release(pool);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.num_free(), 3);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(2, got));  // the plain free block, then x's block is evicted
  EXPECT_EQ(pool.evictions(), 1);
  BlockTable hx, hy;
  EXPECT_EQ(hx.match_prefix(pool, x, 2), 0);
  EXPECT_EQ(hy.match_prefix(pool, y, 2), 2);
  hy.release(pool);
  for (int32_t g : got) pool.release(g);
  pool.check_invariants();
}

TEST(BlockPool, CollidingHashIsNotAHit) {
  BlockPool pool(2, 2);
  std::vector<int32_t> x = {1, 2};
  int32_t block = pool.allocate();
  const uint64_t h = hash_block(kRootBlockHash, x);
  ASSERT_TRUE(pool.register_block(block, h, kRootBlockHash, x));
  std::vector<int32_t> other = {5, 6};
  EXPECT_EQ(pool.lookup(h, kRootBlockHash, other), BlockPool::kNoBlock);  // same hash, other tokens
  EXPECT_EQ(pool.lookup(h, 123, x), BlockPool::kNoBlock);                 // other predecessor
  EXPECT_EQ(pool.lookup(h, kRootBlockHash, x), block);
  EXPECT_FALSE(pool.register_block(pool.allocate(), h, kRootBlockHash, x));  // first holder wins
}

TEST(BlockTable, ForkIsCopyOnWrite) {
  BlockPool pool(6, 4);
  KvCache cache({KvLayerSpec{KvKind::kFullHistory, 2, 0, 1}}, 6, 4);
  BlockTable a;
  ASSERT_TRUE(a.grow(pool, 6));
  for (int64_t pos = 0; pos < 6; ++pos) {
    const int64_t slot = static_cast<int64_t>(a.blocks()[pos / 4]) * 4 + pos % 4;
    cache.slot(0, slot)[0] = static_cast<float>(pos);
  }
  BlockTable b = a.fork(pool);
  EXPECT_EQ(pool.ref_count(a.blocks()[1]), 2);
  // b appends position 6 in the shared second block: it gets a private copy first.
  std::optional<BlockCopy> copy = b.make_writable(pool, 6);
  ASSERT_TRUE(copy.has_value());
  cache.copy_block(copy->src, copy->dst);
  EXPECT_NE(a.blocks()[1], b.blocks()[1]);
  EXPECT_EQ(a.blocks()[0], b.blocks()[0]);
  EXPECT_EQ(pool.ref_count(a.blocks()[1]), 1);
  EXPECT_EQ(cache.slot(0, static_cast<int64_t>(b.blocks()[1]) * 4 + 1)[0], 5.0f);
  // Now private: no further copies.
  EXPECT_FALSE(b.make_writable(pool, 7).has_value());
  a.release(pool);
  b.release(pool);
  EXPECT_EQ(pool.num_used(), 0);
  pool.check_invariants();
}

// Random grow / match / register / fork / release sequences keep the pool consistent, and releasing every
// table returns every block.
TEST(BlockPool, RandomOperationsKeepInvariants) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    BlockPool pool(32, 4);
    std::vector<BlockTable> tables;
    std::vector<std::vector<int32_t>> token_lists;
    for (int step = 0; step < 2000; ++step) {
      const int op = static_cast<int>(rng() % 4);
      if (op == 0 || tables.empty()) {
        // New sequence from a small alphabet of prefixes so that hits happen.
        std::vector<int32_t> tokens(4 + rng() % 20);
        const int32_t family = static_cast<int32_t>(rng() % 3);
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = i < 8 ? family * 100 + static_cast<int32_t>(i) : static_cast<int32_t>(rng() % 50);
        BlockTable t;
        const int32_t hit = t.match_prefix(pool, tokens, static_cast<int64_t>(tokens.size()) - 1);
        ASSERT_EQ(hit % 4, 0);
        if (!t.grow(pool, static_cast<int64_t>(tokens.size()))) {
          t.release(pool);
        } else {
          t.register_full_blocks(pool, tokens, static_cast<int64_t>(tokens.size()));
          tables.push_back(std::move(t));
          token_lists.push_back(tokens);
        }
      } else if (op == 1) {
        const size_t i = rng() % tables.size();
        tables[i].release(pool);
        tables.erase(tables.begin() + static_cast<int64_t>(i));
        token_lists.erase(token_lists.begin() + static_cast<int64_t>(i));
      } else if (op == 2) {
        const size_t i = rng() % tables.size();
        tables.push_back(tables[i].fork(pool));
        token_lists.push_back(token_lists[i]);
      } else {
        const size_t i = rng() % tables.size();
        if (pool.num_free() > 0 && !tables[i].empty()) {
          (void)tables[i].make_writable(pool, static_cast<int64_t>(token_lists[i].size()) - 1);
        }
      }
      pool.check_invariants();
      int64_t refs = 0;
      for (const BlockTable& t : tables) refs += t.num_blocks();
      int64_t counted = 0;
      for (int32_t b = 0; b < pool.num_blocks(); ++b) counted += pool.ref_count(b);
      ASSERT_EQ(refs, counted) << "seed " << seed << " step " << step;
    }
    for (BlockTable& t : tables) t.release(pool);
    EXPECT_EQ(pool.num_used(), 0);
    EXPECT_EQ(pool.num_free(), pool.num_blocks());
    pool.check_invariants();
  }
}

}  // namespace
}  // namespace dsinfer
