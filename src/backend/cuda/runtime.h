// A thin, CUDA-header-free view of the CUDA runtime for the rest of dsinfer: device presence, memory,
// copies. Implemented in runtime.cu (built only with nvcc); every failure throws dsinfer::Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace dsinfer::cuda {

bool device_available();
void* device_alloc(size_t bytes);  // null when out of memory
// DSINFER_CUDA_POISON=1: device_alloc fills every allocation with 0xFF bytes (NaN as f32 / bf16, -1 as an
// integer), so a kernel that uses memory nothing wrote gives NaN or a failed check instead of passing on
// whatever the memory held (`scripts/gpu_check.sh --poison`). Off by default; read once.
bool poison_allocations();
void device_free(void* ptr);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void synchronize();  // waits for the stream
// Streaming multiprocessors of the current device (read once); `fallback` when it cannot be queried.
int device_sm_count(int fallback);
// Shared memory one block may use on the current device with the opt-in (static + dynamic bytes, read once):
// 227 KiB on Hopper, 163 KiB on sm_80, 99 KiB on sm_86 / sm_89; `fallback` when it cannot be queried.
int device_smem_per_block(int fallback);

// Page-locked host memory (needed for copies that overlap host work or are captured in graphs).
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* ptr);
// Queued on the stream; the host buffers must stay untouched until the stream passes the copy.
void copy_to_device_async(void* dst, const void* pinned_src, size_t bytes);
void copy_to_host_async(void* pinned_dst, const void* src, size_t bytes);
// Sets `bytes` device bytes at dst to `value`, queued on the stream.
void memset_async(void* dst, int value, size_t bytes);

// Events on the stream: the host can wait until the stream has passed a point.
using EventHandle = void*;  // a cudaEvent_t (never destroyed: few, process-wide)
EventHandle event_create();
void event_record(EventHandle e);
void event_wait_host(EventHandle e);

// CUDA graphs of the stream's work. Between begin_capture and end_capture nothing runs: kernels are
// recorded, device allocations come from the graph pool (see runtime.cu) and capturing() is true, so that
// code which must not be captured (host copies, per-step uploads) can refuse.
using GraphHandle = void*;  // a cudaGraphExec_t
bool capturing();
void begin_capture();
// Ends the capture: an instantiated graph, or null when !keep (the capture is thrown away). Throws when
// the capture failed and keep is set.
GraphHandle end_capture(bool keep);
void launch_graph(GraphHandle graph);
// Memory a captured graph may read or write moved or changed (a grown workspace, a changed constant):
// graphs captured before must be recorded again. graph_invalidations() counts the calls.
void invalidate_graphs();
uint64_t graph_invalidations();
void destroy_graph(GraphHandle graph);
// The graph pool (graph_arena.h): every captured graph's temporaries and outputs, shared by all graphs (they
// never run at once). graph_pool_reserve makes one free range of `bytes` exist (outside a capture; false when
// the device has no such memory), so the largest capture takes one contiguous range; graph_pool_bytes is
// the device memory the pool holds. Its memory goes back once no graph exists and no block of it is live.
bool graph_pool_reserve(size_t bytes);
size_t graph_pool_bytes();

// Bytes of live device allocations outside the graph pool (by the allocator's size classes) and their peak
// since the last reset_device_peak_bytes: a step's working set is the peak it reaches over the live bytes
// before it.
size_t device_live_bytes();
size_t device_peak_bytes();
void reset_device_peak_bytes();

}  // namespace dsinfer::cuda
