// BlockPool: the block ids of the paged KV cache with reference counts, a free list and the prefix cache.
// A block is `block_size` consecutive token positions of one sequence in every layer. Full blocks may be
// registered under the chained hash of their tokens; when their last user releases them they stay cached
// (reusable by a later request with the same prefix) until allocation evicts them, least recently used first.
// Not thread-safe: the engine thread owns it.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace dsinfer {

class BlockPool {
 public:
  static constexpr int32_t kNoBlock = -1;

  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching = true);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks allocate() can hand out now: never used / plain free blocks plus evictable cached blocks.
  int32_t num_free() const { return static_cast<int32_t>(free_.size()) + num_cached_; }
  // Blocks with a reference count above zero.
  int32_t num_used() const { return num_blocks_ - static_cast<int32_t>(free_.size()) - num_cached_; }
  // Prefix-cache blocks no sequence holds (evictable).
  int32_t num_cached() const { return num_cached_; }
  int64_t evictions() const { return evictions_; }
  // Drops every prefix-cache block no request holds (back to the free list); returns how many. Blocks held
  // by running requests are untouched (the reinit_cache action of the circuit breaker's metrics rules).
  int32_t evict_cached();

  // A block with reference count 1, from the free list or else by evicting the least recently used cached
  // block; kNoBlock when every block is in use.
  int32_t allocate();
  // `n` blocks appended to `out`, all or nothing (false: nothing allocated).
  bool allocate(int32_t n, std::vector<int32_t>& out);
  // One more reference (a prefix-cache hit or a fork); a cached block leaves the LRU list.
  void retain(int32_t block);
  // One reference less; at zero a registered block becomes cached (most recently used), others free.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_[block]; }

  // The block holding exactly `tokens` after the predecessor `parent` (hash `hash`), or kNoBlock.
  int32_t lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Registers a full, in-use block as holding `tokens` after `parent`. Returns false (and changes nothing)
  // when prefix caching is off or another block already holds this hash.
  bool register_block(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  bool is_registered(int32_t block) const { return has_hash_[block] != 0; }

  // Throws dsinfer::Error when the free list, LRU list, reference counts and hash map disagree.
  void check_invariants() const;

 private:
  void lru_push_back(int32_t block);
  void lru_remove(int32_t block);
  void unregister(int32_t block);

  int32_t num_blocks_;
  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;          // [num_blocks]
  std::vector<int32_t> free_;         // unregistered blocks with ref 0 (a stack)
  std::vector<uint64_t> hash_;        // [num_blocks] hash of a registered block
  std::vector<uint64_t> parent_;      // [num_blocks] predecessor hash of a registered block
  std::vector<uint8_t> has_hash_;     // [num_blocks]
  std::vector<int32_t> tokens_;       // [num_blocks * block_size] tokens of registered blocks
  std::vector<int32_t> prev_, next_;  // intrusive LRU list of cached blocks (ref 0, registered)
  int32_t lru_head_ = kNoBlock, lru_tail_ = kNoBlock;
  int32_t num_cached_ = 0;
  int64_t evictions_ = 0;
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace dsinfer
