// The BPE model of tokenizer.json: vocabulary, ranked merges and a word cache.
// Long words merge through rank buckets over a linked list, in Hugging Face's (rank, position)
// order, so they stay near O(n).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_fast.h"

namespace dsinfer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Open-addressing map from a pair of token ids to (rank, merged id).
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t new_id;
  };
  void build(const std::vector<Entry>& entries);
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Entry> slots_{Entry{kEmpty, 0, 0}};
  size_t mask_ = 0;
  int shift_ = 63;
};

class BpeModel {
 public:
  // Parses the "model" object. Throws dsinfer::Error on malformed or unsupported settings.
  // With `tables`, the vocab and merges come from there instead of the JSON object.
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, const BpeTables* tables = nullptr);

  // Encodes one piece of raw bytes whose characters are the byte-level alphabet of each byte.
  void encode_bytes(std::string_view raw, std::vector<int32_t>& out) const;
  // Encodes one piece written in the vocabulary's own alphabet.
  void encode_chars(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when the id is not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

  // Runs one of the two merge strategies on initial symbol ids (for tests: they must agree).
  std::vector<int32_t> merge_for_testing(std::vector<int32_t> syms, bool large) const;

 private:
  BpeModel() = default;
  // Applies the merges to `syms` in place.
  void merge(std::vector<int32_t>& syms) const;
  void merge_small(std::vector<int32_t>& syms) const;
  void merge_large(std::vector<int32_t>& syms) const;
  bool cache_get(std::string_view key, size_t hash, std::vector<int32_t>& out) const;
  void cache_put(std::string_view key, size_t hash, const std::vector<int32_t>& ids) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  MergeTable merges_;
  int32_t num_merges_ = 0;
  std::array<int32_t, 256> byte_ids_{};  // id of each byte's byte-level character, -1 if absent
  bool all_bytes_in_vocab_ = false;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  // Word cache: sharded so that concurrent encodes rarely contend.
  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheShardCapacity = 4096;
  static constexpr size_t kCacheMaxWordBytes = 64;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace dsinfer
