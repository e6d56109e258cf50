// BlockTable: the ordered KV blocks of one sequence (position p lives in blocks[p / block_size]) and the
// operations that move blocks between it and a BlockPool: growth, prefix-cache matching and registration,
// copy-on-write forks and release.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kv/block_pool.h"

namespace dsinfer {

// A block copy the KV storage must perform before a write (copy-on-write).
struct BlockCopy {
  int32_t src;
  int32_t dst;
};

class BlockTable {
 public:
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  bool empty() const { return blocks_.empty(); }
  // Token slots the table can hold.
  int64_t capacity(int32_t block_size) const { return static_cast<int64_t>(blocks_.size()) * block_size; }
  // Full blocks whose chained hash is known (registered in or matched from the prefix cache).
  int32_t num_hashed() const { return static_cast<int32_t>(hashes_.size()); }

  // Blocks to add before the table holds `num_tokens` positions.
  int32_t blocks_needed(int64_t num_tokens, int32_t block_size) const;
  // Adds blocks until `num_tokens` positions fit; all or nothing (false: the pool is short).
  bool grow(BlockPool& pool, int64_t num_tokens);
  // On an empty table: takes the longest run of cached full blocks that hold tokens' prefix, at most
  // `max_tokens` tokens, and returns the number of tokens they cover (a multiple of the block size).
  int32_t match_prefix(BlockPool& pool, std::span<const int32_t> tokens, int64_t max_tokens);
  // Registers every full block among the first `num_computed` positions of `tokens` in the prefix cache.
  void register_full_blocks(BlockPool& pool, std::span<const int32_t> tokens, int64_t num_computed);
  // Releases every block (the table becomes empty).
  void release(BlockPool& pool);
  // A second table sharing every block (reference counts + 1); writes go through make_writable.
  BlockTable fork(BlockPool& pool) const;
  // Before writing position `pos`: when its block is shared, replaces it with a fresh private block and
  // returns the copy to perform. Throws dsinfer::Error when the pool has no free block.
  std::optional<BlockCopy> make_writable(BlockPool& pool, int64_t pos);

 private:
  std::vector<int32_t> blocks_;
  std::vector<uint64_t> hashes_;
};

}  // namespace dsinfer
