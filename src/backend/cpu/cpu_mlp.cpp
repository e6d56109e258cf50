// CPU reference SwiGLU MLP and routed-expert evaluation.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

namespace {

inline float silu(float v) {
  return v / (1.0f + std::exp(-v));
}

// out[M, H] (+)= down(silu(gate x) * up x) for rows x [M, H]; serial when `serial`.
void swiglu_rows(int64_t M, const float* x, const MlpWeights& w, float* out, bool serial) {
  const int64_t H = w.gate.in_features(), I = w.gate.out_features();
  std::vector<float> g(M * I), u(M * I);
  auto gemm = serial ? cpu::gemm_nt_serial : cpu::gemm_nt;
  gemm(M, I, H, x, H, w.gate.weight.f32(), H, g.data(), I, w.gate.bias ? w.gate.bias.f32() : nullptr, false);
  gemm(M, I, H, x, H, w.up.weight.f32(), H, u.data(), I, w.up.bias ? w.up.bias.f32() : nullptr, false);
  const float limit = w.swiglu_limit;
  for (int64_t i = 0; i < M * I; ++i) {
    float gv = g[i], uv = u[i];
    if (limit > 0.0f) {
      gv = std::min(gv, limit);
      uv = std::clamp(uv, -limit, limit);
    }
    g[i] = silu(gv) * uv;
  }
  gemm(M, H, I, g.data(), I, w.down.weight.f32(), I, out, H, w.down.bias ? w.down.bias.f32() : nullptr,
       false);
}

}  // namespace

Tensor CpuBackend::mlp(const Tensor& x, const MlpWeights& w) {
  const int64_t H = x.dim(-1), M = x.numel() / H;
  DSI_CHECK(w.gate.in_features() == H, "mlp: input has ", H, " features, weights expect ",
            w.gate.in_features());
  Tensor out = Tensor::empty(DType::F32, x.shape());  // [T, H]
  swiglu_rows(M, x.f32(), w, out.f32(), false);
  return out;
}

Tensor CpuBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                               const std::vector<MlpWeights>& experts) {
  // x [T, H], ids [T, k] I32, weights [T, k] F32 -> [T, H]
  const int64_t T = x.dim(0), H = x.dim(1), K = ids.dim(1);
  const int64_t E = static_cast<int64_t>(experts.size());
  // Group (token, slot) pairs by expert so each expert runs one GEMM over its tokens.
  std::vector<std::vector<int64_t>> by_expert(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      int32_t e = ids.data<int32_t>()[t * K + k];
      DSI_CHECK(e >= 0 && e < E, "moe: expert id ", e, " out of range");
      by_expert[e].push_back(t * K + k);
    }
  }
  // Each (token, slot) gets its own output row; rows are summed per token in slot order afterwards.
  std::vector<float> rows(static_cast<size_t>(T * K * H), 0.0f);
  const bool parallel =
      static_cast<double>(T) * K * 3 * H * (E ? experts[0].gate.out_features() : 0) > (1 << 18);
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t e = 0; e < E; ++e) {
    const auto& pairs = by_expert[e];
    if (pairs.empty()) continue;
    const int64_t M = static_cast<int64_t>(pairs.size());
    std::vector<float> xin(M * H), yout(M * H);
    for (int64_t i = 0; i < M; ++i) std::memcpy(&xin[i * H], x.f32() + (pairs[i] / K) * H, H * sizeof(float));
    swiglu_rows(M, xin.data(), experts[e], yout.data(), true);
    for (int64_t i = 0; i < M; ++i) std::memcpy(&rows[pairs[i] * H], &yout[i * H], H * sizeof(float));
  }
  Tensor out = Tensor::zeros(DType::F32, {T, H});
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.f32() + t * H;
    for (int64_t k = 0; k < K; ++k) {
      const float wk = weights.f32()[t * K + k];
      const float* r = &rows[(t * K + k) * H];
      for (int64_t i = 0; i < H; ++i) o[i] += wk * r[i];
    }
  }
  return out;
}

}  // namespace dsinfer
