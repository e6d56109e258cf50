// CudaBackend::sample against the host sampler (runs where a GPU is visible; CI compiles it and skips):
// greedy and top-k = 1 equal the host argmax (ties -> lowest id), seeded draws are reproducible, empirical
// distributions over many draws match the host's kept probabilities (penalties, temperature, top-k, top-p,
// min-p), draws stay inside the host's kept set on a 128K vocabulary (compacted and whole-row search
// paths), logprobs match the host's log-softmax, and bad rows report errors without failing the others;
// sample_async's device ids feed the next plan's tokens (async scheduling).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/host_sampling.h"
#include "core/tensor.h"
#include "engine/engine_impl.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling_kernels.h"
#include "backend/cuda/timing.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

constexpr int64_t kVocab = 128256;  // Llama 3

// R copies of one row.
Tensor repeat_row(const std::vector<float>& row, int64_t R) {
  const int64_t V = static_cast<int64_t>(row.size());
  Tensor t = Tensor::empty(DType::F32, {R, V});
  for (int64_t r = 0; r < R; ++r) std::copy(row.begin(), row.end(), t.f32() + r * V);
  return t;
}

class CudaSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  }
  std::mt19937 rng{7};

  // [R, V] normal(0, sigma) logits on the host.
  Tensor random_logits(int64_t R, int64_t V, float sigma) {
    std::normal_distribution<float> d(0.0f, sigma);
    Tensor t = Tensor::empty(DType::F32, {R, V});
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
    return t;
  }
  static SamplingRow row_with(float temperature, uint64_t seed = 11, uint64_t draw = 0) {
    SamplingRow r;
    r.temperature = temperature;
    r.seed = seed;
    r.draw_index = draw;
    return r;
  }
  static std::vector<int32_t> tokens_of(const std::vector<SampledToken>& s) {
    std::vector<int32_t> out;
    for (const SampledToken& t : s) {
      EXPECT_TRUE(t.error.empty()) << t.error;
      out.push_back(t.token);
    }
    return out;
  }
  CudaBackend gpu;
};

// The host's kept distribution for one row: penalties, weights exp((l - max) / T), then top-k, top-p
// (shortest best-first prefix reaching top_p of the top-k mass) and min-p, renormalised.
std::vector<double> kept_probabilities(std::vector<float> logits, const SamplingRow& row) {
  const int32_t V = static_cast<int32_t>(logits.size());
  HostSampler::apply_penalties(logits.data(), V, row);
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<float> w(V);
  for (int32_t i = 0; i < V; ++i) w[i] = std::exp((logits[i] - max) / row.temperature);
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[a] > w[b]; });
  size_t keep = 0;
  while (keep < order.size() && w[order[keep]] > 0.0f) ++keep;
  if (row.top_k > 0) keep = std::min<size_t>(keep, row.top_k);
  if (row.top_p < 1.0f) {
    double mass = 0.0, cumulative = 0.0;
    for (size_t i = 0; i < keep; ++i) mass += w[order[i]];
    const double target = static_cast<double>(row.top_p) * mass;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += w[order[i]];
      if (cumulative >= target) {
        keep = i + 1;
        break;
      }
    }
  }
  std::vector<double> p(V, 0.0);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    if (w[order[i]] >= row.min_p) total += (p[order[i]] = w[order[i]]);
  }
  for (double& x : p) x /= total;
  return p;
}

TEST_F(CudaSamplingTest, GreedyEqualsHostArgmaxWithPlantedTies) {
  const int64_t R = 12;
  Tensor logits = random_logits(R, kVocab, 3.0f);
  // Rows 0-3: the max value twice (the lower id must win); rows 4-7: a tie at a -inf-heavy row.
  for (int64_t r = 0; r < 4; ++r) {
    float* x = logits.f32() + r * kVocab;
    x[90000 + r] = x[1234 + r] = 50.0f;
  }
  for (int64_t r = 4; r < 8; ++r) {
    float* x = logits.f32() + r * kVocab;
    for (int64_t i = 0; i < kVocab; ++i) x[i] = i % 3 ? -INFINITY : x[i];
    x[77777] = x[3333] = 50.0f;
  }
  // Rows 8-11 carry penalties that move the argmax.
  const std::vector<int32_t> seen = {5, 17, 1234, 99999};
  const std::vector<int32_t> gen = {17, 99999}, counts = {2, 5};
  for (int64_t r = 8; r < R; ++r) {
    float* x = logits.f32() + r * kVocab;
    x[17] = x[99999] = 40.0f;
    x[5] = -40.0f;
  }
  std::vector<SamplingRow> rows(R, row_with(0.0f));
  for (int64_t r = 8; r < R; ++r) {
    rows[r].repetition_penalty = 1.0f + 0.5f * static_cast<float>(r - 7);
    rows[r].presence_penalty = 0.5f;
    rows[r].frequency_penalty = r % 2 ? 2.0f : 0.1f;
    rows[r].seen_tokens = seen;
    rows[r].generated_tokens = gen;
    rows[r].generated_counts = counts;
  }
  const std::vector<int32_t> got = tokens_of(gpu.sample(cuda::to_device(logits), rows));
  HostSampler host;
  std::mt19937_64 unused;
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(got[r], host.sample(logits.f32() + r * kVocab, kVocab, rows[r], unused)) << "row " << r;
  }
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(got[r], 1234 + r);
  for (int64_t r = 4; r < 8; ++r) EXPECT_EQ(got[r], 3333);
}

