// CudaBackend's MLA attention (decode, prefill, mixed steps, the rope/KV write) and head_matmul against the
// CPU reference on random inputs (runs where a GPU is visible; CI compiles it and skips). Weights and cached
// rows are bf16-representable so that both backends see the same values.
#include <limits>

#include "cuda_deepseek_test_util.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/gemv_stamps.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

// ---- MLA ----

// Fills every position of `seqs` (cached + new) with random bf16 rows in the CPU cache and copies the cache
// image into a float32 and a bf16 GPU cache; then compares attention_mla for the plan's query tokens.
// Returns the GPU outputs (float32 cache, bf16 cache) as host tensors.
// tol_bf16 (< 0: tol) bounds the bf16 cache's error, where the multi-query prefill kernel (bf16 queries and
// probabilities) may run; its error is printed when it is looser than tol.
// bs: the cache block size; unused: the value of every cache slot no sequence holds (NaN catches a kernel
// that reads past a context's end).
std::vector<Tensor> check_mla(CudaDeepseekOpsTest* test, int64_t H, int64_t R, int64_t P,
                              const std::vector<std::pair<int32_t, int32_t>>& seqs, double tol,
                              double tol_bf16 = -1.0, int32_t bs = 16, float unused = 0.0f) {
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
  std::fill(cpu_cache.slot(0, 0), cpu_cache.slot(0, 0) + cpu_cache.storage(0).numel(), unused);
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

// Runs body() once per tensor-core instance (forced 64-row tiles, one block per SM; forced 32-row tiles,
// two; on Hopper the second design, DSINFER_MLA_KERNEL=v2 and v2x2: 32-row tiles, one and two blocks per
// SM, and the third, DSINFER_MLA_KERNEL=wg: 64-row tiles by TMA), then restores the automatic choice.
template <class Fn>
void for_each_tile_rows(Fn&& body) {
  const int saved = cuda::mla_tile_rows(), saved_v2 = cuda::mla_kernel_v2();
  cuda::mla_set_kernel_v2(0);
  for (int tile_rows : {64, 32}) {
    SCOPED_TRACE("tile rows " + std::to_string(tile_rows));
    cuda::mla_set_tile_rows(tile_rows);
    body(tile_rows);
  }
  cuda::mla_set_tile_rows(0);
  if (cuda::mla_tc_v2_supported()) {
    for (int v2 : {1, 2}) {
      SCOPED_TRACE(v2 == 1 ? "kernel v2" : "kernel v2x2");
      cuda::mla_set_kernel_v2(v2);
      body(32);
    }
  } else {
    std::printf("for_each_tile_rows: the v2 MLA kernel needs the Hopper path; not run\n");
  }
  if (cuda::mla_wgmma_supported()) {
    SCOPED_TRACE("kernel wg");
    cuda::mla_set_kernel_v2(3);
    body(64);
  } else {
    std::printf("for_each_tile_rows: the wgmma MLA kernel needs the Hopper path; not run\n");
  }
  cuda::mla_set_kernel_v2(saved_v2);
  cuda::mla_set_tile_rows(saved);
}

TEST(CudaMlaSplitTest, TensorCoreInstanceAndChunks) {
  // Host-side choice only (no GPU needed): chunks are whole tiles of the chosen instance and cover the
  // context; the 32-row (two blocks per SM) instance for large batches, the 64-row one for batch 1.
  const int saved = cuda::mla_tile_rows();
  cuda::mla_set_tile_rows(0);
  for (int64_t T : {1, 2, 3, 4, 8, 64, 100, 256, 1024})
    for (int64_t H : {16, 128})
      for (int64_t ctx : {1, 31, 32, 33, 64, 256, 4096, 4097, 32768}) {
        const cuda::MlaSplit s = cuda::mla_choose_split(T, H, 512, ctx, true);
        EXPECT_TRUE(s.tile_rows == 32 || s.tile_rows == 64);
        EXPECT_EQ(s.chunk % s.tile_rows, 0) << T << " " << H << " " << ctx;
        EXPECT_GE(s.chunk * s.splits, ctx);
        EXPECT_LT(s.chunk * (s.splits - 1), ctx);
        // Batch invariance: the choice follows next_pow2(T).
        const cuda::MlaSplit p = cuda::mla_choose_split(cuda::next_pow2(T), H, 512, ctx, true);
        EXPECT_EQ(p.tile_rows, s.tile_rows);
        EXPECT_EQ(p.chunk, s.chunk);
        EXPECT_EQ(p.splits, s.splits);
      }
  // On Hopper the third (wgmma) design takes every plan but many waves of short blocks (64-row tiles);
  // elsewhere large batches take the 32-row instance.
  const bool wg = cuda::mla_wgmma_supported();
  EXPECT_EQ(cuda::mla_choose_split(64, 16, 512, 4096, true).tile_rows, wg ? 64 : 32);
  EXPECT_EQ(cuda::mla_choose_split(64, 16, 512, 4096, true).wgmma, wg);
  EXPECT_EQ(cuda::mla_choose_split(64, 128, 512, 4096, true).tile_rows, wg ? 64 : 32);
  EXPECT_EQ(cuda::mla_choose_split(256, 128, 512, 256, true).wgmma, wg);
  EXPECT_EQ(cuda::mla_choose_split(256, 16, 512, 256, true).tile_rows, 32);
  EXPECT_FALSE(cuda::mla_choose_split(256, 16, 512, 256, true).wgmma);
  EXPECT_EQ(cuda::mla_choose_split(1, 16, 512, 256, true).tile_rows, 64);
  EXPECT_EQ(cuda::mla_choose_split(1, 16, 512, 4096, true).tile_rows, 64);
  EXPECT_EQ(cuda::mla_choose_split(1, 16, 512, 4096, true).wgmma, wg);
  for (int forced : {64, 32}) {
    cuda::mla_set_tile_rows(forced);
    for (int64_t T : {1, 64})
      for (int64_t ctx : {1, 256, 4097}) {
        const cuda::MlaSplit s = cuda::mla_choose_split(T, 16, 512, ctx, true);
        EXPECT_EQ(s.tile_rows, forced);
        EXPECT_EQ(s.chunk % forced, 0);
      }
  }
  cuda::mla_set_tile_rows(saved);
}

// DeepSeek-V2-Lite's rope scaling: YaRN, factor 40 over 4096 positions, mscale 1 and mscale_all_dim 1.
RopeConfig v2_lite_yarn() {
  RopeConfig yarn;
  yarn.type = RopeType::kYarn;
  yarn.factor = 40.0;
  yarn.original_max_position_embeddings = 4096;
  yarn.mscale = 1.0;
  yarn.mscale_all_dim = 1.0;
  return yarn;
}

TEST_F(CudaDeepseekOpsTest, MlaKernelV2SplitChoice) {
  // DSINFER_MLA_KERNEL=v2 / v2x2 (Hopper): 32-row tiles, the split of its blocks per SM, chunks of whole
  // tiles covering the context, the choice a function of next_pow2(T); off again: the first design.
  if (!cuda::mla_tc_v2_supported()) GTEST_SKIP() << "the v2 MLA kernel needs the Hopper path";
  const int saved = cuda::mla_kernel_v2();
  for (int v2 : {1, 2}) {
    cuda::mla_set_kernel_v2(v2);
    for (int64_t T : {1, 3, 64, 100, 256})
      for (int64_t H : {16, 128})
        for (int64_t ctx : {1, 31, 33, 256, 4097}) {
          const cuda::MlaSplit s = cuda::mla_choose_split(T, H, 512, ctx, true);
          EXPECT_EQ(s.v2_blocks, v2);
          EXPECT_EQ(s.tile_rows, 32);
          EXPECT_EQ(s.chunk % 32, 0);
          EXPECT_GE(s.chunk * s.splits, ctx);
          EXPECT_LT(s.chunk * (s.splits - 1), ctx);
          const cuda::MlaSplit p = cuda::mla_choose_split(cuda::next_pow2(T), H, 512, ctx, true);
          EXPECT_EQ(p.chunk, s.chunk);
          EXPECT_EQ(p.splits, s.splits);
        }
  }
  if (cuda::mla_wgmma_supported()) {
    cuda::mla_set_kernel_v2(3);  // DSINFER_MLA_KERNEL=wg
    for (int64_t T : {1, 3, 64, 256})
      for (int64_t ctx : {1, 63, 65, 4097}) {
        const cuda::MlaSplit s = cuda::mla_choose_split(T, 16, 512, ctx, true);
        EXPECT_TRUE(s.wgmma);
        EXPECT_EQ(s.v2_blocks, 0);
        EXPECT_EQ(s.tile_rows, 64);
        EXPECT_EQ(s.chunk % 64, 0);
        EXPECT_GE(s.chunk * s.splits, ctx);
        EXPECT_LT(s.chunk * (s.splits - 1), ctx);
      }
  }
  cuda::mla_set_kernel_v2(0);  // DSINFER_MLA_KERNEL=v1
  EXPECT_EQ(cuda::mla_choose_split(64, 16, 512, 4096, true).v2_blocks, 0);
  EXPECT_FALSE(cuda::mla_choose_split(64, 16, 512, 4096, true).wgmma);
  // The default: the third design wherever its blocks fit one wave, run at least 8 tiles or serve 64+
  // heads; else the two-block instance of the second design where the 32-row plan is chosen; the first
  // design whenever tile rows are forced.
  cuda::mla_set_kernel_v2(-1);
  const int saved_rows = cuda::mla_tile_rows();
  cuda::mla_set_tile_rows(0);
  const bool wg = cuda::mla_wgmma_supported();
  EXPECT_EQ(cuda::mla_choose_split(64, 16, 512, 4096, true).wgmma, wg);
  EXPECT_EQ(cuda::mla_choose_split(64, 16, 512, 4096, true).v2_blocks, wg ? 0 : 2);
  EXPECT_EQ(cuda::mla_choose_split(1024, 16, 512, 1024, true).wgmma, wg);   // 16 tiles per block
  EXPECT_EQ(cuda::mla_choose_split(256, 16, 512, 256, true).v2_blocks, 2);  // 2 waves of 4 tiles
  EXPECT_FALSE(cuda::mla_choose_split(256, 16, 512, 256, true).wgmma);
  EXPECT_EQ(cuda::mla_choose_split(1, 16, 512, 256, true).v2_blocks, 0);
  EXPECT_EQ(cuda::mla_choose_split(1, 16, 512, 256, true).tile_rows, 64);
  cuda::mla_set_tile_rows(32);
  EXPECT_EQ(cuda::mla_choose_split(64, 16, 512, 4096, true).v2_blocks, 0);
  EXPECT_FALSE(cuda::mla_choose_split(64, 16, 512, 4096, true).wgmma);
  cuda::mla_set_tile_rows(saved_rows);
  cuda::mla_set_kernel_v2(saved);
}

// The tensor-core decode kernels with bf16 queries and probabilities (DSINFER_MLA_QP=bf16): relative error
// against the float32 CPU reference, as the multi-query prefill kernel's.
constexpr double kMlaDecodeBf16Tol = 1e-2;

TEST_F(CudaDeepseekOpsTest, MlaDecodeMatchesCpu) {
  // One new token per sequence, contexts 1 .. 3000 (split-KV for the long ones); the bf16 cache on both
  // tensor-core instances.
  const std::vector<std::pair<int32_t, int32_t>> decode = {{0, 1},   {1, 1},    {16, 1},  {63, 1},
                                                           {299, 1}, {1000, 1}, {2999, 1}};
  for_each_tile_rows([&](int) {
    for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, decode, 1e-5);
    check_mla(this, 16, 512, 64, {{2999, 1}}, 1e-5);  // batch 1, long context: many splits
  });
  check_mla(this, 4, 32, 8, decode, 1e-5);  // the tiny models' shape
  check_mla(this, 3, 100, 12, {{5, 1}, {200, 1}}, 1e-5);
}

