// The fixture of the CUDA op tests (cuda_ops_test.cpp, cuda_linear_ops_test.cpp): skips without a GPU,
// random float32 values and their bf16 bits, relative L2 error, a CPU reference backend.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "scrambled_plan.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/backend_factory.h"
#include "backend/cuda/arch_path.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/host_reads.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#endif

namespace dsinfer::cuda_ops_test {

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

#endif

}  // namespace dsinfer::cuda_ops_test