// Vocabularies that are not a multiple of 4 put rows at every 16-byte misalignment (the row max reads an
// unaligned head, 16-byte chunks and a tail): greedy still equals the host's argmax, ties to the lowest id,
// with the max planted in the head, the chunks and the tail.
TEST_F(CudaSamplingTest, GreedyOnUnalignedRowsEqualsHostArgmax) {
  for (int64_t V : {1, 2, 3, 5, 7, 1001, 102401}) {
    const int64_t R = 8;
    Tensor logits = random_logits(R, V, 2.0f);
    for (int64_t r = 0; r < R; ++r) {
      float* x = logits.f32() + r * V;
      const int64_t a = (r * 7) % V, b = V - 1 - (r % V);  // a tie between a low and a high position
      x[a] = x[b] = 30.0f;
    }
    const std::vector<int32_t> got =
        tokens_of(gpu.sample(cuda::to_device(logits), std::vector<SamplingRow>(R, row_with(0.0f))));
    HostSampler host;
    std::mt19937_64 unused;
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(got[r], host.sample(logits.f32() + r * V, static_cast<int32_t>(V), row_with(0.0f), unused))
          << "V " << V << " row " << r;
      EXPECT_EQ(got[r], std::min((r * 7) % V, V - 1 - (r % V))) << "V " << V << " row " << r;
    }
  }
}

TEST_F(CudaSamplingTest, TopKOneEqualsGreedy) {
  const int64_t R = 16;
  Tensor logits = random_logits(R, kVocab, 2.0f);
  logits.f32()[3 * kVocab + 500] = logits.f32()[3 * kVocab + 400] = 30.0f;  // tie: 400 wins
  std::vector<SamplingRow> greedy(R, row_with(0.0f)), topk(R);
  for (int64_t r = 0; r < R; ++r) {
    topk[r] = row_with(1.5f, 100 + r, r);
    topk[r].top_k = 1;
    topk[r].top_p = r % 2 ? 0.9f : 1.0f;
  }
  Tensor dev = cuda::to_device(logits);
  EXPECT_EQ(tokens_of(gpu.sample(dev, topk)), tokens_of(gpu.sample(dev, greedy)));
  EXPECT_EQ(tokens_of(gpu.sample(dev, greedy))[3], 400);
}

TEST_F(CudaSamplingTest, SeededDrawsAreReproducible) {
  const int64_t R = 64;
  Tensor dev = cuda::to_device(random_logits(R, kVocab, 1.0f));
  std::vector<SamplingRow> rows(R), next(R);
  for (int64_t r = 0; r < R; ++r) {
    rows[r] = row_with(1.0f, 42 + r, 7);
    rows[r].top_p = 0.95f;
    rows[r].top_k = r % 3 ? 0 : 50;
    next[r] = rows[r];
    next[r].draw_index = 8;
  }
  const std::vector<int32_t> a = tokens_of(gpu.sample(dev, rows));
  EXPECT_EQ(a, tokens_of(gpu.sample(dev, rows)));
  EXPECT_NE(a, tokens_of(gpu.sample(dev, next)));  // 64 rows of ~thousands of likely tokens
}

// Draws `draws` tokens for one row (rows of one call differ only by draw index) and checks them against
// the host's kept distribution with Pearson's chi-square (p = 0.001) and no draw outside the kept set.
void expect_distribution(CudaBackend& gpu, const std::vector<float>& logits, SamplingRow row, int draws) {
  const std::vector<double> p = kept_probabilities(logits, row);
  const int64_t V = static_cast<int64_t>(logits.size()), R = 2000;
  Tensor dev = cuda::to_device(repeat_row(logits, R));
  std::vector<int> counts(V, 0);
  for (int done = 0; done < draws; done += R) {
    std::vector<SamplingRow> rows(R, row);
    for (int64_t r = 0; r < R; ++r) rows[r].draw_index = static_cast<uint64_t>(done + r);
    for (const SampledToken& t : gpu.sample(dev, rows)) {
      ASSERT_TRUE(t.error.empty()) << t.error;
      ASSERT_GT(p[t.token], 0.0) << "token " << t.token << " is outside the kept set";
      ++counts[t.token];
    }
  }
  double chi = 0.0;
  int kept = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (p[i] == 0.0) continue;
    ++kept;
    const double expected = p[i] * draws;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  // chi-square quantiles at p = 0.001 for 1..15 degrees of freedom.
  const double bound[] = {0,     10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32,
                          26.12, 27.88, 29.59, 31.26, 32.91, 34.53, 36.12, 37.70};
  ASSERT_GE(kept, 2);
  EXPECT_LT(chi, bound[kept - 1]) << kept << " kept tokens";
}

TEST_F(CudaSamplingTest, EmpiricalDistributionsMatchHostKeptProbabilities) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f,  1.5f, -0.5f, 0.2f,
                                     1.2f, 0.8f, -2.f, 0.3f,  -0.2f, 1.1f, 0.9f,  -3.0f};
  const int draws = 20000;
  SamplingRow r = row_with(0.7f, 5);
  expect_distribution(gpu, logits, r, draws);  // temperature only
  r = row_with(1.0f, 6), r.top_k = 5;
  expect_distribution(gpu, logits, r, draws);
  r = row_with(1.0f, 7), r.top_p = 0.8f;
  expect_distribution(gpu, logits, r, draws);
  r = row_with(1.3f, 8), r.min_p = 0.2f;
  expect_distribution(gpu, logits, r, draws);
  // Penalties with every filter: ids 2 and 5 (the two best) are pushed down, 15 pulled up.
  const std::vector<int32_t> seen = {2, 5, 15, 0}, gen = {2, 5}, counts = {1, 3};
  r = row_with(1.0f, 9);
  r.repetition_penalty = 1.5f;
  r.presence_penalty = 0.4f;
  r.frequency_penalty = 0.2f;
  r.seen_tokens = seen;
  r.generated_tokens = gen;
  r.generated_counts = counts;
  r.top_k = 10;
  r.top_p = 0.9f;
  r.min_p = 0.05f;
  expect_distribution(gpu, logits, r, draws);
  // logit_bias after the penalties: 2 banned, 15 and 3 raised, 0 lowered.
  const std::vector<int32_t> bias_ids = {2, 15, 3, 0};
  const std::vector<float> bias_values = {-100.0f, 2.5f, 1.0f, -0.7f};
  r.bias_ids = bias_ids;
  r.bias_values = bias_values;
  expect_distribution(gpu, logits, r, draws);
  r = row_with(0.8f, 10);
  r.bias_ids = bias_ids;
  r.bias_values = bias_values;
  expect_distribution(gpu, logits, r, draws);  // bias alone
}

