// Tests for DeepSeek-V3.2 (DSA): the tiny-deepseek-v32 golden (one-shot and chunked prefill), the config's
// indexer fields, and the CPU ops behind it: indexer top-k (causal masking, fewer visible tokens than
// top-k, selection against a brute-force ranking, chunk-independent tie-breaking, batching) and sparse MLA
// against the dense kernel and a direct reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/golden_eval.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/model_config.h"

namespace dsinfer {
namespace {

const std::string kModelDir = std::string(DSINFER_TEST_DATA) + "/models/tiny-deepseek-v32";

// One sequence's part of a step: `cached` tokens already in the cache, `fresh` new ones.
struct SeqStep {
  int32_t cached = 0;
  int32_t fresh = 0;
  int32_t prompt_len = 0;  // 0: not given
};

// A plan over sequences whose blocks are laid out one sequence after another.
BatchPlan make_plan(const std::vector<SeqStep>& seqs, int32_t block_size, int32_t blocks_per_seq) {
  BatchPlan plan;
  plan.block_size = block_size;
  plan.cu_seqlens.push_back(0);
  plan.block_table_indptr.push_back(0);
  bool prompts = false;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t b = 0; b < blocks_per_seq; ++b)
      plan.block_table.push_back(static_cast<int32_t>(s) * blocks_per_seq + b);
    plan.block_table_indptr.push_back(static_cast<int32_t>(plan.block_table.size()));
    plan.context_lens.push_back(seqs[s].cached + seqs[s].fresh);
    plan.seq_ids.push_back(static_cast<int64_t>(s));
    plan.prompt_lens.push_back(seqs[s].prompt_len > 0 ? seqs[s].prompt_len : seqs[s].cached + seqs[s].fresh);
    prompts = prompts || seqs[s].prompt_len > 0;
    for (int32_t i = 0; i < seqs[s].fresh; ++i) {
      const int32_t pos = seqs[s].cached + i;
      plan.token_ids.push_back(0);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(plan.slot_of(static_cast<int32_t>(s), pos));
    }
    plan.cu_seqlens.push_back(plan.num_tokens());
  }
  if (!prompts) plan.prompt_lens.clear();
  return plan;
}

Tensor random_tensor(Shape shape, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v) x = dist(rng);
  return Tensor::from_f32(v, shape);
}

// Fills every slot of cache entry `layer` with random values.
void fill_cache(KvCache& cache, int64_t layer, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t s = 0; s < cache.num_blocks() * cache.block_size(); ++s) {
    float* row = cache.slot(layer, s);
    for (int64_t i = 0; i < cache.width(layer); ++i) row[i] = dist(rng);
  }
}

// The index score of query token t against position p of sequence s, in double.
double index_score(const Tensor& q, const Tensor& w, const KvCache& cache, int64_t layer,
                   const BatchPlan& plan, int64_t t, int32_t s, int64_t p, double scale,
                   double weight_scale) {
  const int64_t Hi = q.dim(1), D = q.dim(2);
  const float* k = cache.slot(layer, plan.slot_of(s, p));
  double score = 0.0;
  for (int64_t h = 0; h < Hi; ++h) {
    double dot = 0.0;
    for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(q.f32()[(t * Hi + h) * D + i]) * k[i];
    score += w.f32()[t * Hi + h] * weight_scale * std::max(dot * scale, 0.0);
  }
  return score;
}

std::vector<int32_t> row_of(const Tensor& sel, int64_t t) {
  const int64_t K = sel.dim(1);
  return std::vector<int32_t>(sel.data<int32_t>() + t * K, sel.data<int32_t>() + (t + 1) * K);
}

// ---------------------------------------------------------------------------------------------- golden

TEST(DeepseekV32Golden, PassesOneShotAndChunked) {
  CpuBackend backend;
  auto model = load_model(kModelDir, backend);
  for (int64_t chunk : {0, 5, 1}) {
    GoldenOptions options;
    options.prefill_chunk = chunk;
    GoldenReport report = run_golden(*model, kModelDir + "/golden.safetensors", options);
    ASSERT_EQ(report.cases.size(), 3u);
    for (const GoldenCase& c : report.cases) {
      EXPECT_TRUE(c.greedy_match) << "chunk " << chunk << " case " << c.index;
      EXPECT_LE(c.rel_l2_err, 1e-4) << "chunk " << chunk << " case " << c.index;
    }
    EXPECT_TRUE(report.pass) << "chunk " << chunk;
  }
}

