// CPU reference DeepSeek-V4 attention pieces over the paged cache: compressor window pooling, compressed-row
// writes, the lightning indexer's causal top-k and the sliding-window + compressed shared-KV attention with
// per-head sinks. Query t of a sequence sees raw positions (pos - window, pos] and compressed rows
// j < (pos + 1) / ratio (a row is visible once its whole window has been seen).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

namespace {

std::vector<int32_t> seq_of_tokens(const BatchPlan& plan) {
  std::vector<int32_t> seq(plan.num_tokens());
  for (int32_t s = 0; s < plan.num_seqs(); ++s)
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) seq[t] = s;
  return seq;
}

}  // namespace

Tensor CpuBackend::compress_rows(const KvCache& cache, int64_t in_layer, const BatchPlan& plan,
                                 const CompressedRows& rows, const Tensor& ape, int64_t ratio, bool overlap) {
  const int64_t c = overlap ? 2 : 1, width = cache.width(in_layer), D = width / (2 * c);
  const int64_t R = static_cast<int64_t>(rows.size());
  DSI_CHECK(width == 2 * c * D && D > 0, "compress_rows: cache rows of ", width,
            " values are not [kv | gate]");
  DSI_CHECK(ape.numel() == ratio * c * D, "compress_rows: ape has ", ape.numel(), " values, expected [",
            ratio, ", ", c * D, "]");
  for (int64_t i = 0; i < R; ++i) {
    DSI_CHECK(rows.seqs[i] >= 0 && rows.seqs[i] < plan.num_seqs() && rows.rows[i] >= 0 &&
                  (rows.rows[i] + 1) * ratio <= plan.context_lens[rows.seqs[i]],
              "compress_rows: window ", rows.rows[i], " of sequence ", rows.seqs[i], " is not closed");
  }
  Tensor out = Tensor::empty(DType::F32, {R, D});  // [R, D]
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic) if (R > 1)
  for (int64_t i = 0; i < R; ++i) {
    const int32_t s = rows.seqs[i];
    const int64_t j = rows.rows[i];
    // Entries in transformers' order: the previous window's first halves (overlap), then this window.
    std::vector<const float*> kv, gate, bias;
    if (overlap && j > 0) {
      for (int64_t k = 0; k < ratio; ++k) {
        const float* row = cache.slot(in_layer, plan.slot_of(s, (j - 1) * ratio + k));
        kv.push_back(row);
        gate.push_back(row + c * D);
        bias.push_back(ape.f32() + k * c * D);
      }
    }
    for (int64_t k = 0; k < ratio; ++k) {
      const float* row = cache.slot(in_layer, plan.slot_of(s, j * ratio + k));
      kv.push_back(row + (c - 1) * D);
      gate.push_back(row + c * D + (c - 1) * D);
      bias.push_back(ape.f32() + k * c * D + (c - 1) * D);
    }
    const size_t n = kv.size();
    std::vector<float> logit(n);
    float* o = out.f32() + i * D;
    for (int64_t d = 0; d < D; ++d) {
      float mx = -INFINITY;
      for (size_t e = 0; e < n; ++e) mx = std::max(mx, logit[e] = gate[e][d] + bias[e][d]);
      float sum = 0.0f;
      for (size_t e = 0; e < n; ++e) sum += (logit[e] = std::exp(logit[e] - mx));
      float acc = 0.0f;
      for (size_t e = 0; e < n; ++e) acc += kv[e][d] * (logit[e] / sum);
      o[d] = acc;
    }
  }
  return out;
}

void CpuBackend::write_compressed(KvCache& cache, int64_t layer, const BatchPlan& plan,
                                  const CompressedRows& rows, const Tensor& values) {
  const int64_t W = cache.width(layer), R = static_cast<int64_t>(rows.size());
  DSI_CHECK(values.numel() == R * W, "write_compressed: ", values.numel(), " values for ", R, " rows of ", W);
  for (int64_t i = 0; i < R; ++i) {
    float* dst = cache.slot(layer, plan.slot_of(rows.seqs[i], rows.rows[i]));
    std::memcpy(dst, values.f32() + i * W, W * sizeof(float));
    round_cache_row(dst, W);
  }
}