// An allowed-token mask (constrained decoding) limits greedy and random draws as on the host; rows beside it
// are unaffected; a mask shorter than the vocabulary is that row's error.
TEST_F(CudaSamplingTest, AllowedMasksLimitDrawsAsOnTheHost) {
  const int64_t R = 4;
  Tensor logits = random_logits(R, kVocab, 3.0f);
  std::vector<uint32_t> mask(static_cast<size_t>(kVocab + 31) / 32, 0u);
  for (int32_t id : {11, 4097, 70000, 128255}) mask[id / 32] |= 1u << (id % 32);
  std::vector<SamplingRow> rows(R, row_with(0.0f));
  rows[0].allowed = mask;
  rows[2] = row_with(1.0f, 3);
  rows[2].allowed = mask;
  const std::vector<uint32_t> short_mask(4, ~0u);
  rows[3].allowed = short_mask;
  HostSampler host;
  std::mt19937_64 unused;
  for (int round = 0; round < 20; ++round) {
    rows[2].draw_index = static_cast<uint64_t>(round);
    const std::vector<SampledToken> got = gpu.sample(cuda::to_device(logits), rows);
    EXPECT_EQ(got[0].token, host.sample(logits.f32(), kVocab, rows[0], unused));
    EXPECT_EQ(got[1].token, host.sample(logits.f32() + kVocab, kVocab, rows[1], unused));
    const int32_t drawn = got[2].token;
    EXPECT_TRUE(drawn == 11 || drawn == 4097 || drawn == 70000 || drawn == 128255) << drawn;
    EXPECT_EQ(got[3].token, -1);
    EXPECT_NE(got[3].error.find("mask"), std::string::npos) << got[3].error;
  }
}

// logit_bias moves the greedy choice as on the host, on a 128K vocabulary split over several blocks, in rows
// beside rows without it; a repeated id is that row's error alone.
TEST_F(CudaSamplingTest, LogitBiasMovesGreedyAsOnTheHost) {
  const int64_t R = 6;
  Tensor logits = random_logits(R, kVocab, 3.0f);
  const std::vector<int32_t> ids = {7, 65000, 131000 % kVocab};
  const std::vector<float> values = {100.0f, -100.0f, 30.0f};
  std::vector<SamplingRow> rows(R, row_with(0.0f));
  for (int64_t r = 0; r < R; r += 2) {
    rows[r].bias_ids = ids;
    rows[r].bias_values = values;
  }
  const std::vector<int32_t> dup = {9, 9};
  const std::vector<float> dup_values = {1.0f, 1.0f};
  rows[R - 1].bias_ids = dup;
  rows[R - 1].bias_values = dup_values;
  const std::vector<SampledToken> got = gpu.sample(cuda::to_device(logits), rows);
  HostSampler host;
  std::mt19937_64 unused;
  for (int64_t r = 0; r < R - 1; ++r) {
    EXPECT_EQ(got[r].token, host.sample(logits.f32() + r * kVocab, kVocab, rows[r], unused)) << "row " << r;
    EXPECT_TRUE(got[r].error.empty()) << got[r].error;
  }
  for (int64_t r = 0; r < R - 1; r += 2) EXPECT_EQ(got[r].token, 7);
  EXPECT_EQ(got[R - 1].token, -1);
  EXPECT_NE(got[R - 1].error.find("twice"), std::string::npos) << got[R - 1].error;
}

// Every draw on a 128K row lies in the host's kept set: small nuclei (compacted candidates) and a nucleus of
// ~100K tokens (more than the candidate capacity: the searches run over the whole row).
TEST_F(CudaSamplingTest, DrawsStayInsideHostKeptSetOnLargeVocab) {
  struct Case {
    float sigma;
    SamplingRow row;
  };
  std::vector<Case> cases;
  SamplingRow r = row_with(1.0f, 1);
  r.top_p = 0.9f;
  cases.push_back({3.0f, r});
  r = row_with(0.8f, 2), r.top_k = 1000, r.top_p = 0.5f;
  cases.push_back({2.0f, r});
  r = row_with(1.0f, 3), r.top_k = 40;
  cases.push_back({1.0f, r});
  r = row_with(1.0f, 4), r.min_p = 0.05f;
  cases.push_back({2.0f, r});
  r = row_with(1.0f, 5), r.top_p = 0.8f;  // nearly flat: ~100K-token nucleus
  cases.push_back({0.05f, r});
  r = row_with(1.0f, 6), r.top_k = 30000, r.top_p = 0.99f;  // top-k list over capacity
  cases.push_back({0.02f, r});
  const int64_t R = 256;
  for (size_t c = 0; c < cases.size(); ++c) {
    Tensor one = random_logits(1, kVocab, cases[c].sigma);
    const std::vector<float> row(one.f32(), one.f32() + kVocab);
    const std::vector<double> p = kept_probabilities(row, cases[c].row);
    size_t kept = 0;
    for (double x : p) kept += x > 0.0;
    std::vector<SamplingRow> rows(R, cases[c].row);
    for (int64_t i = 0; i < R; ++i) rows[i].draw_index = static_cast<uint64_t>(i);
    std::set<int32_t> distinct;
    for (int32_t t : tokens_of(gpu.sample(cuda::to_device(repeat_row(row, R)), rows))) {
      ASSERT_GT(p[t], 0.0) << "case " << c << ": token " << t << " is outside the " << kept << " kept";
      distinct.insert(t);
    }
    if (kept > 1000) {
      EXPECT_GT(distinct.size(), 20u) << "case " << c;  // draws are spread out
    }
  }
}

