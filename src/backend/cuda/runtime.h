// A thin, CUDA-header-free view of the CUDA runtime for the rest of dsinfer: device presence, memory,
// copies. Implemented in runtime.cu (built only with nvcc); every failure throws dsinfer::Error.
#pragma once
#include <cstddef>
#include <string>

namespace dsinfer::cuda {

bool device_available();
void* device_alloc(size_t bytes);  // null when out of memory
void device_free(void* ptr);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void synchronize();

}  // namespace dsinfer::cuda
