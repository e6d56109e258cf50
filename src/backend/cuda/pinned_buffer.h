// PinnedBuffer: a growable page-locked host buffer for asynchronous copies (the sampling call's inputs and
// results). Header-only glue of dsinfer_lib. The owner keeps the event recorded after the last copy that
// used the buffer; growing waits for it first, so no queued copy reads freed memory.
#pragma once
#include <algorithm>
#include <cstddef>

#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace dsinfer::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { host_free_pinned(data_); }

  // At least `bytes` bytes (contents not kept when it grows). `last_use`: the event after the last copy
  // that read or wrote the buffer (null: none).
  char* reserve(size_t bytes, EventHandle last_use) {
    if (bytes > capacity_) {
      if (last_use) event_wait_host(last_use);
      host_free_pinned(data_);
      data_ = nullptr;
      capacity_ = 0;
      const size_t cap = std::max(bytes * 2, size_t{64} << 10);
      data_ = static_cast<char*>(host_alloc_pinned(cap));
      DSI_CHECK(data_ != nullptr, "out of pinned host memory (", cap, " bytes)");
      capacity_ = cap;
    }
    return data_;
  }
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace dsinfer::cuda
