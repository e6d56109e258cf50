// CudaBackend::attention_mla_uv (MLA with W_UV applied; at decode sizes the merge + W_UV kernel replaces the
// split combine kernel and the W_UV head GEMV) against the composition attention_mla + head_matmul, and its
// batch invariance (runs where a GPU is visible; CI compiles it and skips). bf16 caches of the V2/V3 shape.
#include "cuda_deepseek_test_util.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/gemv_stamps.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

constexpr int64_t kR = 512, kP = 64, kV = 128;
constexpr int32_t kBs = 16;

// One decode sequence: its cached rows (the new token's included) and its query.
struct UvSeq {
  int32_t ctx = 1;
  Tensor lat, pe;  // [ctx, R], [ctx, P]
  Tensor ql, qp;   // [1, H, R], [1, H, P]
};

UvSeq random_seq(CudaDeepseekOpsTest* test, int64_t H, int32_t ctx) {
  UvSeq s;
  s.ctx = ctx;
  s.lat = test->random_bf16_values({ctx, kR});
  s.pe = test->random_bf16_values({ctx, kP});
  s.ql = test->random_bf16_values({1, H, kR}, 0.1f);
  s.qp = test->random_bf16_values({1, H, kP}, 0.1f);
  return s;
}

Tensor concat_rows(const std::vector<const Tensor*>& parts) {
  int64_t rows = 0;
  for (const Tensor* p : parts) rows += p->dim(0);
  Shape shape = parts.front()->shape();
  shape[0] = rows;
  Tensor t = Tensor::empty(DType::F32, shape);
  float* dst = t.f32();
  for (const Tensor* p : parts) dst = std::copy_n(p->f32(), p->numel(), dst);
  return t;
}

enum class UvMode { kComposition, kFused, kFusedOff };

// One decode step of `seqs` (one token each, in this order) on a bf16 cache holding their rows: [T, H, V] on
// the host, from attention_mla + head_matmul (kComposition) or attention_mla_uv with the merge + W_UV kernel
// allowed (kFused) or turned off (kFusedOff).
Tensor run_step(CudaDeepseekOpsTest* test, const std::vector<const UvSeq*>& seqs, int64_t H,
                const Tensor& w_uv, UvMode mode) {
  std::vector<std::pair<int32_t, int32_t>> full, step;
  std::vector<const Tensor*> lat, pe, ql, qp;
  int32_t blocks = 1;
  for (const UvSeq* s : seqs) {
    full.push_back({0, s->ctx});
    step.push_back({s->ctx - 1, 1});
    blocks += (s->ctx + kBs - 1) / kBs;
    lat.push_back(&s->lat), pe.push_back(&s->pe), ql.push_back(&s->ql), qp.push_back(&s->qp);
  }
  if (blocks % 7 == 0) ++blocks;  // make_plan's block stride of 7 must stay a bijection
  const BatchPlan fill = make_plan(full, kBs, blocks), plan = make_plan(step, kBs, blocks);
  const int64_t D = kR + kP;
  KvCache host_cache({KvLayerSpec{KvKind::kFullHistory, D}}, blocks, kBs);
  std::fill(host_cache.slot(0, 0), host_cache.slot(0, 0) + host_cache.storage(0).numel(), 0.0f);
  test->cpu.write_kv(host_cache, 0, fill, concat_rows(lat), concat_rows(pe));
  KvCache cache({KvLayerSpec{KvKind::kFullHistory, D}}, blocks, kBs, Device::kCuda, DType::BF16);
  const Tensor bits = CudaDeepseekOpsTest::to_bf16_bits(host_cache.storage(0));
  cuda::copy_to_device(const_cast<void*>(cache.storage(0).raw()), bits.raw(), bits.nbytes());
  const Tensor dql = cuda::to_device(concat_rows(ql)), dqp = cuda::to_device(concat_rows(qp));  // [T, H, R/P]
  const float scale = 1.0f / std::sqrt(192.0f);
  CudaBackend gpu;
  const bool saved = cuda::mla_uv_fused();
  cuda::mla_set_uv_fused(mode == UvMode::kFused);
  Tensor out;  // [T, H, V]
  if (mode == UvMode::kComposition)
    out = gpu.head_matmul(gpu.attention_mla(dql, dqp, cache, 0, plan, scale), w_uv, /*transpose_w=*/false);
  else
    out = gpu.attention_mla_uv(dql, dqp, cache, 0, plan, scale, w_uv);
  Tensor host = gpu.to_host(out);
  cuda::mla_set_uv_fused(saved);
  return host;
}