Tensor CpuBackend::indexer_topk(const Tensor& q, const Tensor& weights, const KvCache& cache, int64_t layer,
                                const BatchPlan& plan, int64_t ratio, int64_t top_k, float scale,
                                float weights_scale) {
  // q [T, h, d], weights [T, h] -> [T, top_k] I32
  const int64_t T = q.dim(0), Hi = q.dim(1), d = q.dim(2);
  DSI_CHECK(cache.width(layer) == d, "indexer_topk: key rows of ", cache.width(layer), " values, queries of ",
            d);
  DSI_CHECK(weights.numel() == T * Hi, "indexer_topk: weights must be [T, ", Hi, "]");
  const std::vector<int32_t> seq_of = seq_of_tokens(plan);
  Tensor out = Tensor::empty(DType::I32, {T, top_k});
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = seq_of[t];
    const int64_t visible = (static_cast<int64_t>(plan.positions[t]) + 1) / ratio;
    std::vector<float> score(visible, 0.0f);
    for (int64_t j = 0; j < visible; ++j) {
      const float* key = cache.slot(layer, plan.slot_of(s, j));
      float acc = 0.0f;
      for (int64_t h = 0; h < Hi; ++h) {
        const float dot = cpu::dot(q.f32() + (t * Hi + h) * d, key, d);
        acc += (std::max(dot, 0.0f) * scale) * (weights.f32()[t * Hi + h] * weights_scale);
      }
      score[j] = acc;
    }
    // transformers scores every row in the cache (rows not yet visible are -inf), takes torch.topk of
    // min(top_k, rows) and drops the invisible picks. ReLU makes exact ties (zeros) common, so the
    // selection reproduces torch's CPU top-k, which breaks ties the way std::nth_element /
    // std::partial_sort over (value, index) pairs compared by value alone do, over as many rows as a
    // one-shot prefill of the whole prompt holds (so any chunking picks the same rows); or, with
    // IndexTies::kLowestPosition, the lowest rows among tied ones (torch.topk on CUDA).
    const int64_t rows = std::max<int64_t>(plan.prompt_len(s) / ratio, visible);
    std::vector<std::pair<double, int64_t>> queue(rows);
    for (int64_t j = 0; j < rows; ++j)
      queue[j] = {j < visible ? static_cast<double>(score[j]) : -INFINITY, j};
    const int64_t k = std::min(top_k, rows);
    auto greater = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
      return a.first > b.first;
    };
    if (k > 0 && index_ties_ == IndexTies::kLowestPosition) {
      std::partial_sort(queue.begin(), queue.begin() + k, queue.end(),
                        [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
                          return a.first > b.first || (a.first == b.first && a.second < b.second);
                        });
    } else if (k > 0 && k * 64 <= rows) {
      std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
    } else if (k > 0) {
      std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), greater);
    }
    std::vector<int32_t> idx;
    for (int64_t i = 0; i < k; ++i) {
      if (queue[i].second < visible) idx.push_back(static_cast<int32_t>(queue[i].second));
    }
    std::sort(idx.begin(), idx.end());
    int32_t* o = out.data<int32_t>() + t * top_k;
    for (int64_t i = 0; i < top_k; ++i) o[i] = i < static_cast<int64_t>(idx.size()) ? idx[i] : -1;
  }
  return out;
}

Tensor CpuBackend::attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                                int64_t comp_layer, int64_t ratio, const Tensor& selected,
                                const BatchPlan& plan, const Tensor& sinks, float scale) {
  // q [T, H, D] -> [T, H, D]
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  DSI_CHECK(cache.width(window_layer) == D, "attention_v4: window rows of ", cache.width(window_layer),
            " values, heads of ", D);
  DSI_CHECK(comp_layer < 0 || cache.width(comp_layer) == D, "attention_v4: compressed rows must have ", D,
            " values");
  DSI_CHECK(sinks.numel() == H, "attention_v4: ", sinks.numel(), " sink logits for ", H, " heads");
  const int64_t K = selected ? selected.dim(1) : 0;
  DSI_CHECK(!selected || (selected.dtype() == DType::I32 && selected.dim(0) == T),
            "attention_v4: bad selection");
  const std::vector<int32_t> seq_of = seq_of_tokens(plan);
  Tensor out = Tensor::zeros(DType::F32, {T, H, D});
  cpu::openmp_thread_setup();
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = seq_of[t];
    const int64_t pos = plan.positions[t];
    // Keys of this token: the raw window, then the compressed rows it may see.
    std::vector<const float*> keys;
    for (int64_t p = std::max<int64_t>(0, pos - window + 1); p <= pos; ++p)
      keys.push_back(cache.slot(window_layer, plan.slot_of(s, p)));
    if (comp_layer >= 0) {
      const int64_t visible = (pos + 1) / ratio;
      if (selected) {
        for (int64_t i = 0; i < K; ++i) {
          const int32_t j = selected.data<int32_t>()[t * K + i];
          if (j >= 0 && j < visible) keys.push_back(cache.slot(comp_layer, plan.slot_of(s, j)));
        }
      } else {
        for (int64_t j = 0; j < visible; ++j) keys.push_back(cache.slot(comp_layer, plan.slot_of(s, j)));
      }
    }
    const size_t n = keys.size();
    std::vector<float> p(n);
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.f32() + (t * H + h) * D;
      const float sink = sinks.f32()[h];
      float mx = sink;
      for (size_t j = 0; j < n; ++j) mx = std::max(mx, p[j] = cpu::dot(qh, keys[j], D) * scale);
      float sum = std::exp(sink - mx);
      for (size_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - mx));
      float* o = out.f32() + (t * H + h) * D;
      for (size_t j = 0; j < n; ++j) {
        const float w = p[j] / sum;
        const float* v = keys[j];
        for (int64_t i = 0; i < D; ++i) o[i] += w * v[i];
      }
    }
  }
  return out;
}

}  // namespace dsinfer