TEST_F(CudaDeepseekOpsTest, MlaDecodeTensorCoreEdgesMatchCpu) {
  // The tensor-core kernel's edges (bf16 cache, R 512, P 64; the float32 cache runs the CUDA-core kernel),
  // on both instances: contexts around the 32- and 64-row tiles, a context of 1, mixed lengths in one batch
  // (empty splits), a partial head group (H 24), many splits (T 1, long context, up to 4097) and T = 257 (no
  // split, next_pow2 512).
  const std::vector<std::pair<int32_t, int32_t>> edges = {{0, 1},   {1, 1},    {30, 1},  {31, 1},  {32, 1},
                                                          {62, 1},  {63, 1},   {64, 1},  {126, 1}, {128, 1},
                                                          {199, 1}, {4000, 1}, {4096, 1}};
  for_each_tile_rows([&](int) {
    for (int64_t H : {16, 24, 128}) check_mla(this, H, 512, 64, edges, 1e-5);
    for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, {{4096, 1}}, 1e-5);
    check_mla(this, 16, 512, 64, {{64, 1}}, 1e-5);
    check_mla(this, 16, 512, 64, {{32, 1}}, 1e-5);
    std::vector<std::pair<int32_t, int32_t>> many;
    for (int32_t i = 0; i < 257; ++i) many.push_back({(i * 37) % 300, 1});
    check_mla(this, 16, 512, 64, many, 1e-5);
  });
  // The automatic choice at a large batch (the two-block instance: 64 tokens, contexts up to 1500).
  std::vector<std::pair<int32_t, int32_t>> batch64;
  for (int32_t i = 0; i < 64; ++i) batch64.push_back({(i * 613) % 1500, 1});
  check_mla(this, 16, 512, 64, batch64, 1e-5);
}

