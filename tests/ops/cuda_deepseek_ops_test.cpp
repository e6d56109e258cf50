// CudaBackend's DeepSeek-V2/V3 ops (MLA attention, head_matmul, MoE routing and experts) against the CPU
// reference on random inputs (runs where a GPU is visible; CI compiles it and skips). Weights and cached rows
// are bf16-representable so that both backends see the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "model/rope.h"
#include "scrambled_plan.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/arch_path.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

class CudaDeepseekOpsTest : public ::testing::Test {
 public:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  }
  std::mt19937 rng{20261130};
  // Normal values rounded to bf16 (exactly representable in the bf16 cache and weights).
  Tensor random_bf16_values(Shape shape, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_f32(f32_to_bf16(d(rng)));
    return t;
  }
  static Tensor to_bf16_bits(const Tensor& values) {
    Tensor bits = Tensor::empty(DType::BF16, values.shape());
    for (int64_t i = 0; i < values.numel(); ++i) bits.data<uint16_t>()[i] = f32_to_bf16(values.f32()[i]);
    return bits;
  }
  static double rel_err(const Tensor& a, const Tensor& b) {
    double d = 0, n = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      d += std::pow(double(a.f32()[i]) - b.f32()[i], 2);
      n += std::pow(double(b.f32()[i]), 2);
    }
    return std::sqrt(d / std::max(n, 1e-30));
  }
  CpuBackend cpu;
};

// ---- MLA ----

// Fills every position of `seqs` (cached + new) with random bf16 rows in the CPU cache and copies the cache
// image into a float32 and a bf16 GPU cache; then compares attention_mla for the plan's query tokens.
// Returns the GPU outputs (float32 cache, bf16 cache) as host tensors.
// tol_bf16 (< 0: tol) bounds the bf16 cache's error, where the multi-query prefill kernel (bf16 queries and
// probabilities) may run; its error is printed when it is looser than tol.
std::vector<Tensor> check_mla(CudaDeepseekOpsTest* test, int64_t H, int64_t R, int64_t P,
                              const std::vector<std::pair<int32_t, int32_t>>& seqs, double tol,
                              double tol_bf16 = -1.0) {
  const int32_t bs = 16;
  const int64_t width = R + P;
  std::vector<std::pair<int32_t, int32_t>> full;
  int32_t blocks = 1;
  for (auto [cached, fresh] : seqs) {
    full.push_back({0, cached + fresh});
    blocks += (cached + fresh + bs - 1) / bs;
  }
  blocks = std::max(blocks, 450);
  const BatchPlan fill = make_plan(full, bs, blocks);
  const BatchPlan plan = make_plan(seqs, bs, blocks);
  KvCache cpu_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs);
  std::fill(cpu_cache.slot(0, 0), cpu_cache.slot(0, 0) + cpu_cache.storage(0).numel(), 0.0f);
  const int64_t N = fill.num_tokens();
  test->cpu.write_kv(cpu_cache, 0, fill, test->random_bf16_values({N, R}), test->random_bf16_values({N, P}));
  const Tensor& image = cpu_cache.storage(0);
  KvCache f32_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda, DType::F32);
  KvCache bf16_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda, DType::BF16);
  cuda::copy_to_device(const_cast<void*>(f32_cache.storage(0).raw()), image.raw(), image.nbytes());
  const Tensor bits = CudaDeepseekOpsTest::to_bf16_bits(image);
  cuda::copy_to_device(const_cast<void*>(bf16_cache.storage(0).raw()), bits.raw(), bits.nbytes());

  const int64_t T = plan.num_tokens();
  const Tensor q_lat = test->random_bf16_values({T, H, R}, 0.1f),
               q_pe = test->random_bf16_values({T, H, P}, 0.1f);
  const float scale = 1.0f / std::sqrt(192.0f);
  const Tensor ref = test->cpu.attention_mla(q_lat, q_pe, cpu_cache, 0, plan, scale);
  CudaBackend gpu;
  const Tensor dq = cuda::to_device(q_lat), dp = cuda::to_device(q_pe);
  std::vector<Tensor> outs;
  for (const KvCache* cache : {&f32_cache, &bf16_cache}) {
    const Tensor out = gpu.to_host(gpu.attention_mla(dq, dp, *cache, 0, plan, scale));
    EXPECT_EQ(out.shape(), ref.shape());
    const bool bf16 = cache == &bf16_cache;
    const double err = CudaDeepseekOpsTest::rel_err(out, ref);
    if (bf16 && tol_bf16 > tol)
      std::printf("attention_mla H %lld T %lld bf16 cache: relative error %.2e\n", static_cast<long long>(H),
                  static_cast<long long>(T), err);
    EXPECT_LT(err, bf16 && tol_bf16 >= 0.0 ? tol_bf16 : tol)
        << "H=" << H << " R=" << R << " P=" << P << " T=" << T << " cache " << dtype_name(cache->dtype());
    outs.push_back(out);
  }
  return outs;
}

TEST_F(CudaDeepseekOpsTest, MlaDecodeMatchesCpu) {
  // One new token per sequence, contexts 1 .. 3000 (split-KV for the long ones).
  const std::vector<std::pair<int32_t, int32_t>> decode = {{0, 1},   {1, 1},    {16, 1},  {63, 1},
                                                           {299, 1}, {1000, 1}, {2999, 1}};
  for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, decode, 1e-5);
  check_mla(this, 16, 512, 64, {{2999, 1}}, 1e-5);  // batch 1, long context: many splits
  check_mla(this, 4, 32, 8, decode, 1e-5);          // the tiny models' shape
  check_mla(this, 3, 100, 12, {{5, 1}, {200, 1}}, 1e-5);
}

TEST_F(CudaDeepseekOpsTest, MlaDecodeTensorCoreEdgesMatchCpu) {
  // The tensor-core kernel's edges (bf16 cache, R 512, P 64; the float32 cache runs the CUDA-core kernel):
  // contexts around its 64-row tile, a context of 1, mixed lengths in one batch (empty splits), a partial
  // head group (H 24), many splits (T 1, long context) and T = 257 (no split, next_pow2 512).
  const std::vector<std::pair<int32_t, int32_t>> edges = {{0, 1},   {1, 1},   {62, 1},  {63, 1},  {64, 1},
                                                          {126, 1}, {128, 1}, {199, 1}, {4000, 1}};
  for (int64_t H : {16, 24, 128}) check_mla(this, H, 512, 64, edges, 1e-5);
  check_mla(this, 128, 512, 64, {{4096, 1}}, 1e-5);
  check_mla(this, 16, 512, 64, {{64, 1}}, 1e-5);
  std::vector<std::pair<int32_t, int32_t>> many;
  for (int32_t i = 0; i < 257; ++i) many.push_back({(i * 37) % 300, 1});
  check_mla(this, 16, 512, 64, many, 1e-5);
}

TEST_F(CudaDeepseekOpsTest, MlaFusedMergeEqualsCombineKernel) {
  // The last split block to arrive merges the splits (few splits), else the separate combine kernel: both
  // must match the CPU and give the same bits. Forced both ways (and fused for every split count) on the
  // CUDA-core (float32 cache) and tensor-core (bf16 cache) kernels: batch 1 and 3 at contexts of 2 to ~60
  // splits, a partial head group, empty splits (mixed lengths).
  const int saved = cuda::mla_fused_merge_max_splits();
  struct Case {
    int64_t H, R, P;
    std::vector<std::pair<int32_t, int32_t>> seqs;
  };
  const std::vector<Case> cases = {{16, 512, 64, {{130, 1}}},
                                   {16, 512, 64, {{255, 1}}},
                                   {16, 512, 64, {{700, 1}}},
                                   {16, 512, 64, {{3000, 1}}},
                                   {24, 512, 64, {{10, 1}, {500, 1}, {64, 1}}},
                                   {128, 512, 64, {{300, 1}}},
                                   {4, 32, 8, {{0, 1}, {90, 1}, {1000, 1}}},
                                   {3, 100, 12, {{5, 1}, {200, 1}}}};
  for (const Case& c : cases) {
    std::vector<std::vector<Tensor>> runs;
    for (int max_splits : {0, 8, 4096}) {
      cuda::mla_set_fused_merge_max_splits(max_splits);
      rng.seed(777);  // the same inputs for every run
      runs.push_back(check_mla(this, c.H, c.R, c.P, c.seqs, 1e-5));
    }
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t k = 0; k < runs[0].size(); ++k) {
        int64_t differ = 0;
        for (int64_t i = 0; i < runs[0][k].numel(); ++i) differ += runs[0][k].f32()[i] != runs[r][k].f32()[i];
        EXPECT_EQ(differ, 0) << "H=" << c.H << " R=" << c.R << " run " << r << " cache " << k;
      }
  }
  cuda::mla_set_fused_merge_max_splits(saved);
}

// Relative error bound of the multi-query prefill kernel (bf16 queries and probabilities) against the
// float32 CPU reference; the decode kernels stay within 1e-5.
constexpr double kMlaPrefillTol = 1e-2;

// Runs body() with the MLA step split's thresholds set (min_query query tokens of a sequence for the
// multi-query kernel, min_blocks of its blocks x head groups in a step), then restores them.
template <class Fn>
void with_prefill_policy(int min_query, int min_blocks, Fn&& body) {
  const int saved_query = cuda::mla_prefill_min_query(), saved_blocks = cuda::mla_prefill_min_blocks();
  cuda::mla_set_prefill_min_query(min_query);
  cuda::mla_set_prefill_min_blocks(min_blocks);
  body();
  cuda::mla_set_prefill_min_query(saved_query);
  cuda::mla_set_prefill_min_blocks(saved_blocks);
}
constexpr int kPrefillOff = 1 << 30;

TEST_F(CudaDeepseekOpsTest, MlaPrefillAndChunkedMatchCpu) {
  // Whole prompts and chunks after a cached prefix, causal within the chunk: the decode kernels (prefill
  // kernel off) at 1e-5, then the multi-query kernel forced on for the bf16 cache, for every sequence
  // (min_query 1: decode tokens are blocks of one) and split by sequence (min_query 2 and 64).
  const std::vector<std::pair<int32_t, int32_t>> chunks = {{0, 100}, {37, 60}, {250, 1}, {0, 3}};
  with_prefill_policy(64, kPrefillOff, [&] {
    for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, chunks, 1e-5);
  });
  for (int min_query : {1, 2, 64})
    with_prefill_policy(min_query, 0, [&] {
      for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, chunks, 1e-5, kMlaPrefillTol);
    });
  check_mla(this, 2, 128, 32, {{0, 300}, {100, 200}}, 1e-5);
}

TEST_F(CudaDeepseekOpsTest, MlaPrefillKernelMatchesCpu) {
  // The multi-query kernel (forced on; bf16 cache, R 512, P 64) on chunked context: chunks of 1 .. 300
  // tokens after cached prefixes of 0 .. 700 in one plan, decode tokens between them, contexts around the
  // 16-row cache blocks and the kernel's 32-row tiles, chunks that are not a multiple of its 4-token blocks,
  // partial head groups (H 24) and 128 heads; every sequence on it (min_query 1) and split by sequence.
  const std::vector<std::vector<std::pair<int32_t, int32_t>>> plans = {
      {{0, 300}, {700, 1}, {37, 60}, {0, 1}, {129, 95}, {511, 33}, {0, 2}, {64, 64}},
      {{0, 1}, {0, 2}, {5, 2}, {31, 1}, {31, 2}, {30, 3}},
      {{700, 300}},
      {{1, 299}, {699, 7}, {300, 128}, {33, 31}, {0, 17}, {15, 16}, {63, 65}}};
  for (int min_query : {1, 16, 64})
    with_prefill_policy(min_query, 0, [&] {
      for (const auto& seqs : plans)
        for (int64_t H : {16, 24, 128}) check_mla(this, H, 512, 64, seqs, 1e-5, kMlaPrefillTol);
    });
  // The default thresholds take a step of 2048 blocks (8192 prompt tokens, 16 heads) and never a step
  // without blocks (decode-only steps carry none).
  EXPECT_TRUE(cuda::mla_prefill_chosen(2048, 16));
  EXPECT_FALSE(cuda::mla_prefill_chosen(0, 16));
  check_mla(this, 16, 512, 64, {{100, 500}, {0, 524}}, 1e-5, kMlaPrefillTol);
}

// A mixed step's sequences: decode rows (contexts 1 .. 1500) around several prefill chunks (whole prompts
// and chunks after cached prefixes, lengths not multiples of 4).
std::vector<std::pair<int32_t, int32_t>> mixed_step_seqs() {
  std::vector<std::pair<int32_t, int32_t>> seqs;
  const std::vector<std::pair<int32_t, int32_t>> chunks = {{0, 301}, {128, 256}, {0, 97}, {640, 130}};
  for (int32_t i = 0; i < 40; ++i) {
    seqs.push_back({(i * 389) % 1500, 1});
    if (i % 10 == 3) seqs.push_back(chunks[static_cast<size_t>(i / 10)]);
  }
  return seqs;
}

TEST_F(CudaDeepseekOpsTest, MlaMixedStepMatchesCpu) {
  // Decode rows and prefill sequences in one plan: split by sequence (the multi-query kernel for the chunks,
  // the split decode kernel over the row list for the rest) at the default thresholds and forced, against
  // the CPU reference; short chunks (2 .. 63 tokens) stay with the decode rows.
  std::vector<std::pair<int32_t, int32_t>> seqs = mixed_step_seqs();
  seqs.push_back({50, 2});
  seqs.push_back({900, 63});
  with_prefill_policy(64, cuda::mla_prefill_min_blocks(), [&] {  // 16 heads: decode kernel; 128: split
    for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, seqs, 1e-5, kMlaPrefillTol);
  });
  with_prefill_policy(64, 0, [&] {
    for (int64_t H : {16, 24}) check_mla(this, H, 512, 64, seqs, 1e-5, kMlaPrefillTol);
  });
}

