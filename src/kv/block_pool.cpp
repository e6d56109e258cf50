// BlockPool: allocation, reference counting, prefix-cache registration and LRU eviction.
#include "kv/block_pool.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      ref_(num_blocks, 0),
      hash_(num_blocks, 0),
      parent_(num_blocks, 0),
      has_hash_(num_blocks, 0),
      tokens_(static_cast<size_t>(num_blocks) * block_size, 0),
      prev_(num_blocks, kNoBlock),
      next_(num_blocks, kNoBlock) {
  DSI_CHECK(num_blocks > 0, "the KV block pool needs at least one block, got ", num_blocks);
  DSI_CHECK(block_size > 0, "the KV block size must be positive, got ", block_size);
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is handed out first
}

void BlockPool::lru_push_back(int32_t block) {
  prev_[block] = lru_tail_;
  next_[block] = kNoBlock;
  if (lru_tail_ != kNoBlock) next_[lru_tail_] = block;
  lru_tail_ = block;
  if (lru_head_ == kNoBlock) lru_head_ = block;
  ++num_cached_;
}

void BlockPool::lru_remove(int32_t block) {
  if (prev_[block] != kNoBlock) next_[prev_[block]] = next_[block];
  if (next_[block] != kNoBlock) prev_[next_[block]] = prev_[block];
  if (lru_head_ == block) lru_head_ = next_[block];
  if (lru_tail_ == block) lru_tail_ = prev_[block];
  prev_[block] = next_[block] = kNoBlock;
  --num_cached_;
}

void BlockPool::unregister(int32_t block) {
  auto it = by_hash_.find(hash_[block]);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
  has_hash_[block] = 0;
  hash_[block] = 0;
  parent_[block] = 0;
}

int32_t BlockPool::allocate() {
  int32_t block = kNoBlock;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (lru_head_ != kNoBlock) {
    block = lru_head_;
    lru_remove(block);
    unregister(block);
    ++evictions_;
  } else {
    return kNoBlock;
  }
  ref_[block] = 1;
  return block;
}

int32_t BlockPool::evict_cached() {
  int32_t n = 0;
  while (lru_head_ != kNoBlock) {
    const int32_t block = lru_head_;
    lru_remove(block);
    unregister(block);
    free_.push_back(block);
    ++evictions_;
    ++n;
  }
  return n;
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n <= 0) return true;
  if (n > num_free()) return false;
  for (int32_t i = 0; i < n; ++i) out.push_back(allocate());
  return true;
}

void BlockPool::retain(int32_t block) {
  DSI_CHECK(block >= 0 && block < num_blocks_, "BlockPool::retain: bad block ", block);
  if (ref_[block] == 0) {
    DSI_CHECK(has_hash_[block], "BlockPool::retain: block ", block, " is free");
    lru_remove(block);
  }
  ++ref_[block];
}

void BlockPool::release(int32_t block) {
  DSI_CHECK(block >= 0 && block < num_blocks_ && ref_[block] > 0, "BlockPool::release: block ", block,
            " is not in use");
  if (--ref_[block] > 0) return;
  if (has_hash_[block]) {
    lru_push_back(block);
  } else {
    free_.push_back(block);
  }
}

int32_t BlockPool::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  if (!prefix_caching_) return kNoBlock;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return kNoBlock;
  const int32_t block = it->second;
  if (parent_[block] != parent || static_cast<int32_t>(tokens.size()) != block_size_) return kNoBlock;
  if (!std::equal(tokens.begin(), tokens.end(),
                  tokens_.begin() + static_cast<int64_t>(block) * block_size_)) {
    return kNoBlock;  // a hash collision
  }
  return block;
}

bool BlockPool::register_block(int32_t block, uint64_t hash, uint64_t parent,
                               std::span<const int32_t> tokens) {
  DSI_CHECK(block >= 0 && block < num_blocks_ && ref_[block] > 0, "BlockPool::register_block: block ", block,
            " is not in use");
  DSI_CHECK(static_cast<int32_t>(tokens.size()) == block_size_, "BlockPool::register_block: a block holds ",
            block_size_, " tokens, got ", tokens.size());
  if (!prefix_caching_ || has_hash_[block] || by_hash_.count(hash)) return false;
  by_hash_.emplace(hash, block);
  has_hash_[block] = 1;
  hash_[block] = hash;
  parent_[block] = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<int64_t>(block) * block_size_);
  return true;
}

void BlockPool::check_invariants() const {
  std::vector<uint8_t> in_free(num_blocks_, 0), in_lru(num_blocks_, 0);
  for (int32_t b : free_) {
    DSI_CHECK(b >= 0 && b < num_blocks_ && !in_free[b], "BlockPool: free list holds block ", b, " twice");
    in_free[b] = 1;
    DSI_CHECK(ref_[b] == 0, "BlockPool: free block ", b, " has ", ref_[b], " references");
    DSI_CHECK(!has_hash_[b], "BlockPool: free block ", b, " is registered");
  }
  int32_t cached = 0;
  for (int32_t b = lru_head_, prev = kNoBlock; b != kNoBlock; prev = b, b = next_[b]) {
    DSI_CHECK(!in_lru[b] && !in_free[b], "BlockPool: LRU list revisits block ", b);
    DSI_CHECK(prev_[b] == prev, "BlockPool: LRU back link of block ", b);
    in_lru[b] = 1;
    ++cached;
    DSI_CHECK(ref_[b] == 0 && has_hash_[b], "BlockPool: cached block ", b, " has references or no hash");
  }
  DSI_CHECK(cached == num_cached_, "BlockPool: ", cached, " blocks on the LRU list, counted ", num_cached_);
  for (int32_t b = 0; b < num_blocks_; ++b) {
    DSI_CHECK(ref_[b] >= 0, "BlockPool: block ", b, " has a negative reference count");
    if (ref_[b] == 0)
      DSI_CHECK(in_free[b] || in_lru[b], "BlockPool: block ", b, " is lost (no refs, not free)");
    if (has_hash_[b]) {
      auto it = by_hash_.find(hash_[b]);
      DSI_CHECK(it != by_hash_.end() && it->second == b, "BlockPool: registered block ", b,
                " not in the map");
    }
  }
  for (const auto& [hash, b] : by_hash_) {
    DSI_CHECK(has_hash_[b] && hash_[b] == hash, "BlockPool: hash map entry for block ", b, " is stale");
  }
}

}  // namespace dsinfer
