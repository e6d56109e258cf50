// CPU reference sparse MLA (DeepSeek-V3.2 DSA): absorbed MLA over an explicit list of cache positions per
// query token, visited in the order given (ascending from indexer_topk, as the dense kernel does).
#include <vector>

#include "backend/cpu/cpu_attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

Tensor CpuBackend::attention_mla_sparse(const Tensor& q_lat, const Tensor& q_pe, const KvCache& cache,
                                        int64_t layer, const BatchPlan& plan, const Tensor& selected,
                                        float scale) {
  // q_lat [T, H, R], q_pe [T, H, P], selected [T, K] (I32) -> [T, H, R]
  const int64_t T = q_lat.dim(0), H = q_lat.dim(1), R = q_lat.dim(2), P = q_pe.dim(2);
  DSI_CHECK(cache.width(layer) == R + P, "attention_mla_sparse: cache row width ", cache.width(layer),
            " != ", R + P);
  DSI_CHECK(selected.dtype() == DType::I32 && selected.ndim() == 2 && selected.dim(0) == T,
            "attention_mla_sparse: selected must be I32 [", T, ", K], got ", shape_str(selected.shape()));
  const int64_t K = selected.dim(1);
  const std::vector<int32_t> seq_of = cpu::token_seq(plan);
  for (int64_t t = 0; t < T; ++t) {  // checked here: no exception may leave the parallel loop
    const int32_t* sel = selected.data<int32_t>() + t * K;
    for (int64_t i = 0; i < K; ++i) {
      DSI_CHECK(sel[i] < plan.context_lens[seq_of[t]], "attention_mla_sparse: position ", sel[i],
                " is beyond the sequence's ", plan.context_lens[seq_of[t]], " cached tokens");
    }
  }
  Tensor out = Tensor::zeros(DType::F32, {T, H, R});
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic)
  for (int64_t th = 0; th < T * H; ++th) {
    const int64_t t = th / H, h = th % H;
    const int32_t s = seq_of[t];
    const int32_t* sel = selected.data<int32_t>() + t * K;
    std::vector<const float*> rows;  // the selected cache rows [n][R + P]
    rows.reserve(K);
    for (int64_t i = 0; i < K; ++i) {
      if (sel[i] < 0) continue;
      rows.push_back(cache.slot(layer, plan.slot_of(s, sel[i])));
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0) continue;  // nothing to attend to: zero output
    std::vector<float> scores(n);
    const float* ql = q_lat.f32() + (t * H + h) * R;
    const float* qp = q_pe.f32() + (t * H + h) * P;
    for (int64_t j = 0; j < n; ++j)
      scores[j] = (cpu::dot(ql, rows[j], R) + cpu::dot(qp, rows[j] + R, P)) * scale;
    cpu::softmax_inplace(scores.data(), n);
    float* o = out.f32() + (t * H + h) * R;
    for (int64_t j = 0; j < n; ++j) {
      const float p = scores[j];
      for (int64_t i = 0; i < R; ++i) o[i] += p * rows[j][i];
    }
  }
  return out;
}

}  // namespace dsinfer
