// Chained block hashing (splitmix64-style mixing of every token into the predecessor's hash).
#include "kv/block_hash.h"

namespace dsinfer {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ (0x2545f4914f6cdd1dull * (tokens.size() + 1)));
  for (int32_t t : tokens)
    h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull));
  return h;
}

std::vector<uint64_t> hash_full_blocks(std::span<const int32_t> tokens, int32_t block_size) {
  std::vector<uint64_t> out;
  uint64_t parent = kRootBlockHash;
  for (size_t begin = 0; begin + block_size <= tokens.size(); begin += block_size) {
    parent = hash_block(parent, tokens.subspan(begin, block_size));
    out.push_back(parent);
  }
  return out;
}

}  // namespace dsinfer
