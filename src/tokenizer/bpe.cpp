// BPE model: loading vocab and merges (string "a b" or pair ["a", "b"] form) and encoding words.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace dsinfer {

void MergeTable::build(const std::vector<Entry>& entries) {
  size_t capacity = 16;
  shift_ = 60;
  while (capacity < entries.size() * 2) {
    capacity *= 2;
    --shift_;
  }
  slots_.assign(capacity, Entry{kEmpty, 0, 0});
  mask_ = capacity - 1;
  for (const Entry& e : entries) {
    size_t i = slot(e.key);
    while (slots_[i].key != kEmpty && slots_[i].key != e.key) i = (i + 1) & mask_;
    slots_[i] = e;  // a repeated pair keeps the later merge, as a hash map insert would
  }
}

namespace {

bool get_bool(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& j, const BpeTables* tables) {
  DSI_CHECK(j.is_object(), "tokenizer: 'model' must be an object");
  const std::string type = j.value("type", std::string("BPE"));
  DSI_CHECK(type == "BPE", "tokenizer: unsupported model type '", type, "' (only BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = j.find(key);
    DSI_CHECK(it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
              "tokenizer: BPE '", key, "' is not supported");
  }
  if (auto it = j.find("dropout"); it != j.end() && !it->is_null()) {
    DSI_CHECK(it->is_number() && it->get<double>() == 0.0, "tokenizer: BPE dropout is not supported");
  }

  std::unique_ptr<BpeModel> m(new BpeModel());
  // Vocabulary: from `tables` (fast loader) or the JSON object.
  int32_t max_id = -1;
  auto add_token = [&](const std::string& token, int64_t id) {
    DSI_CHECK(id >= 0 && id < INT32_MAX, "tokenizer: vocab id ", id, " of '", token, "' is out of range");
    m->vocab_.insert_or_assign(token, static_cast<int32_t>(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
  };
  if (tables) {
    m->vocab_.reserve(tables->vocab.size());
    for (const auto& [token, id] : tables->vocab) add_token(token, id);
  } else {
    auto vit = j.find("vocab");
    DSI_CHECK(vit != j.end() && vit->is_object(), "tokenizer: BPE model needs a 'vocab' object");
    m->vocab_.reserve(vit->size());
    for (auto it = vit->begin(); it != vit->end(); ++it) {
      DSI_CHECK(it.value().is_number_integer(), "tokenizer: vocab id of '", it.key(), "' is not an integer");
      add_token(it.key(), it.value().get<int64_t>());
    }
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m->has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : m->vocab_) {
    m->id_to_token_[id] = token;
    m->has_id_[id] = 1;
  }

  // Merges, in rank order.
  auto lookup = [&](std::string_view token, size_t rank) {
    auto it = m->vocab_.find(token);
    if (it == m->vocab_.end())
      fail("tokenizer: merge ", rank + 1, " uses '", token, "' which is not in the vocab");
    return it->second;
  };
  std::vector<MergeTable::Entry> entries;
  std::string joined;
  auto add_merge = [&](std::string_view first, std::string_view second) {
    const size_t rank = entries.size();
    joined = first;
    joined += second;
    const int32_t ia = lookup(first, rank), ib = lookup(second, rank);
    auto nit = m->vocab_.find(joined);
    if (nit == m->vocab_.end())
      fail("tokenizer: merge ", rank + 1, " result '", joined, "' is not in the vocab");
    entries.push_back({MergeTable::pack(ia, ib), static_cast<int32_t>(rank), nit->second});
  };
  if (tables) {
    entries.reserve(tables->merges.size());
    for (const auto& [a, b] : tables->merges) add_merge(a, b);
  } else if (auto mit = j.find("merges"); mit != j.end() && !mit->is_null()) {
    DSI_CHECK(mit->is_array(), "tokenizer: BPE 'merges' must be an array");
    entries.reserve(mit->size());
    for (const auto& merge : *mit) {
      const size_t rank = entries.size();
      if (merge.is_string()) {
        const std::string& line = merge.get_ref<const std::string&>();
        const size_t space = line.find(' ');
        DSI_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                  "tokenizer: merge ", rank + 1, " '", line, "' is not two tokens separated by one space");
        add_merge(std::string_view(line).substr(0, space), std::string_view(line).substr(space + 1));
      } else {
        DSI_CHECK(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                  "tokenizer: merge ", rank + 1, " must be \"a b\" or [\"a\", \"b\"]");
        add_merge(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>());
      }
    }
  }
  m->merges_.build(entries);
  m->num_merges_ = static_cast<int32_t>(entries.size());

  m->all_bytes_in_vocab_ = true;
  for (int b = 0; b < 256; ++b) {
    auto it = m->vocab_.find(byte_level::char_for_byte(static_cast<uint8_t>(b)));
    m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
    if (it == m->vocab_.end()) m->all_bytes_in_vocab_ = false;
  }
  if (auto uit = j.find("unk_token"); uit != j.end() && !uit->is_null()) {
    const std::string unk = uit->get<std::string>();
    auto it = m->vocab_.find(unk);
    DSI_CHECK(it != m->vocab_.end(), "tokenizer: unk_token '", unk, "' is not in the vocab");
    m->unk_id_ = it->second;
  }
  m->fuse_unk_ = get_bool(j, "fuse_unk");
  m->byte_fallback_ = get_bool(j, "byte_fallback");
  m->ignore_merges_ = get_bool(j, "ignore_merges");
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= has_id_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::merge(std::vector<int32_t>& syms) const {
  if (syms.size() < 2) return;
  if (syms.size() <= 32) {
    merge_small(syms);
  } else {
    merge_large(syms);
  }
}

// Repeatedly merges the lowest-ranked adjacent pair (leftmost on ties); fine for short words.
void BpeModel::merge_small(std::vector<int32_t>& syms) const {
  std::array<const MergeTable::Entry*, 32> pair{};
  size_t n = syms.size();
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = merges_.find(syms[i], syms[i + 1]);
  while (true) {
    size_t best = n;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pair[i] && pair[i]->rank < best_rank) {
        best_rank = pair[i]->rank;
        best = i;
      }
    }
    if (best == n) break;
    syms[best] = pair[best]->new_id;
    for (size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      pair[i] = pair[i + 1];
    }
    --n;
    if (best > 0) pair[best - 1] = merges_.find(syms[best - 1], syms[best]);
    pair[best] = best + 1 < n ? merges_.find(syms[best], syms[best + 1]) : nullptr;
  }
  syms.resize(n);
}

// Linked list of symbols and candidate merges bucketed by rank. Merges happen in the order
// (rank, position), exactly as a min-heap of (rank, position) would give them (Hugging Face's
// algorithm), but in O(n) for the usual case: ranks are visited in increasing order and each
// bucket's positions left to right. A merge creating a pair whose rank is not above the rank
// being processed (possible only with unusual merge lists) interrupts the bucket, which goes back
// to the queue, so the global order is kept. Stale candidates are skipped on validation.
void BpeModel::merge_large(std::vector<int32_t>& syms) const {
  const int n = static_cast<int>(syms.size());
  thread_local std::vector<int> prev, next;
  thread_local std::vector<std::vector<int32_t>> buckets;  // rank -> positions; all empty between calls
  thread_local std::vector<int32_t> ranks;                 // min-heap of ranks with a non-empty bucket
  thread_local std::vector<int32_t> work;
  prev.resize(n);
  next.resize(n);
  if (buckets.size() < static_cast<size_t>(num_merges_)) buckets.resize(num_merges_);
  ranks.clear();
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  int32_t current = -1;
  bool interrupted = false;
  auto push = [&](int32_t rank, int pos) {
    std::vector<int32_t>& bucket = buckets[rank];
    if (bucket.empty()) {
      ranks.push_back(rank);
      std::push_heap(ranks.begin(), ranks.end(), std::greater<int32_t>());
    }
    bucket.push_back(pos);
    if (rank <= current) interrupted = true;
  };
  for (int i = 0; i + 1 < n; ++i) {
    if (const auto* e = merges_.find(syms[i], syms[i + 1])) push(e->rank, i);
  }
  while (!ranks.empty()) {
    std::pop_heap(ranks.begin(), ranks.end(), std::greater<int32_t>());
    current = ranks.back();
    ranks.pop_back();
    work.swap(buckets[current]);
    buckets[current].clear();
    if (!std::is_sorted(work.begin(), work.end())) std::sort(work.begin(), work.end());
    interrupted = false;
    for (size_t k = 0; k < work.size(); ++k) {
      const int pos = work[k];
      if (next[pos] < 0 || prev[pos] == -2) continue;  // merged away or last symbol
      const int right = next[pos];
      const auto* pair = merges_.find(syms[pos], syms[right]);
      if (!pair || pair->rank != current) continue;  // stale candidate
      syms[pos] = pair->new_id;
      prev[right] = -2;  // marks a removed symbol
      next[pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = pos;
      if (prev[pos] >= 0) {
        if (const auto* e = merges_.find(syms[prev[pos]], syms[pos])) push(e->rank, prev[pos]);
      }
      if (next[pos] >= 0) {
        if (const auto* e = merges_.find(syms[pos], syms[next[pos]])) push(e->rank, pos);
      }
      if (interrupted && k + 1 < work.size()) {
        // Something at or below this rank appeared: requeue the rest of this bucket.
        push(current, work[k + 1]);
        std::vector<int32_t>& bucket = buckets[current];
        bucket.insert(bucket.end(), work.begin() + static_cast<std::ptrdiff_t>(k) + 2, work.end());
        break;
      }
    }
    work.clear();
  }
  size_t w = 0;
  for (int i = 0; i < n; ++i)
    if (prev[i] != -2) syms[w++] = syms[i];
  syms.resize(w);
  if (n > (1 << 16)) {
    // Do not keep a huge word's scratch memory alive in this thread (all buckets are empty now).
    std::vector<std::vector<int32_t>>().swap(buckets);
    std::vector<int32_t>().swap(work);
    std::vector<int>().swap(prev);
    std::vector<int>().swap(next);
  }
}

std::vector<int32_t> BpeModel::merge_for_testing(std::vector<int32_t> syms, bool large) const {
  if (syms.size() >= 2) {
    if (large) {
      merge_large(syms);
    } else {
      merge_small(syms);
    }
  }
  return syms;
}

bool BpeModel::cache_get(std::string_view key, size_t hash, std::vector<int32_t>& out) const {
  CacheShard& shard = cache_[hash % kCacheShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.map.find(key);
  if (it == shard.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void BpeModel::cache_put(std::string_view key, size_t hash, const std::vector<int32_t>& ids) const {
  CacheShard& shard = cache_[hash % kCacheShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kCacheShardCapacity) return;  // a full cache stops growing
  shard.map.emplace(std::string(key), ids);
}

void BpeModel::encode_bytes(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  if (!all_bytes_in_vocab_) {
    std::string mapped;
    byte_level::map_bytes(raw, mapped);
    encode_chars(mapped, out);
    return;
  }
  if (raw.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(raw[0])]);
    return;
  }
  if (ignore_merges_) {
    std::string mapped;
    byte_level::map_bytes(raw, mapped);
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = raw.size() <= kCacheMaxWordBytes;
  size_t hash = 0;
  if (cacheable) {
    hash = StringHash{}(raw);
    if (cache_get(raw, hash, out)) return;
  }
  thread_local std::vector<int32_t> syms;
  syms.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) syms[i] = byte_ids_[static_cast<uint8_t>(raw[i])];
  merge(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) cache_put(raw, hash, syms);
}

void BpeModel::encode_chars(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> syms;
  bool previous_unk = false;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    i += utf8::seq_len(static_cast<unsigned char>(word[i]));
    const std::string_view ch = word.substr(start, i - start);
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      syms.push_back(it->second);
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char c : ch) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(c)));
        auto it = vocab_.find(std::string_view(name));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == ch.size()) {
        syms.insert(syms.end(), bytes.begin(), bytes.end());
        previous_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && previous_unk)) syms.push_back(*unk_id_);
      previous_unk = true;
    }
    // Without an unk token the character is dropped, as Hugging Face does.
  }
  merge(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

}  // namespace dsinfer
