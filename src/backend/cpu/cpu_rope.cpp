// CPU reference rotary embedding (half and interleaved layouts, optional inverse rotation).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

void CpuBackend::rope(Tensor& x, const std::vector<int32_t>& positions, const RopeTable& table,
                      int64_t offset, RopeLayout layout, bool inverse) {
  // x [T, heads, head_dim]; rotate dims [offset, offset + rope_dim).
  const int64_t T = x.dim(0), heads = x.dim(1), D = x.dim(2), R = table.rope_dim, half = R / 2;
  DSI_CHECK(static_cast<int64_t>(positions.size()) == T, "rope: ", positions.size(), " positions for ", T,
            " tokens");
  DSI_CHECK(offset + R <= D, "rope: rope dims exceed the head dimension");
  const float sign = inverse ? -1.0f : 1.0f;
  cpu::openmp_thread_setup();
#pragma omp parallel for if (T > 16)
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> cs(half), sn(half);
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      float freq = table.inv_freq[i] * pos;  // float32 product as transformers computes it
      cs[i] = std::cos(freq) * table.attention_scaling;
      sn[i] = sign * std::sin(freq) * table.attention_scaling;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.f32() + (t * heads + h) * D + offset;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = layout == RopeLayout::kHalf ? i : 2 * i;
        const int64_t b = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x1 * cs[i] + x0 * sn[i];
      }
    }
  }
}

}  // namespace dsinfer
