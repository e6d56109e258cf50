// CudaBackend::rope_attention_gqa: a pure decode step's rope, cache write and attention in one kernel
// (DecodeRopeArgs) against the unfused rope_write_kv + attention_gqa on the GPU (the same output and cache
// bits) and against the CPU reference; plans that are not pure decode steps take the unfused path.
#include "cuda_ops_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda_ops_test::CudaOpsTest;
using SeqSpec = std::vector<std::pair<int32_t, int32_t>>;  // (cached tokens, new tokens) per sequence

struct RopeCase {
  int64_t Hq, Hkv, D, R;  // Dv == D
  RopeLayout layout;
};

std::string describe(const RopeCase& c, const SeqSpec& seqs) {
  std::string s = std::to_string(c.Hq) + "/" + std::to_string(c.Hkv) + " D " + std::to_string(c.D) + " R " +
                  std::to_string(c.R) + (c.layout == RopeLayout::kHalf ? " half" : " interleaved") + " seqs";
  for (auto [cached, fresh] : seqs) s += " (" + std::to_string(cached) + "+" + std::to_string(fresh) + ")";
  return s;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class CudaRopeAttentionTest : public CudaOpsTest {
 protected:
  // A GQA cache layer on the GPU (bf16) or the CPU (float32) with `k` / `v` rows at every slot of `plan`.
  static std::unique_ptr<KvCache> filled_cache(Backend& b, const BatchPlan& plan, int32_t blocks, int32_t bs,
                                               int64_t width, Device device, const Tensor& k,
                                               const Tensor& v) {
    const KvLayerSpec spec{KvKind::kFullHistory, width};
    auto cache = device == Device::kCuda
                     ? std::make_unique<KvCache>(std::vector<KvLayerSpec>{spec}, blocks, bs, Device::kCuda,
                                                 DType::BF16)
                     : std::make_unique<KvCache>(std::vector<KvLayerSpec>{spec}, blocks, bs);
    b.write_kv(*cache, 0, plan, k, v);
    return cache;
  }
  static RopeTable table_for(int64_t R) {
    RopeTable table;
    table.rope_dim = R;
    table.attention_scaling = 1.1f;
    for (int64_t i = 0; i < R / 2; ++i)
      table.inv_freq.push_back(std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(R)));
    return table;
  }

  // One step of `seqs` through the fused backend, the unfused one and the CPU reference, over caches that
  // hold the same random rows at every position (the new tokens' slots too: stale rows to overwrite).
  void check(CudaBackend& fused, CudaBackend& unfused, const RopeCase& c, const SeqSpec& seqs) {
    const int32_t bs = 16;
    SeqSpec full;
    int32_t blocks = 3;
    for (auto [cached, fresh] : seqs) {
      full.push_back({0, cached + fresh});
      blocks += (cached + fresh + bs - 1) / bs;
    }
    if (blocks % 7 == 0) ++blocks;  // make_plan's scrambling is a permutation
    const BatchPlan fill_plan = make_plan(full, bs, blocks), plan = make_plan(seqs, bs, blocks);
    const int64_t width = 2 * c.Hkv * c.D, T = plan.num_tokens();
    const Tensor old_k = as_bf16(random_f32({fill_plan.num_tokens(), c.Hkv * c.D})).second;
    const Tensor old_v = as_bf16(random_f32({fill_plan.num_tokens(), c.Hkv * c.D})).second;
    const Tensor dk_old = cuda::to_device(old_k), dv_old = cuda::to_device(old_v);
    auto cache_f = filled_cache(fused, fill_plan, blocks, bs, width, Device::kCuda, dk_old, dv_old);
    auto cache_u = filled_cache(unfused, fill_plan, blocks, bs, width, Device::kCuda, dk_old, dv_old);
    auto cache_c = filled_cache(cpu, fill_plan, blocks, bs, width, Device::kCpu, old_k, old_v);

    Tensor q = random_f32({T, c.Hq, c.D}), k = random_f32({T, c.Hkv, c.D}), v = random_f32({T, c.Hkv * c.D});
    const RopeTable table = table_for(c.R);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const std::string what = describe(c, seqs);
    Tensor q_f = cuda::to_device(q), k_f = cuda::to_device(k), q_u = cuda::to_device(q),
           k_u = cuda::to_device(k);
    const Tensor dv = cuda::to_device(v);
    const Tensor out_f =
        fused.to_host(fused.rope_attention_gqa(q_f, k_f, dv, table, c.layout, *cache_f, 0, plan, c.D, scale));
    const Tensor out_u = unfused.to_host(
        unfused.rope_attention_gqa(q_u, k_u, dv, table, c.layout, *cache_u, 0, plan, c.D, scale));
    EXPECT_TRUE(same_bits(out_f, out_u)) << what << ": outputs differ, rel err " << rel_err(out_f, out_u);
    // Every slot the fill plan wrote (the new tokens' among them); the others were never written.
    const Tensor rows_f = cuda::to_host(cache_f->storage(0)), rows_u = cuda::to_host(cache_u->storage(0));
    const size_t row_bytes = rows_f.nbytes() / static_cast<size_t>(blocks * bs);
    int64_t differing = 0;
    std::string where;  // the first differing rows: position, new or old, first differing bf16 value
    for (int64_t r = 0; r < fill_plan.num_tokens(); ++r) {
      const int64_t slot = fill_plan.slot_mapping[r];
      const auto* a =
          reinterpret_cast<const uint16_t*>(static_cast<const char*>(rows_f.raw()) + slot * row_bytes);
      const auto* b =
          reinterpret_cast<const uint16_t*>(static_cast<const char*>(rows_u.raw()) + slot * row_bytes);
      if (std::memcmp(a, b, row_bytes) == 0) continue;
      int64_t e = 0;
      while (a[e] == b[e]) ++e;
      const bool fresh =
          std::find(plan.slot_mapping.begin(), plan.slot_mapping.end(), slot) != plan.slot_mapping.end();
      if (++differing <= 3)
        where += " [position " + std::to_string(fill_plan.positions[r]) + (fresh ? " new" : " old") +
                 " value " + std::to_string(e) + " of " + std::to_string(width) + ": fused " +
                 std::to_string(a[e]) + ", unfused " + std::to_string(b[e]) + "]";
    }
    EXPECT_EQ(differing, 0) << what << ": cache rows differ:" << where;
    // The CPU keeps the new rows in float32 where the GPU rounds them to bf16: ~4e-3 on those rows' share.
    const Tensor ref = cpu.rope_attention_gqa(q, k, v, table, c.layout, *cache_c, 0, plan, c.D, scale);
    EXPECT_LT(rel_err(out_f, ref), 1e-2) << what;
  }
};