TEST_F(CudaDeepseekOpsTest, MlaMixedStepDecodeRowsEqualDecodeOnlyStep) {
  // The decode rows of a mixed step run the launch a decode-only step of the same sequences runs (the split
  // decode kernel over a row list; its splits from their count and contexts): bit-identical outputs. Each
  // sequence's cached rows and queries are the same values in both plans (block ids differ).
  if (!cuda::mla_tc_supported(512, 64, true, 0, 0, 0) || !cuda::mla_prefill_supported())
    GTEST_SKIP() << "the tensor-core MLA kernels need more shared memory than this GPU has";
  const int64_t R = 512, P = 64, D = R + P;
  const int32_t bs = 16;
  const std::vector<std::pair<int32_t, int32_t>> mixed = mixed_step_seqs();
  std::vector<Tensor> lat, pe, ql, qp;  // per sequence: [len, R], [len, P], [fresh, H, R], [fresh, H, P]
  for (const int64_t H : {16, 128}) {
    lat.clear(), pe.clear(), ql.clear(), qp.clear();
    for (auto [cached, fresh] : mixed) {
      lat.push_back(random_bf16_values({cached + fresh, R}));
      pe.push_back(random_bf16_values({cached + fresh, P}));
      ql.push_back(random_bf16_values({fresh, H, R}, 0.1f));
      qp.push_back(random_bf16_values({fresh, H, P}, 0.1f));
    }
    auto concat = [](const std::vector<Tensor>& parts, const std::vector<size_t>& which, Shape inner) {
      int64_t rows = 0;
      for (size_t i : which) rows += parts[i].dim(0);
      Shape shape = {rows};
      shape.insert(shape.end(), inner.begin(), inner.end());
      Tensor t = Tensor::empty(DType::F32, shape);
      float* dst = t.f32();
      for (size_t i : which) dst = std::copy_n(parts[i].f32(), parts[i].numel(), dst);
      return t;
    };
    // attention_mla over the sequences `which` (in this order) on a bf16 cache holding their rows.
    auto run = [&](const std::vector<size_t>& which) {
      std::vector<std::pair<int32_t, int32_t>> seqs, full;
      for (size_t i : which) {
        seqs.push_back(mixed[i]);
        full.push_back({0, mixed[i].first + mixed[i].second});
      }
      int32_t blocks = 1;  // enough for every sequence, and coprime with make_plan's stride of 7
      for (auto [cached, fresh] : full) blocks += (fresh + bs - 1) / bs;
      if (blocks % 7 == 0) ++blocks;
      const BatchPlan fill = make_plan(full, bs, blocks), plan = make_plan(seqs, bs, blocks);
      KvCache host_cache({KvLayerSpec{KvKind::kFullHistory, D}}, blocks, bs);
      std::fill(host_cache.slot(0, 0), host_cache.slot(0, 0) + host_cache.storage(0).numel(), 0.0f);
      cpu.write_kv(host_cache, 0, fill, concat(lat, which, {R}), concat(pe, which, {P}));
      KvCache cache({KvLayerSpec{KvKind::kFullHistory, D}}, blocks, bs, Device::kCuda, DType::BF16);
      const Tensor bits = to_bf16_bits(host_cache.storage(0));
      cuda::copy_to_device(const_cast<void*>(cache.storage(0).raw()), bits.raw(), bits.nbytes());
      CudaBackend gpu;
      return gpu.to_host(gpu.attention_mla(cuda::to_device(concat(ql, which, {H, R})),
                                           cuda::to_device(concat(qp, which, {H, P})), cache, 0, plan,
                                           1.0f / std::sqrt(192.0f)));
    };
    std::vector<size_t> all, decode;
    for (size_t i = 0; i < mixed.size(); ++i) {
      all.push_back(i);
      if (mixed[i].second == 1) decode.push_back(i);
    }
    with_prefill_policy(64, 0, [&] {
      const Tensor a = run(all), d = run(decode);  // [T, H, R], [decode rows, H, R]
      int64_t row = 0, drow = 0, differ = 0;
      for (size_t i = 0; i < mixed.size(); ++i) {
        const int64_t n = mixed[i].second;
        if (n == 1) {
          const float* x = a.f32() + row * H * R;
          const float* y = d.f32() + drow * H * R;
          for (int64_t k = 0; k < H * R; ++k) differ += x[k] != y[k];
          ++drow;
        }
        row += n;
      }
      EXPECT_EQ(drow, static_cast<int64_t>(decode.size()));
      EXPECT_EQ(differ, 0) << "H=" << H;
    });
  }
}

TEST_F(CudaDeepseekOpsTest, MlaRopeWriteKvMatchesCpuAndUnfused) {
  // One kernel: the latent's RMSNorm, rope of q_pe and k_pe (both layouts, yarn scaling), the cache rows;
  // against the CPU reference and the unfused CUDA ops (rms_norm, rope, rope, write_kv), float32 and bf16
  // caches, batch 1 to 64 at scattered positions.
  RopeConfig yarn;
  yarn.type = RopeType::kYarn;
  yarn.factor = 40.0;
  yarn.original_max_position_embeddings = 4096;
  yarn.mscale = 1.0;
  yarn.mscale_all_dim = 1.0;
  struct Case {
    int64_t H, R, P;
    RopeLayout layout;
    RopeConfig rope;
  };
  const std::vector<Case> cases = {{16, 512, 64, RopeLayout::kInterleaved, RopeConfig{}},
                                   {128, 512, 64, RopeLayout::kHalf, yarn},
                                   {4, 32, 8, RopeLayout::kInterleaved, yarn},
                                   {3, 100, 12, RopeLayout::kHalf, RopeConfig{}}};
  CudaBackend gpu;
  const int32_t bs = 16;
  for (const Case& c : cases) {
    const RopeTable table = make_rope_table(c.rope, c.P);
    const Tensor norm = random_bf16_values({c.R});
    const Tensor dnorm = gpu.prepare_weight(norm);
    for (int64_t T : {1, 3, 8, 64}) {
      std::vector<std::pair<int32_t, int32_t>> seqs;
      int32_t blocks = 1;  // enough that no two sequences share a block (and not a multiple of 7)
      for (int64_t i = 0; i < T; ++i) {
        seqs.push_back({static_cast<int32_t>((i * 397) % 1000), 1});
        blocks += (seqs.back().first + 1 + bs - 1) / bs;
      }
      if (blocks % 7 == 0) ++blocks;
      const BatchPlan plan = make_plan(seqs, bs, blocks);
      const Tensor latent = random_bf16_values({T, c.R}), k_pe = random_bf16_values({T, 1, c.P}),
                   q_pe = random_bf16_values({T, c.H, c.P});
      const KvLayerSpec spec{KvKind::kFullHistory, c.R + c.P};
      KvCache cpu_cache({spec}, blocks, bs);
      std::fill(cpu_cache.slot(0, 0), cpu_cache.slot(0, 0) + cpu_cache.storage(0).numel(), 0.0f);
      Tensor ref_q = q_pe.clone(), ref_k = k_pe.clone();
      cpu.mla_rope_write_kv(ref_q, ref_k, latent, norm, 1e-6f, table, c.layout, cpu_cache, 0, plan);
      for (DType dt : {DType::F32, DType::BF16}) {
        KvCache fused_cache({spec}, blocks, bs, Device::kCuda, dt),
            plain_cache({spec}, blocks, bs, Device::kCuda, dt);
        Tensor fq = cuda::to_device(q_pe), fk = cuda::to_device(k_pe);
        gpu.mla_rope_write_kv(fq, fk, cuda::to_device(latent), dnorm, 1e-6f, table, c.layout, fused_cache, 0,
                              plan);
        Tensor pq = cuda::to_device(q_pe), pk = cuda::to_device(k_pe);
        gpu.Backend::mla_rope_write_kv(pq, pk, cuda::to_device(latent), dnorm, 1e-6f, table, c.layout,
                                       plain_cache, 0, plan);
        // The written rows, as float32 host tensors [T, R + P].
        auto rows = [&](const KvCache& cache) {
          const Tensor image = gpu.to_host(cache.storage(0));  // [slots, R + P]
          Tensor out = Tensor::empty(DType::F32, {T, c.R + c.P});
          for (int64_t t = 0; t < T; ++t)
            std::copy_n(image.f32() + plan.slot_mapping[t] * (c.R + c.P), c.R + c.P,
                        out.f32() + t * (c.R + c.P));
          return out;
        };
        Tensor ref_rows = Tensor::empty(DType::F32, {T, c.R + c.P});
        for (int64_t t = 0; t < T; ++t)
          std::copy_n(cpu_cache.slot(0, plan.slot_mapping[t]), c.R + c.P, ref_rows.f32() + t * (c.R + c.P));
        const double tol = dt == DType::BF16 ? 5e-3 : 1e-6;
        const std::string what = "H=" + std::to_string(c.H) + " R=" + std::to_string(c.R) +
                                 " T=" + std::to_string(T) + " " + std::string(dtype_name(dt));
        const Tensor fused_rows = rows(fused_cache), plain_rows = rows(plain_cache);
        EXPECT_LT(rel_err(fused_rows, ref_rows), tol) << what;
        EXPECT_LT(rel_err(fused_rows, plain_rows), 1e-6) << what;
        EXPECT_LT(rel_err(gpu.to_host(fq), ref_q), 1e-6) << what;
        EXPECT_LT(rel_err(gpu.to_host(fk), ref_k), 1e-6) << what;
        EXPECT_LT(rel_err(gpu.to_host(fq), gpu.to_host(pq)), 1e-6) << what;
      }
    }
  }
}

// ---- head_matmul ----

TEST_F(CudaDeepseekOpsTest, HeadMatmulMatchesCpuBothModes) {
  CudaBackend gpu;
  // V2-Lite's W_UK ([16, 128] -> [16, 512]) and W_UV ([16, 512] -> [16, 128]) shapes at T 1..8 (GEMV), 64,
  // 257 (tensor cores, with a token tail), V3's (128 heads) at T 1, 2, 8, 33, and odd shapes on the general
  // kernels.
  for (auto [T, H, A, B] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 16, 128, 512},
                            {1, 16, 512, 128},
                            {2, 16, 128, 512},
                            {2, 16, 512, 128},
                            {3, 16, 128, 512},
                            {3, 16, 512, 128},
                            {4, 16, 128, 512},
                            {4, 16, 512, 128},
                            {5, 16, 512, 128},
                            {6, 16, 128, 512},
                            {7, 16, 512, 128},
                            {8, 16, 128, 512},
                            {8, 16, 512, 128},
                            {1, 128, 128, 512},
                            {1, 128, 512, 128},
                            {2, 128, 128, 512},
                            {2, 128, 512, 128},
                            {8, 128, 128, 512},
                            {8, 128, 512, 128},
                            {64, 16, 128, 512},
                            {64, 16, 512, 128},
                            {257, 16, 128, 512},
                            {257, 16, 512, 128},
                            {33, 128, 128, 512},
                            {20, 3, 64, 96},
                            {300, 4, 16, 32},
                            {7, 3, 50, 70},
                            {40, 3, 50, 70}}) {
    const Tensor x = random_bf16_values({T, H, A});
    for (bool transpose : {false, true}) {
      const Tensor w = random_bf16_values(transpose ? Shape{H, A, B} : Shape{H, B, A});
      const Tensor ref = cpu.head_matmul(x, w, transpose);
      const Tensor out = gpu.to_host(gpu.head_matmul(cuda::to_device(x), gpu.prepare_weight(w), transpose));
      ASSERT_EQ(out.shape(), ref.shape());
      EXPECT_LT(rel_err(out, ref), 1e-5)
          << T << "x" << H << "x" << A << "x" << B << " transpose " << transpose;
    }
  }
  EXPECT_THROW(gpu.head_matmul(cuda::to_device(random_bf16_values({2, 3, 4})),
                               gpu.prepare_weight(random_bf16_values({3, 5, 6})), false),
               Error);
}

// Inputs that are not bf16 values (the tensor-core kernel splits them into three bf16 parts; from 256 tokens
// cuBLASLt takes them rounded to bf16 unless split activations) and rows that do not depend on the batch
// within a next_pow2 bucket (5 and 8 tokens: GEMV; 17 and 32: tensor cores; 257 and 512: cuBLASLt with the
// bucket's algorithm).
TEST_F(CudaDeepseekOpsTest, HeadMatmulFp32InputsAndBatchInvariance) {
  CudaBackend split(CudaBackendOptions{true}), rounded;
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (CudaBackend* gpu_ptr : {&split, &rounded}) {
    CudaBackend& gpu = *gpu_ptr;
    const bool exact = gpu_ptr == &split;  // below 256 tokens the kernels keep fp32 x either way
    for (auto [H, A, B] : {std::tuple<int64_t, int64_t, int64_t>{16, 128, 512}, {16, 512, 128}}) {
      Tensor x = Tensor::empty(DType::F32, {512, H, A});
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = d(rng);
      for (bool transpose : {false, true}) {
        const Tensor w = gpu.prepare_weight(random_bf16_values(transpose ? Shape{H, A, B} : Shape{H, B, A}));
        const Tensor hw = gpu.to_host(w);
        for (auto [small, large] : {std::pair<int64_t, int64_t>{5, 8}, {17, 32}, {257, 512}}) {
          const Tensor xs = x.rows(0, small), xl = x.rows(0, large);
          const Tensor ref = cpu.head_matmul(xl, hw, transpose);
          const Tensor ol = gpu.to_host(gpu.head_matmul(cuda::to_device(xl), w, transpose));
          const Tensor os = gpu.to_host(gpu.head_matmul(cuda::to_device(xs), w, transpose));
          EXPECT_LT(rel_err(ol, ref), exact || large < 256 ? 3e-6 : 1e-2)
              << "T " << large << " A " << A << " transpose " << transpose << " split " << exact;
          int64_t differ = 0;
          for (int64_t i = 0; i < os.numel(); ++i) differ += os.f32()[i] != ol.f32()[i];
          EXPECT_EQ(differ, 0) << "T " << small << " vs " << large << " A " << A << " transpose " << transpose
                               << " split " << exact;
        }
      }
    }
  }
}

