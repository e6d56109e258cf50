// CPU reference DeepSeekMoE routing: softmax (greedy, group_limited_greedy) and sigmoid or sqrt(softplus)
// (DeepSeek-V4) + correction bias with group-limited top-k (noaux_tc), top-k normalisation and routed
// scaling, as transformers computes it.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace dsinfer {

namespace {

// Indices of the k largest values (ties: lower index first), in descending value order.
std::vector<int32_t> top_k_indices(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

// Keeps the scores of the top `topk_group` groups (ranked by `group_score`), zeroing the rest.
std::vector<float> mask_groups(const std::vector<float>& scores, const std::vector<float>& group_score,
                               int64_t topk_group) {
  const int64_t G = static_cast<int64_t>(group_score.size());
  const int64_t per = static_cast<int64_t>(scores.size()) / G;
  std::vector<int32_t> keep = top_k_indices(group_score, topk_group);
  std::vector<float> masked(scores.size(), 0.0f);
  for (int32_t g : keep) {
    for (int64_t i = 0; i < per; ++i) masked[g * per + i] = scores[g * per + i];
  }
  return masked;
}

}  // namespace

void CpuBackend::moe_route(const Tensor& x, const Tensor& router, const Tensor& bias, const RoutingParams& p,
                           Tensor* ids, Tensor* weights) {
  const int64_t T = x.dim(0), H = x.dim(1), E = router.dim(0), K = p.top_k;
  DSI_CHECK(router.dim(1) == H, "moe_route: router expects ", router.dim(1), " features, got ", H);
  std::vector<float> logits(T * E);
  cpu::gemm_nt(T, E, H, x.f32(), H, router.f32(), H, logits.data(), E);
  *ids = Tensor::empty(DType::I32, {T, K});
  *weights = Tensor::empty(DType::F32, {T, K});
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> scores(logits.begin() + t * E, logits.begin() + (t + 1) * E);
    if (p.scoring == "softmax") {
      float mx = *std::max_element(scores.begin(), scores.end());
      float sum = 0.0f;
      for (float& s : scores) sum += (s = std::exp(s - mx));
      for (float& s : scores) s /= sum;
    } else if (p.scoring == "sigmoid") {
      for (float& s : scores) s = 1.0f / (1.0f + std::exp(-s));
    } else if (p.scoring == "sqrtsoftplus") {
      // torch softplus (threshold 20), then sqrt.
      for (float& s : scores) s = std::sqrt(s > 20.0f ? s : std::log1p(std::exp(s)));
    } else {
      fail("moe_route: unsupported scoring function ", p.scoring);
    }
    std::vector<int32_t> chosen;
    if (p.method == "greedy") {
      chosen = top_k_indices(scores, K);
    } else if (p.method == "group_limited_greedy") {
      const int64_t per = E / p.n_group;
      std::vector<float> group_score(p.n_group);
      for (int64_t g = 0; g < p.n_group; ++g)
        group_score[g] = *std::max_element(scores.begin() + g * per, scores.begin() + (g + 1) * per);
      chosen = top_k_indices(mask_groups(scores, group_score, p.topk_group), K);
    } else if (p.method == "noaux_tc") {
      std::vector<float> choice(scores);
      if (bias) {
        for (int64_t e = 0; e < E; ++e) choice[e] += bias.f32()[e];
      }
      const int64_t per = E / p.n_group;
      std::vector<float> group_score(p.n_group);
      for (int64_t g = 0; g < p.n_group; ++g) {
        std::vector<float> grp(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::vector<int32_t> top2 = top_k_indices(grp, std::min<int64_t>(2, per));
        float s = 0.0f;
        for (int32_t i : top2) s += grp[i];
        group_score[g] = s;
      }
      chosen = top_k_indices(mask_groups(choice, group_score, p.topk_group), K);
    } else {
      fail("moe_route: unsupported top-k method ", p.method);
    }
    float denom = 0.0f;
    for (int32_t e : chosen) denom += scores[e];
    for (int64_t k = 0; k < K; ++k) {
      float w = scores[chosen[k]];
      if (p.norm_topk_prob && (K > 1 || p.scoring == "sigmoid" || p.scoring == "sqrtsoftplus"))
        w /= (denom + 1e-20f);
      ids->data<int32_t>()[t * K + k] = chosen[k];
      weights->f32()[t * K + k] = w * p.routed_scaling_factor;
    }
  }
}

}  // namespace dsinfer