// Whether the merge + W_UV kernel runs for a decode step of T tokens whose longest context is max_ctx (the
// launch's own choice, repeated here to count the cases that exercise it).
bool expect_fused(int64_t T, int64_t H, int64_t max_ctx, const Tensor& w_uv) {
  const cuda::MlaSplit split =
      cuda::mla_choose_split(T, H, kR, cuda::attention_max_context_bucket(max_ctx), /*tensor_cores=*/true);
  return split.splits > 1 && split.splits > cuda::mla_fused_merge_max_splits() &&
         cuda::mla_merge_uv_supported(T, H, kR, kV, split.splits, reinterpret_cast<uintptr_t>(w_uv.raw()));
}

int64_t count_differ(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += a.f32()[i] != b.f32()[i];
  return n;
}

TEST_F(CudaDeepseekOpsTest, MlaUvFusedMatchesComposition) {
  // T 1-8 decode tokens, contexts 1 (one split) to 4096 (many), 16 and 128 heads: attention_mla_uv (the merge
  // + W_UV kernel where the plan has several splits, the composition elsewhere) against attention_mla +
  // head_matmul. The merge is the combine kernel's arithmetic and the GEMV the default decode tile's, so the
  // outputs are expected bit-identical; the test allows fp32 rounding of a reordered dot product (relative
  // L2 error 1e-6) and prints how many values differ. With DSINFER_MLA_UV_FUSED off: bit-identical.
  if (!cuda::mla_tc_supported(kR, kP, true, 0, 0, 0))
    GTEST_SKIP() << "the tensor-core MLA kernel needs more shared memory than this GPU has";
  int fused_cases = 0;
  for (const int64_t H : {16, 128}) {
    const Tensor w_uv = device_bf16(random_bf16_values({H, kV, kR}, 0.05f));  // [H, V, R]
    for (const int32_t ctx : {1, 100, 192, 256, 1000, 4096}) {
      std::vector<UvSeq> pool;  // the longest first: context ctx, the others shorter
      for (int i = 0; i < 8; ++i) pool.push_back(random_seq(this, H, std::max(1, ctx - 37 * i)));
      for (const int64_t T : {1, 2, 4, 8}) {
        std::vector<const UvSeq*> seqs;
        for (int64_t i = 0; i < T; ++i) seqs.push_back(&pool[i]);
        const Tensor ref = run_step(this, seqs, H, w_uv, UvMode::kComposition);
        const Tensor fused = run_step(this, seqs, H, w_uv, UvMode::kFused);
        const Tensor off = run_step(this, seqs, H, w_uv, UvMode::kFusedOff);
        ASSERT_EQ(fused.shape(), (Shape{T, H, kV}));
        const bool uses = expect_fused(T, H, ctx, w_uv);
        fused_cases += uses;
        const double err = CudaDeepseekOpsTest::rel_err(fused, ref);
        const int64_t differ = count_differ(fused, ref);
        if (differ > 0)
          std::printf(
              "attention_mla_uv H %lld ctx %d T %lld (%s): %lld of %lld values differ, rel err %.2e\n",
              static_cast<long long>(H), ctx, static_cast<long long>(T), uses ? "fused" : "composed",
              static_cast<long long>(differ), static_cast<long long>(fused.numel()), err);
        EXPECT_LT(err, 1e-6) << "H=" << H << " ctx=" << ctx << " T=" << T << (uses ? " fused" : " composed");
        EXPECT_EQ(count_differ(off, ref), 0) << "H=" << H << " ctx=" << ctx << " T=" << T;
      }
    }
  }
  std::printf("attention_mla_uv: %d of 48 cases ran the merge + W_UV kernel\n", fused_cases);
  EXPECT_GT(fused_cases, 0);
}