// The tiled decode GEMV kernels at each tile (and the older GEMV kernels, still reachable for benchmarks) for
// T 8 down to 1 on fp32 inputs: V2-Lite (16 heads) and V3 (128 heads) shapes, outputs that are not a
// multiple of the tile, inner sizes that are not a multiple of a pass (128 rows for w^T x, 512 inputs for w
// x) or take several passes. Against the CPU reference, and every row of a tiled kernel the same bits at
// every T (its sums never depend on T or the other rows).
TEST_F(CudaDeepseekOpsTest, HeadGemvTilesMatchCpuAtEveryT) {
  CudaBackend gpu;
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto [H, A, B] : {std::tuple<int64_t, int64_t, int64_t>{16, 128, 512},
                         {16, 512, 128},
                         {128, 128, 512},
                         {128, 512, 128},
                         {3, 264, 72},
                         {2, 1032, 24},
                         {1, 8, 8}}) {
    Tensor x = Tensor::empty(DType::F32, {8, H, A});  // [8, H, A]
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = d(rng);
    const Tensor dx = cuda::to_device(x);
    for (bool transpose : {false, true}) {
      const Tensor w = gpu.prepare_weight(random_bf16_values(transpose ? Shape{H, A, B} : Shape{H, B, A}));
      const Tensor ref = cpu.head_matmul(x, gpu.to_host(w), transpose);  // [8, H, B]
      const std::vector<int> tiles = transpose ? std::vector<int>{0, 4, 8, 16, cuda::kHeadGemvLegacy}
                                               : std::vector<int>{0, 1, 2, 4, cuda::kHeadGemvLegacy};
      for (int tile : tiles) {
        Tensor at8;
        for (int64_t T = 8; T >= 1; --T) {
          Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, B});  // [T, H, B]
          const float* px = dx.data<float>();
          const uint16_t* pw = w.data<uint16_t>();
          if (tile == cuda::kHeadGemvLegacy) {
            cuda::launch_head_matmul(px, pw, y.data<float>(), T, H, A, B, transpose, tile);
          } else if (!cuda::launch_head_gemv_tiled(px, pw, y.data<float>(), T, H, A, B, transpose, tile)) {
            // only where the staged x (and w^T x's partial sums) exceed 48 KiB
            EXPECT_GT(cuda::next_pow2(T) * A + (transpose ? 512 * (tile ? tile : 8) : 0), 12288)
                << "not launched: T " << T << " H " << H << " A " << A << " B " << B << " tile " << tile;
            continue;
          }
          const Tensor out = gpu.to_host(y);
          const std::string what = "T " + std::to_string(T) + " H " + std::to_string(H) + " A " +
                                   std::to_string(A) + " B " + std::to_string(B) + " transpose " +
                                   std::to_string(transpose) + " tile " + std::to_string(tile);
          EXPECT_LT(rel_err(out, ref.rows(0, T)), 3e-6) << what;
          if (tile == cuda::kHeadGemvLegacy) continue;
          if (T == 8) {
            at8 = out;
            continue;
          }
          if (!at8) continue;
          const Tensor same = at8.rows(0, T);
          int64_t differ = 0;
          for (int64_t i = 0; i < out.numel(); ++i) differ += out.f32()[i] != same.f32()[i];
          EXPECT_EQ(differ, 0) << what << " against T 8";
        }
      }
    }
  }
}

// ---- routing ----

struct RouteCase {
  std::string scoring, method;
  int64_t E, K, groups, topk_group;
  bool norm;
  float scale;
  bool bias;
};

// Router inputs on a coarse grid (x in {-2..2}/8, router in {-2..2}/16) so that logits are exact in fp32
// whatever the summation order; equal router rows (and biases) plant exact ties. Tokens whose biased
// selection values would come within 1e-5 of each other without being equal are drawn again, so the two
// backends cannot disagree through rounding.
TEST_F(CudaDeepseekOpsTest, MoeRouteMatchesCpu) {
  CudaBackend gpu;
  const int64_t H = 64;
  for (const RouteCase& c : {RouteCase{"softmax", "greedy", 64, 6, 1, 1, false, 1.0f, false},
                             RouteCase{"softmax", "greedy", 64, 6, 1, 1, true, 1.0f, false},
                             RouteCase{"softmax", "group_limited_greedy", 64, 6, 8, 3, false, 16.0f, false},
                             RouteCase{"sigmoid", "noaux_tc", 256, 8, 8, 4, true, 2.5f, true},
                             RouteCase{"sigmoid", "noaux_tc", 8, 3, 4, 2, true, 2.5f, true},
                             RouteCase{"sigmoid", "noaux_tc", 4, 2, 1, 1, true, 2.5f, false},
                             RouteCase{"softmax", "greedy", 6, 1, 1, 1, true, 1.0f, false},
                             RouteCase{"sqrtsoftplus", "greedy", 32, 4, 1, 1, true, 1.5f, false}}) {
    const int64_t E = c.E, T = 600;
    std::uniform_int_distribution<int> small(-2, 2);
    Tensor router = Tensor::empty(DType::F32, {E, H});
    for (int64_t i = 0; i < E * H; ++i) router.f32()[i] = small(rng) / 16.0f;
    Tensor bias;
    if (c.bias) {
      bias = Tensor::empty(DType::F32, {E});
      // Whole numbers: sigmoid scores differ by less than 1, so experts of different biases never tie.
      for (int64_t e = 0; e < E; ++e) bias.f32()[e] = static_cast<float>((e * 37) % 3);
    }
    // Planted ties: expert 1 copies expert 0; with groups, group 1 copies group 0.
    auto copy_expert = [&](int64_t dst, int64_t src) {
      std::copy(router.f32() + src * H, router.f32() + (src + 1) * H, router.f32() + dst * H);
      if (bias) bias.f32()[dst] = bias.f32()[src];
    };
    copy_expert(1, 0);
    if (c.groups > 1) {
      const int64_t per = E / c.groups;
      for (int64_t i = 0; i < per; ++i) copy_expert(per + i, i);
    }
    Tensor x = Tensor::empty(DType::F32, {T, H});
    for (int64_t t = 0; t < T; ++t) {
      for (int attempt = 0;; ++attempt) {
        for (int64_t i = 0; i < H; ++i) x.f32()[t * H + i] = small(rng) / 8.0f;
        if (!bias) break;
        // Biased selection values in double: distinct (logit, bias) pairs must stay 1e-5 apart.
        std::vector<std::pair<double, double>> key(E);
        std::vector<double> v(E);
        for (int64_t e = 0; e < E; ++e) {
          double l = 0;
          for (int64_t i = 0; i < H; ++i) l += double(x.f32()[t * H + i]) * router.f32()[e * H + i];
          key[e] = {l, bias.f32()[e]};
          v[e] = 1.0 / (1.0 + std::exp(-l)) + bias.f32()[e];
        }
        bool separated = true;
        for (int64_t a = 0; a < E && separated; ++a)
          for (int64_t b = a + 1; b < E && separated; ++b)
            if (key[a] != key[b] && std::abs(v[a] - v[b]) < 1e-5) separated = false;
        // Group scores (sum of the top two) likewise.
        const int64_t per = E / c.groups;
        std::vector<double> gs(c.groups);
        std::vector<std::vector<std::pair<double, double>>> gkey(c.groups);
        for (int64_t g = 0; g < c.groups; ++g) {
          std::vector<int64_t> idx(per);
          for (int64_t i = 0; i < per; ++i) idx[i] = g * per + i;
          std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
          for (int64_t i = 0; i < std::min<int64_t>(2, per); ++i) {
            gs[g] += v[idx[i]];
            gkey[g].push_back(key[idx[i]]);
          }
          std::sort(gkey[g].begin(), gkey[g].end());
        }
        for (int64_t a = 0; a < c.groups && separated; ++a)
          for (int64_t b = a + 1; b < c.groups && separated; ++b)
            if (gkey[a] != gkey[b] && std::abs(gs[a] - gs[b]) < 1e-5) separated = false;
        if (separated) break;
        ASSERT_LT(attempt, 100) << "could not draw separated router inputs";
      }
    }
    RoutingParams p;
    p.scoring = c.scoring;
    p.method = c.method;
    p.top_k = c.K;
    p.n_group = c.groups;
    p.topk_group = c.topk_group;
    p.norm_topk_prob = c.norm;
    p.routed_scaling_factor = c.scale;
    Tensor ref_ids, ref_w;
    cpu.moe_route(x, router, bias, p, &ref_ids, &ref_w);
    Tensor ids, w;
    gpu.moe_route(cuda::to_device(x), gpu.prepare_weight(router),
                  bias ? gpu.prepare_weight_f32(bias) : Tensor(), p, &ids, &w);
    const Tensor hids = cuda::to_host(ids), hw = gpu.to_host(w);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < T * c.K; ++i) mismatches += hids.data<int32_t>()[i] != ref_ids.data<int32_t>()[i];
    EXPECT_EQ(mismatches, 0) << c.scoring << "/" << c.method << " E=" << E;
    EXPECT_LT(rel_err(hw, ref_w), 1e-5) << c.scoring << "/" << c.method << " E=" << E;
    // Smaller batches (tails of the 8-token logits tiles and 4-token selection blocks) give the same rows.
    for (int64_t Ts : {1, 3, 64, 257}) {
      Tensor ids_s, w_s;
      gpu.moe_route(cuda::to_device(x.rows(0, Ts)), gpu.prepare_weight(router),
                    bias ? gpu.prepare_weight_f32(bias) : Tensor(), p, &ids_s, &w_s);
      const Tensor hids_s = cuda::to_host(ids_s), hw_s = gpu.to_host(w_s);
      int64_t differ = 0;
      for (int64_t i = 0; i < Ts * c.K; ++i)
        differ += hids_s.data<int32_t>()[i] != ref_ids.data<int32_t>()[i] || hw_s.f32()[i] != hw.f32()[i];
      EXPECT_EQ(differ, 0) << c.scoring << "/" << c.method << " E=" << E << " T=" << Ts;
    }
    // The planted tie is taken in index order whenever both experts are chosen.
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* row = hids.data<int32_t>() + t * c.K;
      const int32_t* pos1 = std::find(row, row + c.K, 1);
      if (pos1 != row + c.K) {
        EXPECT_NE(std::find(row, pos1, 0), pos1) << "expert 1 chosen before its tie partner 0, token " << t;
      }
    }
  }
}

// ---- experts ----

struct ExpertSet {
  std::vector<MlpWeights> cpu, gpu;
};

ExpertSet make_experts(CudaDeepseekOpsTest* test, CudaBackend& gpu, int64_t E, int64_t H, int64_t I) {
  ExpertSet s;
  for (int64_t e = 0; e < E; ++e) {
    MlpWeights c, g;
    c.gate.weight = test->random_bf16_values({I, H}, 0.1f);
    c.up.weight = test->random_bf16_values({I, H}, 0.1f);
    c.down.weight = test->random_bf16_values({H, I}, 0.1f);
    g.gate.weight = gpu.prepare_weight(c.gate.weight);
    g.up.weight = gpu.prepare_weight(c.up.weight);
    g.down.weight = gpu.prepare_weight(c.down.weight);
    s.cpu.push_back(c);
    s.gpu.push_back(g);
  }
  return s;
}

// [T, K] I32 expert ids, skewed: slot 0 always takes expert E / 2 + 1 (the busy one, T rows); the rest come
// from the lower half, so the upper experts but one stay empty (K < E / 2 + 1).
Tensor skewed_expert_ids(std::mt19937& rng, int64_t T, int64_t K, int64_t E) {
  Tensor ids = Tensor::empty(DType::I32, {T, K});
  std::uniform_int_distribution<int> lower(0, static_cast<int>(std::max<int64_t>(E / 2, K)) - 1);
  for (int64_t t = 0; t < T; ++t) {
    std::set<int> used = {static_cast<int>(E / 2 + 1)};
    ids.data<int32_t>()[t * K] = static_cast<int32_t>(E / 2 + 1);
    for (int64_t k = 1; k < K; ++k) {
      int e;
      do e = lower(rng);
      while (!used.insert(e).second);
      ids.data<int32_t>()[t * K + k] = e;
    }
  }
  return ids;
}

TEST_F(CudaDeepseekOpsTest, MoeExpertsMatchCpuWithSkewedRouting) {
  CudaBackend gpu(CudaBackendOptions{true});  // tensor-core tiles keep ~16 bits of each activation
  CudaBackend plain;                          // tensor-core tiles round activations to bf16 (the default)
  for (auto [E, H, I, K] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 96, 6},
                            {8, 64, 32, 3},
                            {6, 72, 40, 3},
                            {5, 60, 36, 2},
                            {4, 62, 20, 2}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    std::vector<MlpWeights> stacked = experts.gpu;
    gpu.prepare_experts(stacked);
    // prepare_experts leaves every kind at one fixed stride (restacked, or already so when the allocator
    // happened to place the separate tensors that way).
    const auto* gate0 = static_cast<const char*>(stacked[0].gate.weight.raw());
    const int64_t stride = static_cast<const char*>(stacked[1].gate.weight.raw()) - gate0;
    for (int64_t e = 0; e < E; ++e)
      EXPECT_EQ(static_cast<const char*>(stacked[e].gate.weight.raw()) - gate0, e * stride) << "expert " << e;
    // Streaming tiles of 8, 16, 32 and 64 rows (72 x 40: feature and K tails), the 64-row tensor-core tiles
    // (more rows per expert) and the CUDA-core tiles of 1, 2, 4 and 8 rows (H 60: not a multiple of 8).
    for (int64_t T : {1, 3, 7, 64, 128, 200, 257, 600, 1366}) {
      const Tensor ids = skewed_expert_ids(rng, T, K, E);
      const Tensor weights = random_bf16_values({T, K});
      const Tensor x = random_bf16_values({T, H});
      const Tensor ref = cpu.moe_experts(x, ids, weights, experts.cpu);
      const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
      for (const std::vector<MlpWeights>* set : {&experts.gpu, &stacked}) {
        const Tensor out = gpu.to_host(gpu.moe_experts(dx, dids, dw, *set));
        EXPECT_LT(rel_err(out, ref), 1e-4) << "E=" << E << " H=" << H << " I=" << I << " T=" << T
                                           << (set == &stacked ? " stacked" : " separate");
      }
      EXPECT_LT(rel_err(plain.to_host(plain.moe_experts(dx, dids, dw, stacked)), ref), 1e-2)
          << "bf16 activations, E=" << E << " T=" << T;
    }
  }
}

// A token's output does not depend on the other tokens of its batch as long as the batch stays in one
// next_pow2 bucket (as a CUDA graph pads it): the rows a tile shares with others never change its sums.
// [T, K] I32 expert ids, K distinct experts of E per token, uniformly drawn.
Tensor distinct_expert_ids(std::mt19937& rng, int64_t T, int64_t K, int64_t E) {
  Tensor ids = Tensor::empty(DType::I32, {T, K});
  std::uniform_int_distribution<int> pick(0, static_cast<int>(E) - 1);
  for (int64_t t = 0; t < T; ++t) {
    std::set<int> used;
    for (int64_t k = 0; k < K; ++k) {
      int e;
      do e = pick(rng);
      while (!used.insert(e).second);
      ids.data<int32_t>()[t * K + k] = e;
    }
  }
  return ids;
}

