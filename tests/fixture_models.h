// The fixture models for CPU tests: where each lives (tests/data/models, or models/ for the bundled
// deepseek-v3-tiny-code) and a quiet load onto a backend.
#pragma once
#include <memory>
#include <string>

#include "model/model.h"

namespace dsinfer {

inline std::string fixture_model_dir(const std::string& name) {
  if (name == "deepseek-v3-tiny-code") return std::string(DSINFER_SOURCE_DIR) + "/models/" + name;
  return std::string(DSINFER_TEST_DATA) + "/models/" + name;
}

inline std::unique_ptr<Model> load_fixture_model(const std::string& name, Backend& backend) {
  LoadOptions options;
  options.progress = false;
  return load_model(fixture_model_dir(name), backend, options);
}

}  // namespace dsinfer
