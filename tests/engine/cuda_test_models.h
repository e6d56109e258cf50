// Fixture models for the CUDA engine tests: where to find them (the build's test data, or the current
// directory's: the GPU machine runs binaries built elsewhere) and gtest parameter names for them.
#pragma once
#include <filesystem>
#include <string>

namespace dsinfer {

inline std::string cuda_test_model_dir(const std::string& name) {
  const std::string built = std::string(DSINFER_TEST_DATA) + "/models/" + name;
  return std::filesystem::exists(built) ? built : "tests/data/models/" + name;
}

// "tiny-deepseek-v3" -> "tiny_deepseek_v3" (gtest names take no '-').
inline std::string model_param_name(std::string name) {
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace dsinfer
