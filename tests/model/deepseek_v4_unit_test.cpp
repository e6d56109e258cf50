// DeepSeek-V4 unit tests: Sinkhorn projection of the hyper-connection comb weights, compressors (one call
// vs token by token vs a direct formula), the lightning indexer's causal masking, FP4 / e8m0 / FP8 `.scale`
// dequantization, config parsing in DeepSeek's and transformers' spellings, and the V4-Flash size report.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/arch/deepseek_v4_compressor.h"
#include "model/deepseek_v4_config.h"
#include "model/rope.h"
#include "model/weight_loader.h"

namespace dsinfer {
namespace {

Tensor random_tensor(Shape shape, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v) x = dist(rng);
  return Tensor::from_f32(v, shape);
}

// A plan for one sequence whose blocks are 0..n-1 in order.
BatchPlan single_plan(const std::vector<int32_t>& tokens, int32_t start, int32_t block_size,
                      int32_t capacity) {
  BatchPlan plan;
  plan.block_size = block_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    plan.token_ids.push_back(tokens[i]);
    plan.positions.push_back(start + static_cast<int32_t>(i));
    plan.slot_mapping.push_back(start + static_cast<int64_t>(i));
  }
  plan.cu_seqlens = {0, static_cast<int32_t>(tokens.size())};
  plan.context_lens = {start + static_cast<int32_t>(tokens.size())};
  const int32_t blocks = (capacity + block_size - 1) / block_size;
  plan.block_table_indptr = {0, blocks};
  for (int32_t b = 0; b < blocks; ++b) plan.block_table.push_back(b);
  plan.seq_ids = {0};
  plan.logits_rows = {static_cast<int32_t>(tokens.size()) - 1};
  return plan;
}

TEST(DeepseekV4HyperConnection, CombIsDoublyStochasticAndPreCollapses) {
  CpuBackend b;
  std::mt19937 rng(1);
  const int64_t T = 3, n = 4, H = 8, M = (2 + n) * n;
  Tensor x = random_tensor({T, n, H}, rng);
  HyperConnWeights w{random_tensor({M, n * H}, rng, 0.05f), random_tensor({M}, rng), random_tensor({3}, rng)};
  Tensor post, comb;
  Tensor collapsed = b.hc_pre(x, w, 20, 1e-6f, 1e-6f, &post, &comb);
  ASSERT_EQ(comb.shape(), (Shape{T, n, n}));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      float row = 0, col = 0;
      for (int64_t j = 0; j < n; ++j) {
        row += comb.f32()[(t * n + i) * n + j];
        col += comb.f32()[(t * n + j) * n + i];
        EXPECT_GT(comb.f32()[(t * n + i) * n + j], 0.0f);
      }
      EXPECT_NEAR(row, 1.0f, 1e-3f);
      EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last Sinkhorn step normalises columns
    }
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_GT(post.f32()[t * n + j], 0.0f);
      EXPECT_LT(post.f32()[t * n + j], 2.0f);
    }
  }
  // Reference for token 0: mixes from the RMS-normalised flat streams, pre = sigmoid(.) + eps, collapse.
  double ss = 0;
  for (int64_t i = 0; i < n * H; ++i) ss += static_cast<double>(x.f32()[i]) * x.f32()[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n * H) + 1e-6);
  std::vector<double> pre(n);
  for (int64_t j = 0; j < n; ++j) {
    double m = 0;
    for (int64_t i = 0; i < n * H; ++i) m += x.f32()[i] * inv * w.fn.f32()[j * n * H + i];
    pre[j] = 1.0 / (1.0 + std::exp(-(m * w.scale.f32()[0] + w.base.f32()[j]))) + 1e-6;
  }
  for (int64_t i = 0; i < H; ++i) {
    double expect = 0;
    for (int64_t j = 0; j < n; ++j) expect += pre[j] * x.f32()[j * H + i];
    EXPECT_NEAR(collapsed.f32()[i], expect, 1e-4) << i;
  }
  // One Sinkhorn iteration only normalises columns; more iterations approach doubly stochastic rows.
  Tensor post1, comb1;
  b.hc_pre(x, w, 1, 1e-6f, 1e-6f, &post1, &comb1);
  float worst_row_1 = 0, worst_row_20 = 0;
  for (int64_t i = 0; i < T * n; ++i) {
    float r1 = 0, r20 = 0;
    for (int64_t j = 0; j < n; ++j) r1 += comb1.f32()[i * n + j], r20 += comb.f32()[i * n + j];
    worst_row_1 = std::max(worst_row_1, std::abs(r1 - 1.0f));
    worst_row_20 = std::max(worst_row_20, std::abs(r20 - 1.0f));
  }
  EXPECT_LE(worst_row_20, worst_row_1);
  // collapse and write-back shapes
  EXPECT_EQ(collapsed.shape(), (Shape{T, H}));
  Tensor y = random_tensor({T, H}, rng);
  Tensor out = b.hc_post(x, y, post, comb);
  const float expect = post.f32()[1] * y.f32()[2] + comb.f32()[0 * n + 1] * x.f32()[0 * H + 2] +
                       comb.f32()[1 * n + 1] * x.f32()[1 * H + 2] +
                       comb.f32()[2 * n + 1] * x.f32()[2 * H + 2] +
                       comb.f32()[3 * n + 1] * x.f32()[3 * H + 2];
  EXPECT_NEAR(out.f32()[(0 * n + 1) * H + 2], expect, 1e-5f);
}