TEST_F(CudaSamplingTest, TiesAtTheBoundaryKeepTheLowestIds) {
  // A flat row: every weight is 1, so top-p 0.5 keeps exactly the lowest half of the ids and top-k 3 the
  // ids 0..2 (the id part of the search key decides).
  const int64_t R = 256;
  Tensor dev = cuda::to_device(Tensor::zeros(DType::F32, {R, kVocab}));
  std::vector<SamplingRow> half(R), three(R);
  for (int64_t r = 0; r < R; ++r) {
    half[r] = row_with(1.0f, 77, r);
    half[r].top_p = 0.5f;
    three[r] = row_with(1.0f, 78, r);
    three[r].top_k = 3;
  }
  std::set<int32_t> seen3;
  for (int32_t t : tokens_of(gpu.sample(dev, half))) EXPECT_LT(t, kVocab / 2);
  for (int32_t t : tokens_of(gpu.sample(dev, three))) {
    EXPECT_LT(t, 3);
    seen3.insert(t);
  }
  EXPECT_EQ(seen3.size(), 3u);
}

TEST_F(CudaSamplingTest, LogprobsMatchHostLogSoftmax) {
  const int64_t R = 6;
  Tensor logits = random_logits(R, kVocab, 4.0f);
  float* x = logits.f32() + 2 * kVocab;  // row 2: a three-way tie inside the top 20
  x[60000] = x[70] = x[65000] = 30.0f;
  std::vector<SamplingRow> rows(R);
  for (int64_t r = 0; r < R; ++r) {
    rows[r] = row_with(r % 2 ? 0.0f : 0.9f, 3, r);
    rows[r].logprobs = r == 5 ? 1 : 20;
  }
  const std::vector<int32_t> seen = {70};
  rows[2].repetition_penalty = 2.0f;  // logprobs stay those of the raw logits
  rows[2].seen_tokens = seen;
  const std::vector<SampledToken> got = gpu.sample(cuda::to_device(logits), rows);
  for (int64_t r = 0; r < R; ++r) {
    const float* row = logits.f32() + r * kVocab;
    ASSERT_TRUE(got[r].error.empty()) << got[r].error;
    EXPECT_NEAR(got[r].logprob, HostSampler::logprob_of(row, kVocab, got[r].token), 1e-4) << "row " << r;
    const auto ref = HostSampler::top_logprobs(row, kVocab, rows[r].logprobs);
    ASSERT_EQ(got[r].top.size(), ref.size()) << "row " << r;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[r].top[i].first, ref[i].first) << "row " << r << " rank " << i;
      EXPECT_NEAR(got[r].top[i].second, ref[i].second, 1e-4) << "row " << r << " rank " << i;
    }
  }
  EXPECT_EQ(got[2].top[0].first, 70);
  EXPECT_EQ(got[2].top[1].first, 60000);
  EXPECT_EQ(got[2].top[2].first, 65000);
}

// Forced rows (prompt scoring) on the GPU as on the host: the given token, its logprob and the top
// alternatives of the raw logits, whatever the row's temperature, on the scoring kernel (float4 and scalar
// rows; a near-flat row whose ties exceed shared memory, selected one by one; a row with -inf values; NaN
// and all -inf rows fail alone) beside drawn rows in the same call (the sampling kernel's row list); a forced
// token outside the vocabulary fails its row alone.
TEST_F(CudaSamplingTest, ForcedRowsScoreTheGivenTokenAsOnTheHost) {
  for (const int64_t V : {int64_t{1000}, int64_t{1001}, int64_t{5000}, kVocab}) {
    const int64_t R = 9;
    Tensor logits = random_logits(R, V, 3.0f);
    float* flat = logits.f32() + 5 * V;  // row 5: every value equal, then a few larger
    for (int64_t i = 0; i < V; ++i) flat[i] = 1.0f;
    flat[V / 2] = 2.0f;
    float* masked = logits.f32() + 6 * V;  // row 6: all but three -inf
    for (int64_t i = 0; i < V; ++i) masked[i] = -INFINITY;
    masked[3] = 0.5f;
    masked[V - 1] = 0.25f;
    masked[V / 3] = 0.5f;
    logits.f32()[7 * V + 17] = NAN;                                       // row 7
    for (int64_t i = 0; i < V; ++i) logits.f32()[8 * V + i] = -INFINITY;  // row 8
    std::vector<SamplingRow> rows(R);
    for (int64_t r = 0; r < R; ++r) {
      rows[r] = row_with(r % 2 ? 0.0f : 0.8f, 5, r);
      rows[r].forced_token = static_cast<int32_t>((r * 7919 + 13) % V);
      rows[r].logprobs = r == 1 ? 1 : 5;
    }
    rows[3].forced_token = -1;  // drawn (greedy) among the scored rows
    rows[3].temperature = 0.0f;
    rows[4].forced_token = static_cast<int32_t>(V);  // outside
    rows[5].logprobs = 20;
    rows[6].logprobs = 5;  // more alternatives than finite values: -inf ones follow, lowest ids first
    rows[6].forced_token = 3;
    const std::vector<SampledToken> got = gpu.sample(cuda::to_device(logits), rows);
    for (int64_t r : {0, 1, 2, 3, 5, 6}) {
      const float* row = logits.f32() + r * V;
      const std::string what = "V " + std::to_string(V) + " row " + std::to_string(r);
      ASSERT_TRUE(got[r].error.empty()) << what << ": " << got[r].error;
      if (r == 3) {
        EXPECT_EQ(got[r].token, static_cast<int32_t>(std::max_element(row, row + V) - row)) << what;
      } else {
        EXPECT_EQ(got[r].token, rows[r].forced_token) << what;
      }
      EXPECT_NEAR(got[r].logprob, HostSampler::logprob_of(row, static_cast<int32_t>(V), got[r].token), 1e-4)
          << what;
      const auto ref = HostSampler::top_logprobs(row, static_cast<int32_t>(V), rows[r].logprobs);
      ASSERT_EQ(got[r].top.size(), ref.size()) << what;
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_EQ(got[r].top[i].first, ref[i].first) << what << " rank " << i;
        if (std::isinf(ref[i].second)) {
          EXPECT_TRUE(std::isinf(got[r].top[i].second) && got[r].top[i].second < 0) << what << " rank " << i;
        } else {
          EXPECT_NEAR(got[r].top[i].second, ref[i].second, 1e-4) << what << " rank " << i;
        }
      }
    }
    EXPECT_NE(got[4].error.find("outside the vocabulary"), std::string::npos) << got[4].error;
    EXPECT_NE(got[7].error.find("NaN"), std::string::npos) << got[7].error;
    EXPECT_NE(got[8].error.find("-inf"), std::string::npos) << got[8].error;
  }
}