TEST(DeepseekV32Golden, CacheLayoutHasMlaThenIndexerEntries) {
  CpuBackend backend;
  auto model = load_model(kModelDir, backend);
  const ModelConfig& c = model->config();
  std::vector<KvLayerSpec> layout = model->kv_layout();
  ASSERT_EQ(static_cast<int64_t>(layout.size()), 2 * c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    EXPECT_EQ(layout[i].width, c.kv_lora_rank + c.qk_rope_head_dim);
    EXPECT_EQ(layout[c.num_layers + i].width, c.index_head_dim);
  }
}

TEST(DeepseekV32Config, ParsesIndexerFields) {
  ModelConfig c = load_model_config(kModelDir);
  EXPECT_EQ(c.arch, Arch::kDeepseekV32);
  EXPECT_EQ(c.index_n_heads, 2);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 16);
  EXPECT_EQ(c.kv_lora_rank, 32);  // MLA and MoE fields as for V3
  EXPECT_EQ(c.n_routed_experts, 8);

  nlohmann::json j = c.raw;
  j.erase("index_topk");
  EXPECT_EQ(parse_model_config(j).index_topk, 2048);  // DeepseekV32Config default
  j["q_lora_rank"] = nullptr;
  EXPECT_THROW(parse_model_config(j), Error);
  j = c.raw;
  j["index_head_dim"] = 4;  // smaller than qk_rope_head_dim
  EXPECT_THROW(parse_model_config(j), Error);
}

// ---------------------------------------------------------------------------------------------- layer_norm

TEST(DeepseekV32Ops, LayerNormMatchesFormula) {
  std::mt19937 rng(1);
  CpuBackend b;
  Tensor x = random_tensor({3, 16}, rng, 2.0f), w = random_tensor({16}, rng), bias = random_tensor({16}, rng);
  Tensor y = b.layer_norm(x, w, bias, 1e-6f);
  for (int64_t t = 0; t < 3; ++t) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 16; ++i) mean += x.f32()[t * 16 + i] / 16.0;
    for (int64_t i = 0; i < 16; ++i) var += std::pow(x.f32()[t * 16 + i] - mean, 2) / 16.0;
    for (int64_t i = 0; i < 16; ++i) {
      double ref = (x.f32()[t * 16 + i] - mean) / std::sqrt(var + 1e-6) * w.f32()[i] + bias.f32()[i];
      EXPECT_NEAR(y.f32()[t * 16 + i], ref, 1e-5);
    }
  }
}

// ---------------------------------------------------------------------------------------------- indexer

TEST(DeepseekV32Indexer, NeverSelectsFutureTokens) {
  // Key j scores j: later keys always score higher, so without the causal mask future keys would win.
  const int64_t Hi = 2, D = 4, top_k = 3, L = 10;
  KvCache cache({{KvKind::kFullHistory, D}}, 1, 16);
  BatchPlan plan = make_plan({{0, L}}, 16, 1);
  for (int64_t j = 0; j < L; ++j) std::fill(cache.slot(0, j), cache.slot(0, j) + D, static_cast<float>(j));
  Tensor q = Tensor::from_f32(std::vector<float>(L * Hi * D, 1.0f), {L, Hi, D});
  Tensor w = Tensor::from_f32(std::vector<float>(L * Hi, 1.0f), {L, Hi});
  CpuBackend b;
  Tensor sel = b.dsa_indexer_topk(q, w, cache, 0, plan, 0.25f, 0.5f, top_k);  // [L, top_k]
  ASSERT_EQ(sel.dtype(), DType::I32);
  for (int64_t t = 0; t < L; ++t) {
    std::vector<int32_t> expected;
    for (int64_t j = std::max<int64_t>(0, t - top_k + 1); j <= t; ++j)
      expected.push_back(static_cast<int32_t>(j));
    while (static_cast<int64_t>(expected.size()) < top_k) expected.push_back(-1);
    EXPECT_EQ(row_of(sel, t), expected) << "token " << t;
  }
}

TEST(DeepseekV32Indexer, FewerVisibleThanTopKSelectsAllVisible) {
  std::mt19937 rng(2);
  const int64_t Hi = 3, D = 8, top_k = 8, L = 5;
  KvCache cache({{KvKind::kFullHistory, D}}, 1, 8);
  fill_cache(cache, 0, rng);
  BatchPlan plan = make_plan({{0, L}}, 8, 1);
  CpuBackend b;
  Tensor sel = b.dsa_indexer_topk(random_tensor({L, Hi, D}, rng), random_tensor({L, Hi}, rng), cache, 0, plan,
                                  0.3f, 0.6f, top_k);
  ASSERT_EQ(sel.dim(0), L);
  ASSERT_EQ(sel.dim(1), top_k);
  for (int64_t t = 0; t < L; ++t) {
    std::vector<int32_t> expected(top_k, -1);
    for (int64_t j = 0; j <= t; ++j) expected[j] = static_cast<int32_t>(j);
    EXPECT_EQ(row_of(sel, t), expected) << "token " << t;
  }
}