struct CompressorFixture {
  int64_t hidden = 16, dim = 8, rope_dim = 4, ratio;
  bool overlap;
  V4CompressorWeights w;
  RopeTable rope;
  CompressorFixture(int64_t r, bool ov) : ratio(r), overlap(ov) {
    std::mt19937 rng(7);
    const int64_t c = overlap ? 2 : 1;
    w.wkv.weight = random_tensor({c * dim, hidden}, rng, 0.3f);
    w.wgate.weight = random_tensor({c * dim, hidden}, rng, 0.3f);
    w.ape = random_tensor({ratio, c * dim}, rng);
    w.norm = random_tensor({dim}, rng);
    RopeConfig rc;
    rc.theta = 160000.0;
    rope = make_rope_table(rc, rope_dim);
  }
  std::vector<KvLayerSpec> layout() const {
    const int64_t c = overlap ? 2 : 1;
    return {{KvKind::kSlidingWindow, 2 * c * dim, c * ratio, 1}, {KvKind::kCompressed, dim, 0, ratio}};
  }
  V4CompressorStep step() const {
    V4CompressorStep s;
    s.ratio = ratio;
    s.overlap = overlap;
    s.in_layer = 0;
    s.out_layer = 1;
    s.rope_dim = rope_dim;
    return s;
  }
};

class DeepseekV4Compressor : public ::testing::TestWithParam<std::pair<int64_t, bool>> {};