TEST_F(CudaDeepseekOpsTest, MoeExpertsRowsIndependentOfBatchInBucket) {
  CudaBackend gpu(CudaBackendOptions{true});
  const int64_t E = 64, H = 256, I = 96, K = 6, Tmax = 512;
  ExpertSet experts = make_experts(this, gpu, E, H, I);
  gpu.prepare_experts(experts.gpu);
  const Tensor x = random_bf16_values({Tmax, H}), weights = random_bf16_values({Tmax, K});
  const Tensor ids = distinct_expert_ids(rng, Tmax, K, E);  // [Tmax, K]
  // The first T rows of x, ids and weights as device tensors.
  auto head = [](const Tensor& t, int64_t T) {
    Tensor h = Tensor::empty(t.dtype(), {T, t.dim(1)});
    std::copy_n(static_cast<const char*>(t.raw()), h.nbytes(), static_cast<char*>(h.raw()));
    return cuda::to_device(h);
  };
  auto run = [&](int64_t T) {
    return gpu.to_host(gpu.moe_experts(head(x, T), head(ids, T), head(weights, T), experts.gpu));
  };
  for (auto [small, big] : {std::pair<int64_t, int64_t>{5, 8}, {33, 64}, {65, 128}, {129, 256}, {257, 512}}) {
    const Tensor a = run(small), b = run(big);
    int64_t differ = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
    EXPECT_EQ(differ, 0) << "T " << small << " vs " << big;
  }
}

// The grouped bf16 GEMMs (above 64 bucketed rows per expert; activations and the SiLU-mul output rounded to
// bf16, so the bf16 tolerance of the unsplit path) in every tile variant: skewed routing (one expert with
// every token, empty experts, rows not a multiple of the tile), feature and K tails (I 96, 40; H 72), a
// swiglu limit, and the V2-Lite and V3 expert shapes (few experts, so that the CPU reference stays quick).
TEST_F(CudaDeepseekOpsTest, MoeExpertsGroupedGemmMatchesCpu) {
  CudaBackend gpu;
  struct Case {
    int64_t E, H, I, K;
    float limit;
    std::vector<int64_t> tokens;
  };
  for (const Case& c : {Case{64, 256, 96, 6, 0.0f, {600, 1366}}, Case{8, 64, 32, 3, 0.5f, {200, 600}},
                        Case{6, 72, 40, 3, 0.0f, {200, 257}}, Case{4, 2048, 1408, 2, 0.0f, {130, 300}},
                        Case{4, 7168, 2048, 2, 0.0f, {150}}}) {
    ExpertSet experts = make_experts(this, gpu, c.E, c.H, c.I);
    for (size_t e = 0; e < experts.cpu.size(); ++e)
      experts.cpu[e].swiglu_limit = experts.gpu[e].swiglu_limit = c.limit;
    gpu.prepare_experts(experts.gpu);
    for (int64_t T : c.tokens) {
      const Tensor ids = skewed_expert_ids(rng, T, c.K, c.E);
      const Tensor weights = random_bf16_values({T, c.K});
      const Tensor x = random_bf16_values({T, c.H});
      const Tensor ref = cpu.moe_experts(x, ids, weights, experts.cpu);
      const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
      for (int variant = 0; variant <= cuda::kMoeGroupedVariants; ++variant) {
        CudaBackend b(CudaBackendOptions{false, variant});
        const Tensor out = b.to_host(b.moe_experts(dx, dids, dw, experts.gpu));
        EXPECT_LT(rel_err(out, ref), 1e-2) << "variant " << variant << " E=" << c.E << " H=" << c.H
                                           << " I=" << c.I << " K=" << c.K << " T=" << T;
      }
    }
  }
}

// The wgmma grouped kernels (Hopper path only) on one expert's tile(s) against an exact CPU product: small
// integer operands, so every fp32 sum is exact and a descriptor, swizzle or accumulator-layout mistake shows
// as mismatching (row, column) positions (the first few are printed). Down (fp32 out) exactly; gate/up
// (SiLU-mul, bf16 out, x rows gathered through slot_pair / topk) within bf16 rounding. Cases: 64 x 128 x 64
// (one k step), padding rows (a 128-row tile with 64 or 100 rows: an idle warpgroup), several k steps, K and
// N tails (K 72, N 136).
TEST_F(CudaDeepseekOpsTest, MoeWgmmaSingleTileExact) {
  if (cuda::arch_path() != cuda::ArchPath::kHopper) GTEST_SKIP() << "wgmma runs on the Hopper path only";
  CudaBackend gpu;  // registers the device allocator
  struct Case {
    int variant;
    int64_t rows, K, N;
  };
  std::uniform_int_distribution<int> small(-3, 3);
  auto ints = [&](Shape shape) {
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(small(rng));
    return t;
  };
  for (const Case& c :
       {Case{7, 64, 64, 128}, Case{7, 37, 64, 128}, Case{5, 64, 64, 128}, Case{5, 128, 128, 256},
        Case{6, 128, 192, 256}, Case{6, 200, 128, 512}, Case{8, 100, 72, 136}}) {
    const int tile_rows = cuda::moe_grouped_tile_rows(c.variant);
    const std::string what = "variant " + std::to_string(c.variant) + " rows " + std::to_string(c.rows) +
                             " K " + std::to_string(c.K) + " N " + std::to_string(c.N);
    const Tensor a = ints({c.rows, c.K}), w = ints({c.N, c.K}), w_up = ints({c.N, c.K});  // [rows, K], [N, K]
    Tensor off = Tensor::empty(DType::I32, {2}), tiles = Tensor::empty(DType::I32, {2});
    off.data<int32_t>()[0] = 0;
    off.data<int32_t>()[1] = static_cast<int32_t>(c.rows);
    tiles.data<int32_t>()[0] = 0;
    tiles.data<int32_t>()[1] = static_cast<int32_t>((c.rows + tile_rows - 1) / tile_rows);
    // Gate/up gathers row r from x row p(r) = rows - 1 - r through slot_pair[r] = 2 p(r) + r % 2 (topk 2).
    Tensor slot_pair = Tensor::empty(DType::I32, {c.rows});
    for (int64_t r = 0; r < c.rows; ++r)
      slot_pair.data<int32_t>()[r] = static_cast<int32_t>(2 * (c.rows - 1 - r) + r % 2);
    Tensor da = cuda::to_device(to_bf16_bits(a)), dw = cuda::to_device(to_bf16_bits(w)),
           dw_up = cuda::to_device(to_bf16_bits(w_up)), doff = cuda::to_device(off),
           dtiles = cuda::to_device(tiles), dslot = cuda::to_device(slot_pair);
    Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {c.rows, c.N});     // [rows, N]
    Tensor act = Tensor::empty_on(Device::kCuda, DType::BF16, {c.rows, c.N});  // [rows, N]
    cuda::launch_moe_down_grouped(
        c.variant, da.data<uint16_t>(), doff.data<int32_t>(), dtiles.data<int32_t>(),
        cuda::StackedWeights{dw.data<uint16_t>(), c.N * c.K}, y.data<float>(), c.rows, 1, c.N, c.K);
    cuda::launch_moe_gate_up_grouped(c.variant, da.data<uint16_t>(), 2, doff.data<int32_t>(),
                                     dtiles.data<int32_t>(), dslot.data<int32_t>(),
                                     cuda::StackedWeights{dw.data<uint16_t>(), c.N * c.K},
                                     cuda::StackedWeights{dw_up.data<uint16_t>(), c.N * c.K},
                                     act.data<uint16_t>(), c.rows, 1, c.K, c.N, 0.0f);
    const Tensor hy = gpu.to_host(y), hact = gpu.to_host(act);
    int64_t bad_down = 0, bad_gate_up = 0;
    std::string first;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t n = 0; n < c.N; ++n) {
        double dot = 0, gate = 0, up = 0;
        const int64_t src = c.rows - 1 - r;
        for (int64_t k = 0; k < c.K; ++k) {
          dot += double(a.f32()[r * c.K + k]) * w.f32()[n * c.K + k];
          gate += double(a.f32()[src * c.K + k]) * w.f32()[n * c.K + k];
          up += double(a.f32()[src * c.K + k]) * w_up.f32()[n * c.K + k];
        }
        const float got = hy.f32()[r * c.N + n];
        if (got != static_cast<float>(dot) && ++bad_down <= 8)
          first += " down(" + std::to_string(r) + "," + std::to_string(n) + ")=" + std::to_string(got) +
                   " want " + std::to_string(dot);
        const double want = gate / (1.0 + std::exp(-gate)) * up, got_act = hact.f32()[r * c.N + n];
        if (std::abs(got_act - want) > std::abs(want) / 128 + 1e-3 && ++bad_gate_up <= 8)
          first += " act(" + std::to_string(r) + "," + std::to_string(n) + ")=" + std::to_string(got_act) +
                   " want " + std::to_string(want);
      }
    }
    EXPECT_EQ(bad_down, 0) << what << ":" << first;
    EXPECT_EQ(bad_gate_up, 0) << what << ":" << first;
  }
}

// Every grouped variant (the wgmma ones on Hopper, and forced onto the Ampere path, where they run their
// mma.sync twins) on ragged experts: an empty one and 64 to 259 rows (tile tails on both tile sizes), with
// K tails (H 72, I 40 and 200), feature tails (I 40, 200) and top-2 gathers.
TEST_F(CudaDeepseekOpsTest, MoeExpertsGroupedRaggedExpertsMatchCpu) {
  CudaBackend gpu;
  const std::vector<int64_t> counts = {0, 1, 63, 64, 65, 127, 128, 131};
  const int64_t E = static_cast<int64_t>(counts.size()), K = 2;
  for (auto [H, I] : {std::pair<int64_t, int64_t>{72, 40}, {256, 200}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    gpu.prepare_experts(experts.gpu);
    // Slot 0 of the tokens of block e takes expert e, slot 1 expert e + 1 (the last block: expert 1), so
    // expert e holds counts[e] + counts[e - 1] rows: 0 (empty), 132, 64, 127, 129, 192, 255, 259.
    int64_t T = 0;
    for (int64_t c : counts) T += c;
    Tensor ids = Tensor::empty(DType::I32, {T, K});
    int64_t t = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < counts[e]; ++i, ++t) {
        ids.data<int32_t>()[t * K] = static_cast<int32_t>(e);
        ids.data<int32_t>()[t * K + 1] = static_cast<int32_t>(e + 1 < E ? e + 1 : 1);
      }
    }
    const Tensor weights = random_bf16_values({T, K}), x = random_bf16_values({T, H});
    const Tensor ref = cpu.moe_experts(x, ids, weights, experts.cpu);
    const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
    for (const char* path : {"", "sm_80"}) {
      cuda::init_arch_path(path);
      for (int variant = 1; variant <= cuda::kMoeGroupedVariants; ++variant) {
        CudaBackend b(CudaBackendOptions{false, variant});
        const Tensor out = b.to_host(b.moe_experts(dx, dids, dw, experts.gpu));
        EXPECT_LT(rel_err(out, ref), 1e-2)
            << "variant " << variant << " path '" << path << "' H=" << H << " I=" << I;
      }
    }
    cuda::init_arch_path("");
  }
}

// ---- fused decode routing (norm_moe_route) ----

// Device copy of host values as bf16 bits (raw bf16 device tensor, as prepare_weight leaves weights).
Tensor device_bf16(const Tensor& values) {
  Tensor bits = Tensor::empty(DType::BF16, values.shape());
  for (int64_t i = 0; i < values.numel(); ++i) bits.data<uint16_t>()[i] = f32_to_bf16(values.f32()[i]);
  return cuda::to_device(bits);
}

struct FusedRouteCase {
  const char* scoring;
  const char* method;
  int64_t E, K, groups, topk_group;
  bool norm, bias;
};

const FusedRouteCase kFusedRouteCases[] = {
    {"softmax", "greedy", 64, 6, 1, 1, false, false},                 // V2-Lite
    {"softmax", "greedy", 64, 6, 1, 1, true, false},                  //
    {"softmax", "group_limited_greedy", 160, 6, 8, 3, false, false},  // V2
    {"sigmoid", "noaux_tc", 256, 8, 8, 4, true, true},                // V3
    {"sigmoid", "noaux_tc", 64, 8, 4, 2, true, true},                 //
    {"sqrtsoftplus", "greedy", 160, 8, 1, 1, true, false},            //
    {"sigmoid", "group_limited_greedy", 256, 6, 8, 4, false, true},   // bias ignored outside noaux_tc
    {"softmax", "greedy", 6, 2, 1, 1, false, false},                  // tiny-deepseek-v2 (one block)
    {"sigmoid", "noaux_tc", 8, 3, 4, 2, true, true},                  // tiny-deepseek-v3
};

cuda::MoeRouteParams kernel_route_params(const FusedRouteCase& c) {
  cuda::MoeRouteParams p;
  p.scoring = std::string(c.scoring) == "softmax"   ? cuda::MoeScoring::kSoftmax
              : std::string(c.scoring) == "sigmoid" ? cuda::MoeScoring::kSigmoid
                                                    : cuda::MoeScoring::kSqrtSoftplus;
  p.method = std::string(c.method) == "greedy"                 ? cuda::MoeTopk::kGreedy
             : std::string(c.method) == "group_limited_greedy" ? cuda::MoeTopk::kGroupLimitedGreedy
                                                               : cuda::MoeTopk::kNoauxTc;
  p.top_k = static_cast<int>(c.K);
  p.n_group = static_cast<int>(c.groups);
  p.topk_group = static_cast<int>(c.topk_group);
  p.norm_topk_prob = c.norm;
  p.routed_scaling_factor = 2.5f;
  return p;
}

// Random router [E, H] with planted ties (expert 1 = expert 0; with groups, group 1 = group 0).
Tensor tied_router(CudaDeepseekOpsTest* test, int64_t E, int64_t H, int64_t groups) {
  Tensor router = test->random_bf16_values({E, H}, 0.05f);
  auto copy_expert = [&](int64_t dst, int64_t src) {
    std::copy(router.f32() + src * H, router.f32() + (src + 1) * H, router.f32() + dst * H);
  };
  copy_expert(1, 0);
  if (groups > 1)
    for (int64_t i = 0; i < E / groups; ++i) copy_expert(E / groups + i, i);
  return router;
}

