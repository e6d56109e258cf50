// The one table of which backend ops have CUDA kernels in this binary, and which ops each architecture's
// model code calls. `dsinfer check` prints it, and make_backend / cuda_runs() use it to decide whether a
// model can run on the GPU, so the report and the behaviour cannot drift apart.
//
// KEEP IT TRUE: whoever adds (or renames) a kernel for an op edits that op's row in cuda_op_registry.cpp in
// the same commit; an op whose row lists no kernel makes every architecture that calls it CPU-only.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/arch_path.h"
#include "model/model_config.h"

namespace dsinfer::cuda {

struct CudaOpSupport {
  std::string op;  // the Backend method's name
  // Launchers in dsinfer_cuda it runs on both paths (the set over its shape-dependent variants, e.g. GEMV
  // for decode rows and cuBLASLt above); the first word of each is the launcher's name. Empty: none.
  std::vector<std::string> kernels;
  // Launchers replacing `kernels` on the Hopper path (sm_90); empty: the same as the Ampere path.
  std::vector<std::string> hopper_kernels;
  // What the fused op is made of: it runs as these ops (Backend's composed default) when it has no kernels.
  std::vector<std::string> composed_of;
  // Non-empty: without a kernel the op still runs this way (e.g. sampling on the host over the logits).
  std::string host_fallback;
};

// Every op of the Backend interface, one row each.
const std::vector<CudaOpSupport>& cuda_op_support();
// The row of `op`; throws dsinfer::Error for an op the table does not know.
const CudaOpSupport& cuda_op(std::string_view op);

enum class OpCoverage {
  kKernel,        // its own kernels
  kComposed,      // no own kernel; every op it is composed of is covered
  kHostFallback,  // no kernel; runs on the host (host_fallback)
  kMissing,       // no kernel and no fallback: the architecture cannot run on the GPU
};
const char* op_coverage_name(OpCoverage c);
OpCoverage cuda_op_coverage(std::string_view op);
// The kernels `op` runs on `path` (a composed op: those of its parts, in order, without repeats).
std::vector<std::string> cuda_kernels_for(std::string_view op, ArchPath path);

// The backend ops the model code of `arch` calls (plus "sample" for the engine's sampling step).
const std::vector<std::string>& model_backend_ops(Arch arch);
// The ops of `arch` whose coverage is kMissing; empty when the whole model runs on the GPU.
std::vector<std::string> ops_without_cuda_kernel(Arch arch);

}  // namespace dsinfer::cuda