TEST_P(DeepseekV4Compressor, OneCallChunksAndTokenByTokenGiveTheSameRows) {
  CpuBackend b;
  CompressorFixture f(GetParam().first, GetParam().second);
  const int32_t N = static_cast<int32_t>(5 * f.ratio + 3), bs = 8;
  std::mt19937 rng(3);
  Tensor x = random_tensor({N, f.hidden}, rng);
  std::vector<int32_t> tokens(N, 5);
  auto run = [&](int32_t chunk) {
    KvCache cache(f.layout(), (N + bs - 1) / bs, bs);
    for (int32_t begin = 0; begin < N; begin += chunk) {
      const int32_t end = std::min(N, begin + chunk);
      std::vector<int32_t> part(tokens.begin() + begin, tokens.begin() + end);
      BatchPlan plan = single_plan(part, begin, bs, N);
      const Tensor xs = x.rows(begin, end).clone();  // [chunk, hidden]
      run_v4_compressor(b, f.w, f.step(), f.rope, b.linear(xs, f.w.wkv), b.linear(xs, f.w.wgate), plan,
                        cache);
    }
    std::vector<float> rows;
    for (int64_t j = 0; j < N / f.ratio; ++j) {
      const float* r = cache.slot(1, j);
      rows.insert(rows.end(), r, r + f.dim);
    }
    return rows;
  };
  const std::vector<float> once = run(N), single = run(1), odd = run(3);
  ASSERT_EQ(once.size(), static_cast<size_t>(N / f.ratio * f.dim));
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_NEAR(once[i], single[i], 1e-5f) << i;
    EXPECT_NEAR(once[i], odd[i], 1e-5f) << i;
  }
  // Row 1 from the formula: softmax over the window (and, with overlap, the previous window's first half).
  const int64_t c = f.overlap ? 2 : 1, D = f.dim, j = 1;
  Tensor kv = b.linear(x, f.w.wkv), gate = b.linear(x, f.w.wgate);
  std::vector<double> pooled(D);
  for (int64_t d = 0; d < D; ++d) {
    std::vector<std::pair<double, double>> entries;  // (logit, value)
    if (f.overlap) {
      for (int64_t k = 0; k < f.ratio; ++k) {
        const int64_t t = (j - 1) * f.ratio + k;
        entries.push_back(
            {gate.f32()[t * c * D + d] + f.w.ape.f32()[k * c * D + d], kv.f32()[t * c * D + d]});
      }
    }
    for (int64_t k = 0; k < f.ratio; ++k) {
      const int64_t t = j * f.ratio + k, off = (c - 1) * D + d;
      entries.push_back(
          {gate.f32()[t * c * D + off] + f.w.ape.f32()[k * c * D + off], kv.f32()[t * c * D + off]});
    }
    double mx = -1e30, sum = 0, acc = 0;
    for (auto& e : entries) mx = std::max(mx, e.first);
    for (auto& e : entries) sum += std::exp(e.first - mx);
    for (auto& e : entries) acc += std::exp(e.first - mx) / sum * e.second;
    pooled[d] = acc;
  }
  double ss = 0;
  for (double v : pooled) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
  // The nope part (before the rope dims) is only normalised.
  for (int64_t d = 0; d < D - f.rope_dim; ++d) {
    EXPECT_NEAR(once[j * D + d], pooled[d] * inv * f.w.norm.f32()[d], 1e-4) << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Ratios, DeepseekV4Compressor,
                         ::testing::Values(std::make_pair<int64_t, bool>(4, true),
                                           std::make_pair<int64_t, bool>(4, false),
                                           std::make_pair<int64_t, bool>(8, false)));

TEST(DeepseekV4Indexer, NeverSelectsRowsBeyondTheQueryAndKeepsTheBest) {
  CpuBackend b;
  const int64_t ratio = 4, d = 8, heads = 2, top_k = 3, N = 40, bs = 8;
  std::mt19937 rng(11);
  KvCache cache({{KvKind::kCompressed, d, 0, ratio}}, N / bs, bs);
  for (int64_t j = 0; j < N / ratio; ++j) {
    Tensor row = random_tensor({1, d}, rng);
    std::copy(row.f32(), row.f32() + d, cache.slot(0, j));
  }
  std::vector<int32_t> tokens(N, 3);
  BatchPlan plan = single_plan(tokens, 0, bs, N);
  Tensor q = random_tensor({N, heads, d}, rng);
  Tensor w = Tensor::from_f32(std::vector<float>(N * heads, 1.0f), {N, heads});  // positive weights
  Tensor sel = b.indexer_topk(q, w, cache, 0, plan, ratio, top_k, 1.0f, 1.0f);
  ASSERT_EQ(sel.shape(), (Shape{N, top_k}));
  for (int64_t t = 0; t < N; ++t) {
    const int64_t visible = (t + 1) / ratio;
    std::vector<double> score(visible, 0.0);
    for (int64_t j = 0; j < visible; ++j)
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += q.f32()[(t * heads + h) * d + i] * cache.slot(0, j)[i];
        score[j] += std::max(dot, 0.0);
      }
    int64_t chosen = 0;
    double worst_chosen = 1e30;
    std::vector<bool> picked(visible, false);
    for (int64_t i = 0; i < top_k; ++i) {
      const int32_t j = sel.data<int32_t>()[t * top_k + i];
      if (j < 0) continue;
      EXPECT_LT(j, visible) << "token " << t << " selected a row it cannot see";
      picked[j] = true;
      worst_chosen = std::min(worst_chosen, score[j]);
      ++chosen;
    }
    EXPECT_EQ(chosen, std::min(top_k, visible)) << "token " << t;
    for (int64_t j = 0; j < visible; ++j) {
      if (!picked[j]) {
        EXPECT_LE(score[j], worst_chosen + 1e-5) << "token " << t << " row " << j;
      }
    }
  }
}

