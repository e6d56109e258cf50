// Picks the backend for a --device value: cpu, cuda, or auto (the GPU when the build and machine have one).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/model_config.h"

namespace dsinfer {

// With "auto" and a model directory, the GPU is chosen only for architectures it has kernels for; with
// "cuda" and a model directory, an architecture without kernels is a clear error naming the missing ops.
// `cuda_arch` (auto | sm_90 | sm_80; "auto" defers to $DSINFER_CUDA_ARCH) picks the CUDA kernel path
// (src/backend/cuda/arch_path.h); it is checked against the GPU when the CUDA backend starts.
std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& model_dir = "",
                                      const std::string& cuda_arch = "auto");

// Whether the CUDA backend of this binary has kernels for every op of this architecture (the table of
// src/backend/cuda/cuda_op_registry.cpp; llama and qwen2 today). False in a build without CUDA.
bool cuda_runs(const ModelConfig& config);

// Whether the CUDA backend's GEMMs over 8 rows split activations into bf16 hi/lo halves
// (DSINFER_CUDA_GEMM=split) instead of rounding them to bf16 (bf16, the default).
bool split_gemm_activations_from_env();
// The same for a model of `config` (null: unknown): DSINFER_CUDA_GEMM when set, else split for the models
// that select cache rows by a top-k of index scores (DeepSeek-V3.2 and V4), bf16 for the others: with
// bf16-rounded activations which keys the indexer keeps depended on how tokens were batched, and
// tiny-deepseek-v32's batched vs one-at-a-time greedy agreement on the H200 was 46.9% (split: 100%;
// forty-sixth session, docs/benchmarks.md).
bool split_gemm_activations_for(const ModelConfig* config);

// The bf16 parts per activation of the CUDA backend's dense decode GEMVs (CudaBackendOptions::
// gemv_activation_parts) for a model of `config` (null: unknown): DSINFER_GEMV_ACT_PARTS (1 or 2) when set,
// else 2 with split GEMMs (split_gemm) or for a mixture-of-experts model, else 1. MoE models keep 2 because
// their routing decisions follow the hidden state: with one part, tiny-deepseek-v3's batched vs one-at-a-time
// agreement fell to 96.9% (two routing flips beyond the bf16-noise bound; thirty-sixth session), and
// V2-Lite's decode gained only 0.4%; a dense model is 3-4% faster with 1 (Llama-8B on the H200: 3.842 against
// 4.009 ms/token, docs/benchmarks.md, thirty-sixth session).
int gemv_activation_parts_for(const ModelConfig* config, bool split_gemm);

// Whether make_backend(device, a model of this config) starts the CUDA backend ("cuda": always, its own
// checks aside; "auto": a visible GPU with kernels for the architecture).
bool picks_cuda(const std::string& device, const ModelConfig& config);

}  // namespace dsinfer
