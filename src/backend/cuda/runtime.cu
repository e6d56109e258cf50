// CUDA runtime calls behind runtime.h.
#include <cuda_runtime.h>

#include "backend/cuda/runtime.h"
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

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void device_free(void* ptr) {
  cudaFree(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "host-to-device copy");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "device-to-host copy");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "device-to-device copy");
}

void synchronize() {
  check(cudaDeviceSynchronize(), "synchronize");
}

}  // namespace dsinfer::cuda
