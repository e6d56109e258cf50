// KvCache: paged storage for every layer's cached per-token values (float32 on the host for the CPU
// backend; on the GPU for the CUDA backend, in the dtype the backend's kernels read: see kv_dtype).
// A slot is one token position of one block; each layer stores `width` values per slot.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dsinfer {

// What a layer keeps per sequence (see docs/architecture.md, "KV cache kinds").
enum class KvKind {
  kFullHistory,    // one row per token, kept for the whole sequence (GQA K/V, MLA latent)
  kSlidingWindow,  // one row per token, only the last `window` tokens are read
  kCompressed,     // one row per `ratio` tokens
};

struct KvLayerSpec {
  KvKind kind = KvKind::kFullHistory;
  int64_t width = 0;   // float values per row
  int64_t window = 0;  // kSlidingWindow
  int64_t ratio = 1;   // kCompressed: tokens per row
};

class KvCache {
 public:
  // Storage on `device` (a Device::kCuda cache is read and written by the CUDA backend's kernels alone).
  // Storage of `dtype` (F32 or BF16; host caches are always F32).
  KvCache(std::vector<KvLayerSpec> layers, int64_t num_blocks, int64_t block_size,
          Device device = Device::kCpu, DType dtype = DType::F32);

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  const KvLayerSpec& layer(int64_t i) const { return layers_[i]; }
  int64_t width(int64_t layer) const { return layers_[layer].width; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  // One layer's rows [num_blocks * block_size, width] (dtype(), on device()).
  const Tensor& storage(int64_t layer) const { return storage_[layer]; }
  size_t bytes() const;
  // Bytes one block occupies across all layers.
  size_t bytes_per_block() const;
  // Copies every layer's rows of block `src` to block `dst` (copy-on-write).
  void copy_block(int64_t src, int64_t dst);

  // The `width` values of one slot in one layer (host caches only).
  float* slot(int64_t layer, int64_t slot) { return storage_[layer].f32() + slot * layers_[layer].width; }
  const float* slot(int64_t layer, int64_t slot) const {
    return storage_[layer].f32() + slot * layers_[layer].width;
  }

 private:
  std::vector<KvLayerSpec> layers_;
  int64_t num_blocks_;
  int64_t block_size_;
  Device device_;
  DType dtype_;
  std::vector<Tensor> storage_;  // per layer [num_blocks * block_size, width]
};

}  // namespace dsinfer