TEST(DeepseekV32Indexer, SelectsTheHighestScoresAcrossShapes) {
  struct Shape_ {
    int64_t Hi, D, top_k, cached, fresh;
  };
  std::mt19937 rng(3);
  CpuBackend b;
  for (const Shape_ sh : {Shape_{2, 16, 16, 0, 40}, Shape_{4, 32, 7, 20, 13}, Shape_{1, 8, 1, 5, 6},
                          Shape_{8, 24, 64, 190, 10}, Shape_{3, 16, 2, 100, 1}}) {
    const int32_t bs = 16, blocks = 16;
    KvCache cache({{KvKind::kFullHistory, sh.D}}, blocks, bs);
    fill_cache(cache, 0, rng);
    BatchPlan plan =
        make_plan({{static_cast<int32_t>(sh.cached), static_cast<int32_t>(sh.fresh)}}, bs, blocks);
    const int64_t T = plan.num_tokens();
    Tensor q = random_tensor({T, sh.Hi, sh.D}, rng), w = random_tensor({T, sh.Hi}, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D)),
                wscale = 1.0f / std::sqrt(static_cast<float>(sh.Hi));
    Tensor sel = b.dsa_indexer_topk(q, w, cache, 0, plan, scale, wscale, sh.top_k);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = plan.positions[t] + 1;
      std::vector<int32_t> row = row_of(sel, t);
      std::vector<int32_t> chosen;
      for (int32_t p : row) {
        if (p >= 0) chosen.push_back(p);
      }
      ASSERT_EQ(static_cast<int64_t>(chosen.size()), std::min(n, sh.top_k));
      ASSERT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
      // Every chosen key scores at least as high as every key left out (up to float rounding).
      double min_in = INFINITY, max_out = -INFINITY;
      for (int64_t p = 0; p < n; ++p) {
        double s = index_score(q, w, cache, 0, plan, t, 0, p, scale, wscale);
        if (std::binary_search(chosen.begin(), chosen.end(), static_cast<int32_t>(p))) {
          min_in = std::min(min_in, s);
        } else {
          max_out = std::max(max_out, s);
        }
      }
      EXPECT_GE(min_in, max_out - 1e-5) << "token " << t << " Hi " << sh.Hi << " top_k " << sh.top_k;
    }
  }
}

TEST(DeepseekV32Indexer, ChunkedPrefillBreaksTiesAsOneShot) {
  // Most keys score exactly 0 (q . k < 0 on every head), so the choice among them is a tie-break; with
  // prompt_lens a chunk must pick what the one-shot prefill picks.
  std::mt19937 rng(4);
  const int64_t Hi = 2, D = 8, top_k = 6, L = 37;
  KvCache cache({{KvKind::kFullHistory, D}}, 4, 16);
  fill_cache(cache, 0, rng);
  for (int64_t j = 0; j < L; ++j) {
    if (j % 3 != 0) std::fill(cache.slot(0, j), cache.slot(0, j) + D, -1.0f);  // zero score below
  }
  Tensor q_all = Tensor::from_f32(std::vector<float>(L * Hi * D, 0.5f), {L, Hi, D});  // positive q
  Tensor w_all = Tensor::from_f32(std::vector<float>(L * Hi, 1.0f), {L, Hi});
  CpuBackend b;
  BatchPlan one_shot = make_plan({{0, static_cast<int32_t>(L)}}, 16, 4);
  Tensor ref = b.dsa_indexer_topk(q_all, w_all, cache, 0, one_shot, 1.0f, 1.0f, top_k);
  const int32_t chunk = 5;
  for (int32_t begin = 0; begin < L; begin += chunk) {
    const int32_t n = std::min<int32_t>(chunk, static_cast<int32_t>(L) - begin);
    BatchPlan plan = make_plan({{begin, n, static_cast<int32_t>(L)}}, 16, 4);
    Tensor q = q_all.rows(begin, begin + n).clone(), w = w_all.rows(begin, begin + n).clone();
    Tensor sel = b.dsa_indexer_topk(q, w, cache, 0, plan, 1.0f, 1.0f, top_k);
    for (int32_t i = 0; i < n; ++i)
      EXPECT_EQ(row_of(sel, i), row_of(ref, begin + i)) << "token " << begin + i;
  }
}