TEST(DeepseekV4Indexer, LowestPositionTiesKeepTheEarliestTiedRows) {
  // Rows 0, 3, 6, ... score above 0, every other row exactly 0: under kLowestPosition the tied zeros at the
  // boundary are the earliest visible rows (torch.topk on CUDA); the default (torch's CPU choice) differs.
  const int64_t ratio = 2, d = 8, heads = 2, top_k = 10, N = 48, bs = 8;  // at most 8 positive rows
  KvCache cache({{KvKind::kCompressed, d, 0, ratio}}, N / bs, bs);
  for (int64_t j = 0; j < N / ratio; ++j) {
    const float v = j % 3 == 0 ? 0.1f * static_cast<float>(j + 1) : -1.0f;  // distinct positive scores
    std::fill(cache.slot(0, j), cache.slot(0, j) + d, v);
  }
  const BatchPlan plan = single_plan(std::vector<int32_t>(N, 3), 0, bs, N);
  const Tensor q = Tensor::from_f32(std::vector<float>(N * heads * d, 0.5f), {N, heads, d});
  const Tensor w = Tensor::from_f32(std::vector<float>(N * heads, 1.0f), {N, heads});
  CpuBackend lowest;
  lowest.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  const Tensor sel = lowest.indexer_topk(q, w, cache, 0, plan, ratio, top_k, 1.0f, 1.0f);
  const Tensor torch_cpu = CpuBackend().indexer_topk(q, w, cache, 0, plan, ratio, top_k, 1.0f, 1.0f);
  bool differs = false;
  for (int64_t t = 0; t < N; ++t) {
    const int32_t visible = static_cast<int32_t>((t + 1) / ratio);
    std::vector<int32_t> expected;
    int32_t positive = 0;
    for (int32_t j = 0; j < visible; j += 3) ++positive;
    int32_t zeros = static_cast<int32_t>(top_k) - positive;  // the earliest zero-score rows fill the rest
    for (int32_t j = 0; j < visible; ++j) {
      if (j % 3 == 0) {
        expected.push_back(j);
      } else if (j % 3 != 0 && zeros > 0) {
        expected.push_back(j);
        --zeros;
      }
    }
    expected.resize(top_k, -1);
    const std::vector<int32_t> got(sel.data<int32_t>() + t * top_k, sel.data<int32_t>() + (t + 1) * top_k);
    const std::vector<int32_t> cpu_rule(torch_cpu.data<int32_t>() + t * top_k,
                                        torch_cpu.data<int32_t>() + (t + 1) * top_k);
    EXPECT_EQ(got, expected) << "token " << t;
    differs = differs || cpu_rule != expected;
  }
  EXPECT_TRUE(differs) << "the two tie rules should choose differently on this input";
}

