// CPU reference LayerNorm (torch.nn.LayerNorm: biased variance, affine weight and bias).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

Tensor CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  // x [T, H] (any leading shape) -> same shape, normalised over the last dimension.
  const int64_t H = x.dim(-1), T = x.numel() / H;
  DSI_CHECK(weight.numel() == H, "layer_norm: weight has ", weight.numel(), " values for rows of ", H);
  DSI_CHECK(!bias || bias.numel() == H, "layer_norm: bias has ", bias.numel(), " values for rows of ", H);
  Tensor out = Tensor::empty(DType::F32, x.shape());
  const float* w = weight.f32();
  const float* b = bias ? bias.f32() : nullptr;
  cpu::openmp_thread_setup();
#pragma omp parallel for if (T > 16)
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x.f32() + t * H;
    float* o = out.f32() + t * H;
    double sum = 0.0;
    for (int64_t i = 0; i < H; ++i) sum += row[i];
    const double mean = sum / static_cast<double>(H);
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i) ss += (row[i] - mean) * (row[i] - mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(H) + eps));
    const float m = static_cast<float>(mean);
    for (int64_t i = 0; i < H; ++i) o[i] = (row[i] - m) * inv * w[i] + (b ? b[i] : 0.0f);
  }
  return out;
}

}  // namespace dsinfer