TEST_F(CudaDeepseekOpsTest, MlaDecodeWgTmaBlockSizesMatchCpu) {
  // The third design over cache block sizes 8 .. 128 (TMA boxes of min(block size, 64) rows) and, for block
  // sizes the boxes do not fit (12, 48, 100), the first design's 64-row instance in its place, with NaN in
  // every slot no sequence holds: a last tile's rows past the end must neither be read as values nor reach
  // the output. Contexts around the tile edges, H 16 and 128.
  if (!cuda::mla_wgmma_supported()) GTEST_SKIP() << "the wgmma MLA kernel needs the Hopper path";
  const int saved_v2 = cuda::mla_kernel_v2();
  cuda::mla_set_kernel_v2(3);
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{0, 1},   {62, 1},  {63, 1},   {64, 1},
                                                         {100, 1}, {127, 1}, {1000, 1}, {2500, 1}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int32_t bs : {8, 16, 32, 64, 128, 12, 48, 100}) {
    SCOPED_TRACE("block size " + std::to_string(bs));
    for (int64_t H : {16, 128}) check_mla(this, H, 512, 64, seqs, 1e-5, -1.0, bs, nan);
  }
  cuda::mla_set_kernel_v2(saved_v2);
}

TEST_F(CudaDeepseekOpsTest, MlaDecodeBf16QueriesAndProbabilitiesMatchCpu) {
  // DSINFER_MLA_QP=bf16: the tensor-core kernels with bf16 Q and P (one MMA per product) on both instances,
  // within the prefill kernel's tolerance (the same precision); the split-precision outputs differ from them
  // (else the variant did not run), and the CUDA-core (float32 cache) outputs do not change. The third
  // (wgmma) design has no bf16 variant: its outputs do not change either.
  const bool saved = cuda::mla_bf16_qp();
  std::vector<std::pair<int32_t, int32_t>> seqs = {{0, 1}, {31, 1}, {64, 1}, {199, 1}, {4000, 1}};
  for (int32_t i = 0; i < 70; ++i) seqs.push_back({(i * 613) % 1500, 1});
  for_each_tile_rows([&](int) {
    for (int64_t H : {16, 24, 128}) {
      std::vector<std::vector<Tensor>> runs;
      for (bool bf16 : {false, true}) {
        cuda::mla_set_bf16_qp(bf16);
        rng.seed(4242);  // the same inputs for both runs
        runs.push_back(check_mla(this, H, 512, 64, seqs, 1e-5, bf16 ? kMlaDecodeBf16Tol : -1.0));
      }
      int64_t differ_f32 = 0, differ_bf16 = 0;
      for (int64_t i = 0; i < runs[0][0].numel(); ++i) {
        differ_f32 += runs[0][0].f32()[i] != runs[1][0].f32()[i];
        differ_bf16 += runs[0][1].f32()[i] != runs[1][1].f32()[i];
      }
      EXPECT_EQ(differ_f32, 0) << "H=" << H;
      if (cuda::mla_kernel_v2() == 3)
        EXPECT_EQ(differ_bf16, 0) << "H=" << H << ": the wgmma design keeps split Q and P";
      else
        EXPECT_GT(differ_bf16, 0) << "H=" << H;
    }
  });
  cuda::mla_set_bf16_qp(saved);
}

