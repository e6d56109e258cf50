// The one CUDA stream every dsinfer kernel, cuBLASLt call and copy runs on (a blocking stream, so it also
// orders against the legacy default stream). Only for .cu files: it needs the CUDA runtime headers.
#pragma once
#include <cuda_runtime.h>

namespace dsinfer::cuda {

cudaStream_t stream();

}  // namespace dsinfer::cuda