// The stamped merge + W_UV kernel (gemv_stamps.h): with stamps on, its launch takes a slot as a launch of T
// rows, K = R and tiles = V, one block per (head, 16 output rows); the outputs keep their bits and every
// block records its points in order (start <= issued <= waited <= merged <= W_UV done <= end). V2-Lite's
// batch-1 shape (16 heads) at two contexts, and 128 heads.
TEST_F(CudaDeepseekOpsTest, MlaUvStampsRecordEveryBlockWithTheSameBits) {
  if (!cuda::mla_tc_supported(kR, kP, true, 0, 0, 0))
    GTEST_SKIP() << "the tensor-core MLA kernel needs more shared memory than this GPU has";
  int stamped_cases = 0;
  for (const int64_t H : {16, 128}) {
    const Tensor w_uv = device_bf16(random_bf16_values({H, kV, kR}, 0.05f));  // [H, V, R]
    for (const int32_t ctx : {201, 1000}) {
      if (!expect_fused(1, H, ctx, w_uv)) continue;
      ++stamped_cases;
      const std::string what = "H " + std::to_string(H) + " ctx " + std::to_string(ctx);
      const UvSeq seq = random_seq(this, H, ctx);
      const Tensor want = run_step(this, {&seq}, H, w_uv, UvMode::kFused);
      ASSERT_TRUE(cuda::enable_gemv_stamps(8));
      const Tensor got = run_step(this, {&seq}, H, w_uv, UvMode::kFused);
      const std::vector<cuda::GemvStampLaunch> launches = cuda::read_gemv_stamps();
      cuda::disable_gemv_stamps();
      EXPECT_EQ(count_differ(got, want), 0) << what;
      const cuda::GemvStampLaunch* merge = nullptr;
      for (const cuda::GemvStampLaunch& l : launches)
        if (l.K == kR && l.tiles == kV && !l.swiglu) merge = &l;
      ASSERT_NE(merge, nullptr) << what << ": no merge + W_UV record among " << launches.size();
      EXPECT_EQ(merge->rows, 1) << what;
      EXPECT_EQ(merge->grid, H * (kV / 16)) << what;
      ASSERT_EQ(static_cast<int64_t>(merge->blocks.size()), merge->grid) << what;
      for (size_t i = 0; i < merge->blocks.size(); ++i) {
        const cuda::GemvStampBlock& b = merge->blocks[i];
        ASSERT_GT(b.t[cuda::kStampStart], 0u) << what << " block " << i << " has no stamps";
        for (int p = 1; p < cuda::kStampPoints; ++p)
          EXPECT_LE(b.t[p - 1], b.t[p]) << what << " block " << i << " point " << p;
      }
      EXPECT_EQ(count_differ(run_step(this, {&seq}, H, w_uv, UvMode::kFused), want), 0)
          << what << ": the plain instance again";
    }
  }
  EXPECT_GT(stamped_cases, 0) << "no case ran the merge + W_UV kernel";
}

TEST_F(CudaDeepseekOpsTest, MlaUvFusedRowIndependentOfBatch) {
  // A row's output does not depend on the other rows of its bucket: sequence s0 (the longest, so the context
  // bucket is the same) decoded with different companions in batches of the same next_pow2(T) gives the
  // same bits, fused and with the fused kernel off.
  if (!cuda::mla_tc_supported(kR, kP, true, 0, 0, 0))
    GTEST_SKIP() << "the tensor-core MLA kernel needs more shared memory than this GPU has";
  for (const int64_t H : {16, 128}) {
    const Tensor w_uv = device_bf16(random_bf16_values({H, kV, kR}, 0.05f));  // [H, V, R]
    for (const int32_t ctx : {192, 1000, 4096}) {
      std::vector<UvSeq> pool;
      for (int i = 0; i < 16; ++i) pool.push_back(random_seq(this, H, std::max(1, ctx - 29 * i)));
      // (T, T') pairs of one bucket: s0 plus T - 1 of pool[1..8), then s0 plus T' - 1 of pool[8..16).
      for (auto [T, T2] : {std::pair<int64_t, int64_t>{2, 2}, {4, 3}, {8, 5}}) {
        std::vector<const UvSeq*> a{&pool[0]}, b{&pool[0]};
        for (int64_t i = 1; i < T; ++i) a.push_back(&pool[i]);
        for (int64_t i = 1; i < T2; ++i) b.push_back(&pool[7 + i]);
        for (UvMode mode : {UvMode::kFused, UvMode::kFusedOff}) {
          const Tensor ya = run_step(this, a, H, w_uv, mode), yb = run_step(this, b, H, w_uv, mode);
          int64_t differ = 0;
          for (int64_t k = 0; k < H * kV; ++k) differ += ya.f32()[k] != yb.f32()[k];
          EXPECT_EQ(differ, 0) << "H=" << H << " ctx=" << ctx << " T=" << T << " vs " << T2
                               << (mode == UvMode::kFused ? " fused" : " off");
        }
      }
    }
  }
}

#endif

}  // namespace
}  // namespace dsinfer