TEST_F(CudaSamplingTest, BadRowsReportErrorsAlone) {
  Tensor logits = random_logits(4, 1000, 1.0f);
  logits.f32()[1 * 1000 + 10] = NAN;
  for (int64_t i = 0; i < 1000; ++i) logits.f32()[2 * 1000 + i] = -INFINITY;
  std::vector<SamplingRow> rows(4, row_with(1.0f));
  const std::vector<int32_t> outside = {1000};
  rows[3].repetition_penalty = 1.2f;
  rows[3].seen_tokens = outside;
  const std::vector<SampledToken> got = gpu.sample(cuda::to_device(logits), rows);
  EXPECT_TRUE(got[0].error.empty());
  EXPECT_GE(got[0].token, 0);
  EXPECT_NE(got[1].error.find("NaN"), std::string::npos) << got[1].error;
  EXPECT_NE(got[2].error.find("-inf"), std::string::npos) << got[2].error;
  EXPECT_NE(got[3].error.find("outside the vocabulary"), std::string::npos) << got[3].error;
}

// On a large vocabulary the row max is split over several blocks per row (sample_row_parts): a NaN or +inf
// in any block's range, or -inf everywhere, still fails the row alone; the max in the last element (the last
// range's tail) is found; and the arrival counters are left ready, so repeated calls (with fewer and more
// rows) give the same answers.
TEST_F(CudaSamplingTest, SplitRowMaxReportsErrorsAndResetsItsCounters) {
  const int64_t V = 128256;
  ASSERT_GT(cuda::sample_row_parts(V), 1);
  Tensor logits = random_logits(5, V, 1.0f);
  logits.f32()[1 * V + V - 2] = NAN;  // the last range
  for (int64_t i = 0; i < V; ++i) logits.f32()[2 * V + i] = -INFINITY;
  logits.f32()[3 * V + V / 2] = INFINITY;  // a middle range
  logits.f32()[4 * V + V - 1] = 40.0f;     // the max in the tail
  Tensor first_two = Tensor::empty(DType::F32, {2, V});
  std::copy(logits.f32(), logits.f32() + 2 * V, first_two.f32());
  const Tensor dev = cuda::to_device(logits), dev_two = cuda::to_device(first_two);
  for (int64_t R : {5, 2, 5, 5}) {
    const Tensor& rows_logits = R == 5 ? dev : dev_two;
    const std::vector<SampledToken> got =
        gpu.sample(rows_logits, std::vector<SamplingRow>(static_cast<size_t>(R), row_with(0.0f)));
    HostSampler host;
    std::mt19937_64 unused;
    EXPECT_TRUE(got[0].error.empty());
    EXPECT_EQ(got[0].token, host.sample(logits.f32(), static_cast<int32_t>(V), row_with(0.0f), unused));
    EXPECT_NE(got[1].error.find("NaN"), std::string::npos) << got[1].error;
    if (R < 5) continue;
    EXPECT_NE(got[2].error.find("-inf"), std::string::npos) << got[2].error;
    EXPECT_NE(got[3].error.find("NaN"), std::string::npos) << got[3].error;
    EXPECT_TRUE(got[4].error.empty());
    EXPECT_EQ(got[4].token, V - 1);
  }
}

// Calls whose row parameters equal the last cached call's read them from the device cache (greedy rows
// ignore their seed and draw index, so steps of the same requests repeat them); any change (logprobs, a
// temperature, more rows, penalties) reads the new ones. Every call's tokens and logprobs still equal the
// host's on that call's logits.
TEST_F(CudaSamplingTest, RepeatedRowParametersComeFromTheDeviceCacheAndChangesDoNot) {
  const int64_t V = 102400;  // DeepSeek-V2: a split row
  HostSampler host;
  std::mt19937_64 unused;
  auto rows_of = [](int n, int logprobs, uint64_t draw) {
    std::vector<SamplingRow> rows(static_cast<size_t>(n), row_with(0.0f, 11, draw));
    for (SamplingRow& r : rows) r.logprobs = logprobs;
    return rows;
  };
  struct Call {
    std::vector<SamplingRow> rows;
    bool hit;  // expected to read the cache
  };
  std::vector<Call> calls;
  calls.push_back({rows_of(2, 0, 0), false});
  calls.push_back({rows_of(2, 0, 1), true});   // draw index differs: ignored by greedy rows
  calls.push_back({rows_of(2, 3, 2), false});  // logprobs asked
  calls.push_back({rows_of(2, 3, 3), true});
  calls.push_back({rows_of(2, 0, 4), false});  // back to none: the cache holds the logprobs rows
  calls.push_back({rows_of(3, 0, 5), false});  // one row more
  calls.push_back({rows_of(3, 0, 6), true});
  static const std::vector<int32_t> seen = {1, 2, 3};
  std::vector<SamplingRow> penalised = rows_of(3, 0, 7);
  penalised[1].repetition_penalty = 1.3f;
  penalised[1].seen_tokens = seen;
  calls.push_back({penalised, false});        // penalties: not cached
  calls.push_back({rows_of(3, 0, 8), true});  // the cache still holds the greedy rows
  std::vector<SamplingRow> drawn = rows_of(3, 0, 9);
  drawn[2].temperature = 1.0f;
  calls.push_back({drawn, false});
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::vector<SamplingRow>& rows = calls[c].rows;
    const int64_t R = static_cast<int64_t>(rows.size());
    const Tensor logits = random_logits(R, V, 3.0f);
    const int64_t hits_before = gpu.sample_params_cache_hits();
    const std::vector<SampledToken> got = gpu.sample(cuda::to_device(logits), rows);
    EXPECT_EQ(gpu.sample_params_cache_hits() - hits_before, calls[c].hit ? 1 : 0) << "call " << c;
    ASSERT_EQ(static_cast<int64_t>(got.size()), R);
    for (int64_t r = 0; r < R; ++r) {
      ASSERT_TRUE(got[r].error.empty()) << got[r].error;
      const float* x = logits.f32() + r * V;
      if (rows[r].temperature == 0.0f) {
        EXPECT_EQ(got[r].token, host.sample(x, static_cast<int32_t>(V), rows[r], unused)) << "call " << c;
      } else {
        EXPECT_TRUE(got[r].token >= 0 && got[r].token < V);
      }
      EXPECT_EQ(static_cast<int>(got[r].top.size()), rows[r].logprobs) << "call " << c << " row " << r;
    }
  }
}

