// KvCache storage allocation.
#include "kv/kv_cache.h"

#include <algorithm>

#include "core/error.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_tensor.h"
#endif

namespace dsinfer {

KvCache::KvCache(std::vector<KvLayerSpec> layers, int64_t num_blocks, int64_t block_size, Device device,
                 DType dtype)
    : layers_(std::move(layers)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      device_(device),
      dtype_(dtype) {
  DSI_CHECK(num_blocks > 0 && block_size > 0, "KvCache needs positive num_blocks and block_size");
  DSI_CHECK(dtype == DType::F32 || (dtype == DType::BF16 && device != Device::kCpu), "KvCache: a ",
            device_name(device), " cache cannot hold ", dtype_name(dtype));
  for (const KvLayerSpec& spec : layers_) {
    DSI_CHECK(spec.width >= 0, "KvCache: negative layer width");
    // Not zeroed: every slot is written before it is read, and untouched pages of a large cache then cost
    // no memory until used.
    const Shape shape = {num_blocks * block_size, spec.width};
    if (device == Device::kCpu) {
      storage_.push_back(Tensor::empty(DType::F32, shape));
    } else {
#ifdef DSINFER_HAVE_CUDA
      cuda::register_allocator();
#endif
      storage_.push_back(Tensor::empty_on(device, dtype, shape));
    }
  }
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (const Tensor& t : storage_) n += t.nbytes();
  return n;
}

size_t KvCache::bytes_per_block() const {
  return bytes() / static_cast<size_t>(num_blocks_);
}

void KvCache::copy_block(int64_t src, int64_t dst) {
  DSI_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_, "KvCache::copy_block: bad block");
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int64_t rows = block_size_ * layers_[l].width;
    if (device_ != Device::kCpu) {
#ifdef DSINFER_HAVE_CUDA
      char* base = static_cast<char*>(storage_[l].raw());
      const size_t bytes = static_cast<size_t>(rows) * dtype_size(dtype_);
      cuda::copy_device_to_device(base + dst * bytes, base + src * bytes, bytes);
      continue;
#else
      fail("KvCache::copy_block: no ", device_name(device_), " support in this build");
#endif
    }
    std::copy(storage_[l].f32() + src * rows, storage_[l].f32() + (src + 1) * rows,
              storage_[l].f32() + dst * rows);
  }
}

}  // namespace dsinfer