TEST(DeepseekV4Cache, Bf16CacheValuesRoundTheStoredRows) {
  // set_bf16_cache_values: write_kv and write_compressed store bf16-rounded values (as the GPU's bf16 cache);
  // off (the default), the rows are stored exactly.
  const int64_t W = 6, bs = 4;
  const std::vector<float> v = {1.0f + 1.0f / 512, -3.14159f, 1e-3f, 65504.5f, 0.1f, -0.0f};  // [1, W]
  const Tensor row = Tensor::from_f32(v, {1, W});
  const BatchPlan plan = single_plan({5}, 0, bs, bs);
  CompressedRows rows;
  rows.seqs = {0};
  rows.rows = {0};
  for (bool round : {false, true}) {
    CpuBackend b;
    b.set_bf16_cache_values(round);
    KvCache cache({{KvKind::kFullHistory, W}, {KvKind::kCompressed, W, 0, 4}}, 1, bs);
    b.write_kv(cache, 0, plan, row, Tensor());
    b.write_compressed(cache, 1, plan, rows, row);
    for (int64_t l = 0; l < 2; ++l) {
      for (int64_t i = 0; i < W; ++i) {
        const float expected = round ? bf16_to_f32(f32_to_bf16(v[i])) : v[i];
        EXPECT_EQ(cache.slot(l, 0)[i], expected) << "layer " << l << " value " << i << " rounded " << round;
      }
    }
  }
  EXPECT_NE(bf16_to_f32(f32_to_bf16(v[1])), v[1]);  // the check can tell the two apart
}

TEST(DeepseekV4Attention, CompressedRowsFollowTheCausalRule) {
  // With a zero sink far below the scores and identical keys everywhere, the output equals the key; a row a
  // query must not see is set to a different value and must not leak in.
  CpuBackend b;
  const int64_t D = 4, ratio = 4, N = 12, bs = 4;
  KvCache cache({{KvKind::kSlidingWindow, D, 2, 1}, {KvKind::kCompressed, D, 0, ratio}}, N / bs, bs);
  std::vector<int32_t> tokens(N, 1);
  BatchPlan plan = single_plan(tokens, 0, bs, N);
  for (int64_t p = 0; p < N; ++p)
    for (int64_t i = 0; i < D; ++i) cache.slot(0, p)[i] = 1.0f;
  for (int64_t j = 0; j < N / ratio; ++j)
    for (int64_t i = 0; i < D; ++i) cache.slot(1, j)[i] = static_cast<float>(10 * (j + 1));
  Tensor q = Tensor::zeros(DType::F32, {N, 1, D});
  Tensor sinks = Tensor::from_f32({-1e9f}, {1});
  Tensor out = b.attention_v4(q, cache, 0, 2, 1, ratio, Tensor(), plan, sinks, 1.0f);
  for (int64_t t = 0; t < N; ++t) {
    const int64_t visible = (t + 1) / ratio, window = std::min<int64_t>(t + 1, 2);
    double expect = window * 1.0;
    for (int64_t j = 0; j < visible; ++j) expect += 10.0 * (j + 1);
    expect /= static_cast<double>(window + visible);
    EXPECT_NEAR(out.f32()[t * D], expect, 1e-4) << "token " << t;
  }
}

TEST(DeepseekV4Weights, Fp4UnpacksLowNibbleFirstWithE8m0Scales) {
  // e8m0: 2^(v - 127)
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128.0f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
  // e2m1 nibbles
  const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int v = 0; v < 16; ++v) EXPECT_EQ(fp4_e2m1_to_f32(static_cast<uint8_t>(v)), expect[v]) << v;
  // [2, 64] packed into [2, 32] int8, scales [2, 2] (one per 32 inputs)
  Tensor packed = Tensor::empty(DType::I8, {2, 32});
  for (int i = 0; i < 64; ++i)
    packed.data<uint8_t>()[i] = static_cast<uint8_t>((i % 16) | (((i + 3) % 16) << 4));
  Tensor scale = Tensor::empty(DType::F8_E8M0, {2, 2});
  const uint8_t sv[4] = {127, 129, 126, 130};
  for (int i = 0; i < 4; ++i) scale.data<uint8_t>()[i] = sv[i];
  Tensor w = dequantize_fp4_blocks(packed, scale, kFp4BlockK);
  ASSERT_EQ(w.shape(), (Shape{2, 64}));
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 64; ++k) {
      const uint8_t byte = packed.data<uint8_t>()[r * 32 + k / 2];
      const uint8_t nib = (k % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      EXPECT_EQ(w.f32()[r * 64 + k], expect[nib] * e8m0_to_f32(sv[r * 2 + k / 32])) << r << "," << k;
    }
  // A wrong scale shape is an error, not a crash.
  EXPECT_THROW(dequantize_fp4_blocks(packed, Tensor::empty(DType::F8_E8M0, {2, 3}), kFp4BlockK), Error);
}

