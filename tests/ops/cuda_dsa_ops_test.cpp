// CudaBackend's DeepSeek-V3.2 (DSA) ops against the CPU reference on random inputs: layer_norm, the
// lightning indexer's top-k (the CPU set to the lowest-position tie rule the GPU follows, torch.topk's on
// CUDA) over one- and many-sequence steps, chunks, exact zero-score ties and contexts at or under top_k, and
// sparse MLA over selections with skipped entries, empty lists and the V3 shape. Runs where a GPU is
// visible; CI compiles it and skips. Cached rows and weights are bf16-representable so that both backends see
// the same values.
#include <iterator>
#include <limits>
#include <numeric>

#include "cuda_deepseek_test_util.h"
#include "index_selection_check.h"
#include "kv/kv_cache.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

// A host cache of one layer of `width` filled with `rows` (one row per slot, bf16 values) and its bf16 GPU
// copy (and a float32 one).
struct CachePair {
  KvCache host, gpu, gpu_f32;
};

CachePair make_caches(const Tensor& rows, int64_t width, int32_t blocks, int32_t bs) {
  CachePair c{KvCache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs),
              KvCache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda, DType::BF16),
              KvCache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda, DType::F32)};
  std::copy(rows.f32(), rows.f32() + rows.numel(), c.host.slot(0, 0));
  const Tensor bits = CudaDeepseekOpsTest::to_bf16_bits(c.host.storage(0));
  cuda::copy_to_device(const_cast<void*>(c.gpu.storage(0).raw()), bits.raw(), bits.nbytes());
  const Tensor& image = c.host.storage(0);
  cuda::copy_to_device(const_cast<void*>(c.gpu_f32.storage(0).raw()), image.raw(), image.nbytes());
  return c;
}

TEST_F(CudaDeepseekOpsTest, LayerNormMatchesCpu) {
  CudaBackend gpu;
  for (auto [T, H] : {std::pair<int64_t, int64_t>{1, 16}, {7, 128}, {33, 300}, {4, 1024}}) {
    const Tensor x = random_bf16_values({T, H}, 2.0f);
    Tensor x_shifted = x.clone();
    for (int64_t i = 0; i < x_shifted.numel(); ++i) x_shifted.f32()[i] += 3.0f;  // a mean far from 0
    const Tensor w = random_bf16_values({H}), b = random_bf16_values({H});
    for (const Tensor* input : {&x, static_cast<const Tensor*>(&x_shifted)}) {
      for (bool bias : {true, false}) {
        const Tensor ref = cpu.layer_norm(*input, w, bias ? b : Tensor(), 1e-6f);
        const Tensor out = gpu.to_host(
            gpu.layer_norm(cuda::to_device(*input), device_bf16(w), bias ? device_bf16(b) : Tensor(), 1e-6f));
        EXPECT_LT(rel_err(out, ref), 2e-6) << "T " << T << " H " << H << " bias " << bias;
      }
    }
  }
}

struct IndexCase {
  int64_t Hi, D, top_k;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (cached, new) per sequence
};

TEST_F(CudaDeepseekOpsTest, IndexerTopkMatchesCpu) {
  const std::vector<IndexCase> cases = {
      {2, 16, 16, {{0, 40}}},                            // the tiny fixture's indexer, one-shot prefill
      {2, 16, 16, {{25, 7}, {3, 1}, {0, 17}}},           // chunks and decode of several sequences
      {64, 128, 64, {{0, 300}}},                         // V3.2's indexer heads, a prefill
      {64, 128, 2048, {{3000, 1}, {4100, 1}, {10, 1}}},  // decode past and under V3.2's top_k
      {8, 32, 1, {{50, 3}}},                             // top_k 1
      {4, 64, 100, {{0, 60}, {20, 20}}},                 // every context within top_k: no scores
      {128, 128, 7, {{130, 2}}},                         // the most heads the kernel takes
  };
  CudaBackend gpu;
  CpuBackend ref;
  ref.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  const int32_t bs = 16;
  for (const IndexCase& c : cases) {
    int32_t blocks = 1;
    for (auto [cached, fresh] : c.seqs) blocks += (cached + fresh + bs - 1) / bs;
    blocks += 7;  // the scrambled block order needs spare blocks
    const BatchPlan plan = make_plan(c.seqs, bs, blocks);
    const Tensor rows = random_bf16_values({static_cast<int64_t>(blocks) * bs, c.D});
    const CachePair caches = make_caches(rows, c.D, blocks, bs);
    const int64_t T = plan.num_tokens();
    const IndexerQuery iq = random_indexer_query(T, c.Hi, c.D, c.top_k);
    SCOPED_TRACE(iq.label);
    const Tensor expected =
        ref.dsa_indexer_topk(iq.q, iq.w, caches.host, 0, plan, iq.scale, iq.wscale, c.top_k);
    const Tensor got = cuda::to_host(gpu.dsa_indexer_topk(cuda::to_device(iq.q), cuda::to_device(iq.w),
                                                          caches.gpu, 0, plan, iq.scale, iq.wscale, c.top_k));
    ASSERT_EQ(got.dtype(), DType::I32);
    expect_same_selection(got, expected, iq.q, iq.w, caches.host, plan, iq.scale, iq.wscale);
  }
}