TEST_F(CudaSamplingTest, HostLogitsUseTheHostSampler) {
  Tensor logits = random_logits(2, 500, 1.0f);
  std::mt19937_64 a(5), b(5);
  std::vector<SamplingRow> rows(2, row_with(1.0f));
  rows[0].host_rng = rows[1].host_rng = &a;
  const std::vector<int32_t> got = tokens_of(gpu.sample(logits, rows));
  HostSampler host;
  EXPECT_EQ(got[0], host.sample(logits.f32(), 500, rows[0], b));
  EXPECT_EQ(got[1], host.sample(logits.f32() + 500, 500, rows[1], b));
}

// Async scheduling: a plan's tokens fed from the previous sample_async call (prev_sample_rows) reach the
// forward pass on the device before sample_wait, and a failed row (NaN logits) feeds 0; the host plan keeps
// its placeholders. Host logits feed through the host plan instead.
TEST_F(CudaSamplingTest, FeedSampledTokensPatchesTheDevicePlan) {
  const int64_t V = 1000, H = 8;
  Tensor logits = random_logits(4, V, 1.0f);
  const int32_t planted[] = {17, 999, -1, 500};
  for (int64_t r = 0; r < 4; ++r) {
    if (planted[r] >= 0) logits.f32()[r * V + planted[r]] = 50.0f;
  }
  logits.f32()[2 * V + 3] = NAN;
  const std::vector<SamplingRow> rows(4, row_with(0.0f));
  Tensor table_host = random_logits(V, H, 1.0f);  // [V, H]
  const Tensor table = gpu.prepare_weight(table_host);

  auto plan_of = [](std::vector<int32_t> tokens, std::vector<int32_t> prev) {
    BatchPlan p;
    p.block_size = 16;
    p.cu_seqlens = {0};
    p.block_table_indptr = {0};
    for (size_t s = 0; s < tokens.size(); ++s) {
      p.positions.push_back(3);
      p.cu_seqlens.push_back(static_cast<int32_t>(s + 1));
      p.context_lens.push_back(4);
      p.block_table.push_back(static_cast<int32_t>(s));
      p.block_table_indptr.push_back(static_cast<int32_t>(s + 1));
      p.slot_mapping.push_back(static_cast<int64_t>(s) * 16 + 3);
      p.logits_rows.push_back(static_cast<int32_t>(s));
      p.seq_ids.push_back(static_cast<int64_t>(s));
    }
    p.token_ids = std::move(tokens);
    p.prev_sample_rows = std::move(prev);
    return p;
  };
  auto embed_of = [&](BatchPlan& plan) {
    gpu.begin_step(plan);
    Tensor out = gpu.to_host(gpu.embed(table, plan.token_ids));  // [T, H]
    gpu.end_step();
    return std::vector<float>(out.f32(), out.f32() + out.numel());
  };
  BatchPlan want = plan_of({999, 42, 17, 0, 500, 7}, {});
  const std::vector<float> expected = embed_of(want);
  BatchPlan want2 = plan_of({999, 42, 23, 0, 500, 7}, {});
  const std::vector<float> expected2 = embed_of(want2);

  gpu.sample_async(cuda::to_device(logits), rows);
  BatchPlan fed = plan_of({0, 42, 0, 0, 0, 7}, {1, -1, 0, 2, 3, -1});
  gpu.feed_sampled_tokens(fed);
  EXPECT_EQ(fed.token_ids, (std::vector<int32_t>{0, 42, 0, 0, 0, 7}));  // patched on the device only
  EXPECT_EQ(embed_of(fed), expected);
  const std::vector<SampledToken> got = gpu.sample_wait();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].token, 17);
  EXPECT_EQ(got[1].token, 999);
  EXPECT_FALSE(got[2].error.empty());
  EXPECT_EQ(got[3].token, 500);
  // The same plan again (its bytes unchanged: no upload) is patched again, now from a new call.
  logits.f32()[0 * V + 17] = 0.0f;
  logits.f32()[0 * V + 23] = 60.0f;
  gpu.sample_async(cuda::to_device(logits), rows);
  BatchPlan again = plan_of({0, 42, 0, 0, 0, 7}, {1, -1, 0, 2, 3, -1});
  EXPECT_EQ(embed_of(again), expected2);
  gpu.sample_wait();

  // Host logits: the host sampler ran; the ids go into the host plan.
  std::mt19937_64 rng(3);
  std::vector<SamplingRow> host_rows(4, row_with(0.0f));
  for (SamplingRow& r : host_rows) r.host_rng = &rng;
  gpu.sample_async(logits, host_rows);
  BatchPlan host_fed = plan_of({0, 42, 0, 0, 0, 7}, {1, -1, 0, 2, 3, -1});
  gpu.feed_sampled_tokens(host_fed);
  EXPECT_EQ(host_fed.token_ids, (std::vector<int32_t>{999, 42, 23, 0, 500, 7}));
  EXPECT_EQ(embed_of(host_fed), expected2);
  EXPECT_EQ(tokens_of({gpu.sample_wait()[0]}), std::vector<int32_t>{23});
}

