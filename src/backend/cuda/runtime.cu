// CUDA runtime calls behind runtime.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/graph_arena.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/env_choice.h"
#include "core/error.h"

namespace dsinfer::cuda {

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
// and the allocation retried once. It counts the bytes of live blocks (size classes) and their peak, so that
// the engine can measure a step's working set (device_peak_bytes).
//
// While a CUDA graph is being captured (set_graph_pool(true)) allocations of every size come from the graph
// arena (graph_arena.h), whose memory is never handed out to work outside capture: a captured graph bakes in
// the addresses of its temporaries, and replays must not overwrite memory that something else keeps across
// steps. Graphs share the arena with each other, which is safe because they never run at once; its chunks
// go back to the device only when no graph exists and no arena block is live.
class CachingAllocator {
 public:
  void* alloc(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (graph_pool_) {
      void* p = arena_.alloc(bytes);
      if (p) live_[p] = {GraphArena::round_up(bytes), true};
      return p;
    }
    const size_t size = size_class(bytes);
    void* p = nullptr;
    if (size < kBypass) {
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
      }
    }
    if (!p && cudaMalloc(&p, size) != cudaSuccess) {
      cudaGetLastError();
      release_cached_locked();
      if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
    }
    live_[p] = {size, false};
    live_bytes_ += size;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    return p;
  }

  void free(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    const Block block = it->second;
    live_.erase(it);
    if (block.pooled) {
      arena_.free(p);
      release_arena_if_unused_locked();
    } else {
      live_bytes_ -= block.size;
      if (block.size >= kBypass) {
        cudaFree(p);
      } else {
        free_[block.size].push_back(p);
      }
    }
  }

  void set_graph_pool(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    graph_pool_ = on;
  }

  bool reserve_graph_pool(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return arena_.reserve(bytes);
  }

  // Graphs alive (instantiated and not destroyed): the arena's chunks stay while any is.
  void graph_created() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++graphs_;
  }
  void graph_destroyed() {
    std::lock_guard<std::mutex> lock(mutex_);
    --graphs_;
    release_arena_if_unused_locked();
  }

  size_t graph_pool_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return arena_.reserved_bytes();
  }
  size_t live_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_bytes_;
  }
  size_t peak_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_bytes_;
  }
  void reset_peak_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_bytes_ = live_bytes_;
  }

 private:
  struct Block {
    size_t size = 0;
    bool pooled = false;  // belongs to the graph arena
  };
  static constexpr size_t kBypass = size_t{256} << 20;
  static constexpr size_t kGraphChunk = size_t{64} << 20;
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
  // Outside a capture, with no graph left and no arena block live, nothing can use the arena's memory.
  void release_arena_if_unused_locked() {
    if (!graph_pool_ && graphs_ == 0) arena_.release();
  }
  static void* arena_chunk(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {  // no release of cached blocks: a capture may be running
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<size_t, std::vector<void*>> free_;
  GraphArena arena_{&arena_chunk, [](void* p) { cudaFree(p); }, kGraphChunk};
  bool graph_pool_ = false;
  int64_t graphs_ = 0;
  size_t live_bytes_ = 0;  // blocks outside the arena, by size class
  size_t peak_bytes_ = 0;
};

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();  // never destroyed: frees may come during exit
  return *a;
}

bool g_capturing = false;
uint64_t g_graph_invalidations = 0;

}  // namespace

bool poison_allocations() {
  static const bool on = env_switch("DSINFER_CUDA_POISON", false);
  return on;
}

void* device_alloc(size_t bytes) {
  void* p = allocator().alloc(bytes);
  // A checking mode: every allocation, fresh or handed out again, reads as NaN (f32 and bf16) and -1
  // (integers) until a kernel writes it. Queued on the one stream (a memset node inside a capture), so it
  // lands after the last use of a reused block and before its next writer.
  if (p && bytes > 0 && poison_allocations())
    check_cuda(cudaMemsetAsync(p, 0xFF, bytes, stream()), "poisoning a device allocation");
  return p;
}

