// Dummy weights: every architecture loads from config.json alone, runs a finite forward pass, and the same
// seed gives the same model; weights that cannot fit on a device are refused before loading.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/weight_loader.h"

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

TEST(DummyWeightValuesTest, AreBf16ExactSoTheCpuAndGpuHoldTheSameModel) {
  const ModelConfig config = load_model_config(std::string(DSINFER_TEST_DATA) + "/models/tiny-deepseek-v3");
  WeightLoader loader(config, 3);
  // A small matrix and one large enough for the parallel fill (every element written: no zeroing pass).
  for (const Shape& shape : {Shape{64, 48}, Shape{2048, 1030}}) {
    const Tensor w = loader.get_host("model.layers.0.mlp.gate_proj.weight", shape);
    int64_t nonzero = 0;
    const float bound = 1.0f / std::sqrt(static_cast<float>(shape[1])) * (1.0f + 1.0f / 256);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const float v = w.f32()[i];
      ASSERT_EQ(v, bf16_to_f32(f32_to_bf16(v))) << "element " << i;
      ASSERT_LE(std::abs(v), bound) << "element " << i;  // within rounding of the bound
      nonzero += v != 0.0f;
    }
    EXPECT_GT(nonzero, w.numel() * 9 / 10);  // random values, not zeros
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

namespace dsinfer {
namespace {

// A device backend with little free memory: loading refuses before reading any weight, naming the sizes.
class SmallDeviceBackend : public CpuBackend {
 public:
  Device device() const override { return Device::kCuda; }
  int64_t free_memory_bytes() const override { return 4096; }
};

TEST(ModelFitTest, WeightsLargerThanTheFreeDeviceMemoryAreAClearError) {
  SmallDeviceBackend backend;
  LoadOptions options;
  options.progress = false;
  options.dummy_weights = true;
  try {
    load_model(std::string(DSINFER_TEST_DATA) + "/models/tiny-llama", backend, options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model does not fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB free"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsinfer
