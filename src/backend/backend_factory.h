// Picks the backend for a --device value: cpu, cuda, or auto (the GPU when the build and machine have one).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace dsinfer {

std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace dsinfer