TEST_F(CudaDeepseekOpsTest, MlaFusedMergeEqualsCombineKernel) {
  // The last split block to arrive merges the splits (few splits), else the separate combine kernel: both
  // must match the CPU and give the same bits. Forced both ways (and fused for every split count) on the
  // CUDA-core (float32 cache) and tensor-core (bf16 cache, both instances) kernels: batch 1 and 3 at
  // contexts of 2 to ~60 splits, a partial head group, empty splits (mixed lengths).
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
  for_each_tile_rows([&](int) {
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
          for (int64_t i = 0; i < runs[0][k].numel(); ++i)
            differ += runs[0][k].f32()[i] != runs[r][k].f32()[i];
          EXPECT_EQ(differ, 0) << "H=" << c.H << " R=" << c.R << " run " << r << " cache " << k;
        }
    }
  });
  cuda::mla_set_fused_merge_max_splits(saved);
}

// Relative error bound of the multi-query prefill kernel (bf16 queries and probabilities) against the
// float32 CPU reference; the decode kernels stay within 1e-5.
constexpr double kMlaPrefillTol = 1e-2;

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
  // decode kernel over a row list; its splits from their count and contexts): bit-identical outputs, on both
  // tensor-core instances. Each sequence's cached rows and queries are the same values in both plans (block
  // ids differ).
  if (!cuda::mla_tc_supported(512, 64, true, 0, 0, 0) || !cuda::mla_prefill_supported())
    GTEST_SKIP() << "the tensor-core MLA kernels need more shared memory than this GPU has";
  const int64_t R = 512, P = 64, D = R + P;
  const int32_t bs = 16;
  const std::vector<std::pair<int32_t, int32_t>> mixed = mixed_step_seqs();
  std::vector<Tensor> lat, pe, ql, qp;  // per sequence: [len, R], [len, P], [fresh, H, R], [fresh, H, P]
  for_each_tile_rows([&](int) {
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
  });
}