// The fused decode routing kernel against launch_rms_norm + launch_moe_route + launch_moe_permute on random
// inputs: x, ids and weights bit for bit, offsets and tiles equal, and both permutations consistent (the
// fused one in pair order within an expert); the arrival counter is zero again after each launch.
TEST_F(CudaDeepseekOpsTest, MoeNormRouteKernelEqualsSeparateKernels) {
  CudaBackend gpu;  // registers the device allocator
  for (const FusedRouteCase& c : kFusedRouteCases) {
    for (int64_t H : {2048, 7168, 264, 64}) {
      const int64_t E = c.E, K = c.K;
      const cuda::MoeRouteParams rp = kernel_route_params(c);
      const Tensor router = device_bf16(tied_router(this, E, H, c.groups));
      const Tensor norm = device_bf16(random_bf16_values({H}, 0.5f));
      Tensor bias_host = Tensor::empty(DType::F32, {E});
      for (int64_t e = 0; e < E; ++e) bias_host.f32()[e] = 0.01f * static_cast<float>((e * 37) % 11);
      bias_host.f32()[1] = bias_host.f32()[0];
      const Tensor bias = c.bias ? cuda::to_device(bias_host) : Tensor();
      const float* bias_d = c.bias ? bias.data<float>() : nullptr;
      for (int64_t T = 1; T <= cuda::kMoeNormRouteMaxTokens; ++T) {
        const int64_t pairs = T * K;
        const Tensor h = cuda::to_device(random_bf16_values({T, H}, 3.0f));
        for (int tile_rows : {1, 8, 64}) {
          auto i32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::I32, {n}); };
          auto f32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::F32, {n}); };
          // Separate kernels.
          Tensor x_s = f32(T * H), logits_s = f32(T * E), ids_s = i32(pairs), w_s = f32(pairs);
          Tensor off_s = i32(E + 1), tiles_s = i32(E + 1), sp_s = i32(pairs), ps_s = i32(pairs);
          cuda::launch_rms_norm(h.data<float>(), norm.data<uint16_t>(), x_s.data<float>(), T, H, 1e-6f);
          cuda::launch_moe_route(x_s.data<float>(), router.data<uint16_t>(), bias_d, logits_s.data<float>(),
                                 ids_s.data<int32_t>(), w_s.data<float>(), T, H, E, rp);
          cuda::launch_moe_permute(ids_s.data<int32_t>(), pairs, E, tile_rows, off_s.data<int32_t>(),
                                   tiles_s.data<int32_t>(), sp_s.data<int32_t>(), ps_s.data<int32_t>());
          // The fused kernel, twice (the counter must be back at zero for the second launch).
          Tensor x_f = f32(T * H), logits_f = f32(T * E), ids_f = i32(pairs), w_f = f32(pairs);
          Tensor off_f = i32(E + 1), tiles_f = i32(E + 1), sp_f = i32(pairs), ps_f = i32(pairs);
          cuda::MoeNormRouteArgs a;
          a.h = h.data<float>();
          a.norm = norm.data<uint16_t>();
          a.eps = 1e-6f;
          a.router = router.data<uint16_t>();
          a.bias = bias_d;
          a.x = x_f.data<float>();
          a.logits = logits_f.data<float>();
          a.ids = ids_f.data<int32_t>();
          a.weights = w_f.data<float>();
          a.tile_rows = tile_rows;
          a.offsets = off_f.data<int32_t>();
          a.tiles = tiles_f.data<int32_t>();
          a.slot_pair = sp_f.data<int32_t>();
          a.pair_slot = ps_f.data<int32_t>();
          a.arrivals = cuda::decode_arrivals(1);
          a.T = static_cast<int>(T);
          a.H = static_cast<int>(H);
          a.E = static_cast<int>(E);
          ASSERT_TRUE(cuda::moe_norm_route_supported(a, rp)) << "E=" << E << " H=" << H << " T=" << T;
          for (int rep = 0; rep < 2; ++rep) {
            cuda::launch_moe_norm_route(a, rp);
            int32_t counter = -1;
            cuda::copy_to_host(&counter, a.arrivals, sizeof(counter));
            ASSERT_EQ(counter, 0) << "the arrival counter was not reset";
          }
          const std::string where = std::string(c.scoring) + "/" + c.method + " E=" + std::to_string(E) +
                                    " K=" + std::to_string(K) + " H=" + std::to_string(H) +
                                    " T=" + std::to_string(T) + " tile " + std::to_string(tile_rows);
          auto same_bits = [&](const Tensor& u, const Tensor& v, const char* what) {
            const Tensor hu = cuda::to_host(u), hv = cuda::to_host(v);
            int64_t differ = 0;
            for (int64_t i = 0; i < hu.numel(); ++i)
              differ +=
                  static_cast<const uint32_t*>(hu.raw())[i] != static_cast<const uint32_t*>(hv.raw())[i];
            EXPECT_EQ(differ, 0) << what << " differ, " << where;
          };
          same_bits(x_f, x_s, "x");
          same_bits(ids_f, ids_s, "ids");
          same_bits(w_f, w_s, "weights");
          same_bits(off_f, off_s, "offsets");
          same_bits(tiles_f, tiles_s, "tiles");
          if (tile_rows == 8) {
            // As the model runs it: three launches back to back captured in a CUDA graph (each one's weight
            // loads before its PDL wait overlap the previous one), replayed into zeroed outputs.
            const std::vector<std::pair<Tensor, int64_t>> outs = {{x_f, T * H * 4},
                                                                  {ids_f, pairs * 4},
                                                                  {w_f, pairs * 4},
                                                                  {off_f, (E + 1) * 4},
                                                                  {tiles_f, (E + 1) * 4}};
            const std::vector<char> zeros(static_cast<size_t>(std::max(T * H, E + 1) * 4), 0);
            cuda::begin_capture();
            for (int rep = 0; rep < 3; ++rep) cuda::launch_moe_norm_route(a, rp);
            cuda::GraphHandle graph = cuda::end_capture(true);
            for (int replay = 0; replay < 2; ++replay) {
              for (const auto& [t, bytes] : outs)
                cuda::copy_to_device(const_cast<void*>(t.raw()), zeros.data(), bytes);
              cuda::launch_graph(graph);
              same_bits(x_f, x_s, "x (graph)");
              same_bits(ids_f, ids_s, "ids (graph)");
              same_bits(w_f, w_s, "weights (graph)");
              same_bits(off_f, off_s, "offsets (graph)");
              same_bits(tiles_f, tiles_s, "tiles (graph)");
              int32_t counter = -1;
              cuda::copy_to_host(&counter, a.arrivals, sizeof(counter));
              ASSERT_EQ(counter, 0) << "the arrival counter was not reset (graph)";
            }
            cuda::destroy_graph(graph);
          }
          // Permutations: pair i sits in its expert's rows (the fused one at rank i among that expert's
          // pairs), and slot_pair inverts pair_slot.
          const Tensor ids = cuda::to_host(ids_f), off = cuda::to_host(off_f);
          for (const auto& [sp, ps, ordered] :
               {std::tuple<Tensor, Tensor, bool>{sp_f, ps_f, true}, {sp_s, ps_s, false}}) {
            const Tensor hsp = cuda::to_host(sp), hps = cuda::to_host(ps);
            std::vector<int32_t> seen(E, 0);
            for (int64_t i = 0; i < pairs; ++i) {
              const int32_t e = ids.data<int32_t>()[i], slot = hps.data<int32_t>()[i];
              ASSERT_TRUE(e >= 0 && e < E) << where;
              EXPECT_TRUE(slot >= off.data<int32_t>()[e] && slot < off.data<int32_t>()[e + 1]) << where;
              if (ordered) {
                EXPECT_EQ(slot, off.data<int32_t>()[e] + seen[e]) << where;
              }
              ++seen[e];
              if (slot >= 0 && slot < pairs) {
                EXPECT_EQ(hsp.data<int32_t>()[slot], i) << where;
              }
            }
          }
        }
      }
    }
  }
}

// The backend op: norm_moe_route (fused up to 8 tokens, its dispatch used by moe_experts_residual) gives the
// bits of rms_norm + moe_route + moe_experts_residual, and x within rounding of the CPU reference's norm.
TEST_F(CudaDeepseekOpsTest, NormMoeRouteAndDispatchEqualUnfused) {
  const int64_t H = 256, I = 96;
  CudaBackendOptions on, split_on;
  on.moe_fused_route = true;  // DSINFER_CUDA_MOE_FUSED_ROUTE=1
  split_on.split_gemm_activations = true;
  split_on.moe_fused_route = true;
  CudaBackendOptions off;
  off.moe_fused_route = false;  // DSINFER_CUDA_MOE_FUSED_ROUTE=0
  for (CudaBackendOptions opts : {on, split_on, off}) {
    CudaBackend gpu(opts);
    for (const FusedRouteCase& c : kFusedRouteCases) {
      const int64_t E = c.E;
      ExpertSet experts = make_experts(this, gpu, E, H, I);
      gpu.prepare_experts(experts.gpu);
      const Tensor router_host = tied_router(this, E, H, c.groups);
      const Tensor router = gpu.prepare_weight(router_host);
      const Tensor norm_host = random_bf16_values({H}, 0.5f);
      const Tensor norm = gpu.prepare_weight(norm_host);
      Tensor bias;
      if (c.bias) {
        Tensor b = Tensor::empty(DType::F32, {E});
        for (int64_t e = 0; e < E; ++e) b.f32()[e] = 0.01f * static_cast<float>((e * 37) % 11);
        bias = gpu.prepare_weight_f32(b);
      }
      RoutingParams p;
      p.scoring = c.scoring;
      p.method = c.method;
      p.top_k = c.K;
      p.n_group = c.groups;
      p.topk_group = c.topk_group;
      p.norm_topk_prob = c.norm;
      p.routed_scaling_factor = 2.5f;
      for (int64_t T : {1, 2, 3, 5, 8, 16}) {
        const Tensor h_host = random_bf16_values({T, H}, 3.0f);
        const Tensor h = cuda::to_device(h_host);
        // Unfused.
        const Tensor x_u = gpu.rms_norm(h, norm, 1e-6f);
        Tensor ids_u, w_u;
        gpu.moe_route(x_u, router, bias, p, &ids_u, &w_u);
        Tensor res_u = cuda::to_device(h_host);
        gpu.moe_experts_residual(res_u, x_u, ids_u, w_u, experts.gpu);
        // Fused.
        Tensor ids_f, w_f;
        MoeDispatch dispatch;
        const Tensor x_f =
            gpu.norm_moe_route(h, norm, 1e-6f, router, bias, p, experts.gpu, &ids_f, &w_f, &dispatch);
        const bool fused = cuda::next_pow2(T) <= cuda::kMoeNormRouteMaxTokens &&
                           cuda::next_pow2(T) * E <= cuda::kMoeNormRouteMaxTokenExperts;
        EXPECT_EQ(static_cast<bool>(dispatch.data), fused && opts.moe_fused_route) << "T=" << T;
        Tensor res_f = cuda::to_device(h_host);
        gpu.moe_experts_residual(res_f, x_f, ids_f, w_f, experts.gpu, &dispatch);
        const std::string where =
            std::string(c.scoring) + "/" + c.method + " E=" + std::to_string(E) + " T=" + std::to_string(T);
        for (const auto& [u, f, what] : {std::tuple<Tensor, Tensor, const char*>{x_u, x_f, "x"},
                                         {ids_u, ids_f, "ids"},
                                         {w_u, w_f, "weights"},
                                         {res_u, res_f, "residual"}}) {
          const Tensor hu = cuda::to_host(u), hf = cuda::to_host(f);
          ASSERT_EQ(hu.shape(), hf.shape()) << what << ", " << where;
          int64_t differ = 0;
          for (int64_t i = 0; i < hu.numel(); ++i)
            differ += static_cast<const uint32_t*>(hu.raw())[i] != static_cast<const uint32_t*>(hf.raw())[i];
          EXPECT_EQ(differ, 0) << what << " differ, " << where;
        }
        EXPECT_LT(rel_err(gpu.to_host(x_f), cpu.rms_norm(h_host, norm_host, 1e-6f)), 1e-6) << where;
      }
    }
  }
}

TEST_F(CudaDeepseekOpsTest, MoeExpertsResidualMatchesCpuAndUnfused) {
  // The combine adding into the residual: residual + the experts' sum, the same bits as moe_experts followed
  // by add_inplace, within tolerance of the CPU (streaming, tensor-core and CUDA-core tiles).
  CudaBackend gpu(CudaBackendOptions{true});
  for (auto [E, H, I, K] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 96, 6}, {6, 60, 36, 2}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    gpu.prepare_experts(experts.gpu);
    for (int64_t T : {1, 3, 8, 64, 600}) {
      const Tensor ids = distinct_expert_ids(rng, T, K, E);
      const Tensor weights = random_bf16_values({T, K}), x = random_bf16_values({T, H});
      const Tensor h = random_bf16_values({T, H}, 4.0f);
      Tensor ref = h.clone();
      cpu.moe_experts_residual(ref, x, ids, weights, experts.cpu);
      const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
      Tensor fused = cuda::to_device(h), unfused = cuda::to_device(h);
      gpu.moe_experts_residual(fused, dx, dids, dw, experts.gpu);
      gpu.add_inplace(unfused, gpu.moe_experts(dx, dids, dw, experts.gpu));
      const Tensor a = gpu.to_host(fused), b = gpu.to_host(unfused);
      EXPECT_LT(rel_err(a, ref), 1e-5) << "E=" << E << " T=" << T;
      int64_t differ = 0;
      for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
      EXPECT_EQ(differ, 0) << "E=" << E << " T=" << T;
    }
  }
}

// ---- shared experts inside the routed experts' launches ----

// A block's shared MLP of `units` x I intermediate ([units I, H] gate and up, [H, units I] down), small
// bf16 values, on the host and as the GPU's bf16 copies.
struct SharedMlp {
  MlpWeights cpu, gpu;
};

