// The driver's cuTensorMapEncodeTiled, found once through the runtime (no link against libcuda): the TMA
// kernels' host side builds their tensor maps with it (mla_wgmma_tma_kernels.cu, stream_probe_kernels.cu).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

namespace dsinfer::cuda {

// The encoder, or null when the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

}  // namespace dsinfer::cuda