// tiny-llama from the working directory (the GPU machine runs tests from the repository root) or the
// source tree this binary was built from.
std::string tiny_llama_dir() {
  const std::string relative = "tests/data/models/tiny-llama";
  return std::filesystem::exists(relative) ? relative : std::string(DSINFER_TEST_DATA) + "/models/tiny-llama";
}

// The engine on the GPU backend samples on the GPU: greedy equals host sampling of the same GPU logits
// (one sequence at a time, as the engine runs them with max_batch_size 1), seeded sampling with every
// filter and penalty repeats itself, and requested logprobs arrive.
TEST_F(CudaSamplingTest, EngineSamplesOnTheGpu) {
  auto backend = std::make_unique<CudaBackend>();
  LoadOptions options;
  options.progress = false;
  std::unique_ptr<Model> model = load_model(tiny_llama_dir(), *backend, options);
  const int32_t vocab = static_cast<int32_t>(model->config().vocab_size);
  std::mt19937 gen(9);
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t len : {5, 17, 40}) {
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab));
    prompts.push_back(p);
  }
  const int32_t max_tokens = 12;
  std::vector<std::vector<int32_t>> reference;
  for (const auto& prompt : prompts) {  // host sampling of the GPU logits
    SequenceRunner runner(*model);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    Sampler sampler(greedy, prompt);
    std::vector<int32_t> out;
    Tensor logits = runner.append(prompt);  // [1, V] on the host
    while (static_cast<int32_t>(out.size()) < max_tokens) {
      out.push_back(sampler.sample(logits.f32(), vocab));
      sampler.accept(out.back());
      logits = runner.append({out.back()});
    }
    reference.push_back(out);
  }
  EngineConfig config;
  config.max_batch_size = 1;
  config.kv_block_size = 64;
  config.max_tokens_in_paged_kv_cache = 4096;
  auto engine = make_engine(config, std::move(backend), std::move(model), std::nullopt);

  std::mutex mutex;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<RequestEvent>> events;
  std::map<uint64_t, bool> done;
  auto submit = [&](const std::vector<int32_t>& prompt, SamplingParams p) {
    GenerationRequest r;
    r.prompt_ids = prompt;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    r.sampling = p;
    r.on_event = [&](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      events[e.request_id].push_back(e);
      if (e.finished) done[e.request_id] = true;
      cv.notify_all();
    };
    return engine->submit(std::move(r));
  };
  auto tokens = [&](uint64_t id) {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait_for(lock, std::chrono::seconds(120), [&] { return done[id]; });
    std::vector<int32_t> out;
    for (const RequestEvent& e : events[id]) {
      EXPECT_TRUE(e.error.empty()) << e.error;
      out.insert(out.end(), e.token_ids.begin(), e.token_ids.end());
    }
    return out;
  };
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<uint64_t> ids;
  for (const auto& prompt : prompts) ids.push_back(submit(prompt, greedy));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(tokens(ids[i]), reference[i]) << "prompt " << i;

  SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.top_k = 20;
  seeded.top_p = 0.9f;
  seeded.min_p = 0.01f;
  seeded.repetition_penalty = 1.1f;
  seeded.presence_penalty = 0.2f;
  seeded.frequency_penalty = 0.1f;
  seeded.seed = 1234;
  seeded.logprobs = 5;
  const uint64_t a = submit(prompts[1], seeded), b = submit(prompts[1], seeded);
  const std::vector<int32_t> ta = tokens(a), tb = tokens(b);
  EXPECT_EQ(ta.size(), static_cast<size_t>(max_tokens));
  EXPECT_EQ(ta, tb);
  std::lock_guard<std::mutex> lock(mutex);
  for (const RequestEvent& e : events[a]) {
    for (const TokenLogprob& lp : e.logprobs) {
      EXPECT_EQ(lp.top.size(), 5u);
      EXPECT_LE(lp.logprob, 0.0f);
    }
  }
  engine->shutdown(std::chrono::milliseconds(0));
}

// Timing of one sample() call at batch 256 over a 128K vocabulary (run with
// --gtest_also_run_disabled_tests); the alternative, copying the logits to the host, is timed for scale.
TEST_F(CudaSamplingTest, DISABLED_Timing) {
  const int64_t R = 256;
  Tensor dev = cuda::to_device(random_logits(R, kVocab, 2.0f));  // top-p 0.9 keeps ~30K tokens per row
  const std::vector<int32_t> seen = {1, 2, 3, 4, 5, 6, 7, 8}, gen = {3, 4}, counts = {1, 2};
  auto time_ms = [&](const std::vector<SamplingRow>& rows) {
    for (int32_t t : tokens_of(gpu.sample(dev, rows))) EXPECT_TRUE(t >= 0 && t < kVocab);  // warm-up
    const int iters = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) gpu.sample(dev, rows);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
           iters;
  };
  auto rows_of = [&](SamplingRow r) {
    std::vector<SamplingRow> rows(R, r);
    for (int64_t i = 0; i < R; ++i) rows[i].draw_index = static_cast<uint64_t>(i);
    return rows;
  };
  SamplingRow r = row_with(0.0f);
  std::printf("sample R=256 V=128256 greedy:               %.3f ms\n", time_ms(rows_of(r)));
  r = row_with(1.0f);
  std::printf("sample R=256 V=128256 temperature:          %.3f ms\n", time_ms(rows_of(r)));
  r.top_p = 0.9f;
  std::printf("sample R=256 V=128256 top_p 0.9:            %.3f ms\n", time_ms(rows_of(r)));
  r.top_k = 50;
  std::printf("sample R=256 V=128256 top_k 50 + top_p 0.9: %.3f ms\n", time_ms(rows_of(r)));
  r.repetition_penalty = 1.1f, r.presence_penalty = 0.5f, r.frequency_penalty = 0.5f;
  r.seen_tokens = seen, r.generated_tokens = gen, r.generated_counts = counts;
  r.min_p = 0.01f;
  std::printf("sample R=256 V=128256 + penalties + min_p:  %.3f ms\n", time_ms(rows_of(r)));
  r.logprobs = 20;
  std::printf("sample R=256 V=128256 + 20 logprobs:        %.3f ms\n", time_ms(rows_of(r)));
  Tensor peaked = cuda::to_device(random_logits(R, kVocab, 4.0f));
  std::swap(dev, peaked);
  r = row_with(1.0f);
  r.top_p = 0.9f;
  std::printf("sample R=256 V=128256 top_p 0.9 (peaked):   %.3f ms\n", time_ms(rows_of(r)));
  std::swap(dev, peaked);
  SamplingRow one = row_with(1.0f);
  one.top_p = 0.9f;
  one.top_k = 50;
  Tensor dev1 = cuda::to_device(random_logits(1, kVocab, 2.0f));
  gpu.sample(dev1, {one});
  const auto s1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) gpu.sample(dev1, {one});
  std::printf("sample R=1   V=128256 top_k 50 + top_p 0.9: %.3f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s1).count() / 50);
  gpu.to_host(dev);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) gpu.to_host(dev);
  std::printf(
      "copy R=256 V=128256 logits to the host:     %.3f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 5);
}

