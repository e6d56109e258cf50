// KeyedMirrors: a few device copies of host arrays, one per distinct contents, for callers that alternate
// between a handful of arrays (DeepSeek-V4's two rope tables, the sliding layers' and the compressed layers',
// every step): each is found already on the device instead of replacing the one copy a single DeviceMirror
// holds (which re-uploads on every alternation, and which a CUDA graph capture refuses). At most kMax arrays;
// a new one beyond that takes the least recently used one's copy. Header-only and CUDA-free: Mirror is
// cuda::DeviceMirror in the backend, a counting fake in tests/unit/keyed_mirrors_test.cpp.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace dsinfer::cuda {

template <typename Mirror, int kMax = 4>
class KeyedMirrors {
  static_assert(kMax >= 1, "at least one copy");

 public:
  // Device pointer to a copy of `v` (null when v is empty), uploaded only when no copy holds its contents.
  template <typename T>
  const T* upload(const std::vector<T>& v) {
    const char* bytes = reinterpret_cast<const char*>(v.data());
    const size_t n = v.size() * sizeof(T);
    Entry* pick = nullptr;
    for (const std::unique_ptr<Entry>& e : entries_) {
      if (e->key.size() == n && (n == 0 || std::memcmp(e->key.data(), bytes, n) == 0)) {
        pick = e.get();
        break;
      }
    }
    if (!pick) {
      if (static_cast<int>(entries_.size()) < kMax) {
        entries_.push_back(std::make_unique<Entry>());
        pick = entries_.back().get();
      } else {
        pick = entries_.front().get();
        for (const std::unique_ptr<Entry>& e : entries_)
          if (e->last_use < pick->last_use) pick = e.get();
      }
      pick->key.assign(bytes, bytes + n);
    }
    pick->last_use = ++clock_;
    return pick->mirror.upload(v);
  }

  // Copies held (for tests).
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    std::vector<char> key;  // the contents `mirror` holds
    Mirror mirror;
    uint64_t last_use = 0;
  };
  std::vector<std::unique_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
};

}  // namespace dsinfer::cuda