// The warp kernel's head dims, groups of 1 to 16, full / partial / no rope in both layouts; batch 1 at split
// edges (1, 32, 33, 64 positions) and long, and a batch of mixed lengths; repeated, so the fused combine's
// counters come back to zero.
TEST_F(CudaRopeAttentionTest, FusedDecodeMatchesUnfusedBitForBit) {
  CudaBackendOptions on, off;
  on.rope_attention_fused = true;
  off.rope_attention_fused = false;
  CudaBackend fused(on), unfused(off);
  const std::vector<RopeCase> cases = {
      {32, 8, 128, 128, RopeLayout::kHalf}, {32, 8, 128, 128, RopeLayout::kInterleaved},
      {8, 8, 64, 64, RopeLayout::kHalf},    {16, 2, 256, 256, RopeLayout::kHalf},
      {16, 1, 128, 64, RopeLayout::kHalf},  {16, 1, 128, 64, RopeLayout::kInterleaved},
      {4, 4, 128, 0, RopeLayout::kHalf},    {8, 2, 64, 22, RopeLayout::kInterleaved},
  };
  const std::vector<SeqSpec> batches = {
      {{0, 1}},
      {{31, 1}},
      {{32, 1}},
      {{63, 1}},
      {{200, 1}},
      {{4096, 1}},
      {{0, 1}, {1, 1}, {31, 1}, {32, 1}, {64, 1}, {257, 1}, {999, 1}},
  };
  for (const RopeCase& c : cases)
    for (const SeqSpec& seqs : batches)
      for (int rep = 0; rep < 2; ++rep) check(fused, unfused, c, seqs);
}

// Plans with a prefill chunk (or shapes the fused kernel does not take) run rope_write_kv + attention_gqa in
// both backends: the same bits, and the CPU reference's values.
TEST_F(CudaRopeAttentionTest, OtherPlansAndShapesTakeTheUnfusedPath) {
  CudaBackendOptions on, off;
  on.rope_attention_fused = true;
  off.rope_attention_fused = false;
  CudaBackend fused(on), unfused(off);
  EXPECT_FALSE(cuda::decode_rope_supported({8, 2, 96, 96, 1.0f}, true, 96, false));    // D 96: generic kernel
  EXPECT_FALSE(cuda::decode_rope_supported({8, 2, 128, 128, 1.0f}, true, 36, false));  // half of 18 dims
  EXPECT_FALSE(cuda::decode_rope_supported({8, 2, 128, 128, 1.0f}, false, 128, false));  // float32 cache
  EXPECT_TRUE(cuda::decode_rope_supported({8, 2, 128, 128, 1.0f}, true, 36, true));
  check(fused, unfused, {32, 8, 128, 128, RopeLayout::kHalf}, {{0, 37}, {20, 1}});
  check(fused, unfused, {32, 8, 128, 128, RopeLayout::kHalf}, {{100, 2}});
  check(fused, unfused, {8, 2, 128, 36, RopeLayout::kHalf}, {{50, 1}});
  check(fused, unfused, {8, 2, 96, 96, RopeLayout::kHalf}, {{50, 1}, {7, 1}});
}

#endif

}  // namespace
}  // namespace dsinfer
