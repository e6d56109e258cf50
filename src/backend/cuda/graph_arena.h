// GraphArena: the device memory of captured CUDA graphs (runtime.cu's graph pool), as offsets in a few large
// chunks. Graphs replay one at a time on the one stream, so they all share the arena: a capture's temporaries
// and its output may take memory that earlier graphs baked in, and the arena holds about the largest step's
// working set instead of the sum over every (batch, context) bucket captured. Free ranges coalesce and a
// block is cut from the smallest free range that holds it, so a large batch's capture reuses what small ones
// used. Chunks come from a callback (cudaMalloc on the GPU, plain memory in the tests) and go back only
// through release(), which the runtime calls once no graph exists and no block is live. Host code only; not
// thread-safe (the allocator holds its lock around every call).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace dsinfer::cuda {

class GraphArena {
 public:
  static constexpr size_t kAlign = 256;
  using ChunkSource = std::function<void*(size_t)>;  // memory for a chunk of `bytes`, or null
  using ChunkSink = std::function<void(void*)>;      // gives a chunk back

  // New chunks hold at least `min_chunk` bytes.
  GraphArena(ChunkSource source, ChunkSink sink, size_t min_chunk)
      : source_(std::move(source)), sink_(std::move(sink)), min_chunk_(round_up(min_chunk)) {}
  GraphArena(const GraphArena&) = delete;
  GraphArena& operator=(const GraphArena&) = delete;

  static size_t round_up(size_t bytes) { return (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }

  // A block of at least `bytes`: from the smallest free range that holds it, else from a new chunk; null
  // when no range holds it and the source has no memory.
  void* alloc(size_t bytes) {
    const size_t need = round_up(bytes);
    Chunk* best = nullptr;
    std::map<size_t, size_t>::iterator best_range;
    for (Chunk& c : chunks_) {
      for (auto it = c.free.begin(); it != c.free.end(); ++it) {
        if (it->second >= need && (!best || it->second < best_range->second)) {
          best = &c;
          best_range = it;
        }
      }
    }
    if (!best) {
      // A chunk of min_chunk where one is to be had, else one just big enough.
      if (!add_chunk(std::max(need, min_chunk_)) && (need >= min_chunk_ || !add_chunk(need))) return nullptr;
      best = &chunks_.back();
      best_range = best->free.begin();
    }
    const size_t offset = best_range->first, length = best_range->second;
    best->free.erase(best_range);
    if (length > need) best->free.emplace(offset + need, length - need);
    char* p = best->base + offset;
    live_.emplace(p, Block{static_cast<size_t>(best - chunks_.data()), need});
    live_bytes_ += need;
    return p;
  }

  // Gives back a block from alloc; false (and nothing changes) for any other pointer.
  bool free(void* p) {
    auto it = live_.find(static_cast<char*>(p));
    if (it == live_.end()) return false;
    Chunk& c = chunks_[it->second.chunk];
    size_t offset = static_cast<size_t>(static_cast<char*>(p) - c.base), length = it->second.bytes;
    live_bytes_ -= length;
    live_.erase(it);
    auto next = c.free.lower_bound(offset);
    if (next != c.free.end() && next->first == offset + length) {  // merge the range after
      length += next->second;
      next = c.free.erase(next);
    }
    if (next != c.free.begin()) {  // merge the range before
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        c.free.erase(prev);
      }
    }
    c.free.emplace(offset, length);
    return true;
  }

  bool owns(const void* p) const { return live_.count(static_cast<char*>(const_cast<void*>(p))) != 0; }

  // Makes sure one free range of at least `bytes` exists (a new chunk if none does): the largest capture
  // expected then takes one contiguous range instead of chunks added as the captures grow.
  bool reserve(size_t bytes) {
    const size_t need = round_up(bytes);
    for (const Chunk& c : chunks_)
      for (const auto& [offset, length] : c.free)
        if (length >= need) return true;
    return add_chunk(need);
  }

  // Gives every chunk back when no block is live; false (nothing changes) otherwise.
  bool release() {
    if (!live_.empty()) return false;
    for (Chunk& c : chunks_) sink_(c.base);
    chunks_.clear();
    reserved_bytes_ = 0;
    return true;
  }

  size_t reserved_bytes() const { return reserved_bytes_; }
  size_t live_bytes() const { return live_bytes_; }
  size_t chunk_count() const { return chunks_.size(); }

 private:
  struct Chunk {
    char* base = nullptr;
    std::map<size_t, size_t> free;  // offset -> length, disjoint, never adjacent
  };
  struct Block {
    size_t chunk = 0;
    size_t bytes = 0;
  };

  bool add_chunk(size_t bytes) {
    void* base = source_(bytes);
    if (!base) return false;
    Chunk c;
    c.base = static_cast<char*>(base);
    c.free.emplace(0, bytes);
    chunks_.push_back(std::move(c));
    reserved_bytes_ += bytes;
    return true;
  }

  ChunkSource source_;
  ChunkSink sink_;
  size_t min_chunk_;
  std::vector<Chunk> chunks_;
  std::map<char*, Block> live_;
  size_t live_bytes_ = 0;
  size_t reserved_bytes_ = 0;
};

}  // namespace dsinfer::cuda
