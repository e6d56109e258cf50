// Picks the backend for a --device value: cpu, cuda, or auto (the GPU when the build and machine have one).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/model_config.h"

namespace dsinfer {

// With "auto" and a model directory, the GPU is chosen only for architectures it has kernels for.
std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& model_dir = "");

// Whether the CUDA backend has kernels for every op of this architecture (llama, qwen2 today).
bool cuda_runs(const ModelConfig& config);

}  // namespace dsinfer
