// DeepSeek-V3.2 and V4 end to end on the GPU against the CPU reference set to the GPU's indexer tie rule
// (the lowest positions among exactly tied keys, torch.topk's on CUDA) and to its bf16 cache values. The
// fixtures' goldens were made by torch on the CPU, whose top-k keeps other tied keys (their 2-head indexers
// tie often), and from float32 caches: rounding the cached keys to bf16 alone moves which rows the indexer
// keeps and with them the logits of 150- and 300-token prompts by rel L2 2-6% (the CPU against itself). So
// this is the model-level check of their GPU paths: prompts of 7, 150 and 300 tokens, then greedy
// decode steps teacher-forced with the CPU's tokens, every step's logits within bf16 tolerance. Runs on a
// GPU for the architectures the op registry lets run there; skips elsewhere (CI compiles it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cuda_test_models.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/model_config.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/backend_factory.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {
namespace {

class CudaIndexTiesModelTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Models, CudaIndexTiesModelTest,
                         ::testing::Values("tiny-deepseek-v32", "tiny-deepseek-v4",
                                           "small-deepseek-v4-fp8-fp4"),
                         [](const auto& info) { return model_param_name(info.param); });

#ifdef DSINFER_HAVE_CUDA
double rel_l2(const Tensor& a, const Tensor& b) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d += std::pow(double(a.f32()[i]) - b.f32()[i], 2);
    n += std::pow(double(b.f32()[i]), 2);
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

int32_t argmax(const Tensor& row) {
  return static_cast<int32_t>(std::max_element(row.f32(), row.f32() + row.numel()) - row.f32());
}
#endif

TEST_P(CudaIndexTiesModelTest, GpuMatchesTheCpuWithTheSameTieRule) {
#ifdef DSINFER_HAVE_CUDA
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  const std::string dir = cuda_test_model_dir(GetParam());
  if (!cuda_runs(load_model_config(dir))) GTEST_SKIP() << GetParam() << " does not run on the GPU yet";
  CpuBackend cpu;
  cpu.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  cpu.set_bf16_cache_values(true);  // the GPU's bf16 cache: the same stored keys, so the same selections
  std::unique_ptr<Backend> gpu = make_backend("cuda", dir);
  LoadOptions load;
  load.progress = false;
  auto cpu_model = load_model(dir, cpu, load);
  auto gpu_model = load_model(dir, *gpu, load);
  const int64_t V = cpu_model->config().vocab_size;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(V) - 1);
  for (int64_t n : {7, 150, 300}) {
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int32_t& t : prompt) t = token(rng);
    SequenceRunner on_cpu(*cpu_model, 512, 16, 1), on_gpu(*gpu_model, 512, 16, 2);
    Tensor ref = on_cpu.append(prompt, /*all_logits=*/true);  // [n, vocab]
    Tensor got = on_gpu.append(prompt, /*all_logits=*/true);
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_LT(rel_l2(got, ref), 2e-2) << GetParam() << " prompt of " << n;
    for (int step = 0; step < 12; ++step) {  // decode, fed the CPU's greedy token
      const Tensor last = ref.rows(ref.dim(0) - 1, ref.dim(0));
      const int32_t next = argmax(last);
      ref = on_cpu.append({next});
      got = on_gpu.append({next});
      EXPECT_LT(rel_l2(got, ref), 2e-2) << GetParam() << " prompt of " << n << " decode step " << step;
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace dsinfer
