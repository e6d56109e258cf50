// Backend selection by device name.
#include "backend/backend_factory.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "core/env_choice.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model_config.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/arch_path.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_op_registry.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {

namespace {

#ifdef DSINFER_HAVE_CUDA
// GEMMs over more than 8 rows round activations to bf16 (one GEMM); DSINFER_CUDA_GEMM=split keeps ~16 bits
// of each activation (hi/lo halves, two GEMMs). Read once, when the backend is made. The kernel path
// (cuda/arch_path.h) is chosen first: it throws below sm_80 or for a request the GPU cannot honour. config:
// the model's, when known.
std::unique_ptr<Backend> make_cuda_backend(const std::string& cuda_arch, const ModelConfig* config) {
  const cuda::ArchPath path = cuda::init_arch_path(cuda_arch);
  log_info("CUDA backend: ", cuda::arch_path_name(path), " kernel path");
  CudaBackendOptions options;
  options.split_gemm_activations = split_gemm_activations_for(config);
  options.gemv_activation_parts = gemv_activation_parts_for(config, options.split_gemm_activations);
  // DSINFER_MOE_GROUPED_MIN_ROWS=N: the grouped expert GEMMs from N (bucketed) rows per expert on
  // (benchmarks).
  if (const char* rows = std::getenv("DSINFER_MOE_GROUPED_MIN_ROWS"); rows && *rows) {
    char* end = nullptr;
    const long long n = std::strtoll(rows, &end, 10);
    DSI_CHECK(*end == '\0' && n >= 1, "DSINFER_MOE_GROUPED_MIN_ROWS must be a positive integer, got \"", rows,
              "\"");
    options.moe_grouped_min_rows = n;
  }
  // DSINFER_CUDA_HC_FUSED=0 / 1: V4's hyper-connection pre-step (after the write-back) as one cluster launch
  // off / on (on by default, cuda_backend.h).
  options.hc_fused = env_switch("DSINFER_CUDA_HC_FUSED", options.hc_fused);
  // DSINFER_CUDA_MOE_FUSED_ROUTE=0 / 1: the one-kernel routing at decode sizes off / on (on by default,
  // cuda_backend.h).
  options.moe_fused_route = env_switch("DSINFER_CUDA_MOE_FUSED_ROUTE", options.moe_fused_route);
  // DSINFER_CUDA_MOE_ROUTE_CLUSTER=0 / 1: that routing of one token as one thread block cluster where it
  // fits off / on (on by default, cuda_backend.h).
  options.moe_route_cluster = env_switch("DSINFER_CUDA_MOE_ROUTE_CLUSTER", options.moe_route_cluster);
  // DSINFER_CUDA_MOE_SHARED_FUSED=0 / 1: the shared experts inside the routed experts' streaming launches
  // off / on (on by default, cuda_backend.h).
  options.moe_shared_fused = env_switch("DSINFER_CUDA_MOE_SHARED_FUSED", options.moe_shared_fused);
  // DSINFER_MLA_PREPARE_FUSED=0 / 1: the MLA cache write and the W_UK GEMV in one launch at decode sizes off
  // / on (on by default, cuda_backend.h).
  options.mla_prepare_fused = env_switch("DSINFER_MLA_PREPARE_FUSED", options.mla_prepare_fused);
  // DSINFER_CUDA_ROPE_ATTENTION_FUSED=0 / 1: a decode step's rope and cache write inside the attention
  // kernel off / on (on by default, cuda_backend.h).
  options.rope_attention_fused =
      env_switch("DSINFER_CUDA_ROPE_ATTENTION_FUSED", options.rope_attention_fused);
  // DSINFER_CUDA_MOE_UNITS=0 / 1: one token's experts as the two units GEMV launches off / on (on by
  // default, cuda_backend.h).
  options.moe_units = env_switch("DSINFER_CUDA_MOE_UNITS", options.moe_units);
  // DSINFER_GEMV_UNITS_PACKED=0 / 1 / auto: packed copies of the MoE experts for the units launches never
  // (default) / always / while 30% of the GPU's memory stays free (cuda_backend.h).
  options.moe_units_packed =
      env_choice("DSINFER_GEMV_UNITS_PACKED", {"0", "1", "auto"}, options.moe_units_packed);
  return std::make_unique<CudaBackend>(options);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}
#endif

void check_cuda_arch_value(const std::string& cuda_arch) {
  DSI_CHECK(cuda_arch.empty() || cuda_arch == "auto" || cuda_arch == "sm_90" || cuda_arch == "sm_80",
            "unknown --cuda-arch \"", cuda_arch, "\" (use auto, sm_90 or sm_80)");
}

}  // namespace

bool split_gemm_activations_from_env() {
  return env_choice("DSINFER_CUDA_GEMM", {"bf16", "split"}, 0) == 1;
}

bool split_gemm_activations_for(const ModelConfig* config) {
  if (const char* v = std::getenv("DSINFER_CUDA_GEMM"); v && *v) return split_gemm_activations_from_env();
  return config != nullptr && (config->arch == Arch::kDeepseekV32 || config->arch == Arch::kDeepseekV4);
}

int gemv_activation_parts_for(const ModelConfig* config, bool split_gemm) {
  const bool moe = config != nullptr && config->n_routed_experts > 0;
  return env_int("DSINFER_GEMV_ACT_PARTS", split_gemm || moe ? 2 : 1, 1, 2);
}

bool cuda_runs(const ModelConfig& config) {
#ifdef DSINFER_HAVE_CUDA
  return cuda::ops_without_cuda_kernel(config.arch).empty();
#else
  (void)config;
  return false;
#endif
}

bool picks_cuda(const std::string& device, const ModelConfig& config) {
  if (device == "cuda") return true;
#ifdef DSINFER_HAVE_CUDA
  return device == "auto" && cuda::device_available() && cuda_runs(config);
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& model_dir,
                                      const std::string& cuda_arch) {
  check_cuda_arch_value(cuda_arch);
  if (device == "cpu") return std::make_unique<CpuBackend>();
  if (device == "auto") {
#ifdef DSINFER_HAVE_CUDA
    // The GPU when there is one and it has kernels for this architecture; otherwise the CPU reference.
    if (cuda::device_available()) {
      if (model_dir.empty()) return make_cuda_backend(cuda_arch, nullptr);
      const ModelConfig config = load_model_config(model_dir);
      if (cuda_runs(config)) return make_cuda_backend(cuda_arch, &config);
      log_info("--device auto: no CUDA kernels for this architecture yet, running on the CPU");
    }
#endif
    return std::make_unique<CpuBackend>();
  }
  if (device == "cuda") {
#ifdef DSINFER_HAVE_CUDA
    std::optional<ModelConfig> config;
    if (!model_dir.empty()) {
      config = load_model_config(model_dir);
      const std::vector<std::string> missing = cuda::ops_without_cuda_kernel(config->arch);
      DSI_CHECK(missing.empty(), "--device cuda: the CUDA backend has no kernels yet for these ops of ",
                config->model_type, ": ", joined(missing), " (use --device cpu; `dsinfer check` lists them)");
    }
    DSI_CHECK(cuda::device_available(), "--device cuda: no CUDA device is visible");
    return make_cuda_backend(cuda_arch, config ? &*config : nullptr);
#else
    fail("--device cuda: this build has no CUDA backend (no CUDA compiler was found); use --device cpu");
#endif
  }
  fail("unknown --device \"", device, "\" (use auto, cpu or cuda)");
}

}  // namespace dsinfer