// One greedy row of DeepSeek-V2's 102,400 logits, as a decode step at batch 1 samples it (run with
// --gtest_also_run_disabled_tests): microseconds per sampling kernel, ten launches back to back in a CUDA
// graph, with the row's parameters in page-locked host memory (the engine's path) or on the device, the
// results also written to page-locked memory or not, and the row split over its parts or in one block. Each
// variant's token is checked against the host's argmax.
TEST_F(CudaSamplingTest, DISABLED_BenchGreedyRowKernel) {
  const int64_t V = 102400;
  const Tensor logits = random_logits(1, V, 2.0f);
  const Tensor dev = cuda::to_device(logits);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(logits.f32(), logits.f32() + V) - logits.f32());
  cuda::SampleRowParams p{};
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.repetition_penalty = 1.0f;
  p.work_row = -1;
  p.mask_begin = -1;
  p.forced_token = -1;
  auto* pinned_params = static_cast<cuda::SampleRowParams*>(cuda::host_alloc_pinned(sizeof(p)));
  *pinned_params = p;
  auto* device_params = static_cast<cuda::SampleRowParams*>(cuda::device_alloc(sizeof(p)));
  cuda::copy_to_device(device_params, &p, sizeof(p));
  auto* host_results =
      static_cast<cuda::SampleRowResult*>(cuda::host_alloc_pinned(sizeof(cuda::SampleRowResult)));
  auto* results = static_cast<cuda::SampleRowResult*>(cuda::device_alloc(sizeof(cuda::SampleRowResult)));
  const int64_t capacity = cuda::sample_candidate_capacity(V);
  auto* cand_ids = static_cast<int32_t*>(cuda::device_alloc(capacity * sizeof(int32_t)));
  auto* cand_values = static_cast<float*>(cuda::device_alloc(capacity * sizeof(float)));
  cuda::SampleRowWork split;
  split.parts = cuda::sample_row_parts(V);
  ASSERT_GT(split.parts, 1);
  split.part_keys = static_cast<uint64_t*>(cuda::device_alloc(split.parts * sizeof(uint64_t)));
  split.part_bad = static_cast<int32_t*>(cuda::device_alloc(split.parts * sizeof(int32_t)));
  split.counters = static_cast<uint32_t*>(cuda::device_alloc(sizeof(uint32_t)));
  cuda::memset_async(split.counters, 0, sizeof(uint32_t));
  struct Variant {
    const char* name;
    const cuda::SampleRowParams* params;
    cuda::SampleRowResult* host;
    bool split;
  };
  const Variant variants[] = {
      {"params pinned, results to host, split (engine)", pinned_params, host_results, true},
      {"params on device, results to host, split", device_params, host_results, true},
      {"params pinned, no host results, split", pinned_params, nullptr, true},
      {"params on device, no host results, split", device_params, nullptr, true},
      {"params pinned, results to host, one block", pinned_params, host_results, false},
  };
  std::printf("greedy row of %lld logits, %d parts: us per sampling kernel\n", static_cast<long long>(V),
              split.parts);
  for (const Variant& v : variants) {
    auto launch = [&] {
      cuda::launch_sample_rows(dev.data<float>(), 1, V, v.params, nullptr, nullptr, nullptr, nullptr, nullptr,
                               nullptr, nullptr, cand_ids, cand_values,
                               v.split ? split : cuda::SampleRowWork{}, results, v.host);
    };
    const double ms = cuda::time_graph_ms(
        [&] {
          for (int i = 0; i < 10; ++i) launch();
        },
        50);
    cuda::SampleRowResult got{};
    cuda::copy_to_host(&got, results, sizeof(got));
    EXPECT_EQ(got.token, argmax) << v.name;
    EXPECT_EQ(got.error, cuda::kSampleOk) << v.name;
    if (v.host != nullptr) {
      EXPECT_EQ(v.host->token, argmax) << v.name;
    }
    std::printf("  %-50s %7.2f\n", v.name, ms * 1000.0 / 10);
  }
  for (void* d :
       {static_cast<void*>(device_params), static_cast<void*>(results), static_cast<void*>(cand_ids),
        static_cast<void*>(cand_values), static_cast<void*>(split.part_keys),
        static_cast<void*>(split.part_bad), static_cast<void*>(split.counters)})
    cuda::device_free(d);
  cuda::host_free_pinned(pinned_params);
  cuda::host_free_pinned(host_results);
}

#else

TEST(CudaSamplingTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
