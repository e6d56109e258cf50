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

// Whether make_backend(device, a model of this config) starts the CUDA backend ("cuda": always, its own
// checks aside; "auto": a visible GPU with kernels for the architecture).
bool picks_cuda(const std::string& device, const ModelConfig& config);

}  // namespace dsinfer