TEST(DeepseekV32Indexer, LowestPositionTiesKeepTheEarliestTiedKeys) {
  // Keys 0, 3, 6, ... score above 0, every other key exactly 0: under kLowestPosition the tied zeros at the
  // boundary are the earliest ones, whatever the chunking; the default (torch's CPU choice) differs here.
  const int64_t Hi = 2, D = 8, top_k = 20, L = 37;
  std::mt19937 rng(6);
  KvCache cache({{KvKind::kFullHistory, D}}, 4, 16);
  fill_cache(cache, 0, rng);
  for (int64_t j = 0; j < L; ++j) {
    const float v = j % 3 == 0 ? 0.1f * static_cast<float>(j + 1) : -1.0f;  // distinct positive scores
    std::fill(cache.slot(0, j), cache.slot(0, j) + D, v);
  }
  Tensor q = Tensor::from_f32(std::vector<float>(L * Hi * D, 0.5f), {L, Hi, D});
  Tensor w = Tensor::from_f32(std::vector<float>(L * Hi, 1.0f), {L, Hi});
  CpuBackend lowest;
  lowest.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  const BatchPlan plan = make_plan({{0, static_cast<int32_t>(L)}}, 16, 4);
  const Tensor sel = lowest.dsa_indexer_topk(q, w, cache, 0, plan, 1.0f, 1.0f, top_k);
  bool differs = false;
  const Tensor torch_cpu = CpuBackend().dsa_indexer_topk(q, w, cache, 0, plan, 1.0f, 1.0f, top_k);
  for (int64_t t = 0; t < L; ++t) {
    std::vector<int32_t> expected;
    if (t + 1 <= top_k) {
      for (int32_t j = 0; j <= t; ++j) expected.push_back(j);
    } else {
      int32_t positive = 0;
      for (int32_t j = 0; j <= t; j += 3) ++positive;
      int32_t zeros = static_cast<int32_t>(top_k) - positive;  // the earliest zero-score keys fill the rest
      for (int32_t j = 0; j <= t; ++j) {
        if (j % 3 == 0) {
          expected.push_back(j);
        } else if (zeros > 0) {
          expected.push_back(j);
          --zeros;
        }
      }
    }
    expected.resize(top_k, -1);
    EXPECT_EQ(row_of(sel, t), expected) << "token " << t;
    differs = differs || row_of(torch_cpu, t) != expected;
  }
  EXPECT_TRUE(differs) << "the two tie rules should choose differently on this input";
  // Chunked prefill (prompt_lens given) chooses alike.
  for (int32_t begin = 0; begin < L; begin += 7) {
    const int32_t n = std::min<int32_t>(7, static_cast<int32_t>(L) - begin);
    const BatchPlan chunk = make_plan({{begin, n, static_cast<int32_t>(L)}}, 16, 4);
    const Tensor part =
        lowest.dsa_indexer_topk(q.rows(begin, begin + n).clone(), w.rows(begin, begin + n).clone(), cache, 0,
                                chunk, 1.0f, 1.0f, top_k);
    for (int32_t i = 0; i < n; ++i)
      EXPECT_EQ(row_of(part, i), row_of(sel, begin + i)) << "token " << begin + i;
  }
}

TEST(DeepseekV32Indexer, SequencesInABatchOnlySeeTheirOwnKeys) {
  std::mt19937 rng(5);
  const int64_t Hi = 2, D = 8, top_k = 4;
  KvCache cache({{KvKind::kFullHistory, D}}, 8, 8);
  fill_cache(cache, 0, rng);
  BatchPlan both = make_plan({{10, 3}, {0, 9}}, 8, 4);
  const int64_t T = both.num_tokens();
  Tensor q = random_tensor({T, Hi, D}, rng), w = random_tensor({T, Hi}, rng);
  CpuBackend b;
  Tensor sel = b.dsa_indexer_topk(q, w, cache, 0, both, 0.5f, 0.7f, top_k);
  // Sequence 1 alone, in its own blocks (4..7): same selection.
  BatchPlan second = make_plan({{0, 9}}, 8, 4);
  for (int32_t& blk : second.block_table) blk += 4;
  Tensor alone =
      b.dsa_indexer_topk(q.rows(3, T).clone(), w.rows(3, T).clone(), cache, 0, second, 0.5f, 0.7f, top_k);
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(row_of(sel, 3 + i), row_of(alone, i));
}