TEST_F(CudaDeepseekOpsTest, IndexerTopkKeepsTheLowestTiedPositions) {
  // Most keys score exactly 0 (q . k < 0 on every head); the boundary falls among them, in one sequence and
  // across several, at chunk starts and with a graph context bound wider than the step.
  const int64_t Hi = 2, D = 16, top_k = 24;
  const int32_t bs = 16, blocks = 40;
  Tensor rows = random_bf16_values({int64_t{blocks} * bs, D});
  for (int64_t r = 0; r < rows.dim(0); ++r) {
    for (int64_t d = 0; d < D; ++d) {
      float& v = rows.f32()[r * D + d];
      v = r % 5 == 0 ? std::abs(v) : -std::abs(v);  // every fifth slot scores above 0
    }
  }
  const CachePair caches = make_caches(rows, D, blocks, bs);
  CpuBackend ref;
  ref.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  for (const auto& seqs : std::vector<std::vector<std::pair<int32_t, int32_t>>>{
           {{0, 90}}, {{61, 5}, {0, 30}, {100, 1}}, {{200, 1}, {37, 1}}}) {
    const BatchPlan plan = make_plan(seqs, bs, blocks);
    const int64_t T = plan.num_tokens();
    Tensor q = random_bf16_values({T, Hi, D});
    for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] = std::abs(q.f32()[i]);
    const Tensor w = random_bf16_values({T, Hi});
    const Tensor expected = ref.dsa_indexer_topk(q, w, caches.host, 0, plan, 0.25f, 0.7f, top_k);
    for (int32_t bound : {0, 1000}) {
      CudaBackend gpu;
      gpu.set_context_bound(bound);
      const Tensor got = cuda::to_host(gpu.dsa_indexer_topk(cuda::to_device(q), cuda::to_device(w),
                                                            caches.gpu, 0, plan, 0.25f, 0.7f, top_k));
      for (int64_t t = 0; t < T; ++t) EXPECT_EQ(row_of(got, t), row_of(expected, t)) << "token " << t;
    }
  }
}

TEST_F(CudaDeepseekOpsTest, IndexerTopkRefusesWhatItCannotRun) {
  CudaBackend gpu;
  const BatchPlan plan = make_plan({{0, 4}}, 16, 4);
  const Tensor rows = random_bf16_values({64, 24});
  const CachePair caches = make_caches(rows, 24, 4, 16);
  const Tensor q = cuda::to_device(random_bf16_values({4, 2, 24})),
               w = cuda::to_device(random_bf16_values({4, 2}));
  EXPECT_THROW(gpu.dsa_indexer_topk(q, w, caches.gpu, 0, plan, 1.0f, 1.0f, 2), Error);      // D 24
  EXPECT_THROW(gpu.dsa_indexer_topk(q, w, caches.gpu_f32, 0, plan, 1.0f, 1.0f, 2), Error);  // f32 cache
  EXPECT_THROW(gpu.dsa_indexer_topk(q, cuda::to_device(random_bf16_values({4, 3})), caches.gpu, 0, plan, 1.0f,
                                    1.0f, 2),
               Error);  // weights of 3 heads for q of 2
}