TEST_F(CudaDeepseekOpsTest, MlaRopeWriteKvMatchesCpuAndUnfused) {
  // One kernel: the latent's RMSNorm, rope of q_pe and k_pe (both layouts, yarn scaling), the cache rows;
  // against the CPU reference and the unfused CUDA ops (rms_norm, rope, rope, write_kv), float32 and bf16
  // caches, batch 1 to 64 at scattered positions.
  const RopeConfig yarn = v2_lite_yarn();
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

// ---- mla_prepare ----

// Elements of a and b (float32 host tensors of one shape) whose bits differ.
int64_t bits_differ(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  int64_t n = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    n += std::memcmp(a.f32() + i, b.f32() + i, sizeof(float)) != 0;
  return n;
}

// mla_prepare's fused decode kernel (the MLA cache write and the W_UK GEMV in one launch) against the two
// CUDA ops it replaces (Backend::mla_prepare's composition: the same bits for q_lat, the rotated q_pe and
// k_pe and the written cache rows) and the CPU reference: V2-Lite (16 heads) and V3 (128 heads) shapes, a
// small one whose outputs end inside a GEMV tile, and one the fused kernel does not take (B % 8 != 0: the
// composition runs); T 8 down to 1 (fp32 q_nope), both rope layouts (yarn scaling on the half layout),
// float32 and bf16 caches. Every token's results have the same bits at every T (never dependent on the
// batch), and the CudaBackendOptions switch gives the composition's bits.
TEST_F(CudaDeepseekOpsTest, MlaPrepareFusedEqualsComposition) {
  const RopeConfig yarn = v2_lite_yarn();
  CudaBackend gpu;  // mla_prepare_fused on by default
  CudaBackendOptions off_options;
  off_options.mla_prepare_fused = false;
  CudaBackend off(off_options);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int32_t bs = 16;
  const float eps = 1e-6f;
  struct Case {
    int64_t H, A, R, P;
    bool fused;  // whether the fused kernel takes it
  };
  for (const Case& c : {Case{16, 128, 512, 64, true}, Case{128, 128, 512, 64, true},
                        Case{4, 64, 96, 16, true}, Case{3, 50, 100, 12, false}}) {
    const Tensor w_uk = random_bf16_values({c.H, c.A, c.R}, 0.1f);  // [H, A, R]
    const Tensor dw_uk = gpu.prepare_weight(w_uk);
    const Tensor norm = norm_weight(this, c.R), dnorm = gpu.prepare_weight(norm);
    Tensor q_nope8 = Tensor::empty(DType::F32, {8, c.H, c.A});  // [8, H, A], not bf16 values
    for (int64_t i = 0; i < q_nope8.numel(); ++i) q_nope8.f32()[i] = d(rng);
    const Tensor latent8 = random_bf16_values({8, c.R}), k_pe8 = random_bf16_values({8, 1, c.P}),
                 q_pe8 = random_bf16_values({8, c.H, c.P});
    std::vector<std::pair<int32_t, int32_t>> seqs8;  // one decode token each, scattered positions
    int32_t blocks = 1;
    for (int64_t i = 0; i < 8; ++i) {
      seqs8.push_back({static_cast<int32_t>((i * 397 + 11) % 1000), 1});
      blocks += (seqs8.back().first + 1 + bs - 1) / bs;
    }
    if (blocks % 7 == 0) ++blocks;
    const KvLayerSpec spec{KvKind::kFullHistory, c.R + c.P};
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalf}) {
      const RopeTable table = make_rope_table(layout == RopeLayout::kHalf ? yarn : RopeConfig{}, c.P);
      for (DType dt : {DType::F32, DType::BF16}) {
        struct Out {
          Tensor q_lat, q_pe, k_pe, rows;  // host float32: [T, H, R], [T, H, P], [T, 1, P], [T, R + P]
        };
        Out at8;
        for (int64_t T : {8, 7, 5, 4, 3, 2, 1}) {
          const BatchPlan plan = make_plan({seqs8.begin(), seqs8.begin() + T}, bs, blocks);
          const Tensor q_nope = q_nope8.rows(0, T), latent = latent8.rows(0, T), k_pe = k_pe8.rows(0, T),
                       q_pe = q_pe8.rows(0, T);
          // mode 0: gpu.mla_prepare (fused where taken); 1: Backend::mla_prepare on the GPU (composition);
          // 2: the backend with the option off.
          auto run = [&](int mode) {
            KvCache cache({spec}, blocks, bs, Device::kCuda, dt);
            Tensor q = cuda::to_device(q_pe), k = cuda::to_device(k_pe);
            const Tensor x = cuda::to_device(q_nope), lat = cuda::to_device(latent);
            Tensor q_lat;
            if (mode == 0)
              q_lat = gpu.mla_prepare(x, dw_uk, q, k, lat, dnorm, eps, table, layout, cache, 0, plan);
            else if (mode == 1)
              q_lat =
                  gpu.Backend::mla_prepare(x, dw_uk, q, k, lat, dnorm, eps, table, layout, cache, 0, plan);
            else
              q_lat = off.mla_prepare(x, dw_uk, q, k, lat, dnorm, eps, table, layout, cache, 0, plan);
            const Tensor image = gpu.to_host(cache.storage(0));  // [slots, R + P]
            Tensor rows = Tensor::empty(DType::F32, {T, c.R + c.P});
            for (int64_t t = 0; t < T; ++t)
              std::copy_n(image.f32() + plan.slot_mapping[t] * (c.R + c.P), c.R + c.P,
                          rows.f32() + t * (c.R + c.P));
            return Out{gpu.to_host(q_lat), gpu.to_host(q), gpu.to_host(k), rows};
          };
          const std::string what = "H " + std::to_string(c.H) + " A " + std::to_string(c.A) + " R " +
                                   std::to_string(c.R) + " T " + std::to_string(T) + " layout " +
                                   std::to_string(static_cast<int>(layout)) + " " +
                                   std::string(dtype_name(dt));
          cuda::MlaPrepareArgs args;  // what the backend passes, for the kernel's shape check
          args.w_uk = dw_uk.data<uint16_t>();
          args.A = c.A;
          args.B = c.R;
          args.write.T = T;
          args.write.H = c.H;
          args.write.R = c.R;
          args.write.P = c.P;
          args.write.cache.width = c.R + c.P;
          EXPECT_EQ(cuda::mla_prepare_supported(args), c.fused) << what;
          const Out fused = run(0), composed = run(1), switched = run(2);
          EXPECT_EQ(bits_differ(fused.q_lat, composed.q_lat), 0) << what;
          EXPECT_EQ(bits_differ(fused.q_pe, composed.q_pe), 0) << what;
          EXPECT_EQ(bits_differ(fused.k_pe, composed.k_pe), 0) << what;
          EXPECT_EQ(bits_differ(fused.rows, composed.rows), 0) << what;
          EXPECT_EQ(bits_differ(switched.q_lat, composed.q_lat), 0) << what;
          EXPECT_EQ(bits_differ(switched.rows, composed.rows), 0) << what;
          // The CPU reference.
          KvCache cpu_cache({spec}, blocks, bs);
          std::fill(cpu_cache.slot(0, 0), cpu_cache.slot(0, 0) + cpu_cache.storage(0).numel(), 0.0f);
          Tensor ref_q = q_pe.clone(), ref_k = k_pe.clone();
          const Tensor ref_lat = cpu.mla_prepare(q_nope, w_uk, ref_q, ref_k, latent, norm, eps, table, layout,
                                                 cpu_cache, 0, plan);
          Tensor ref_rows = Tensor::empty(DType::F32, {T, c.R + c.P});
          for (int64_t t = 0; t < T; ++t)
            std::copy_n(cpu_cache.slot(0, plan.slot_mapping[t]), c.R + c.P, ref_rows.f32() + t * (c.R + c.P));
          EXPECT_LT(rel_err(fused.q_lat, ref_lat), 1e-5) << what;
          EXPECT_LT(rel_err(fused.q_pe, ref_q), 1e-6) << what;
          EXPECT_LT(rel_err(fused.k_pe, ref_k), 1e-6) << what;
          EXPECT_LT(rel_err(fused.rows, ref_rows), dt == DType::BF16 ? 5e-3 : 1e-6) << what;
          // Batch invariance (of the fused kernel): the first T tokens of the 8-token batch.
          if (!c.fused) continue;
          if (T == 8) {
            at8 = fused;
            continue;
          }
          EXPECT_EQ(bits_differ(fused.q_lat, at8.q_lat.rows(0, T)), 0) << what << " against T 8";
          EXPECT_EQ(bits_differ(fused.q_pe, at8.q_pe.rows(0, T)), 0) << what << " against T 8";
          EXPECT_EQ(bits_differ(fused.k_pe, at8.k_pe.rows(0, T)), 0) << what << " against T 8";
          EXPECT_EQ(bits_differ(fused.rows, at8.rows.rows(0, T)), 0) << what << " against T 8";
        }
      }
    }
  }
}