TEST(DeepseekV4Weights, Fp8WithE8m0BlockScales) {
  Tensor w8 = Tensor::empty(DType::F8_E4M3, {130, 4});
  for (int i = 0; i < 520; ++i) w8.data<uint8_t>()[i] = 0x38;  // 1.0
  Tensor scale = Tensor::empty(DType::F8_E8M0, {2, 1});
  scale.data<uint8_t>()[0] = 127 + 3;  // 8
  scale.data<uint8_t>()[1] = 127 - 2;  // 0.25
  Tensor w = dequantize_fp8_blocks(w8, scale, 128, 128);
  EXPECT_EQ(w.f32()[0], 8.0f);
  EXPECT_EQ(w.f32()[127 * 4 + 3], 8.0f);
  EXPECT_EQ(w.f32()[128 * 4], 0.25f);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

const std::string kData = DSINFER_TEST_DATA;

TEST(DeepseekV4Config, ParsesDeepSeekSpelling) {
  DeepseekV4Config c = parse_deepseek_v4_config(read_json(kData + "/models/tiny-deepseek-v4/config.json"));
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.rope_dim, 8);
  ASSERT_EQ(c.attn_kinds.size(), 4u);
  EXPECT_EQ(c.attn_kinds[0], V4AttnKind::kHca);
  EXPECT_EQ(c.attn_kinds[1], V4AttnKind::kCsa);
  EXPECT_EQ(c.attn_kinds[2], V4AttnKind::kSliding);
  EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{128, 4, 0, 4}));
  EXPECT_EQ(c.hash_layers, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(c.main_rope.type, RopeType::kDefault);
  EXPECT_EQ(c.main_rope.theta, 10000.0);
  EXPECT_EQ(c.compress_rope.type, RopeType::kYarn);
  EXPECT_EQ(c.compress_rope.theta, 160000.0);
  EXPECT_EQ(c.compress_rope.factor, 4.0);
  EXPECT_EQ(c.compress_rope.original_max_position_embeddings, 64);
  EXPECT_EQ(*c.compress_rope.attention_factor, 1.0);
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c.swiglu_limit, 10.0);
}

TEST(DeepseekV4Config, TransformersSpellingGivesTheSameConfig) {
  nlohmann::json j = read_json(kData + "/models/tiny-deepseek-v4/config.json");
  DeepseekV4Config a = parse_deepseek_v4_config(j);
  nlohmann::json t = j;
  for (const char* key : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling",
                          "rope_theta", "compress_rope_theta"})
    t.erase(key);
  t["layer_types"] = {"heavily_compressed_attention", "compressed_sparse_attention", "sliding_attention",
                      "compressed_sparse_attention"};
  t["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  t["mlp_layer_types"] = {"hash_moe", "moe", "moe", "moe"};
  t["partial_rotary_factor"] = 0.25;
  t["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}},
      {"compress",
       {{"rope_type", "yarn"},
        {"rope_theta", 160000.0},
        {"factor", 4.0},
        {"original_max_position_embeddings", 64},
        {"beta_fast", 32.0},
        {"beta_slow", 1.0},
        {"attention_factor", 1.0},
        {"partial_rotary_factor", 0.25}}}};
  DeepseekV4Config b = parse_deepseek_v4_config(t);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_EQ(a.attn_kinds, b.attn_kinds);
  EXPECT_EQ(a.compress_ratios, b.compress_ratios);
  EXPECT_EQ(a.hash_layers, b.hash_layers);
  EXPECT_EQ(a.main_rope.theta, b.main_rope.theta);
  EXPECT_EQ(a.compress_rope.type, b.compress_rope.type);
  EXPECT_EQ(a.compress_rope.theta, b.compress_rope.theta);
  EXPECT_EQ(a.compress_rope.factor, b.compress_rope.factor);
  EXPECT_EQ(*a.compress_rope.attention_factor, *b.compress_rope.attention_factor);
  const RopeTable ra = make_rope_table(a.compress_rope, a.rope_dim),
                  rb = make_rope_table(b.compress_rope, b.rope_dim);
  EXPECT_EQ(ra.inv_freq, rb.inv_freq);
}

