// CUDA kernels against the CPU reference on random inputs (runs where a GPU is visible; CI compiles it and
// skips). Weights are bf16 on the GPU; the CPU op gets the same bf16 values widened to float32, so the
// results agree to float32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/elementwise_kernels.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  }
  std::mt19937 rng{20261130};
  Tensor random_f32(Shape shape) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
    return t;
  }
  // bf16 bits of `values` and the same values widened back to float32.
  static std::pair<Tensor, Tensor> as_bf16(const Tensor& values) {
    Tensor bits = Tensor::empty(DType::BF16, values.shape());
    Tensor widened = Tensor::empty(DType::F32, values.shape());
    for (int64_t i = 0; i < values.numel(); ++i) {
      bits.data<uint16_t>()[i] = f32_to_bf16(values.f32()[i]);
      widened.f32()[i] = bf16_to_f32(bits.data<uint16_t>()[i]);
    }
    return {bits, widened};
  }
  static double rel_err(const Tensor& a, const Tensor& b) {
    double d = 0, n = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      d += std::pow(double(a.f32()[i]) - b.f32()[i], 2);
      n += std::pow(double(b.f32()[i]), 2);
    }
    return std::sqrt(d / std::max(n, 1e-30));
  }
  CpuBackend cpu;
};

TEST_F(CudaOpsTest, EmbedMatchesCpu) {
  for (auto [V, H, T] : {std::tuple<int64_t, int64_t, int64_t>{300, 64, 7}, {4096, 257, 33}}) {
    auto [bits, widened] = as_bf16(random_f32({V, H}));
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % V);
    Tensor ids_host = Tensor::empty(DType::I32, {T});
    std::copy(ids.begin(), ids.end(), ids_host.data<int32_t>());
    Tensor table = cuda::to_device(bits), dev_ids = cuda::to_device(ids_host);
    Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H});
    cuda::launch_embed(table.data<uint16_t>(), dev_ids.data<int32_t>(), out.data<float>(), T, H, V);
    EXPECT_EQ(rel_err(cuda::to_host(out), cpu.embed(widened, ids)), 0.0);
  }
}

TEST_F(CudaOpsTest, EmbedRejectsIdsOutsideTheVocabulary) {
  auto [bits, widened] = as_bf16(random_f32({10, 8}));
  Tensor ids_host = Tensor::empty(DType::I32, {2});
  ids_host.data<int32_t>()[0] = 3;
  ids_host.data<int32_t>()[1] = 10;
  Tensor table = cuda::to_device(bits), dev_ids = cuda::to_device(ids_host);
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {2, 8});
  EXPECT_THROW(cuda::launch_embed(table.data<uint16_t>(), dev_ids.data<int32_t>(), out.data<float>(), 2, 8, 10),
               Error);
}

TEST_F(CudaOpsTest, RmsNormMatchesCpu) {
  for (auto [T, H] : {std::pair<int64_t, int64_t>{1, 64}, {5, 4096}, {130, 7168}, {3, 100}}) {
    Tensor x = random_f32({T, H});
    auto [w_bits, w] = as_bf16(random_f32({H}));
    Tensor dx = cuda::to_device(x), dw = cuda::to_device(w_bits);
    Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H});
    cuda::launch_rms_norm(dx.data<float>(), dw.data<uint16_t>(), out.data<float>(), T, H, 1e-6f);
    EXPECT_LT(rel_err(cuda::to_host(out), cpu.rms_norm(x, w, 1e-6f)), 1e-6) << T << "x" << H;
  }
}

TEST_F(CudaOpsTest, SiluMulMatchesReference) {
  const int64_t n = 100003;
  Tensor g = random_f32({n}), u = random_f32({n});
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {n});
  Tensor dg = cuda::to_device(g), du = cuda::to_device(u);
  cuda::launch_silu_mul(dg.data<float>(), du.data<float>(), out.data<float>(), n);
  Tensor ref = Tensor::empty(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) ref.f32()[i] = g.f32()[i] / (1.0f + std::exp(-g.f32()[i])) * u.f32()[i];
  EXPECT_LT(rel_err(cuda::to_host(out), ref), 1e-6);
}

TEST_F(CudaOpsTest, DeviceTensorsRefuseHostAccess) {
  Tensor d = cuda::to_device(random_f32({4}));
  EXPECT_EQ(d.device(), Device::kCuda);
  EXPECT_THROW(d.f32(), Error);
  EXPECT_THROW(d.to_f32(), Error);
  EXPECT_THROW(d.clone(), Error);
}

#else

TEST(CudaOpsTest, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace dsinfer