// The wgmma + TMA design's early tile requests (MlaPlanView::early_rows, set for a decode-only step staged
// by begin_step): a split's first two tiles are requested before the wait for the kernel before, which here
// is mla_prepare writing each token's own cache row over a slot that held NaN (the model's order). The
// kernel must use the row as written (loaded again after the wait): outputs match the CPU and have the
// same bits as launches that request every tile after the wait (mla_set_early_tiles(false)); a lone call
// (plan not staged) never requests early and gives the same bits too. Contexts put the newest row in the
// first, second and a later tile of its split; block sizes 16 and 64; batch 1 and 8; three repeats each
// (the early requests race the write).
TEST_F(CudaDeepseekOpsTest, MlaDecodeEarlyTilesUseTheStepsOwnRow) {
  if (!cuda::mla_wgmma_supported()) GTEST_SKIP() << "the wgmma MLA kernel needs the Hopper path";
  const int saved_v2 = cuda::mla_kernel_v2();
  const bool saved_early = cuda::mla_early_tiles();
  cuda::mla_set_kernel_v2(3);
  const int64_t A = 128, R = 512, P = 64, width = R + P;
  const float eps = 1e-6f, scale = 1.0f / std::sqrt(192.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const RopeTable table = make_rope_table(v2_lite_yarn(), P);
  const Tensor norm = norm_weight(this, R);
  CudaBackend gpu;
  const Tensor dnorm = gpu.prepare_weight(norm);
  const std::vector<int32_t> newest = {0, 63, 64, 100, 127, 128, 200, 1000};  // the new tokens' positions
  // H 16: each position alone (one tile a split at these contexts) and all 8; H 128, all 8: splits of 512
  // positions, so the newest rows also fall in a split's second and later tiles.
  struct Case {
    int64_t H;
    std::vector<int32_t> batch;
  };
  std::vector<Case> cases;
  for (int32_t p : newest) cases.push_back({16, {p}});
  cases.push_back({16, newest});
  cases.push_back({128, newest});
  for (int32_t bs : {16, 64}) {
    for (const Case& c : cases) {
      const int64_t H = c.H;
      const std::vector<int32_t>& batch = c.batch;
      const Tensor w_uk = random_bf16_values({H, A, R}, 0.1f);  // [H, A, R]
      const Tensor dw_uk = gpu.prepare_weight(w_uk);
      const int64_t T = static_cast<int64_t>(batch.size());
      const std::string what = "block size " + std::to_string(bs) + " H " + std::to_string(H) + " T " +
                               std::to_string(T) + " first position " + std::to_string(batch[0]);
      std::vector<std::pair<int32_t, int32_t>> full, seqs;
      int32_t blocks = 1;
      for (int32_t p : batch) {
        full.push_back({0, p + 1});
        seqs.push_back({p, 1});
        blocks += (p + 1 + bs - 1) / bs;
      }
      if (blocks % 7 == 0) ++blocks;
      const BatchPlan fill = make_plan(full, bs, blocks), plan = make_plan(seqs, bs, blocks);
      KvCache cpu_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs);
      std::fill(cpu_cache.slot(0, 0), cpu_cache.slot(0, 0) + cpu_cache.storage(0).numel(), nan);
      const int64_t N = fill.num_tokens();
      cpu.write_kv(cpu_cache, 0, fill, random_bf16_values({N, R}), random_bf16_values({N, P}));
      for (int64_t t = 0; t < T; ++t)  // the step's own rows: NaN until mla_prepare writes them
        std::fill_n(cpu_cache.slot(0, plan.slot_mapping[t]), width, nan);
      const Tensor bits = to_bf16_bits(cpu_cache.storage(0));  // the GPU cache's image before the step
      const Tensor q_nope = random_bf16_values({T, H, A}), latent = random_bf16_values({T, R}),
                   k_pe = random_bf16_values({T, 1, P}), q_pe = random_bf16_values({T, H, P}, 0.1f);
      Tensor ref_q = q_pe.clone(), ref_k = k_pe.clone();
      const Tensor ref_lat = cpu.mla_prepare(q_nope, w_uk, ref_q, ref_k, latent, norm, eps, table,
                                             RopeLayout::kHalf, cpu_cache, 0, plan);
      const Tensor ref = cpu.attention_mla(ref_lat, ref_q, cpu_cache, 0, plan, scale);  // [T, H, R]
      // staged: begin_step first (early requests where the switch allows); else a lone call.
      auto run = [&](bool early, bool staged) {
        cuda::mla_set_early_tiles(early);
        KvCache cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda, DType::BF16);
        cuda::copy_to_device(const_cast<void*>(cache.storage(0).raw()), bits.raw(), bits.nbytes());
        Tensor q = cuda::to_device(q_pe), k = cuda::to_device(k_pe);
        const Tensor x = cuda::to_device(q_nope), lat = cuda::to_device(latent);
        if (staged) gpu.begin_step(plan);
        const Tensor q_lat =
            gpu.mla_prepare(x, dw_uk, q, k, lat, dnorm, eps, table, RopeLayout::kHalf, cache, 0, plan);
        const Tensor out = gpu.to_host(gpu.attention_mla(q_lat, q, cache, 0, plan, scale));
        if (staged) gpu.end_step();
        return out;
      };
      const Tensor late = run(false, true), lone = run(true, false);
      EXPECT_LT(rel_err(late, ref), 5e-3) << what;
      EXPECT_EQ(bits_differ(lone, late), 0) << what << ": lone call";
      for (int rep = 0; rep < 3; ++rep) {
        const Tensor early = run(true, true);
        EXPECT_LT(rel_err(early, ref), 5e-3) << what << " repeat " << rep;
        EXPECT_EQ(bits_differ(early, late), 0) << what << " repeat " << rep;
      }
    }
  }
  cuda::mla_set_early_tiles(saved_early);
  cuda::mla_set_kernel_v2(saved_v2);
}