SharedMlp make_shared_mlp(CudaDeepseekOpsTest* test, CudaBackend& gpu, int64_t units, int64_t H, int64_t I) {
  SharedMlp s;
  s.cpu.gate.weight = test->random_bf16_values({units * I, H}, 0.1f);
  s.cpu.up.weight = test->random_bf16_values({units * I, H}, 0.1f);
  s.cpu.down.weight = test->random_bf16_values({H, units * I}, 0.1f);
  s.gpu.gate.weight = gpu.prepare_weight(s.cpu.gate.weight);
  s.gpu.up.weight = gpu.prepare_weight(s.cpu.up.weight);
  s.gpu.down.weight = gpu.prepare_weight(s.cpu.down.weight);
  return s;
}

// An RMSNorm weight near 1, bf16-representable.
Tensor norm_weight(CudaDeepseekOpsTest* test, int64_t H) {
  Tensor w = test->random_bf16_values({H}, 0.1f);
  for (int64_t i = 0; i < H; ++i) w.f32()[i] = bf16_to_f32(f32_to_bf16(1.0f + w.f32()[i]));
  return w;
}

// a - h elementwise (host tensors of one shape): what an op added to the residual h.
Tensor added_part(const Tensor& a, const Tensor& h) {
  Tensor d = Tensor::empty(DType::F32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) d.f32()[i] = a.f32()[i] - h.f32()[i];
  return d;
}

// moe_experts_residual with the block's shared experts, as the model calls it (x, ids, weights and the
// dispatch from norm_moe_route): at T 1..8 the shared experts run as extra experts of the streaming launches
// (units of the routed intermediate size, weight 1, added by the combine). Against the unfused path (the
// shared MLP's own launches, then the routed experts: the bits of norm_mlp_residual followed by
// moe_experts_residual) and the CPU, 1 and 2 shared units, 64 and 6 experts: what both add to the residual
// within the expert tests' tolerance of the CPU's, and the fused result not bit-equal to the unfused one
// (the fused path ran: its sums run in another order).
TEST_F(CudaDeepseekOpsTest, MoeSharedExpertsFusedMatchCpuAndUnfused) {
  CudaBackendOptions off;
  off.moe_shared_fused = false;
  CudaBackend gpu, unfused(off);
  const float eps = 1e-6f;
  RoutingParams rp;
  rp.scoring = "softmax";
  rp.method = "greedy";
  for (auto [E, H, I, K] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 96, 6}, {6, 128, 40, 2}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    gpu.prepare_experts(experts.gpu);
    const Tensor router = gpu.prepare_weight(random_bf16_values({E, H}, 0.5f));
    rp.top_k = K;
    for (int64_t units : {1, 2}) {
      const SharedMlp shared = make_shared_mlp(this, gpu, units, H, I);
      const Tensor norm_c = norm_weight(this, H), norm_g = device_bf16(norm_c);
      const MoeSharedExperts sc{&shared.cpu, norm_c, eps}, sg{&shared.gpu, norm_g, eps};
      for (int64_t T = 1; T <= 8; ++T) {
        const std::string what =
            "E=" + std::to_string(E) + " units=" + std::to_string(units) + " T=" + std::to_string(T);
        const Tensor h = random_bf16_values({T, H}, 4.0f);
        const Tensor dh = cuda::to_device(h);
        Tensor ids, weights;
        MoeDispatch dispatch;
        const Tensor x =
            gpu.norm_moe_route(dh, norm_g, eps, router, Tensor(), rp, experts.gpu, &ids, &weights, &dispatch);
        Tensor fused = cuda::to_device(h), split = cuda::to_device(h), separate = cuda::to_device(h);
        gpu.moe_experts_residual(fused, x, ids, weights, experts.gpu, &dispatch, &sg);
        unfused.moe_experts_residual(split, x, ids, weights, experts.gpu, nullptr, &sg);
        unfused.norm_mlp_residual(separate, norm_g, eps, shared.gpu);
        unfused.moe_experts_residual(separate, x, ids, weights, experts.gpu);
        // The CPU on its own norm of h, with the GPU's routing.
        Tensor ref = h.clone();
        cpu.moe_experts_residual(ref, cpu.rms_norm(h, norm_c, eps), gpu.to_host(ids), gpu.to_host(weights),
                                 experts.cpu, nullptr, &sc);
        const Tensor a = gpu.to_host(fused), b = gpu.to_host(split), c = gpu.to_host(separate);
        const Tensor want = added_part(ref, h);
        EXPECT_LT(rel_err(added_part(a, h), want), 1e-4) << "fused " << what;
        EXPECT_LT(rel_err(added_part(b, h), want), 1e-4) << "unfused " << what;
        int64_t differ_split = 0, differ_fused = 0;
        for (int64_t i = 0; i < a.numel(); ++i) {
          differ_split += b.f32()[i] != c.f32()[i];
          differ_fused += a.f32()[i] != b.f32()[i];
        }
        EXPECT_EQ(differ_split, 0) << "unfused vs norm_mlp_residual + moe_experts_residual, " << what;
        EXPECT_GT(differ_fused, 0) << "the fused path did not run? " << what;
      }
    }
  }
}

// With the shared experts fused, a token's result does not depend on the other tokens of its bucket (a
// shared unit's tile holds the bucket's tokens; a row's sums never see the others), and graph replay gives
// the eager bits.
TEST_F(CudaDeepseekOpsTest, MoeSharedExpertsFusedRowsIndependentOfBatchInBucket) {
  CudaBackend gpu;
  const int64_t E = 64, H = 256, I = 96, K = 6, units = 2, Tmax = 8;
  const float eps = 1e-6f;
  ExpertSet experts = make_experts(this, gpu, E, H, I);
  gpu.prepare_experts(experts.gpu);
  const SharedMlp shared = make_shared_mlp(this, gpu, units, H, I);
  const Tensor norm_g = device_bf16(norm_weight(this, H));
  const MoeSharedExperts sg{&shared.gpu, norm_g, eps};
  const Tensor h = random_bf16_values({Tmax, H}, 4.0f), x = random_bf16_values({Tmax, H});
  const Tensor weights = random_bf16_values({Tmax, K}), ids = distinct_expert_ids(rng, Tmax, K, E);
  auto head = [](const Tensor& t, int64_t T) {
    Tensor r = Tensor::empty(t.dtype(), {T, t.dim(1)});
    std::copy_n(static_cast<const char*>(t.raw()), r.nbytes(), static_cast<char*>(r.raw()));
    return cuda::to_device(r);
  };
  auto run = [&](int64_t T) {
    Tensor res = head(h, T);
    gpu.moe_experts_residual(res, head(x, T), head(ids, T), head(weights, T), experts.gpu, nullptr, &sg);
    return gpu.to_host(res);
  };
  for (auto [small, big] : {std::pair<int64_t, int64_t>{3, 4}, {5, 8}, {7, 8}}) {
    const Tensor a = run(small), b = run(big);
    int64_t differ = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
    EXPECT_EQ(differ, 0) << "T " << small << " vs " << big;
  }
  // A captured graph of the op (the residual reset from a copy first) replays the eager bits.
  for (int64_t T : {1, 6}) {
    const Tensor eager = run(T);
    const Tensor h0 = head(h, T), dx = head(x, T), dids = head(ids, T), dw = head(weights, T);
    Tensor res = head(h, T);
    cuda::time_graph_ms(
        [&] {
          cuda::copy_device_to_device(res.raw(), h0.raw(), res.nbytes());
          gpu.moe_experts_residual(res, dx, dids, dw, experts.gpu, nullptr, &sg);
        },
        2);
    const Tensor replayed = gpu.to_host(res);
    int64_t differ = 0;
    for (int64_t i = 0; i < eager.numel(); ++i) differ += eager.f32()[i] != replayed.f32()[i];
    EXPECT_EQ(differ, 0) << "graph replay, T " << T;
  }
}

// The grouped GEMMs keep a token's output independent of the other tokens of its bucket: an output row
// depends only on its own activation row (the tile it shares and its position there never enter its sums).
TEST_F(CudaDeepseekOpsTest, MoeExpertsGroupedRowsIndependentOfBatchInBucket) {
  CudaBackend base;
  const int64_t E = 64, H = 256, I = 96, K = 6, Tmax = 2048;
  ExpertSet experts = make_experts(this, base, E, H, I);
  base.prepare_experts(experts.gpu);
  const Tensor x = random_bf16_values({Tmax, H}), weights = random_bf16_values({Tmax, K});
  const Tensor ids = distinct_expert_ids(rng, Tmax, K, E);  // [Tmax, K]
  auto head = [](const Tensor& t, int64_t T) {
    Tensor h = Tensor::empty(t.dtype(), {T, t.dim(1)});
    std::copy_n(static_cast<const char*>(t.raw()), h.nbytes(), static_cast<char*>(h.raw()));
    return cuda::to_device(h);
  };
  // The default choice and the wgmma variants (their mma.sync twins off Hopper).
  for (int variant : {0, 5, 6, 7, 8}) {
    CudaBackend gpu(CudaBackendOptions{false, variant});
    auto run = [&](int64_t T) {
      return gpu.to_host(gpu.moe_experts(head(x, T), head(ids, T), head(weights, T), experts.gpu));
    };
    // Buckets 1024 (96 rows per expert: the 64-row tiles) and 2048 (192: the 128-row tiles).
    for (auto [small, big] : {std::pair<int64_t, int64_t>{600, 1024}, {1100, 2048}}) {
      const Tensor a = run(small), b = run(big);
      int64_t differ = 0;
      for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
      EXPECT_EQ(differ, 0) << "variant " << variant << " T " << small << " vs " << big;
    }
  }
}

// ---- Micro-benchmarks (run with --gtest_also_run_disabled_tests --gtest_filter='*Bench*') ----

