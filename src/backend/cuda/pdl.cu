// pdl_enabled(): whether kernels launched through launch_pdl (pdl.cuh) may overlap the previous kernel.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/pdl.cuh"
#include "core/env_choice.h"

namespace dsinfer::cuda {

bool pdl_enabled() {
  static const bool supported = [] {
    if (!env_switch("DSINFER_CUDA_PDL", true)) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return supported && arch_path() == ArchPath::kHopper;  // the forced Ampere path runs without it
}

}  // namespace dsinfer::cuda
