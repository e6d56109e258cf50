// CPU reference DeepSeek-V4 manifold-constrained hyper-connections: stream expansion, the pre/post/comb
// weights (comb projected onto doubly-stochastic matrices by Sinkhorn-Knopp), the write-back and the head's
// final collapse, in float32 as transformers' DeepseekV4HyperConnection / DeepseekV4HyperHead compute them.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

namespace {

inline float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

// mixes [T, M] = rms_normalised(x viewed [T, n * H]) @ fn^T (unweighted RMSNorm with norm_eps).
std::vector<float> hc_mixes(const Tensor& x, const Tensor& fn, float norm_eps) {
  const int64_t T = x.dim(0), F = x.numel() / std::max<int64_t>(T, 1), M = fn.dim(0);
  DSI_CHECK(fn.dim(1) == F, "hyper-connection: fn expects ", fn.dim(1), " inputs, streams have ", F);
  std::vector<float> normed(static_cast<size_t>(T * F)), mixes(static_cast<size_t>(T * M));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x.f32() + t * F;
    float ss = 0.0f;
    for (int64_t i = 0; i < F; ++i) ss += row[i] * row[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(F) + norm_eps);
    for (int64_t i = 0; i < F; ++i) normed[t * F + i] = row[i] * inv;
  }
  cpu::gemm_nt(T, M, F, normed.data(), F, fn.f32(), F, mixes.data(), M);
  return mixes;
}

// Sinkhorn-Knopp on one n x n matrix (row-major): columns first, then `iters - 1` row/column rounds.
void sinkhorn(float* m, int64_t n, int64_t iters, float eps) {
  auto norm_cols = [&]() {
    for (int64_t c = 0; c < n; ++c) {
      float s = 0.0f;
      for (int64_t r = 0; r < n; ++r) s += m[r * n + c];
      for (int64_t r = 0; r < n; ++r) m[r * n + c] /= (s + eps);
    }
  };
  auto norm_rows = [&]() {
    for (int64_t r = 0; r < n; ++r) {
      float s = 0.0f;
      for (int64_t c = 0; c < n; ++c) s += m[r * n + c];
      for (int64_t c = 0; c < n; ++c) m[r * n + c] /= (s + eps);
    }
  };
  norm_cols();
  for (int64_t i = 0; i + 1 < iters; ++i) {
    norm_rows();
    norm_cols();
  }
}

// sum_j w[j] * x[j] over the n streams of one token.
void collapse(const float* x, const float* w, int64_t n, int64_t H, float* out) {
  for (int64_t i = 0; i < H; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float wj = w[j];
    const float* xj = x + j * H;
    for (int64_t i = 0; i < H; ++i) out[i] += wj * xj[i];
  }
}

}  // namespace

Tensor CpuBackend::hc_expand(const Tensor& x, int64_t n) {
  const int64_t T = x.dim(0), H = x.dim(1);
  Tensor out = Tensor::empty(DType::F32, {T, n, H});  // [T, n, H]
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(out.f32() + (t * n + j) * H, x.f32() + t * H, H * sizeof(float));
  return out;
}

Tensor CpuBackend::hc_pre(const Tensor& x, const HyperConnWeights& w, int64_t iters, float hc_eps,
                          float norm_eps, Tensor* post, Tensor* comb) {
  // x [T, n, H] -> collapsed [T, H], post [T, n], comb [T, n, n]
  DSI_CHECK(x.ndim() == 3, "hc_pre: expected streams [T, n, H], got ", shape_str(x.shape()));
  const int64_t T = x.dim(0), n = x.dim(1), H = x.dim(2), M = (2 + n) * n;
  DSI_CHECK(w.fn.dim(0) == M && w.base.numel() == M && w.scale.numel() == 3, "hc_pre: weights for ",
            w.fn.dim(0), " mixes, ", n, " streams need ", M);
  const std::vector<float> mixes = hc_mixes(x, w.fn, norm_eps);  // [T, M]
  const float* base = w.base.f32();
  const float* scale = w.scale.f32();
  Tensor out = Tensor::empty(DType::F32, {T, H});
  *post = Tensor::empty(DType::F32, {T, n});
  *comb = Tensor::empty(DType::F32, {T, n, n});
  for (int64_t t = 0; t < T; ++t) {
    const float* m = mixes.data() + t * M;
    std::vector<float> pre(n);
    for (int64_t j = 0; j < n; ++j) {
      pre[j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps;
      post->f32()[t * n + j] = 2.0f * sigmoid(m[n + j] * scale[1] + base[n + j]);
    }
    float* c = comb->f32() + t * n * n;
    for (int64_t r = 0; r < n; ++r) {  // row-wise softmax, then + eps
      float* row = c + r * n;
      float mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        row[k] = m[2 * n + r * n + k] * scale[2] + base[2 * n + r * n + k];
        mx = std::max(mx, row[k]);
      }
      float sum = 0.0f;
      for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - mx));
      for (int64_t k = 0; k < n; ++k) row[k] = row[k] / sum + hc_eps;
    }
    sinkhorn(c, n, iters, hc_eps);
    collapse(x.f32() + t * n * H, pre.data(), n, H, out.f32() + t * H);
  }
  return out;
}

Tensor CpuBackend::hc_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb) {
  // x [T, n, H], y [T, H], post [T, n], comb [T, n, n] -> [T, n, H]
  const int64_t T = x.dim(0), n = x.dim(1), H = x.dim(2);
  DSI_CHECK(y.numel() == T * H && post.numel() == T * n && comb.numel() == T * n * n,
            "hc_post: shape mismatch");
  Tensor out = Tensor::empty(DType::F32, {T, n, H});
  cpu::openmp_thread_setup();
#pragma omp parallel for if (T > 16)
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.f32() + t * n * H;
    const float* yt = y.f32() + t * H;
    const float* c = comb.f32() + t * n * n;
    for (int64_t k = 0; k < n; ++k) {
      float* o = out.f32() + (t * n + k) * H;
      const float pk = post.f32()[t * n + k];
      for (int64_t i = 0; i < H; ++i) o[i] = pk * yt[i];
      for (int64_t j = 0; j < n; ++j) {
        const float cj = c[j * n + k];
        const float* xj = xt + j * H;
        for (int64_t i = 0; i < H; ++i) o[i] += cj * xj[i];
      }
    }
  }
  return out;
}

Tensor CpuBackend::hc_head(const Tensor& x, const HyperConnWeights& w, float hc_eps, float norm_eps) {
  // x [T, n, H] -> [T, H]
  DSI_CHECK(x.ndim() == 3, "hc_head: expected streams [T, n, H], got ", shape_str(x.shape()));
  const int64_t T = x.dim(0), n = x.dim(1), H = x.dim(2);
  DSI_CHECK(w.fn.dim(0) == n && w.base.numel() == n && w.scale.numel() == 1, "hc_head: weights for ",
            w.fn.dim(0), " streams, input has ", n);
  const std::vector<float> mixes = hc_mixes(x, w.fn, norm_eps);  // [T, n]
  Tensor out = Tensor::empty(DType::F32, {T, H});
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> pre(n);
    for (int64_t j = 0; j < n; ++j)
      pre[j] = sigmoid(mixes[t * n + j] * w.scale.f32()[0] + w.base.f32()[j]) + hc_eps;
    collapse(x.f32() + t * n * H, pre.data(), n, H, out.f32() + t * H);
  }
  return out;
}

}  // namespace dsinfer