// ---------------------------------------------------------------------------------------------- sparse MLA

TEST(DeepseekV32SparseMla, FullSelectionEqualsDenseMla) {
  std::mt19937 rng(6);
  const int64_t H = 4, R = 32, P = 8;
  KvCache cache({{KvKind::kFullHistory, R + P}}, 6, 8);
  fill_cache(cache, 0, rng);
  BatchPlan plan = make_plan({{7, 12}, {0, 5}}, 8, 3);
  const int64_t T = plan.num_tokens(), K = 24;
  Tensor q_lat = random_tensor({T, H, R}, rng, 0.3f), q_pe = random_tensor({T, H, P}, rng, 0.3f);
  std::vector<int32_t> sel(T * K, -1);
  for (int64_t t = 0; t < T; ++t) {
    for (int32_t p = 0; p <= plan.positions[t]; ++p) sel[t * K + p] = p;
  }
  Tensor selected = Tensor::empty(DType::I32, {T, K});
  std::copy(sel.begin(), sel.end(), selected.data<int32_t>());
  CpuBackend b;
  Tensor dense = b.attention_mla(q_lat, q_pe, cache, 0, plan, 0.2f);
  Tensor sparse = b.attention_mla_sparse(q_lat, q_pe, cache, 0, plan, selected, 0.2f);
  ASSERT_EQ(sparse.shape(), dense.shape());
  for (int64_t i = 0; i < dense.numel(); ++i) EXPECT_NEAR(sparse.f32()[i], dense.f32()[i], 1e-6) << i;
}

TEST(DeepseekV32SparseMla, PartialSelectionMatchesDirectSoftmax) {
  std::mt19937 rng(7);
  const int64_t H = 2, R = 16, P = 4;
  KvCache cache({{KvKind::kFullHistory, R + P}}, 2, 16);
  fill_cache(cache, 0, rng);
  BatchPlan plan = make_plan({{20, 2}}, 16, 2);
  const int64_t T = 2, K = 5;
  const std::vector<int32_t> sel = {3, 9, -1, 17, 20, 0, 21, 5, -1, -1};  // any order, -1 ignored
  Tensor selected = Tensor::empty(DType::I32, {T, K});
  std::copy(sel.begin(), sel.end(), selected.data<int32_t>());
  Tensor q_lat = random_tensor({T, H, R}, rng, 0.3f), q_pe = random_tensor({T, H, P}, rng, 0.3f);
  const float scale = 0.4f;
  CpuBackend b;
  Tensor out = b.attention_mla_sparse(q_lat, q_pe, cache, 0, plan, selected, scale);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> s;
      std::vector<const float*> rows;
      for (int64_t i = 0; i < K; ++i) {
        if (sel[t * K + i] < 0) continue;
        const float* row = cache.slot(0, plan.slot_of(0, sel[t * K + i]));
        double d = 0;
        for (int64_t r = 0; r < R; ++r) d += double(q_lat.f32()[(t * H + h) * R + r]) * row[r];
        for (int64_t p = 0; p < P; ++p) d += double(q_pe.f32()[(t * H + h) * P + p]) * row[R + p];
        s.push_back(d * scale);
        rows.push_back(row);
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t r = 0; r < R; ++r) {
        double ref = 0;
        for (size_t j = 0; j < s.size(); ++j) ref += s[j] / sum * rows[j][r];
        EXPECT_NEAR(out.f32()[(t * H + h) * R + r], ref, 1e-5);
      }
    }
  }
}

TEST(DeepseekV32SparseMla, RejectsPositionsBeyondTheCache) {
  KvCache cache({{KvKind::kFullHistory, 12}}, 1, 8);
  BatchPlan plan = make_plan({{0, 2}}, 8, 1);
  Tensor selected = Tensor::empty(DType::I32, {2, 1});
  selected.data<int32_t>()[0] = 0;
  selected.data<int32_t>()[1] = 5;  // only 2 tokens cached
  CpuBackend b;
  Tensor q_lat = Tensor::zeros(DType::F32, {2, 1, 8}), q_pe = Tensor::zeros(DType::F32, {2, 1, 4});
  EXPECT_THROW(b.attention_mla_sparse(q_lat, q_pe, cache, 0, plan, selected, 1.0f), Error);
}

}  // namespace
}  // namespace dsinfer
