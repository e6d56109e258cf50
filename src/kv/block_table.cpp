// BlockTable operations over a BlockPool.
#include "kv/block_table.h"

#include "core/error.h"
#include "kv/block_hash.h"

namespace dsinfer {

int32_t BlockTable::blocks_needed(int64_t num_tokens, int32_t block_size) const {
  const int64_t want = (num_tokens + block_size - 1) / block_size;
  return static_cast<int32_t>(std::max<int64_t>(0, want - num_blocks()));
}

bool BlockTable::grow(BlockPool& pool, int64_t num_tokens) {
  return pool.allocate(blocks_needed(num_tokens, pool.block_size()), blocks_);
}

int32_t BlockTable::match_prefix(BlockPool& pool, std::span<const int32_t> tokens, int64_t max_tokens) {
  DSI_CHECK(blocks_.empty(), "BlockTable::match_prefix needs an empty table");
  if (!pool.prefix_caching()) return 0;
  const int32_t bs = pool.block_size();
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size())) / bs;
  uint64_t parent = kRootBlockHash;
  for (int64_t i = 0; i < limit; ++i) {
    std::span<const int32_t> block_tokens = tokens.subspan(i * bs, bs);
    const uint64_t hash = hash_block(parent, block_tokens);
    const int32_t block = pool.lookup(hash, parent, block_tokens);
    if (block == BlockPool::kNoBlock) break;
    pool.retain(block);
    blocks_.push_back(block);
    hashes_.push_back(hash);
    parent = hash;
  }
  return num_blocks() * bs;
}

void BlockTable::register_full_blocks(BlockPool& pool, std::span<const int32_t> tokens,
                                      int64_t num_computed) {
  if (!pool.prefix_caching()) return;
  const int32_t bs = pool.block_size();
  const int64_t full = std::min<int64_t>(num_computed / bs, num_blocks());
  for (int64_t i = num_hashed(); i < full; ++i) {
    const uint64_t parent = i == 0 ? kRootBlockHash : hashes_[i - 1];
    std::span<const int32_t> block_tokens = tokens.subspan(i * bs, bs);
    const uint64_t hash = hash_block(parent, block_tokens);
    // Another block may already hold this prefix (two requests computed it at once); this copy then
    // stays unregistered and returns to the free list when released.
    pool.register_block(blocks_[i], hash, parent, block_tokens);
    hashes_.push_back(hash);
  }
}

void BlockTable::release(BlockPool& pool) {
  // Release back to front so that a sequence's tail blocks are evicted before its head blocks.
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool.release(*it);
  blocks_.clear();
  hashes_.clear();
}

BlockTable BlockTable::fork(BlockPool& pool) const {
  BlockTable copy = *this;
  for (int32_t b : blocks_) pool.retain(b);
  return copy;
}

std::optional<BlockCopy> BlockTable::make_writable(BlockPool& pool, int64_t pos) {
  const int64_t index = pos / pool.block_size();
  DSI_CHECK(index < num_blocks(), "BlockTable::make_writable: position ", pos, " is beyond the table");
  const int32_t old_block = blocks_[index];
  if (pool.ref_count(old_block) == 1) return std::nullopt;
  const int32_t fresh = pool.allocate();
  DSI_CHECK(fresh != BlockPool::kNoBlock, "KV cache exhausted: no free block for a copy-on-write");
  pool.release(old_block);
  blocks_[index] = fresh;
  // The private copy will be written, so it no longer matches a registered hash.
  if (index < num_hashed()) hashes_.resize(index);
  return BlockCopy{old_block, fresh};
}

}  // namespace dsinfer