// The stamped instance of the wgmma + TMA design (gemv_stamps.h): with stamps on, each launch takes one slot,
// one "block" per CTA (T x head groups x splits), and its outputs keep their bits; every CTA records its six
// points in order (start <= waited <= staged <= O done <= end, and the producer's early requests after the
// start), its SM and its tile count, and the tiles of a token's splits add up to its context. V2-Lite's
// batch-1 shape (16 heads, context 201: four 64-row splits) in a staged step (early tiles), and 128 heads at
// batch 3 (two head groups, longer splits).
TEST_F(CudaDeepseekOpsTest, MlaDecodeStampsRecordEveryCtaWithTheSameBits) {
  if (!cuda::mla_wgmma_supported()) GTEST_SKIP() << "the wgmma MLA kernel needs the Hopper path";
  const int saved_v2 = cuda::mla_kernel_v2();
  cuda::mla_set_kernel_v2(3);
  const int64_t R = 512, P = 64, width = R + P;
  const int32_t bs = 64;
  const float scale = 1.0f / std::sqrt(192.0f);
  CudaBackend gpu;
  struct Case {
    int64_t H;
    std::vector<int32_t> batch;  // each token's position (its context is position + 1)
  };
  for (const Case& c : {Case{16, {200}}, Case{128, {700, 31, 1300}}}) {
    const int64_t H = c.H, T = static_cast<int64_t>(c.batch.size());
    const std::string what = "H " + std::to_string(H) + " T " + std::to_string(T);
    std::vector<std::pair<int32_t, int32_t>> full, seqs;
    int32_t blocks = 1;
    for (int32_t p : c.batch) {
      full.push_back({0, p + 1});
      seqs.push_back({p, 1});
      blocks += (p + 1 + bs - 1) / bs;
    }
    const BatchPlan fill = make_plan(full, bs, blocks), plan = make_plan(seqs, bs, blocks);
    KvCache cpu_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs);
    std::fill(cpu_cache.slot(0, 0), cpu_cache.slot(0, 0) + cpu_cache.storage(0).numel(), 0.0f);
    cpu.write_kv(cpu_cache, 0, fill, random_bf16_values({fill.num_tokens(), R}),
                 random_bf16_values({fill.num_tokens(), P}));
    const Tensor bits = to_bf16_bits(cpu_cache.storage(0));
    const Tensor q_lat = random_bf16_values({T, H, R}, 0.1f), q_pe = random_bf16_values({T, H, P}, 0.1f);
    const Tensor ref = cpu.attention_mla(q_lat, q_pe, cpu_cache, 0, plan, scale);  // [T, H, R]
    KvCache cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda, DType::BF16);
    cuda::copy_to_device(const_cast<void*>(cache.storage(0).raw()), bits.raw(), bits.nbytes());
    const Tensor dq = cuda::to_device(q_lat), dp = cuda::to_device(q_pe);
    auto run = [&] {
      gpu.begin_step(plan);
      const Tensor out = gpu.to_host(gpu.attention_mla(dq, dp, cache, 0, plan, scale));
      gpu.end_step();
      return out;
    };
    const Tensor want = run();
    EXPECT_LT(rel_err(want, ref), 5e-3) << what;
    ASSERT_TRUE(cuda::enable_gemv_stamps(4));
    const Tensor got = run();
    const std::vector<cuda::GemvStampLaunch> launches = cuda::read_gemv_stamps();
    cuda::disable_gemv_stamps();
    EXPECT_EQ(bits_differ(got, want), 0) << what;
    ASSERT_EQ(launches.size(), 1u) << what;
    const cuda::GemvStampLaunch& l = launches[0];
    EXPECT_EQ(l.rows, T) << what;
    EXPECT_EQ(l.K, width) << what;
    const int64_t groups = (H + 15) / 16;
    ASSERT_EQ(l.grid % (T * groups), 0) << what;
    const int64_t splits = l.grid / (T * groups);
    if (H == 16) {
      EXPECT_GT(splits, 1) << what << ": V2-Lite's batch-1 context splits";
    }
    ASSERT_EQ(static_cast<int64_t>(l.blocks.size()), l.grid) << what;
    std::vector<int64_t> tiles(static_cast<size_t>(T * groups), 0);
    for (size_t i = 0; i < l.blocks.size(); ++i) {
      const cuda::GemvStampBlock& b = l.blocks[i];
      const std::string cta = what + " CTA " + std::to_string(i);
      ASSERT_GT(b.t[cuda::kStampStart], 0u) << cta << " has no stamps";
      EXPECT_LE(b.t[cuda::kStampStart], b.t[cuda::kStampIssued]) << cta;
      for (int p : {cuda::kStampConsumed, cuda::kStampLastIssue, cuda::kStampEnd}) {
        const int before = p == cuda::kStampConsumed ? cuda::kStampWaited : p - 1;
        EXPECT_LE(b.t[before], b.t[p]) << cta << " point " << p;
      }
      EXPECT_LE(b.t[cuda::kStampStart], b.t[cuda::kStampWaited]) << cta;
      tiles[i % static_cast<size_t>(T * groups)] += b.tiles;  // CTA (token x group, split)
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t gi = 0; gi < groups; ++gi)
        EXPECT_EQ(tiles[static_cast<size_t>(t * groups + gi)],
                  (c.batch[static_cast<size_t>(t)] + 1 + 63) / 64)
            << what << " token " << t << " group " << gi << ": its splits' tiles cover its context";
    EXPECT_EQ(bits_differ(run(), want), 0) << what << ": the plain instance again";
  }
  cuda::mla_set_kernel_v2(saved_v2);
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

#else

TEST(CudaMlaOpsTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