// Sparse MLA over `seqs` with a random selection per token (k entries, ascending, some skipped as -1 when
// `holes`), against the CPU reference, for a bf16 and a float32 GPU cache.
void check_sparse_mla(CudaDeepseekOpsTest* test, int64_t H, int64_t R, int64_t P, int64_t k,
                      const std::vector<std::pair<int32_t, int32_t>>& seqs, bool holes, double tol) {
  const int32_t bs = 16;
  int32_t blocks = 8;
  for (auto [cached, fresh] : seqs) blocks += (cached + fresh + bs - 1) / bs;
  const BatchPlan plan = make_plan(seqs, bs, blocks);
  const Tensor rows = test->random_bf16_values({int64_t{blocks} * bs, R + P});
  const CachePair caches = make_caches(rows, R + P, blocks, bs);
  const int64_t T = plan.num_tokens();
  Tensor selected = Tensor::empty(DType::I32, {T, k});
  std::uniform_int_distribution<int> coin(0, 3);
  for (int32_t s = 0; s < plan.num_seqs(); ++s) {
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) {
      std::vector<int32_t> all(plan.positions[t] + 1);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), test->rng);
      all.resize(std::min<size_t>(all.size(), static_cast<size_t>(k)));
      std::sort(all.begin(), all.end());
      if (holes) {
        for (int32_t& p : all) {
          if (coin(test->rng) == 0) p = -1;
        }
      }
      all.resize(k, -1);
      std::copy(all.begin(), all.end(), selected.data<int32_t>() + t * k);
    }
  }
  if (holes && T > 1) std::fill(selected.data<int32_t>(), selected.data<int32_t>() + k, -1);  // an empty list
  const Tensor q_lat = test->random_bf16_values({T, H, R}, 0.1f),
               q_pe = test->random_bf16_values({T, H, P}, 0.1f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(R / 4 + P));
  const Tensor ref = test->cpu.attention_mla_sparse(q_lat, q_pe, caches.host, 0, plan, selected, scale);
  CudaBackend gpu;
  for (const KvCache* cache : {&caches.gpu, &caches.gpu_f32}) {
    for (bool on_device : {true, false}) {
      const Tensor sel = on_device ? cuda::to_device(selected) : selected;
      const Tensor out = gpu.to_host(gpu.attention_mla_sparse(cuda::to_device(q_lat), cuda::to_device(q_pe),
                                                              *cache, 0, plan, sel, scale));
      EXPECT_LT(CudaDeepseekOpsTest::rel_err(out, ref), tol)
          << "H " << H << " R " << R << " k " << k << " T " << T << " holes " << holes << " cache "
          << dtype_name(cache->dtype());
      if (holes && T > 1) {
        for (int64_t i = 0; i < H * R; ++i) ASSERT_EQ(out.f32()[i], 0.0f) << "an empty list gives zeros";
      }
    }
  }
}

TEST_F(CudaDeepseekOpsTest, SparseMlaMatchesCpu) {
  // R 512, P 64 on the bf16 cache runs the tensor-core design (its sparse instance); the float32 cache and
  // the tiny shape the CUDA-core kernel.
  check_sparse_mla(this, 4, 32, 8, 16, {{0, 40}}, false, 2e-6);                  // the tiny fixture's shape
  check_sparse_mla(this, 4, 32, 8, 16, {{25, 7}, {3, 1}, {0, 17}}, true, 2e-6);  // holes, an empty list
  check_sparse_mla(this, 16, 512, 64, 64, {{0, 100}, {300, 1}}, true, 1e-5);     // V2-Lite's MLA shape
  check_sparse_mla(this, 128, 512, 64, 256, {{700, 1}, {40, 1}}, false, 1e-5);   // V3's heads, decode
  check_sparse_mla(this, 16, 512, 64, 2048, {{3000, 2}}, false, 1e-5);           // V3.2's top_k: splits
  check_sparse_mla(this, 16, 512, 64, 2048, {{3000, 2}}, true, 1e-5);            // ... an empty list too
  check_sparse_mla(this, 128, 512, 64, 2048, {{2500, 1}, {100, 1}, {4000, 1}}, true, 1e-5);
}

TEST_F(CudaDeepseekOpsTest, SparseMlaEdgeCases) {
  CudaBackend gpu;
  const BatchPlan plan = make_plan({{0, 3}}, 16, 4);
  const Tensor rows = random_bf16_values({64, 40});
  const CachePair caches = make_caches(rows, 40, 4, 16);
  const Tensor q_lat = cuda::to_device(random_bf16_values({3, 2, 32})),
               q_pe = cuda::to_device(random_bf16_values({3, 2, 8}));
  // No entries at all: zeros.
  const Tensor none = gpu.to_host(
      gpu.attention_mla_sparse(q_lat, q_pe, caches.gpu, 0, plan, Tensor::empty(DType::I32, {3, 0}), 0.1f));
  for (int64_t i = 0; i < none.numel(); ++i) ASSERT_EQ(none.f32()[i], 0.0f);
  // A host selection past the sequence's cache is refused, as on the CPU.
  Tensor bad = Tensor::empty(DType::I32, {3, 2});
  for (int64_t i = 0; i < 6; ++i) bad.data<int32_t>()[i] = static_cast<int32_t>(i);  // position 5 of 3
  EXPECT_THROW(gpu.attention_mla_sparse(q_lat, q_pe, caches.gpu, 0, plan, bad, 0.1f), Error);
  EXPECT_THROW(
      gpu.attention_mla_sparse(q_lat, q_pe, caches.gpu, 0, plan, Tensor::empty(DType::I32, {2, 2}), 0.1f),
      Error);
}

#endif  // DSINFER_HAVE_CUDA

}  // namespace
}  // namespace dsinfer