void device_free(void* ptr) {
  allocator().free(ptr);
}

cudaStream_t stream() {
  // Created on first use; never destroyed (kernels may still be queued while statics are torn down).
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    check_cuda(cudaStreamCreate(&created), "stream creation");
    return created;
  }();
  return s;
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  DSI_CHECK(!g_capturing, "a synchronous host-to-device copy cannot be part of a CUDA graph");
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()), "host-to-device copy");
  check_cuda(cudaStreamSynchronize(stream()), "host-to-device copy");  // the host buffer may go away
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  DSI_CHECK(!g_capturing, "a synchronous device-to-host copy cannot be part of a CUDA graph");
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "device-to-host copy");
  check_cuda(cudaStreamSynchronize(stream()), "device-to-host copy");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "device-to-device copy");
}

void synchronize() {
  DSI_CHECK(!g_capturing, "cannot wait for the GPU while a CUDA graph is being captured");
  check_cuda(cudaStreamSynchronize(stream()), "synchronize");
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaMallocHost(&p, bytes), "pinned host allocation");
  return p;
}

void host_free_pinned(void* ptr) {
  if (ptr) cudaFreeHost(ptr);
}

void copy_to_device_async(void* dst, const void* pinned_src, size_t bytes) {
  check_cuda(cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice, stream()),
             "host-to-device copy");
}

void copy_to_host_async(void* pinned_dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpyAsync(pinned_dst, src, bytes, cudaMemcpyDeviceToHost, stream()),
             "device-to-host copy");
}

void memset_async(void* dst, int value, size_t bytes) {
  check_cuda(cudaMemsetAsync(dst, value, bytes, stream()), "device memset");
}

bool capturing() {
  return g_capturing;
}

EventHandle event_create() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event creation");
  return e;
}

void event_record(EventHandle e) {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(e), stream()), "event record");
}

void event_wait_host(EventHandle e) {
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "event wait");
}

void begin_capture() {
  DSI_CHECK(!g_capturing, "CUDA graph capture is already in progress");
  check_cuda(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed), "graph capture begin");
  allocator().set_graph_pool(true);
  g_capturing = true;
}

GraphHandle end_capture(bool keep) {
  g_capturing = false;
  allocator().set_graph_pool(false);
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream(), &graph);
  if (err != cudaSuccess || !keep) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    if (!keep) return nullptr;
    fail("CUDA graph capture failed: ", cudaGetErrorString(err));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(inst, "graph instantiation");
  allocator().graph_created();
  return exec;
}

void launch_graph(GraphHandle graph) {
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream()), "graph launch");
}

void invalidate_graphs() {
  ++g_graph_invalidations;
}

uint64_t graph_invalidations() {
  return g_graph_invalidations;
}

void destroy_graph(GraphHandle graph) {
  if (!graph) return;
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  allocator().graph_destroyed();
}

bool graph_pool_reserve(size_t bytes) {
  DSI_CHECK(!g_capturing, "the graph pool is reserved outside a capture");
  return allocator().reserve_graph_pool(bytes);
}

size_t graph_pool_bytes() {
  return allocator().graph_pool_bytes();
}

size_t device_live_bytes() {
  return allocator().live_bytes();
}

size_t device_peak_bytes() {
  return allocator().peak_bytes();
}

void reset_device_peak_bytes() {
  allocator().reset_peak_bytes();
}

namespace {

// An attribute of the current device; 0 when it cannot be queried.
int current_device_attribute(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

}  // namespace

int device_sm_count(int fallback) {
  static const int n = current_device_attribute(cudaDevAttrMultiProcessorCount);
  return n > 0 ? n : fallback;
}

int device_smem_per_block(int fallback) {
  static const int n = current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  return n > 0 ? n : fallback;
}

}  // namespace dsinfer::cuda
