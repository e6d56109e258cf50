// Dummy weights: every architecture loads from config.json alone, runs a finite forward pass, and the same
// seed gives the same model.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace dsinfer {
namespace {

class DummyWeightsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DummyWeightsTest, LoadsAndRunsFromConfigAlone) {
  const std::string dir = std::string(DSINFER_TEST_DATA) + "/models/" + GetParam();
  CpuBackend backend;
  LoadOptions options;
  options.progress = false;
  options.dummy_weights = true;
  options.dummy_seed = 5;
  auto a = load_model(dir, backend, options);
  auto b = load_model(dir, backend, options);
  SequenceRunner ra(*a), rb(*b);
  Tensor la = ra.append({1, 2, 3, 4});
  Tensor lb = rb.append({1, 2, 3, 4});
  ASSERT_EQ(la.dim(1), a->config().vocab_size);
  for (int64_t i = 0; i < la.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(la.f32()[i]));
    ASSERT_EQ(la.f32()[i], lb.f32()[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DummyWeightsTest,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-deepseek-v2", "tiny-deepseek-v3",
                                           "small-deepseek-v3-fp8"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

}  // namespace
}  // namespace dsinfer