TEST(DeepseekV4Config, MissingOrInconsistentFieldsAreNamed) {
  nlohmann::json j = read_json(kData + "/models/tiny-deepseek-v4/config.json");
  auto expect_error = [](const nlohmann::json& cfg, const std::string& needle) {
    try {
      parse_deepseek_v4_config(cfg);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json k = j;
  k.erase("compress_ratios");
  expect_error(k, "compress_ratios");
  k = j;
  k["compress_ratios"] = {4, 4};
  expect_error(k, "compress_ratios");
  k = j;
  k.erase("num_hash_layers");
  expect_error(k, "num_hash_layers");
  k = j;
  k["o_groups"] = 3;
  expect_error(k, "o_groups");
  k = j;
  k["qk_rope_head_dim"] = 7;
  expect_error(k, "qk_rope_head_dim");
  k = j;
  k.erase("hc_mult");
  expect_error(k, "hc_mult");
  k = j;
  k["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
  expect_error(k, "full_attention");
}

TEST(DeepseekV4Config, FlashSizeReport) {
  DeepseekV4Config c = parse_deepseek_v4_config(read_json(kData + "/configs/deepseek-v4-flash.json"));
  EXPECT_EQ(c.num_layers, 43);
  EXPECT_EQ(c.mtp_compress_ratios.size(), 1u);  // the list also covers the MTP layer
  DeepseekV4SizeReport r = deepseek_v4_size_report(c);
  // Published: 284B total, 13B active.
  EXPECT_NEAR(static_cast<double>(r.total_params) / 1e9, 284.0, 3.0);
  EXPECT_NEAR(static_cast<double>(r.active_params_no_embed) / 1e9, 13.0, 1.0);
  EXPECT_GT(r.active_params, r.active_params_no_embed);
  // FP4 experts + FP8 attention: well under 1 byte per parameter on average.
  EXPECT_GT(r.weight_bytes, r.total_params / 2);
  EXPECT_LT(r.weight_bytes, r.total_params);
  EXPECT_GT(r.weight_bytes_with_mtp, r.weight_bytes);
  EXPECT_GT(r.mtp_params, 0);
  EXPECT_GT(r.kv_bytes_per_token_bf16, 0);
  EXPECT_EQ(r.kv_bytes_per_token_fp32, 2 * r.kv_bytes_per_token_bf16);
  std::printf(
      "V4-Flash: %.3fB params (%.3fB active, %.3fB without embedding/head), MTP %.3fB, weights %.2f GB "
      "(%.2f GB with MTP), KV %.2f B/token (bf16), window state %.2f MB/sequence (fp32)\n",
      r.total_params / 1e9, r.active_params / 1e9, r.active_params_no_embed / 1e9, r.mtp_params / 1e9,
      r.weight_bytes / 1e9, r.weight_bytes_with_mtp / 1e9, r.kv_bytes_per_token_bf16,
      r.kv_window_bytes_fp32 / 1e6);
}

}  // namespace
}  // namespace dsinfer
