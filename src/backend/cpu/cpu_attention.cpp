// CPU reference attention over the paged KV cache: cache writes, causal GQA and absorbed MLA.
// Query token t of a sequence attends to cache positions [0, positions[t]].
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

namespace {

// Below this many multiply-adds an op runs on one thread: an OpenMP region costs more than it saves.
constexpr double kParallelWork = 1 << 18;

}  // namespace

void CpuBackend::write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a,
                          const Tensor& b) {
  const int64_t T = plan.num_tokens();
  const int64_t wa = a.numel() / std::max<int64_t>(T, 1);
  const int64_t wb = b ? b.numel() / std::max<int64_t>(T, 1) : 0;
  DSI_CHECK(wa + wb == cache.width(layer), "write_kv: rows of ", wa + wb, " values for a cache row of ",
            cache.width(layer));
  for (int64_t t = 0; t < T; ++t) {
    float* dst = cache.slot(layer, plan.slot_mapping[t]);
    std::memcpy(dst, a.f32() + t * wa, wa * sizeof(float));
    if (wb) std::memcpy(dst + wa, b.f32() + t * wb, wb * sizeof(float));
    round_cache_row(dst, wa + wb);
  }
}

void CpuBackend::round_cache_row(float* row, int64_t n) const {
  if (!bf16_cache_values_) return;
  for (int64_t i = 0; i < n; ++i) row[i] = bf16_to_f32(f32_to_bf16(row[i]));
}

Tensor CpuBackend::attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                                 int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) {
  // q [T, Hq, D] -> out [T, Hq * Dv]
  const int64_t T = q.dim(0), Hq = q.dim(1), D = head_dim, Dv = v_head_dim;
  DSI_CHECK(q.dim(2) == D && Hq % kv_heads == 0, "attention_gqa: bad query shape ", shape_str(q.shape()));
  DSI_CHECK(cache.width(layer) == kv_heads * (D + Dv), "attention_gqa: cache row width mismatch");
  const int64_t group = Hq / kv_heads;
  const std::vector<int32_t> seq_of = cpu::token_seq(plan);
  Tensor out = Tensor::zeros(DType::F32, {T, Hq * Dv});
  const bool parallel =
      static_cast<double>(T) * Hq * (plan.positions.empty() ? 0 : plan.positions.back() + 1) * (D + Dv) >
      kParallelWork;
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t th = 0; th < T * Hq; ++th) {
    const int64_t t = th / Hq, h = th % Hq, kvh = h / group;
    const int32_t s = seq_of[t];
    const int64_t n = static_cast<int64_t>(plan.positions[t]) + 1;
    std::vector<float> scores(n);
    const float* qv = q.f32() + (t * Hq + h) * D;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = cache.slot(layer, plan.slot_of(s, j)) + kvh * D;
      scores[j] = cpu::dot(qv, k, D) * scale;
    }
    cpu::softmax_inplace(scores.data(), n);
    float* o = out.f32() + t * Hq * Dv + h * Dv;
    for (int64_t j = 0; j < n; ++j) {
      const float* v = cache.slot(layer, plan.slot_of(s, j)) + kv_heads * D + kvh * Dv;
      const float p = scores[j];
      for (int64_t i = 0; i < Dv; ++i) o[i] += p * v[i];
    }
  }
  return out;
}

Tensor CpuBackend::attention_mla(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache, int64_t layer,
                                 const BatchPlan& plan, float scale) {
  // q_lat [T, H, R], q_pe [T, H, P] -> [T, H, R]
  const int64_t T = q_lat.dim(0), H = q_lat.dim(1), R = q_lat.dim(2), P = q_pe.dim(2);
  DSI_CHECK(cache.width(layer) == R + P, "attention_mla: cache row width ", cache.width(layer),
            " != ", R + P);
  const std::vector<int32_t> seq_of = cpu::token_seq(plan);
  Tensor out = Tensor::zeros(DType::F32, {T, H, R});
  const bool parallel =
      static_cast<double>(T) * H * (plan.positions.empty() ? 0 : plan.positions.back() + 1) * (2 * R + P) >
      kParallelWork;
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t th = 0; th < T * H; ++th) {
    const int64_t t = th / H, h = th % H;
    const int32_t s = seq_of[t];
    const int64_t n = static_cast<int64_t>(plan.positions[t]) + 1;
    std::vector<float> scores(n);
    const float* ql = q_lat.f32() + (t * H + h) * R;
    const float* qp = q_pe.f32() + (t * H + h) * P;
    for (int64_t j = 0; j < n; ++j) {
      const float* row = cache.slot(layer, plan.slot_of(s, j));
      scores[j] = (cpu::dot(ql, row, R) + cpu::dot(qp, row + R, P)) * scale;
    }
    cpu::softmax_inplace(scores.data(), n);
    float* o = out.f32() + (t * H + h) * R;
    for (int64_t j = 0; j < n; ++j) {
      const float* row = cache.slot(layer, plan.slot_of(s, j));
      const float p = scores[j];
      for (int64_t i = 0; i < R; ++i) o[i] += p * row[i];
    }
  }
  return out;
}

}  // namespace dsinfer