// Mean seconds per call of fn over `iters` calls after 3 warm-up calls.
template <typename Fn>
double time_calls(Fn&& fn, int iters) {
  for (int i = 0; i < 3; ++i) fn();
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Device copy bandwidth (bytes read + written per second, 1 GiB buffers), printed for reference.
double measured_copy_gbs() {
  const int64_t copy_bytes = int64_t{1} << 30;
  Tensor src = Tensor::empty_on(Device::kCuda, DType::U8, {copy_bytes}),
         dst = Tensor::empty_on(Device::kCuda, DType::U8, {copy_bytes});
  const double copy_s =
      time_calls([&] { cuda::copy_device_to_device(dst.raw(), src.raw(), copy_bytes); }, 10);
  const double copy_gbs = 2.0 * copy_bytes / copy_s / 1e9;
  std::printf("device copy: %.0f GB/s (read + write)\n", copy_gbs);
  return copy_gbs;
}

// Device tensor of n bf16 values filled by repeating one host block of small random values.
Tensor device_bf16_filled(CudaDeepseekOpsTest* test, Shape shape) {
  Tensor dev = Tensor::empty_on(Device::kCuda, DType::BF16, shape);
  const int64_t n = dev.numel(), block = std::min<int64_t>(n, 1 << 22);
  const Tensor host = CudaDeepseekOpsTest::to_bf16_bits(test->random_bf16_values({block}, 0.05f));
  for (int64_t i = 0; i < n; i += block)
    cuda::copy_to_device(static_cast<uint16_t*>(dev.raw()) + i, host.raw(), std::min(block, n - i) * 2);
  return dev;
}

// E experts of [I, H] gate/up and [H, I] down with small random weights, stacked as prepare_experts leaves
// them (one [E * 2I, H] gate/up tensor, one [E * H, I] down tensor, which the rows views keep alive).
std::vector<MlpWeights> stacked_random_experts(CudaDeepseekOpsTest* test, int64_t E, int64_t H, int64_t I) {
  const Tensor gate_up = device_bf16_filled(test, {E * 2 * I, H});  // [E * 2I, H]
  const Tensor down = device_bf16_filled(test, {E * H, I});         // [E * H, I]
  std::vector<MlpWeights> experts(E);
  for (int64_t e = 0; e < E; ++e) {
    experts[e].gate.weight = gate_up.rows(2 * e * I, 2 * e * I + I);
    experts[e].up.weight = gate_up.rows(2 * e * I + I, 2 * (e + 1) * I);
    experts[e].down.weight = down.rows(e * H, (e + 1) * H);
  }
  return experts;
}

TEST_F(CudaDeepseekOpsTest, DISABLED_BenchMlaDecode) {
  CudaBackend gpu;  // registers the device allocator
  // Device copy bandwidth (read + write) for reference.
  const double copy_gbs = measured_copy_gbs();
  for (auto [batch, ctx, H] : {std::tuple<int32_t, int32_t, int64_t>{64, 4096, 16},
                               {64, 4096, 128},
                               {1, 4096, 16},
                               {1, 4096, 128},
                               {1, 192, 16},
                               {1, 256, 16},
                               {64, 256, 16},
                               {256, 256, 16},
                               {256, 256, 128}}) {
    const int64_t R = 512, P = 64;
    const int32_t bs = 64, blocks = batch * ((ctx + bs - 1) / bs) + 1;
    std::vector<std::pair<int32_t, int32_t>> seqs(batch, {ctx - 1, 1});
    const BatchPlan plan = make_plan(seqs, bs, blocks);
    for (DType dt : {DType::BF16, DType::F32}) {
      KvCache cache({KvLayerSpec{KvKind::kFullHistory, R + P}}, blocks, bs, Device::kCuda, dt);
      if (dt == DType::BF16) {
        const Tensor filled = device_bf16_filled(this, {static_cast<int64_t>(blocks) * bs, R + P});
        cuda::copy_device_to_device(const_cast<void*>(cache.storage(0).raw()), filled.raw(), filled.nbytes());
      } else {
        const Tensor zeros = Tensor::zeros(DType::F32, cache.storage(0).shape());
        cuda::copy_to_device(const_cast<void*>(cache.storage(0).raw()), zeros.raw(), zeros.nbytes());
      }
      const Tensor q_lat = cuda::to_device(random_bf16_values({batch, H, R}, 0.1f));
      const Tensor q_pe = cuda::to_device(random_bf16_values({batch, H, P}, 0.1f));
      const double s = time_calls([&] { gpu.attention_mla(q_lat, q_pe, cache, 0, plan, 0.07f); }, 20);
      const double bytes = static_cast<double>(batch) * ctx * (R + P) * dtype_size(dt);
      std::printf(
          "attention_mla decode batch %d ctx %d heads %lld %s cache: %.1f us, latent read %.0f GB/s (%.0f%% "
          "of copy)\n",
          batch, ctx, static_cast<long long>(H), std::string(dtype_name(dt)).c_str(), s * 1e6,
          bytes / s / 1e9, 100.0 * bytes / s / 1e9 / copy_gbs);
    }
  }
}

// attention_mla on prefill and mixed steps (bf16 cache, R 512, P 64), us per call (CUDA events; six caches
// used in turn so that L2 does not keep one step's rows for the next call) and TFLOP/s of the absorbed
// form's 2 x (576 + 512) FLOPs per (query row, visible position), four dispatches: "decode" the split decode
// kernel for every token (main's dispatch), "all-mq" every sequence on the multi-query kernel (decode
// tokens as blocks of one; close to the mlaprefill branch's whole-step dispatch), "split" the split by
// sequence forced on (min_query 64, no block threshold) and "default" the default thresholds. Workloads:
// 8192 query tokens as whole prompts of 128 .. 1024 tokens or as chunks after cached prefixes, smaller
// steps, and the V2-Lite workload's mixed step: 480 decode rows (contexts 128 .. 1500) + a 7,680-token
// chunk of 10 prompts.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchMlaPrefill) {
  CudaBackend gpu;
  const int64_t R = 512, P = 64;
  const int32_t bs = 64;
  struct Work {
    const char* name;
    std::vector<std::pair<int32_t, int32_t>> seqs;
    int64_t H;
  };
  std::vector<std::pair<int32_t, int32_t>> prompts, chunks, small, tiny, mixed;
  for (int32_t i = 0, left = 8192; left > 0; ++i) {  // 13 prompts of 128 .. 1024 tokens
    const int32_t len = std::min(left, 128 + (i * 389) % 897);
    prompts.push_back({0, len});
    left -= len;
  }
  for (int32_t i = 0; i < 16; ++i) chunks.push_back({(i * 37) % 513, 512});  // 16 x 512 after 0 .. 512
  for (int32_t i = 0; i < 4; ++i) small.push_back({(i * 251) % 700, 128});   // 512 tokens
  for (int32_t i = 0; i < 2; ++i) tiny.push_back({600 + i * 100, 64});       // 128 tokens
  // The mixed step: 480 decode rows (contexts 129 .. 1501), one of the 10 prompts (7,680 tokens, 348 ..
  // 1024 each) after every 48 of them.
  const int32_t mixed_prompts[10] = {1024, 1000, 960, 900, 840, 768, 700, 640, 500, 348};
  for (int32_t i = 0; i < 480; ++i) {
    mixed.push_back({128 + (i * 613) % 1373, 1});
    if (i % 48 == 47) mixed.push_back({0, mixed_prompts[i / 48]});
  }
  const std::vector<Work> works = {{"8192 tok, 13 prompts 128..1024", prompts, 16},
                                   {"8192 tok, 16 chunks of 512 after 0..512", chunks, 16},
                                   {"8192 tok, 13 prompts, 128 heads", prompts, 128},
                                   {"512 tok, 4 chunks of 128 after 0..700", small, 16},
                                   {"128 tok, 2 chunks of 64 after 600..700", tiny, 16},
                                   {"mixed: 480 decode + 7680 tok of 10 prompts", mixed, 16}};
  struct Dispatch {
    const char* name;
    int min_query, min_blocks;
  };
  const std::vector<Dispatch> dispatches = {
      {"decode", 64, kPrefillOff},
      {"all-mq", 1, 0},
      {"split", 64, 0},
      {"default", cuda::mla_prefill_min_query(), cuda::mla_prefill_min_blocks()}};
  std::printf("%-44s %5s", "attention_mla prefill (us, TFLOP/s)", "heads");
  for (const Dispatch& d : dispatches) std::printf(" %9s %6s", d.name, "TF/s");
  std::printf(" %8s\n", "speedup");
  for (const Work& w : works) {
    int32_t blocks = 1;
    for (auto [cached, fresh] : w.seqs) blocks += (cached + fresh + bs - 1) / bs;
    const BatchPlan plan = make_plan(w.seqs, bs, blocks);
    const int64_t T = plan.num_tokens(), H = w.H;
    double flops = 0.0;
    for (int32_t pos : plan.positions) flops += (pos + 1.0) * H * 2.0 * (R + P + R);
    std::vector<std::unique_ptr<KvCache>> caches;
    for (int c = 0; c < 6; ++c) {
      caches.push_back(
          std::make_unique<KvCache>(std::vector<KvLayerSpec>{KvLayerSpec{KvKind::kFullHistory, R + P}},
                                    blocks, bs, Device::kCuda, DType::BF16));
      const Tensor filled = device_bf16_filled(this, {static_cast<int64_t>(blocks) * bs, R + P});
      cuda::copy_device_to_device(const_cast<void*>(caches.back()->storage(0).raw()), filled.raw(),
                                  filled.nbytes());
    }
    const Tensor q_lat = cuda::to_device(random_bf16_values({T, H, R}, 0.1f));
    const Tensor q_pe = cuda::to_device(random_bf16_values({T, H, P}, 0.1f));
    std::vector<double> us;
    for (const Dispatch& d : dispatches) {
      with_prefill_policy(d.min_query, d.min_blocks, [&] {
        int next = 0;
        us.push_back(1e3 * cuda::time_stream_ms(
                               [&] {
                                 gpu.attention_mla(q_lat, q_pe, *caches[next], 0, plan, 0.07f);
                                 next = (next + 1) % 6;
                               },
                               12));
      });
    }
    std::printf("%-44s %5lld", w.name, static_cast<long long>(H));
    for (double u : us) std::printf(" %9.1f %6.1f", u, flops / u * 1e-6);
    std::printf(" %7.2fx\n", us[0] / us.back());  // decode / default
  }
}

// The DeepSeek-V2-Lite decode shapes of the other ops (latency per call) at batch 1, 64 and 256, and the
// V3 router (256 experts, 8 groups, top 8, sigmoid noaux_tc, hidden 7168).
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchDecodeOps) {
  CudaBackend gpu;
  const int64_t heads = 16, nope = 128, v = 128, R = 512;
  struct RouterShape {
    const char* name;
    int64_t H, E, K, groups, topk_group;
    const char *scoring, *method;
  };
  for (const RouterShape& r :
       {RouterShape{"V2-Lite softmax greedy", 2048, 64, 6, 1, 1, "softmax", "greedy"},
        RouterShape{"V3 sigmoid noaux_tc", 7168, 256, 8, 8, 4, "sigmoid", "noaux_tc"}}) {
    const Tensor router = device_bf16_filled(this, {r.E, r.H});
    Tensor bias_host = Tensor::empty(DType::F32, {r.E});
    for (int64_t e = 0; e < r.E; ++e) bias_host.f32()[e] = 0.01f * static_cast<float>(e % 7);
    const Tensor bias = std::string(r.method) == "noaux_tc" ? gpu.prepare_weight_f32(bias_host) : Tensor();
    RoutingParams p;
    p.scoring = r.scoring;
    p.method = r.method;
    p.top_k = r.K;
    p.n_group = r.groups;
    p.topk_group = r.topk_group;
    p.norm_topk_prob = true;
    for (int64_t T : {1, 64, 256}) {
      const Tensor x = cuda::to_device(random_bf16_values({T, r.H}));
      Tensor ids, w;
      const double s = time_calls([&] { gpu.moe_route(x, router, bias, p, &ids, &w); }, 50);
      std::printf("moe_route %s T %lld, %lld experts, hidden %lld: %.1f us\n", r.name,
                  static_cast<long long>(T), static_cast<long long>(r.E), static_cast<long long>(r.H),
                  s * 1e6);
    }
  }
  const Tensor w_uk = device_bf16_filled(this, {heads, nope, R});
  const Tensor w_uv = device_bf16_filled(this, {heads, v, R});
  for (int64_t T : {1, 64, 256, 512}) {
    const Tensor q_nope = cuda::to_device(random_bf16_values({T, heads, nope}));
    double s = time_calls([&] { gpu.head_matmul(q_nope, w_uk, true); }, 50);
    std::printf("head_matmul T %lld [16, 128] -> [16, 512] (w^T x): %.1f us, %.2f TFLOP/s\n",
                static_cast<long long>(T), s * 1e6, 2.0 * T * heads * nope * R / s / 1e12);
    const Tensor o_lat = cuda::to_device(random_bf16_values({T, heads, R}));
    s = time_calls([&] { gpu.head_matmul(o_lat, w_uv, false); }, 50);
    std::printf("head_matmul T %lld [16, 512] -> [16, 128] (w x): %.1f us, %.2f TFLOP/s\n",
                static_cast<long long>(T), s * 1e6, 2.0 * T * heads * v * R / s / 1e12);
  }
}

// head_matmul's decode GEMV (next_pow2(T) <= 8) at the V2-Lite (16 heads, 2 MB) and V3 (128 heads, 16.8
// MB) W_UK (w^T x, [H, 128] -> [H, 512]) and W_UV (w x, [H, 512] -> [H, 128]) shapes, T 1, 2, 4, 8: the
// older GEMV kernels ("legacy"), the default tile and each tile. Cycling through weight copies (100 MB or
// more, twice the L2): us per call launched back to back (CUDA events over 400 calls) and replayed in a CUDA
// graph of one call per copy (as in the model: programmatic edges between the calls), and the weight bytes
// per second of the graph figure as a share of 4290 GB/s. DSINFER_CUDA_PDL=0 times them without
// programmatic launch.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchHeadMatmulDecode) {
  CudaBackend gpu;  // registers the device allocator
  struct HeadShape {
    const char* name;
    int64_t H, A, B;
    bool transpose;
  };
  std::printf("%-9s %2s %-8s %10s %9s %8s\n", "shape", "T", "tile", "stream us", "graph us", "% 4290");
  for (const HeadShape& s :
       {HeadShape{"V2L W_UK", 16, 128, 512, true}, HeadShape{"V2L W_UV", 16, 512, 128, false},
        HeadShape{"V3 W_UK", 128, 128, 512, true}, HeadShape{"V3 W_UV", 128, 512, 128, false}}) {
    const int64_t elems = s.H * s.A * s.B;
    const int64_t copies = std::max<int64_t>(4, (int64_t{100} << 20) / (elems * 2) + 1);
    const Tensor weights = device_bf16_filled(this, {copies * elems});  // copies x [H, A, B] or [H, B, A]
    for (int64_t T : {1, 2, 4, 8}) {
      const Tensor x = cuda::to_device(random_bf16_values({T, s.H, s.A}));    // [T, H, A]
      Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {T, s.H, s.B});  // [T, H, B]
      const std::vector<int> tiles = s.transpose ? std::vector<int>{cuda::kHeadGemvLegacy, 0, 4, 8, 16}
                                                 : std::vector<int>{cuda::kHeadGemvLegacy, 0, 1, 2, 4};
      for (int tile : tiles) {
        auto call = [&](int64_t c) {
          cuda::launch_head_matmul(x.data<float>(), weights.data<uint16_t>() + c * elems, y.data<float>(), T,
                                   s.H, s.A, s.B, s.transpose, tile);
        };
        int64_t next = 0;
        const double stream_us = 1e3 * cuda::time_stream_ms([&] { call(next++ % copies); }, 400);
        const double graph_us = 1e3 *
                                cuda::time_graph_ms(
                                    [&] {
                                      for (int64_t c = 0; c < copies; ++c) call(c);
                                    },
                                    20) /
                                copies;
        const std::string name = tile == cuda::kHeadGemvLegacy ? "legacy"
                                 : tile == 0                   ? "default"
                                                               : std::to_string(tile);
        std::printf("%-9s %2lld %-8s %10.2f %9.2f %7.1f%%\n", s.name, static_cast<long long>(T), name.c_str(),
                    stream_us, graph_us, 100.0 * elems * 2 / (graph_us * 1e-6) / 1e9 / 4290.0);
      }
    }
  }
}

