// Prefix-cache identity of a full KV block: a 64-bit hash of its tokens chained with its predecessor's hash,
// so equal hashes mean equal token prefixes (collisions are caught by BlockPool comparing the tokens).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace dsinfer {

// Hash of the first block of a sequence's chain ("no predecessor").
inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ull;

// Hash of a block holding `tokens` whose predecessor block has hash `parent`.
uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens);

// Hashes of the full blocks of `tokens` (tokens.size() / block_size of them), chained from the root.
std::vector<uint64_t> hash_full_blocks(std::span<const int32_t> tokens, int32_t block_size);

}  // namespace dsinfer
