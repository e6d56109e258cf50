// CUDA runtime calls behind runtime.h.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(err));
}

}  // namespace

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

namespace {

// A caching allocator for the many short-lived activation buffers of a forward pass: freed blocks are kept
// per size class and handed out again, so the step loop stops calling cudaMalloc/cudaFree (which also
// synchronise the device). Sizes up to 1 MiB round to a power of two, larger ones to 2 MiB; blocks of
// 256 MiB and more (weights, the KV cache) bypass the cache. On cudaMalloc failure the cache is released
// and the allocation retried once.
class CachingAllocator {
 public:
  void* alloc(size_t bytes) {
    const size_t size = size_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    if (size < kBypass) {
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        live_[p] = size;
        return p;
      }
    }
    void* p = nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess) {
      cudaGetLastError();
      release_cached_locked();
      if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
    }
    live_[p] = size;
    return p;
  }

  void free(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    const size_t size = it->second;
    live_.erase(it);
    if (size >= kBypass) {
      cudaFree(p);
    } else {
      free_[size].push_back(p);
    }
  }

 private:
  static constexpr size_t kBypass = size_t{256} << 20;
  static size_t size_class(size_t bytes) {
    if (bytes <= 512) return 512;
    if (bytes <= (size_t{1} << 20)) {
      size_t s = 512;
      while (s < bytes) s <<= 1;
      return s;
    }
    const size_t step = size_t{2} << 20;
    return (bytes + step - 1) / step * step;
  }
  void release_cached_locked() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) cudaFree(p);
      blocks.clear();
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;
  std::map<size_t, std::vector<void*>> free_;
};

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();  // never destroyed: frees may come during exit
  return *a;
}

}  // namespace

void* device_alloc(size_t bytes) {
  return allocator().alloc(bytes);
}

void device_free(void* ptr) {
  allocator().free(ptr);
}

cudaStream_t stream() {
  // Created on first use; never destroyed (kernels may still be queued while statics are torn down).
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    check(cudaStreamCreate(&created), "stream creation");
    return created;
  }();
  return s;
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()), "host-to-device copy");
  check(cudaStreamSynchronize(stream()), "host-to-device copy");  // the host buffer may go away
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "device-to-host copy");
  check(cudaStreamSynchronize(stream()), "device-to-host copy");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "device-to-device copy");
}

void synchronize() {
  check(cudaStreamSynchronize(stream()), "synchronize");
}

}  // namespace dsinfer::cuda
