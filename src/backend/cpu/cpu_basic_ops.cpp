// CPU reference: embedding, RMSNorm, Linear, residual add, per-head matmul, row gather.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

Tensor CpuBackend::embed(const Tensor& table, const std::vector<int32_t>& ids) {
  const int64_t V = table.dim(0), H = table.dim(1);
  Tensor out = Tensor::empty(DType::F32, {static_cast<int64_t>(ids.size()), H});  // [T, H]
  for (size_t t = 0; t < ids.size(); ++t) {
    DSI_CHECK(ids[t] >= 0 && ids[t] < V, "token id ", ids[t], " is outside the vocabulary [0, ", V, ")");
    std::memcpy(out.f32() + t * H, table.f32() + ids[t] * H, H * sizeof(float));
  }
  return out;
}

Tensor CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  const int64_t H = x.dim(-1), T = x.numel() / H;
  DSI_CHECK(weight.numel() == H, "rms_norm: weight has ", weight.numel(), " values for rows of ", H);
  Tensor out = Tensor::empty(DType::F32, x.shape());
  const float* w = weight.f32();
  cpu::openmp_thread_setup();
#pragma omp parallel for if (T > 16)
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x.f32() + t * H;
    float* o = out.f32() + t * H;
    float ss = 0.0f;
    for (int64_t i = 0; i < H; ++i) ss += row[i] * row[i];
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    for (int64_t i = 0; i < H; ++i) o[i] = w[i] * (row[i] * inv);
  }
  return out;
}

Tensor CpuBackend::linear(const Tensor& x, const Linear& w) {
  const int64_t K = w.in_features(), N = w.out_features();
  DSI_CHECK(x.dim(-1) == K, "linear: input has ", x.dim(-1), " features, weight expects ", K);
  const int64_t M = x.numel() / K;
  Shape shape = x.shape();
  shape.back() = N;
  Tensor out = Tensor::empty(DType::F32, shape);  // [..., N]
  cpu::gemm_nt(M, N, K, x.f32(), K, w.weight.f32(), K, out.f32(), N, w.bias ? w.bias.f32() : nullptr);
  return out;
}

void CpuBackend::add_inplace(Tensor& a, const Tensor& b) {
  DSI_CHECK(a.numel() == b.numel(), "add: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  float* pa = a.f32();
  const float* pb = b.f32();
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) pa[i] += pb[i];
}

Tensor CpuBackend::head_matmul(const Tensor& x, const Tensor& w, bool transpose_w) {
  // x [T, H, A]; w [H, B, A] (y = w x) or [H, A, B] with transpose_w (y = w^T x).
  const int64_t T = x.dim(0), H = x.dim(1), A = x.dim(2);
  DSI_CHECK(w.dim(0) == H, "head_matmul: weight has ", w.dim(0), " heads, input ", H);
  const int64_t B = transpose_w ? w.dim(2) : w.dim(1);
  DSI_CHECK((transpose_w ? w.dim(1) : w.dim(2)) == A, "head_matmul: inner dimension mismatch");
  Tensor out = Tensor::zeros(DType::F32, {T, H, B});  // [T, H, B]
  cpu::openmp_thread_setup();
#pragma omp parallel for if (T * H * A * B > 65536)
  for (int64_t h = 0; h < H; ++h) {
    const float* wh = w.f32() + h * A * B;
    if (!transpose_w) {
      // [T, A] x [B, A]^T with row stride H*A.
      cpu::gemm_nt_serial(T, B, A, x.f32() + h * A, H * A, wh, A, out.f32() + h * B, H * B);
    } else {
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x.f32() + (t * H + h) * A;
        float* ot = out.f32() + (t * H + h) * B;
        for (int64_t a = 0; a < A; ++a) {
          const float xa = xt[a];
          const float* wrow = wh + a * B;
          for (int64_t b = 0; b < B; ++b) ot[b] += xa * wrow[b];
        }
      }
    }
  }
  return out;
}

Tensor CpuBackend::gather_rows(const Tensor& x, const std::vector<int32_t>& rows) {
  const int64_t H = x.numel() / x.dim(0);
  Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(DType::F32, shape);
  for (size_t r = 0; r < rows.size(); ++r) {
    DSI_CHECK(rows[r] >= 0 && rows[r] < x.dim(0), "gather_rows: row ", rows[r], " out of range");
    std::memcpy(out.f32() + r * H, x.f32() + rows[r] * H, H * sizeof(float));
  }
  return out;
}

}  // namespace dsinfer