// The decode routing of one MoE layer: the fused kernel (norm_moe_route: RMSNorm, logits, selection and
// the experts' permutation in one launch) against the four separate launches it replaces (rms_norm,
// moe_route's logits and selection, moe_permute) at the V2-Lite and V3 router shapes, T 1/4/8, as the model
// runs them: one call per router copy (100 MB or more of copies, twice the L2) captured into a CUDA graph
// (PDL edges kept) and replayed, so launch overhead is not counted; us per call. Splits of the separate path
// (each piece alone in its own graph): rms_norm, moe_route (logits + selection), moe_permute. "fused eager":
// the fused kernel launched from the host back to back (CUDA events). Router bytes per second of the fused
// graph as a share of 4290 GB/s. DSINFER_CUDA_PDL=0 times them without programmatic launch.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchNormMoeRoute) {
  CudaBackend gpu;  // registers the device allocator
  struct RouterShape {
    const char* name;
    int64_t H, E, K, groups, topk_group;
    const char *scoring, *method;
    int moe_layers;
  };
  std::printf("%-8s %2s %8s %9s %7s %9s %8s %8s %8s %7s %10s\n", "shape", "T", "fused", "separate", "saved",
              "rms_norm", "route", "permute", "f.eager", "f. %BW", "saved/tok");
  for (const RouterShape& r : {RouterShape{"V2-Lite", 2048, 64, 6, 1, 1, "softmax", "greedy", 26},
                               RouterShape{"V3", 7168, 256, 8, 8, 4, "sigmoid", "noaux_tc", 58}}) {
    const int64_t router_elems = r.E * r.H;
    const int64_t copies = std::max<int64_t>(2, (int64_t{100} << 20) / (router_elems * 2) + 1);
    const Tensor routers = device_bf16_filled(this, {copies * r.E, r.H});  // [copies * E, H]
    const Tensor norm = device_bf16(random_bf16_values({r.H}, 0.5f));
    Tensor bias_host = Tensor::empty(DType::F32, {r.E});
    for (int64_t e = 0; e < r.E; ++e) bias_host.f32()[e] = 0.01f * static_cast<float>(e % 7);
    const bool has_bias = std::string(r.method) == "noaux_tc";
    const Tensor bias = has_bias ? cuda::to_device(bias_host) : Tensor();
    const FusedRouteCase c{r.scoring, r.method, r.E, r.K, r.groups, r.topk_group, true, has_bias};
    const cuda::MoeRouteParams rp = kernel_route_params(c);
    for (int64_t T : {1, 4, 8}) {
      const int64_t pairs = T * r.K;
      const int tile_rows = cuda::moe_stream_tile_rows((cuda::next_pow2(T) * r.K + r.E - 1) / r.E);
      auto i32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::I32, {n}); };
      auto f32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::F32, {n}); };
      const Tensor h = cuda::to_device(random_bf16_values({T, r.H}, 3.0f));
      Tensor x = f32(T * r.H), logits = f32(T * r.E), ids = i32(pairs), w = f32(pairs);
      Tensor off = i32(r.E + 1), tiles = i32(r.E + 1), sp = i32(pairs), ps = i32(pairs);
      cuda::MoeNormRouteArgs a;
      a.h = h.data<float>();
      a.norm = norm.data<uint16_t>();
      a.eps = 1e-6f;
      a.bias = has_bias ? bias.data<float>() : nullptr;
      a.x = x.data<float>();
      a.logits = logits.data<float>();
      a.ids = ids.data<int32_t>();
      a.weights = w.data<float>();
      a.tile_rows = tile_rows;
      a.offsets = off.data<int32_t>();
      a.tiles = tiles.data<int32_t>();
      a.slot_pair = sp.data<int32_t>();
      a.pair_slot = ps.data<int32_t>();
      a.arrivals = cuda::decode_arrivals(1);
      a.T = static_cast<int>(T);
      a.H = static_cast<int>(r.H);
      a.E = static_cast<int>(r.E);
      const bool fusable = cuda::moe_norm_route_supported(a, rp);
      auto router = [&](int64_t i) { return routers.data<uint16_t>() + i * router_elems; };
      // us per call of one(i) (router copy i): every copy once in a captured graph, replayed.
      auto graph_us = [&](const std::function<void(int64_t)>& one) {
        const double ms = cuda::time_graph_ms(
            [&] {
              for (int64_t i = 0; i < copies; ++i) one(i);
            },
            5);
        return ms * 1e3 / static_cast<double>(copies);
      };
      auto fused = [&](int64_t i) {
        a.router = router(i);
        cuda::launch_moe_norm_route(a, rp);
      };
      auto norm_only = [&](int64_t) { cuda::launch_rms_norm(a.h, a.norm, a.x, T, r.H, a.eps); };
      auto route_only = [&](int64_t i) {
        cuda::launch_moe_route(a.x, router(i), a.bias, a.logits, a.ids, a.weights, T, r.H, r.E, rp);
      };
      auto permute_only = [&](int64_t) {
        cuda::launch_moe_permute(a.ids, pairs, r.E, tile_rows, a.offsets, a.tiles, a.slot_pair, a.pair_slot);
      };
      const double fused_us = fusable ? graph_us(fused) : 0.0;
      const double separate_us = graph_us([&](int64_t i) {
        norm_only(i);
        route_only(i);
        permute_only(i);
      });
      const double norm_us = graph_us(norm_only), route_us = graph_us(route_only),
                   permute_us = graph_us(permute_only);
      int64_t next = 0;
      const double eager_us =
          fusable ? cuda::time_stream_ms([&] { fused(next++ % copies); }, 400) * 1e3 : 0.0;
      const double saved_us = separate_us - fused_us;
      std::printf("%-8s %2lld %8.2f %9.2f %7.2f %9.2f %8.2f %8.2f %8.2f %6.1f%% %10.0f%s\n", r.name,
                  static_cast<long long>(T), fused_us, separate_us, saved_us, norm_us, route_us, permute_us,
                  eager_us, fusable ? 100.0 * router_elems * 2 / (fused_us * 1e-6) / 1e9 / 4290.0 : 0.0,
                  saved_us * r.moe_layers, fusable ? "" : "  (fused kernel does not take the shape)");
    }
  }
}

// moe_experts at the DeepSeek-V2-Lite expert shape (64 experts, top 6, hidden 2048, intermediate 1408; the
// stacked weights, 1.1 GB, far exceed the 50 MB L2) from decode to prefill sizes: the default path, from 256
// tokens every grouped GEMM variant (forced, so also below 64 rows per expert; wgmma variants 5-8 on the
// Hopper path, their mma.sync twins with DSINFER_CUDA_ARCH=sm_80), and from 683 tokens the older 64-row
// tensor-core tiles, in TFLOP/s next to the
// dense cuBLASLt bf16 rate of 8192 x 2816 x 2048 (CUDA events, 20 calls back to back), and the active
// experts' weight bytes per second as a share of 4290 GB/s.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchGroupedExperts) {
  CudaBackend gpu;
  const int64_t E = 64, H = 2048, I = 1408, K = 6;
  const std::vector<MlpWeights> experts = stacked_random_experts(this, E, H, I);
  const double hbm_gbs = 4290.0;  // H200 HBM3e bandwidth reached by streaming kernels here
  // The dense bf16 GEMM rate for comparison: [8192, 2048] x [2816, 2048]^T, activations rounded to bf16.
  Linear w{device_bf16_filled(this, {2 * I, H}), Tensor()};
  const Tensor xd = cuda::to_device(random_bf16_values({8192, H}));
  const double dense_ms = cuda::time_stream_ms([&] { gpu.linear(xd, w); }, 20);
  const double dense = 2.0 * 8192 * 2 * I * H / dense_ms / 1e9;
  std::printf("dense bf16 GEMM 8192 x 2816 x 2048: %.1f TFLOP/s\n", dense);
  std::printf("%6s %6s %8s %-22s %9s %8s %7s %11s\n", "T", "rows", "experts", "path", "us", "TFLOP/s",
              "% dense", "% 4290 GB/s");
  for (int64_t T : {1, 8, 64, 256, 512, 683, 1366, 2731, 8192}) {
    const Tensor ids = distinct_expert_ids(rng, T, K, E);  // [T, K]
    const Tensor dx = cuda::to_device(random_bf16_values({T, H})), dids = cuda::to_device(ids),
                 dw = cuda::to_device(random_bf16_values({T, K}));
    std::set<int32_t> active(ids.data<int32_t>(), ids.data<int32_t>() + T * K);
    const double flops = 6.0 * T * K * H * I, bytes = 3.0 * active.size() * H * I * 2;
    auto row = [&](const char* path, CudaBackend& b) {
      const double ms = cuda::time_stream_ms([&] { b.moe_experts(dx, dids, dw, experts); }, 20);
      std::printf("%6lld %6lld %8zu %-22s %9.1f %8.1f %6.0f%% %10.0f%%\n", static_cast<long long>(T),
                  static_cast<long long>(T * K), active.size(), path, ms * 1e3, flops / ms / 1e9,
                  100.0 * flops / ms / 1e9 / dense, 100.0 * bytes / ms / 1e6 / hbm_gbs);
    };
    row("default", gpu);
    if (T < 256) continue;
    for (int variant = 1; variant <= cuda::kMoeGroupedVariants; ++variant) {
      CudaBackend b(CudaBackendOptions{false, variant});
      const char* names[] = {"",
                             "grouped 128x128 k32 s4",
                             "grouped 128x128 k64 s3",
                             "grouped 64x128 k64 s4",
                             "grouped 128x256 k32 s4",
                             "wgmma 128x128 s4",
                             "wgmma 128x256 s4",
                             "wgmma 64x128 s4",
                             "wgmma 128x128 s3"};
      row(names[variant], b);
    }
    if (T < 683) continue;
    CudaBackend old(CudaBackendOptions{false, -1});
    row("64-row mma tiles", old);
    CudaBackend split(CudaBackendOptions{true});
    row("64-row mma tiles split", split);
  }
}

// moe_experts at decode batch sizes (V2-Lite experts, 64 of them, top 6): the weight-streaming kernels
// against the grouped bf16 GEMMs in 64- and 128-row tiles, in us and in active expert weight bytes per
// second as a share of 4290 GB/s. Chooses CudaBackendOptions::moe_grouped_min_rows.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchExpertsDecodeBatch) {
  CudaBackend gpu;
  const int64_t E = 64, H = 2048, I = 1408, K = 6;
  const std::vector<MlpWeights> experts = stacked_random_experts(this, E, H, I);
  CudaBackendOptions streaming;
  streaming.moe_grouped_min_rows = int64_t{1} << 40;
  CudaBackendOptions g64, g128;
  g64.moe_grouped_variant = 3;
  g64.moe_grouped_min_rows = 1;
  g128.moe_grouped_variant = 2;
  g128.moe_grouped_min_rows = 1;
  CudaBackendOptions w64 = g64;
  w64.moe_grouped_variant = 7;  // wgmma 64 x 128 (Hopper)
  CudaBackend stream_b(streaming), g64_b(g64), g128_b(g128), w64_b(w64);
  std::printf("%6s %10s %-18s %9s %12s\n", "T", "rows/exp", "path", "us", "% 4290 GB/s");
  for (int64_t T : {16, 32, 64, 128, 256, 512}) {
    const Tensor ids = distinct_expert_ids(rng, T, K, E);  // [T, K]
    const Tensor dx = cuda::to_device(random_bf16_values({T, H})), dids = cuda::to_device(ids),
                 dw = cuda::to_device(random_bf16_values({T, K}));
    std::set<int32_t> active(ids.data<int32_t>(), ids.data<int32_t>() + T * K);
    const double bytes = 3.0 * active.size() * H * I * 2;
    auto row = [&](const char* path, CudaBackend& b) {
      const double ms = cuda::time_stream_ms([&] { b.moe_experts(dx, dids, dw, experts); }, 20);
      std::printf("%6lld %10.1f %-18s %9.1f %11.0f%%\n", static_cast<long long>(T),
                  static_cast<double>(T * K) / E, path, ms * 1e3, 100.0 * bytes / ms / 1e6 / 4290.0);
    };
    row("default", gpu);
    row("streaming", stream_b);
    row("grouped 64x128", g64_b);
    row("grouped 128x128", g128_b);
    row("wgmma 64x128", w64_b);
  }
}

// One DeepSeek-V2-Lite MoE layer's experts at decode sizes (64 routed experts of 2048 x 1408, top 6, 2
// shared experts = one 2816-wide shared MLP), T 1/2/4/8: moe_experts_residual with the shared experts as
// the model calls it, unfused (DSINFER_CUDA_MOE_SHARED_FUSED=0: the shared MLP's gate/up + SwiGLU and down
// GEMVs, then the routed experts' permute, gate/up, down and combine) against fused (the shared experts
// as 2 extra experts of every token inside the routed gate/up and down launches). Each call uses its own
// copy of the shared weights (8 copies, 277 MB) and its own routing over the 1.1 GB of routed experts, so
// the 50 MB L2 does not serve repeats. "graph": all copies' calls captured in one CUDA graph and replayed
// (PDL edges kept, no launch overhead), us per call; "eager": back to back from the host (CUDA events).
// The pieces (graph): the shared MLP alone (norm_mlp_residual) and the routed experts alone. % BW: the
// call's weight bytes (active routed experts + shared) per fused graph time, as a share of 4290 GB/s.
// saved/tok: (unfused - fused) graph us x 26 MoE layers.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchSharedExpertsFused) {
  CudaBackendOptions off;
  off.moe_shared_fused = false;
  CudaBackend gpu, unfused(off);
  const int64_t E = 64, H = 2048, I = 1408, K = 6, units = 2, copies = 8, layers = 26;
  const float eps = 1e-6f;
  const std::vector<MlpWeights> experts = stacked_random_experts(this, E, H, I);
  std::vector<MlpWeights> shared(copies);
  for (MlpWeights& m : shared) {
    m.gate.weight = device_bf16_filled(this, {units * I, H});
    m.up.weight = device_bf16_filled(this, {units * I, H});
    m.down.weight = device_bf16_filled(this, {H, units * I});
  }
  const Tensor norm = device_bf16(norm_weight(this, H));
  std::vector<MoeSharedExperts> sh(copies);
  for (int64_t c = 0; c < copies; ++c) sh[c] = MoeSharedExperts{&shared[c], norm, eps};
  const double copy_gbs = measured_copy_gbs();
  std::printf("%2s %9s %9s %7s %9s %9s %9s %9s %7s %10s\n", "T", "unfused", "fused", "saved", "u.eager",
              "f.eager", "shared", "routed", "f. %BW", "saved/tok");
  for (int64_t T : {1, 2, 4, 8}) {
    std::vector<Tensor> h(copies), x(copies), ids(copies), w(copies);
    double bytes = 0.0;
    for (int64_t c = 0; c < copies; ++c) {
      h[c] = cuda::to_device(random_bf16_values({T, H}, 1.0f));
      x[c] = gpu.rms_norm(h[c], norm, eps);
      const Tensor id = distinct_expert_ids(rng, T, K, E);
      const std::set<int32_t> active(id.data<int32_t>(), id.data<int32_t>() + T * K);
      bytes += (3.0 * static_cast<double>(active.size()) * H * I + 3.0 * units * I * H) * 2.0 / copies;
      ids[c] = cuda::to_device(id);
      w[c] = cuda::to_device(random_bf16_values({T, K}, 0.3f));
    }
    auto layer = [&](CudaBackend& b, int64_t c) {
      b.moe_experts_residual(h[c], x[c], ids[c], w[c], experts, nullptr, &sh[c]);
    };
    auto graph_us = [&](const std::function<void(int64_t)>& one) {
      const double ms = cuda::time_graph_ms(
          [&] {
            for (int64_t c = 0; c < copies; ++c) one(c);
          },
          20);
      return ms * 1e3 / static_cast<double>(copies);
    };
    auto eager_us = [&](CudaBackend& b) {
      int64_t next = 0;
      return cuda::time_stream_ms([&] { layer(b, next++ % copies); }, 200) * 1e3;
    };
    const double unfused_us = graph_us([&](int64_t c) { layer(unfused, c); });
    const double fused_us = graph_us([&](int64_t c) { layer(gpu, c); });
    const double shared_us = graph_us([&](int64_t c) { gpu.norm_mlp_residual(h[c], norm, eps, shared[c]); });
    const double routed_us =
        graph_us([&](int64_t c) { gpu.moe_experts_residual(h[c], x[c], ids[c], w[c], experts); });
    const double ue = eager_us(unfused), fe = eager_us(gpu);
    std::printf("%2lld %9.2f %9.2f %7.2f %9.2f %9.2f %9.2f %9.2f %6.1f%% %10.1f\n", static_cast<long long>(T),
                unfused_us, fused_us, unfused_us - fused_us, ue, fe, shared_us, routed_us,
                100.0 * bytes / (fused_us * 1e-6) / 1e9 / 4290.0, (unfused_us - fused_us) * layers);
  }
  std::printf("(copy bandwidth measured here: %.0f GB/s)\n", copy_gbs);
}

#else

TEST(CudaDeepseekOpsTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
