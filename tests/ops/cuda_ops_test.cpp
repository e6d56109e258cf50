// CUDA kernels and CudaBackend ops against the CPU reference on random inputs (runs where a GPU is visible;
// CI compiles it and skips). Weights are bf16 on the GPU; the CPU op gets the same bf16 values widened to
// float32, so elementwise results agree to float32 rounding and GEMMs to the activation rounding
// (GEMV kernels, 2 or 3 bf16 parts per activation: ~5e-6 / ~1e-7; hi/lo split GEMMs: ~1e-5; plain bf16
// activations: ~1e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "scrambled_plan.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/backend_factory.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#endif

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  }
  std::mt19937 rng{20261130};
  Tensor random_f32(Shape shape) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
    return t;
  }
  // bf16 bits of `values` and the same values widened back to float32.
  static std::pair<Tensor, Tensor> as_bf16(const Tensor& values) {
    Tensor bits = Tensor::empty(DType::BF16, values.shape());
    Tensor widened = Tensor::empty(DType::F32, values.shape());
    for (int64_t i = 0; i < values.numel(); ++i) {
      bits.data<uint16_t>()[i] = f32_to_bf16(values.f32()[i]);
      widened.f32()[i] = bf16_to_f32(bits.data<uint16_t>()[i]);
    }
    return {bits, widened};
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

TEST_F(CudaOpsTest, EmbedMatchesCpu) {
  for (auto [V, H, T] : {std::tuple<int64_t, int64_t, int64_t>{300, 64, 7}, {4096, 257, 33}}) {
    auto [bits, widened] = as_bf16(random_f32({V, H}));
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % V);
    Tensor ids_host = Tensor::empty(DType::I32, {T});
    std::copy(ids.begin(), ids.end(), ids_host.data<int32_t>());
    Tensor table = cuda::to_device(bits), dev_ids = cuda::to_device(ids_host);
    Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H});
    cuda::launch_embed(table.data<uint16_t>(), dev_ids.data<int32_t>(), out.data<float>(), T, H, V);
    EXPECT_EQ(rel_err(cuda::to_host(out), cpu.embed(widened, ids)), 0.0);
  }
}

TEST_F(CudaOpsTest, EmbedRejectsIdsOutsideTheVocabulary) {
  // The backend checks ids on the host (the kernel never syncs to report one); the kernel clamps.
  auto [bits, widened] = as_bf16(random_f32({10, 8}));
  CudaBackend gpu;
  const Tensor table = cuda::to_device(bits);
  EXPECT_THROW(gpu.embed(table, {3, 10}), Error);
  EXPECT_THROW(gpu.embed(table, {-1}), Error);
  const Tensor row = gpu.to_host(gpu.embed(table, {9}));  // [1, 8]
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(row.f32()[i], widened.f32()[9 * 8 + i]);
}

TEST_F(CudaOpsTest, RmsNormMatchesCpu) {
  for (auto [T, H] : {std::pair<int64_t, int64_t>{1, 64}, {5, 4096}, {130, 7168}, {3, 100}}) {
    Tensor x = random_f32({T, H});
    auto [w_bits, w] = as_bf16(random_f32({H}));
    Tensor dx = cuda::to_device(x), dw = cuda::to_device(w_bits);
    Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {T, H});
    cuda::launch_rms_norm(dx.data<float>(), dw.data<uint16_t>(), out.data<float>(), T, H, 1e-6f);
    EXPECT_LT(rel_err(cuda::to_host(out), cpu.rms_norm(x, w, 1e-6f)), 1e-6) << T << "x" << H;
  }
}

TEST_F(CudaOpsTest, SiluMulMatchesReference) {
  const int64_t n = 100003;
  Tensor g = random_f32({n}), u = random_f32({n});
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {n});
  Tensor dg = cuda::to_device(g), du = cuda::to_device(u);
  cuda::launch_silu_mul(dg.data<float>(), du.data<float>(), out.data<float>(), n);
  Tensor ref = Tensor::empty(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) ref.f32()[i] = g.f32()[i] / (1.0f + std::exp(-g.f32()[i])) * u.f32()[i];
  EXPECT_LT(rel_err(cuda::to_host(out), ref), 1e-6);
}

TEST_F(CudaOpsTest, DeviceTensorsRefuseHostAccess) {
  Tensor d = cuda::to_device(random_f32({4}));
  EXPECT_EQ(d.device(), Device::kCuda);
  EXPECT_THROW(d.f32(), Error);
  EXPECT_THROW(d.to_f32(), Error);
  EXPECT_THROW(d.clone(), Error);
}

// ---- CudaBackend ops ----

TEST_F(CudaOpsTest, BackendEmbedRmsNormAddGather) {
  CudaBackend gpu;
  auto [tab_bits, tab] = as_bf16(random_f32({500, 96}));
  const std::vector<int32_t> ids = {3, 499, 0, 17, 17, 250};
  Tensor table = gpu.prepare_weight(tab);
  EXPECT_EQ(table.dtype(), DType::BF16);
  Tensor e = gpu.embed(table, ids);
  EXPECT_EQ(rel_err(gpu.to_host(e), cpu.embed(tab, ids)), 0.0);
  EXPECT_THROW(gpu.embed(table, {500}), Error);

  auto [w_bits, w] = as_bf16(random_f32({96}));
  Tensor x = random_f32({6, 96});
  EXPECT_LT(rel_err(gpu.to_host(gpu.rms_norm(cuda::to_device(x), gpu.prepare_weight(w), 1e-5f)),
                    cpu.rms_norm(x, w, 1e-5f)),
            1e-6);

  Tensor a = random_f32({6, 96}), b = random_f32({6, 96});
  Tensor da = cuda::to_device(a);
  gpu.add_inplace(da, cuda::to_device(b));
  Tensor ref = a.clone();
  cpu.add_inplace(ref, b);
  EXPECT_EQ(rel_err(gpu.to_host(da), ref), 0.0);

  const std::vector<int32_t> rows = {5, 0, 5, 2};
  EXPECT_EQ(rel_err(gpu.to_host(gpu.gather_rows(cuda::to_device(a), rows)), cpu.gather_rows(a, rows)), 0.0);
  EXPECT_THROW(gpu.gather_rows(cuda::to_device(a), {6}), Error);
}

TEST_F(CudaOpsTest, LinearMatchesCpu) {
  CudaBackend split(CudaBackendOptions{true});
  CudaBackend plain;
  for (auto [M, N, K, bias] : {std::tuple<int64_t, int64_t, int64_t, bool>{1, 64, 64, false},
                               {7, 96, 64, true},
                               {33, 130, 257, true},
                               {128, 512, 1024, false},
                               {300, 256, 896, true}}) {
    Tensor x = random_f32({M, K});
    auto [w_bits, w] = as_bf16(random_f32({N, K}));
    Linear lin_cpu{w, Tensor()}, lin_gpu{split.prepare_weight(w), Tensor()};
    if (bias) {
      auto [b_bits, b] = as_bf16(random_f32({N}));
      lin_cpu.bias = b;
      lin_gpu.bias = split.prepare_weight(b);
    }
    const Tensor ref = cpu.linear(x, lin_cpu);
    const Tensor dx = cuda::to_device(x);
    EXPECT_LT(rel_err(split.to_host(split.linear(dx, lin_gpu)), ref), 1e-4) << M << "x" << N << "x" << K;
    EXPECT_LT(rel_err(plain.to_host(plain.linear(dx, lin_gpu)), ref), 1e-2) << M << "x" << N << "x" << K;
    Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {M, N});
    cuda::linear_bf16_reference(dx.data<float>(), lin_gpu.weight.data<uint16_t>(),
                                bias ? lin_gpu.bias.data<uint16_t>() : nullptr, y.data<float>(), M, N, K);
    EXPECT_LT(rel_err(cuda::to_host(y), ref), 1e-5) << M << "x" << N << "x" << K;
  }
}

TEST_F(CudaOpsTest, MlpMatchesCpu) {
  CudaBackend gpu(CudaBackendOptions{true});  // hi/lo split GEMMs: the 1e-4 tolerance below
  const int64_t T = 9, H = 128, I = 352;
  Tensor x = random_f32({T, H});
  MlpWeights wc, wg;
  for (auto [lc, lg, out, in] : {std::tuple<Linear*, Linear*, int64_t, int64_t>{&wc.gate, &wg.gate, I, H},
                                 {&wc.up, &wg.up, I, H},
                                 {&wc.down, &wg.down, H, I}}) {
    auto [bits, w] = as_bf16(random_f32({out, in}));
    lc->weight = w;
    lg->weight = gpu.prepare_weight(w);
  }
  for (float limit : {0.0f, 0.5f}) {
    wc.swiglu_limit = wg.swiglu_limit = limit;
    EXPECT_LT(rel_err(gpu.to_host(gpu.mlp(cuda::to_device(x), wg)), cpu.mlp(x, wc)), 1e-4)
        << "limit " << limit;
  }
}

TEST_F(CudaOpsTest, RopeMatchesCpu) {
  CudaBackend gpu;
  std::vector<int32_t> positions = {0, 1, 7, 100, 4095, 31, 2};
  for (auto [D, R, offset, scaling] : {std::tuple<int64_t, int64_t, int64_t, float>{64, 64, 0, 1.0f},
                                       {128, 128, 0, 1.0f},
                                       {192, 64, 128, 1.3f},
                                       {96, 32, 16, 0.7f}}) {
    RopeTable table;
    table.rope_dim = R;
    table.attention_scaling = scaling;
    for (int64_t i = 0; i < R / 2; ++i)
      table.inv_freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(R)));
    for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
      for (bool inverse : {false, true}) {
        Tensor x = random_f32({static_cast<int64_t>(positions.size()), 3, D});
        Tensor dx = cuda::to_device(x);
        gpu.rope(dx, positions, table, offset, layout, inverse);
        cpu.rope(x, positions, table, offset, layout, inverse);
        EXPECT_LT(rel_err(gpu.to_host(dx), x), 1e-6) << D << " " << R << " " << offset << " " << inverse;
      }
    }
  }
}

TEST_F(CudaOpsTest, WriteKvAndPagedAttentionMatchCpu) {
  CudaBackend gpu;
  const int32_t bs = 16, blocks = 32;
  for (auto [Hq, Hkv, D, Dv] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{8, 2, 64, 64},
                                {4, 4, 256, 128},
                                {6, 3, 40, 72},
                                {14, 2, 128, 128}}) {
    const int64_t width = Hkv * (D + Dv);
    KvCache cpu_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs);
    KvCache gpu_cache({KvLayerSpec{KvKind::kFullHistory, width}}, blocks, bs, Device::kCuda);
    EXPECT_EQ(gpu_cache.storage(0).device(), Device::kCuda);
    // Step 1 fills the prefixes (prefill), step 2 adds new tokens to both sequences and a third new one.
    const BatchPlan prefill = make_plan({{0, 70}, {0, 3}}, bs, blocks);
    const BatchPlan step = make_plan({{70, 5}, {3, 1}, {0, 9}}, bs, blocks);
    for (const BatchPlan* plan : {&prefill, &step}) {
      const int64_t T = plan->num_tokens();
      Tensor k = random_f32({T, Hkv * D}), v = random_f32({T, Hkv * Dv}), q = random_f32({T, Hq, D});
      cpu.write_kv(cpu_cache, 0, *plan, k, v);
      gpu.write_kv(gpu_cache, 0, *plan, cuda::to_device(k), cuda::to_device(v));
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      Tensor ref = cpu.attention_gqa(q, cpu_cache, 0, *plan, Hkv, D, Dv, scale);
      Tensor out = gpu.to_host(gpu.attention_gqa(cuda::to_device(q), gpu_cache, 0, *plan, Hkv, D, Dv, scale));
      EXPECT_LT(rel_err(out, ref), 1e-5) << Hq << "/" << Hkv << " " << D << "/" << Dv << " T=" << T;
    }
    // The written rows are the same values in both caches.
    Tensor host = cuda::to_host(gpu_cache.storage(0));
    double diff = 0;
    for (const BatchPlan* plan : {&prefill, &step})
      for (int64_t slot : plan->slot_mapping)
        for (int64_t i = 0; i < width; ++i)
          diff += std::abs(host.f32()[slot * width + i] - cpu_cache.slot(0, slot)[i]);
    EXPECT_EQ(diff, 0.0);
    // Copy-on-write of a device block.
    gpu_cache.copy_block(prefill.block_table[0], prefill.block_table[1]);
    cpu_cache.copy_block(prefill.block_table[0], prefill.block_table[1]);
    host = cuda::to_host(gpu_cache.storage(0));
    const int64_t dst = prefill.block_table[1] * bs;
    for (int64_t i = 0; i < bs * width; ++i)
      ASSERT_EQ(host.f32()[dst * width + i], cpu_cache.slot(0, dst)[i]);
  }
}

// ---- Paged attention with a bf16 cache (decode, flash prefill, mixed batches) and the fused rope write ----

using SeqSpec = std::vector<std::pair<int32_t, int32_t>>;  // (cached tokens, new tokens) per sequence

struct GqaCase {
  int64_t Hq, Hkv, D, Dv;
};

std::string describe(const GqaCase& c, int32_t bs, const SeqSpec& seqs) {
  std::string s = std::to_string(c.Hq) + "/" + std::to_string(c.Hkv) + " D " + std::to_string(c.D) + "/" +
                  std::to_string(c.Dv) + " bs " + std::to_string(bs) + " seqs";
  for (auto [cached, fresh] : seqs) s += " (" + std::to_string(cached) + "+" + std::to_string(fresh) + ")";
  return s;
}

class CudaAttentionTest : public CudaOpsTest {
 protected:
  // Enough blocks for `seqs`, a count make_plan's scrambling (b * 7 + 3) turns into a permutation.
  static int32_t blocks_for(const SeqSpec& seqs, int32_t bs) {
    int32_t blocks = 3;
    for (auto [cached, fresh] : seqs) blocks += (cached + fresh + bs - 1) / bs;
    return blocks % 7 == 0 ? blocks + 1 : blocks;
  }
  // Caches of one GQA layer (CPU float32, GPU `dtype`) holding random K/V at every position of `seqs`;
  // the CPU cache gets the values the GPU cache stores (bf16-rounded for a bf16 cache).
  struct Filled {
    std::unique_ptr<KvCache> cpu_cache, gpu_cache;
    BatchPlan plan;  // the query plan of `seqs`
  };
  Filled fill(CudaBackend& gpu, const SeqSpec& seqs, int32_t bs, const GqaCase& c, DType dtype) {
    SeqSpec full;
    for (auto [cached, fresh] : seqs) full.push_back({0, cached + fresh});
    const int32_t blocks = blocks_for(seqs, bs);
    const BatchPlan fill_plan = make_plan(full, bs, blocks);
    Filled f;
    f.plan = make_plan(seqs, bs, blocks);
    const KvLayerSpec spec{KvKind::kFullHistory, c.Hkv * (c.D + c.Dv)};
    f.cpu_cache = std::make_unique<KvCache>(std::vector<KvLayerSpec>{spec}, blocks, bs);
    f.gpu_cache = std::make_unique<KvCache>(std::vector<KvLayerSpec>{spec}, blocks, bs, Device::kCuda, dtype);
    const int64_t T = fill_plan.num_tokens();
    Tensor k = random_f32({T, c.Hkv * c.D}), v = random_f32({T, c.Hkv * c.Dv});
    gpu.write_kv(*f.gpu_cache, 0, fill_plan, cuda::to_device(k), cuda::to_device(v));
    if (dtype == DType::BF16) {
      k = as_bf16(k).second;
      v = as_bf16(v).second;
    }
    cpu.write_kv(*f.cpu_cache, 0, fill_plan, k, v);
    return f;
  }
  // GPU attention_gqa over `seqs` against the CPU reference; returns the relative error.
  double attention_error(CudaBackend& gpu, const SeqSpec& seqs, int32_t bs, const GqaCase& c, DType dtype) {
    Filled f = fill(gpu, seqs, bs, c, dtype);
    Tensor q = random_f32({f.plan.num_tokens(), c.Hq, c.D});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const Tensor ref = cpu.attention_gqa(q, *f.cpu_cache, 0, f.plan, c.Hkv, c.D, c.Dv, scale);
    const Tensor out =
        gpu.to_host(gpu.attention_gqa(cuda::to_device(q), *f.gpu_cache, 0, f.plan, c.Hkv, c.D, c.Dv, scale));
    return rel_err(out, ref);
  }
  // Device copy of an int32 array.
  static Tensor device_i32(const std::vector<int32_t>& v) {
    Tensor t = Tensor::empty(DType::I32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return cuda::to_device(t);
  }
};

// Head counts 1..32 with groups of 1, 2, 4, 7, 8 and 16 (the decode kernel splits groups above 8), head dims
// 64..256 (96 and Dv != D take the generic kernels).
const std::vector<GqaCase> kGqaCases = {
    {1, 1, 64, 64}, {4, 1, 128, 128}, {8, 8, 128, 128}, {32, 8, 128, 128}, {8, 4, 64, 64},
    {4, 4, 96, 96}, {8, 1, 256, 256}, {8, 2, 128, 64},  {14, 2, 64, 64},   {16, 1, 128, 128}};

TEST_F(CudaAttentionTest, CudaBackendUsesABf16Cache) {
  CudaBackend gpu;
  EXPECT_EQ(gpu.kv_dtype(), DType::BF16);
}

// Decode steps (one new token per sequence) over contexts 1..5000: split-KV with several splits for the long
// ones. fp32 math over the same bf16 values as the reference, so the tolerance is float32 rounding.
TEST_F(CudaAttentionTest, DecodeMatchesCpu) {
  CudaBackend gpu;
  const SeqSpec seqs = {{0, 1}, {1, 1}, {62, 1}, {63, 1}, {64, 1}, {128, 1}, {999, 1}, {4999, 1}};
  for (const GqaCase& c : kGqaCases)
    for (int32_t bs : {16, 64}) {
      EXPECT_LT(attention_error(gpu, seqs, bs, c, DType::BF16), 1e-5) << describe(c, bs, seqs);
      // One long sequence alone: the most splits.
      EXPECT_LT(attention_error(gpu, {{4321, 1}}, bs, c, DType::BF16), 1e-5) << describe(c, bs, {{4321, 1}});
    }
}

// Prefill chunks with and without a cached prefix, and mixed batches of chunks and decode tokens. The flash
// kernel rounds q and the probabilities to bf16 (~3e-3); other shapes run the fp32 per-token kernel.
TEST_F(CudaAttentionTest, PrefillAndMixedBatchesMatchCpu) {
  CudaBackend gpu;
  const std::vector<SeqSpec> batches = {
      {{0, 37}},
      {{0, 200}, {0, 64}, {0, 2}},
      {{100, 50}, {64, 64}, {1, 130}},
      {{999, 1}, {0, 70}, {4999, 1}, {130, 3}, {17, 1}, {300, 129}},
  };
  for (const GqaCase& c : kGqaCases) {
    const bool flash = cuda::flash_supported({c.Hq, c.Hkv, c.D, c.Dv, 1.0f}, true);
    for (int32_t bs : {16, 64})
      for (const SeqSpec& seqs : batches)
        EXPECT_LT(attention_error(gpu, seqs, bs, c, DType::BF16), flash ? 1e-2 : 1e-5)
            << describe(c, bs, seqs);
  }
}

// A float32 cache with a flash-sized head runs the fp32 kernels (no bf16 rounding anywhere).
TEST_F(CudaAttentionTest, Float32CacheMatchesCpuExactlyUpToRounding) {
  CudaBackend gpu;
  const SeqSpec seqs = {{0, 90}, {700, 1}, {33, 17}};
  for (int32_t bs : {16, 64})
    EXPECT_LT(attention_error(gpu, seqs, bs, {8, 2, 128, 128}, DType::F32), 1e-5) << bs;
}

// The decode launch depends on max_context, not on the lengths: any bound above the longest context gives the
// same result (the split count changes; surplus splits exit), as a CUDA graph captured for a larger bucket.
TEST_F(CudaAttentionTest, DecodeResultDoesNotDependOnMaxContext) {
  CudaBackend gpu;
  const GqaCase c{32, 8, 128, 128};
  const SeqSpec seqs = {{0, 1}, {40, 1}, {299, 1}};
  Filled f = fill(gpu, seqs, 16, c, DType::BF16);
  Tensor q = random_f32({f.plan.num_tokens(), c.Hq, c.D});
  const float scale = 0.09f;
  const Tensor ref = cpu.attention_gqa(q, *f.cpu_cache, 0, f.plan, c.Hkv, c.D, c.Dv, scale);
  std::vector<int32_t> seq_of = {0, 1, 2};
  Tensor positions = device_i32(f.plan.positions), token_seq = device_i32(seq_of);
  Tensor table = device_i32(f.plan.block_table), indptr = device_i32(f.plan.block_table_indptr);
  cuda::DevicePlanView view{positions.data<int32_t>(), token_seq.data<int32_t>(), table.data<int32_t>(),
                            indptr.data<int32_t>(), 16};
  cuda::DeviceCacheView cv{const_cast<void*>(f.gpu_cache->storage(0).raw()), f.gpu_cache->width(0), true};
  const cuda::GqaShape shape{c.Hq, c.Hkv, c.D, c.Dv, scale};
  Tensor dq = cuda::to_device(q);
  std::set<int64_t> split_counts;
  for (int64_t max_context : {300, 512, 4096, 16384}) {
    const int64_t floats = cuda::decode_partial_floats(3, shape, max_context);
    split_counts.insert(cuda::decode_splits(3, shape, max_context));
    Tensor partials = Tensor::empty_on(Device::kCuda, DType::F32, {std::max<int64_t>(floats, 1)});
    Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {3, c.Hq * c.Dv});
    cuda::launch_attention_decode(dq.data<float>(), cv, view, nullptr, 3, out.data<float>(), shape,
                                  max_context, partials.data<float>());
    EXPECT_LT(rel_err(cuda::to_host(out), ref), 1e-5) << "max_context " << max_context;
  }
  EXPECT_GT(split_counts.size(), 1u);  // the bound did change the launch
}

// The fused combine (the last split CTA of each (query, head group) merges the splits) against the separate
// combine kernel: the same bits, over contexts 1..4097, groups 1/4/8/16, D 64/128/256 (warp kernel), D 96 and
// Dv != D (generic kernel), batch 1 (the most, shortest splits) and mixed batches, with and without a token
// list, launched repeatedly and replayed from a captured CUDA graph (the counters must come back to zero).
TEST_F(CudaAttentionTest, FusedCombineMatchesUnfusedBitForBit) {
  CudaBackend gpu;
  const std::vector<GqaCase> cases = {{8, 8, 64, 64},    {32, 8, 128, 128}, {64, 8, 256, 256},
                                      {16, 2, 128, 128}, {16, 1, 128, 128}, {4, 4, 96, 96},
                                      {8, 2, 128, 64}};
  const std::vector<SeqSpec> batches = {
      {{4096, 1}},
      {{0, 1}},
      {{200, 1}},
      {{0, 1}, {1, 1}, {31, 1}, {32, 1}, {63, 1}, {64, 1}, {256, 1}, {999, 1}, {4096, 1}},
  };
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  for (const GqaCase& c : cases) {
    for (const SeqSpec& seqs : batches) {
      const int32_t bs = 16;
      Filled f = fill(gpu, seqs, bs, c, DType::BF16);
      const int64_t n = f.plan.num_tokens();
      Tensor q = random_f32({n, c.Hq, c.D});
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      const Tensor ref = cpu.attention_gqa(q, *f.cpu_cache, 0, f.plan, c.Hkv, c.D, c.Dv, scale);
      std::vector<int32_t> seq_of(static_cast<size_t>(n)), reversed(static_cast<size_t>(n));
      int32_t longest = 1;
      for (int32_t i = 0; i < n; ++i) {
        seq_of[i] = i;
        reversed[i] = static_cast<int32_t>(n) - 1 - i;
        longest = std::max(longest, f.plan.positions[i] + 1);
      }
      Tensor positions = device_i32(f.plan.positions), token_seq = device_i32(seq_of);
      Tensor table = device_i32(f.plan.block_table), indptr = device_i32(f.plan.block_table_indptr);
      Tensor dtokens = device_i32(reversed);
      cuda::DevicePlanView view{positions.data<int32_t>(), token_seq.data<int32_t>(), table.data<int32_t>(),
                                indptr.data<int32_t>(), bs};
      cuda::DeviceCacheView cv{const_cast<void*>(f.gpu_cache->storage(0).raw()), f.gpu_cache->width(0), true};
      const cuda::GqaShape shape{c.Hq, c.Hkv, c.D, c.Dv, scale};
      Tensor dq = cuda::to_device(q);
      const Tensor zeros = Tensor::zeros(DType::F32, {n, c.Hq * c.Dv});
      for (int64_t max_context : {cuda::attention_max_context_bucket(longest), int64_t{8192}}) {
        for (bool use_list : {false, true}) {
          const int32_t* tokens = use_list ? dtokens.data<int32_t>() : nullptr;
          const std::string what = describe(c, bs, seqs) + " max_context " + std::to_string(max_context) +
                                   (tokens ? " token list" : "") + " splits " +
                                   std::to_string(cuda::decode_splits(n, shape, max_context));
          const int64_t floats = cuda::decode_partial_floats(n, shape, max_context);
          const int64_t slots = cuda::decode_arrival_slots(n, shape, max_context);
          Tensor partials = Tensor::empty_on(Device::kCuda, DType::F32, {std::max<int64_t>(floats, 1)});
          int32_t* arrivals = cuda::decode_arrivals(slots);
          ASSERT_EQ(arrivals != nullptr, slots > 0) << what;
          Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {n, c.Hq * c.Dv});
          cuda::launch_attention_decode(dq.data<float>(), cv, view, tokens, n, out.data<float>(), shape,
                                        max_context, partials.data<float>(), nullptr);
          const Tensor unfused = cuda::to_host(out);
          EXPECT_LT(rel_err(unfused, ref), 1e-5) << what;
          for (int rep = 0; rep < 3; ++rep) {
            Tensor fused = Tensor::empty_on(Device::kCuda, DType::F32, {n, c.Hq * c.Dv});
            cuda::launch_attention_decode(dq.data<float>(), cv, view, tokens, n, fused.data<float>(), shape,
                                          max_context, partials.data<float>(), arrivals);
            EXPECT_TRUE(same_bits(cuda::to_host(fused), unfused)) << what << " launch " << rep;
          }
          // Captured once, replayed three times into a zeroed output.
          Tensor graphed = Tensor::empty_on(Device::kCuda, DType::F32, {n, c.Hq * c.Dv});
          cuda::begin_capture();
          cuda::launch_attention_decode(dq.data<float>(), cv, view, tokens, n, graphed.data<float>(), shape,
                                        max_context, partials.data<float>(), arrivals);
          cuda::GraphHandle graph = cuda::end_capture(true);
          for (int rep = 0; rep < 3; ++rep) {
            cuda::copy_to_device(graphed.raw(), zeros.raw(), zeros.nbytes());
            cuda::launch_graph(graph);
            EXPECT_TRUE(same_bits(cuda::to_host(graphed), unfused)) << what << " replay " << rep;
          }
          cuda::destroy_graph(graph);
          if (slots > 0) {
            std::vector<int32_t> counters(static_cast<size_t>(slots), -1);
            cuda::copy_to_host(counters.data(), arrivals, counters.size() * sizeof(int32_t));
            EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), slots) << what;
          }
        }
      }
    }
  }
}

// The split plan: batch 1 takes more, shorter splits (every SM streams K/V); the count depends on the query
// count only through its next power of two, so eager and graph-padded batches split alike.
TEST_F(CudaAttentionTest, DecodeSplitPlan) {
  const cuda::GqaShape shape{32, 8, 128, 128, 0.1f};
  EXPECT_GE(cuda::decode_splits(1, shape, 256), 8);
  EXPECT_GE(cuda::decode_splits(1, shape, 4096), 32);
  EXPECT_LE(cuda::decode_splits(1, shape, 1 << 20), cuda::kMaxDecodeSplits);
  EXPECT_EQ(cuda::decode_splits(1, shape, 1), 1);
  EXPECT_EQ(cuda::decode_arrival_slots(1, shape, 1), 0);
  for (int64_t n : {3, 5, 9, 33, 65, 129})
    for (int64_t ctx : {256, 4096, 32768})
      EXPECT_EQ(cuda::decode_splits(n, shape, ctx), cuda::decode_splits(cuda::next_pow2(n), shape, ctx));
}

TEST_F(CudaAttentionTest, RopeWriteKvMatchesCpu) {
  CudaBackend gpu;
  const int32_t bs = 16;
  const SeqSpec seqs = {{0, 5}, {4000, 1}, {31, 40}};
  for (auto [Hq, Hkv, D, Dv, R, scaling] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float>{8, 2, 128, 128, 128, 1.0f},
        {4, 4, 64, 64, 64, 1.2f},
        {6, 2, 128, 64, 64, 0.9f}}) {
    RopeTable table;
    table.rope_dim = R;
    table.attention_scaling = scaling;
    for (int64_t i = 0; i < R / 2; ++i)
      table.inv_freq.push_back(std::pow(500000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(R)));
    for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
      for (DType dtype : {DType::BF16, DType::F32}) {
        const int32_t blocks = blocks_for(seqs, bs);
        const BatchPlan plan = make_plan(seqs, bs, blocks);
        const int64_t T = plan.num_tokens(), width = Hkv * (D + Dv);
        const KvLayerSpec spec{KvKind::kFullHistory, width};
        KvCache cpu_cache({spec}, blocks, bs);
        KvCache gpu_cache({spec}, blocks, bs, Device::kCuda, dtype);
        Tensor q = random_f32({T, Hq, D}), k = random_f32({T, Hkv, D}), v = random_f32({T, Hkv * Dv});
        Tensor dq = cuda::to_device(q), dk = cuda::to_device(k), dv = cuda::to_device(v);
        gpu.rope_write_kv(dq, dk, dv, table, layout, gpu_cache, 0, plan);
        cpu.rope_write_kv(q, k, v, table, layout, cpu_cache, 0, plan);
        const std::string what = "D " + std::to_string(D) + " R " + std::to_string(R) +
                                 (layout == RopeLayout::kHalf ? " half " : " interleaved ") +
                                 std::string(dtype_name(dtype));
        EXPECT_LT(rel_err(gpu.to_host(dq), q), 1e-6) << what;
        EXPECT_LT(rel_err(gpu.to_host(dk), k), 1e-6) << what;
        Tensor rows = gpu.to_host(gpu_cache.storage(0));  // float32 either way
        Tensor got = Tensor::empty(DType::F32, {T, width}), want = Tensor::empty(DType::F32, {T, width});
        for (int64_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < width; ++i) {
            got.f32()[t * width + i] = rows.f32()[plan.slot_mapping[t] * width + i];
            want.f32()[t * width + i] = cpu_cache.slot(0, plan.slot_mapping[t])[i];
          }
        EXPECT_LT(rel_err(got, want), dtype == DType::BF16 ? 4e-3 : 1e-6) << what;
      }
    }
  }
}

// ---- Linear layers: GEMV kernels (M <= 8) and the cuBLASLt path (M > 8) ----

// A Linear on both sides: the CPU one holds the bf16 values widened to float32.
struct LinearPair {
  Linear cpu, gpu;
};

class CudaLinearTest : public CudaOpsTest {
 protected:
  LinearPair make_linear(int64_t N, int64_t K, bool bias) {
    LinearPair l;
    auto [bits, w] = as_bf16(random_f32({N, K}));
    l.cpu.weight = w;
    l.gpu.weight = cuda::to_device(bits);
    if (bias) {
      auto [b_bits, b] = as_bf16(random_f32({N}));
      l.cpu.bias = b;
      l.gpu.bias = cuda::to_device(b_bits);
    }
    return l;
  }
  std::pair<MlpWeights, MlpWeights> make_mlp(int64_t H, int64_t I, bool bias, float limit) {
    LinearPair g = make_linear(I, H, bias), u = make_linear(I, H, bias), d = make_linear(H, I, bias);
    MlpWeights c{g.cpu, u.cpu, d.cpu, limit}, w{g.gpu, u.gpu, d.gpu, limit};
    return {c, w};
  }
  static Tensor minus(const Tensor& a, const Tensor& b) {
    Tensor d = a.clone();
    for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] -= b.f32()[i];
    return d;
  }
  // silu(g) * u with the swiglu_limit clamp, on the host.
  static Tensor swiglu(const Tensor& g, const Tensor& u, float limit) {
    Tensor out = Tensor::empty(DType::F32, g.shape());
    for (int64_t i = 0; i < g.numel(); ++i) {
      float gv = g.f32()[i], uv = u.f32()[i];
      if (limit > 0.0f) {
        gv = std::min(gv, limit);
        uv = std::clamp(uv, -limit, limit);
      }
      out.f32()[i] = gv / (1.0f + std::exp(-gv)) * uv;
    }
    return out;
  }
};

// Every kernel shape (and the generic kernel), M = 1..8, with and without bias, norm prologue and
// accumulate; odd N everywhere, K % 8 != 0 and tiny K take the generic kernel.
TEST_F(CudaLinearTest, GemvMatchesCpu) {
  std::vector<cuda::GemvConfig> configs = cuda::gemv_configs(false);
  configs.push_back({});                  // chosen by shape
  configs.push_back({1, 2, 4, 3, true});  // generic kernel
  for (auto [N, K] :
       {std::pair<int64_t, int64_t>{67, 64}, {130, 264}, {33, 100}, {19, 1000}, {40, 7}, {300, 2048}}) {
    for (int64_t M : {1, 2, 3, 5, 8}) {
      const bool bias = (N + M) % 2 == 1, norm = M % 2 == 1, accumulate = M >= 3;
      LinearPair l = make_linear(N, K, bias);
      auto [nw_bits, nw] = as_bf16(random_f32({K}));
      const Tensor x = random_f32({M, K}), y0 = random_f32({M, N});
      Tensor ref = cpu.linear(norm ? cpu.rms_norm(x, nw, 1e-5f) : x, l.cpu);
      if (accumulate) cpu.add_inplace(ref, y0);
      const Tensor dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
      for (const cuda::GemvConfig& c : configs) {
        Tensor y = cuda::to_device(y0);
        const cuda::GemvMatrix mat{l.gpu.weight.data<uint16_t>(),
                                   bias ? l.gpu.bias.data<uint16_t>() : nullptr, y.data<float>(), N};
        cuda::launch_gemv(dx.data<float>(), M, K, &mat, 1, {norm ? dnw.data<uint16_t>() : nullptr, 1e-5f},
                          accumulate, c);
        EXPECT_LT(rel_err(cuda::to_host(y), ref), 1e-5)
            << "M " << M << " N " << N << " K " << K << " bias " << bias << " norm " << norm << " acc "
            << accumulate << " tiles " << c.tiles << " unroll " << c.unroll << " stages " << c.stages
            << " splits " << c.splits << " generic " << c.generic;
      }
    }
  }
  const float* x = nullptr;
  const cuda::GemvMatrix none{};
  EXPECT_THROW(cuda::launch_gemv(x, 9, 64, &none, 1, {}, false), Error);
}

TEST_F(CudaLinearTest, GemvSeveralMatricesInOneLaunch) {
  const int64_t K = 512;
  std::vector<LinearPair> ls = {make_linear(96, K, true), make_linear(17, K, false),
                                make_linear(200, K, true), make_linear(8, K, false)};
  auto [nw_bits, nw] = as_bf16(random_f32({K}));
  const Tensor dnw = cuda::to_device(nw_bits);
  for (int64_t M : {1, 4, 8}) {
    const Tensor x = random_f32({M, K}), dx = cuda::to_device(x);
    const Tensor normed = cpu.rms_norm(x, nw, 1e-6f);
    std::vector<Tensor> ys;
    cuda::GemvMatrix mats[4];
    for (size_t i = 0; i < ls.size(); ++i) {
      ys.push_back(Tensor::empty_on(Device::kCuda, DType::F32, {M, ls[i].gpu.out_features()}));
      mats[i] = {ls[i].gpu.weight.data<uint16_t>(),
                 ls[i].gpu.bias ? ls[i].gpu.bias.data<uint16_t>() : nullptr, ys[i].data<float>(),
                 ls[i].gpu.out_features()};
    }
    cuda::launch_gemv(dx.data<float>(), M, K, mats, 4, {dnw.data<uint16_t>(), 1e-6f}, false);
    for (size_t i = 0; i < ls.size(); ++i)
      EXPECT_LT(rel_err(cuda::to_host(ys[i]), cpu.linear(normed, ls[i].cpu)), 1e-5)
          << "M " << M << " i " << i;
  }
}

TEST_F(CudaLinearTest, GemvSwigluMatchesCpu) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{352, 128}, {45, 72}, {30, 50}}) {
    for (int64_t M : {1, 3, 8}) {
      for (float limit : {0.0f, 3.0f}) {
        const bool norm = M != 3, bias = M != 1;
        LinearPair g = make_linear(N, K, bias), u = make_linear(N, K, bias);
        auto [nw_bits, nw] = as_bf16(random_f32({K}));
        const Tensor x = random_f32({M, K});
        const Tensor xn = norm ? cpu.rms_norm(x, nw, 1e-5f) : x;
        const Tensor ref = swiglu(cpu.linear(xn, g.cpu), cpu.linear(xn, u.cpu), limit);
        const Tensor dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
        std::vector<cuda::GemvConfig> configs = cuda::gemv_configs(true);
        configs.push_back({});
        configs.push_back({2, 1, 4, 3, true});
        for (const cuda::GemvConfig& c : configs) {
          Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {M, N});
          cuda::launch_gemv_swiglu(dx.data<float>(), M, K, g.gpu.weight.data<uint16_t>(),
                                   bias ? g.gpu.bias.data<uint16_t>() : nullptr,
                                   u.gpu.weight.data<uint16_t>(),
                                   bias ? u.gpu.bias.data<uint16_t>() : nullptr, out.data<float>(), N,
                                   {norm ? dnw.data<uint16_t>() : nullptr, 1e-5f}, limit, c);
          // 2e-5: silu(g) * u amplifies the two products' ~5e-6 errors (rel err 1.3e-5 was seen for M 3,
          // N 83, K 1288).
          EXPECT_LT(rel_err(cuda::to_host(out), ref), 2e-5)
              << "M " << M << " N " << N << " K " << K << " limit " << limit << " unroll " << c.unroll
              << " stages " << c.stages << " splits " << c.splits << " generic " << c.generic;
        }
      }
    }
  }
}

// Split-K (s blocks per row tile, last block sums the partials): every kernel shape and split against the
// CPU, with ragged K (not a multiple of the split's columns), N not a multiple of 16, bias, norm and
// accumulate.
TEST_F(CudaLinearTest, GemvSplitKMatchesCpu) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{67, 1288}, {300, 2048}, {19, 4104}, {130, 520}}) {
    for (int64_t M : {1, 3, 8}) {
      const bool bias = (N + M) % 2 == 0, norm = M != 3, accumulate = M >= 3;
      LinearPair l = make_linear(N, K, bias);
      auto [nw_bits, nw] = as_bf16(random_f32({K}));
      const Tensor x = random_f32({M, K}), y0 = random_f32({M, N});
      Tensor ref = cpu.linear(norm ? cpu.rms_norm(x, nw, 1e-5f) : x, l.cpu);
      if (accumulate) cpu.add_inplace(ref, y0);
      const Tensor dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
      for (cuda::GemvConfig c : cuda::gemv_configs(false)) {
        for (int ks : {2, 3, 4, 8, 16}) {
          c.ksplit = ks;
          Tensor y = cuda::to_device(y0);
          const cuda::GemvMatrix mat{l.gpu.weight.data<uint16_t>(),
                                     bias ? l.gpu.bias.data<uint16_t>() : nullptr, y.data<float>(), N};
          cuda::launch_gemv(dx.data<float>(), M, K, &mat, 1, {norm ? dnw.data<uint16_t>() : nullptr, 1e-5f},
                            accumulate, c);
          EXPECT_LT(rel_err(cuda::to_host(y), ref), 1e-5)
              << "M " << M << " N " << N << " K " << K << " bias " << bias << " norm " << norm << " acc "
              << accumulate << " warps " << c.warps << " tiles " << c.tiles << " unroll " << c.unroll
              << " stages " << c.stages << " splits " << c.splits << " ksplit " << ks << " (effective "
              << cuda::resolve_gemv_config(M, K, &N, 1, false, c).ksplit << ")";
        }
      }
    }
  }
}

TEST_F(CudaLinearTest, GemvSplitKSeveralMatricesInOneLaunch) {
  const int64_t K = 1288;
  std::vector<LinearPair> ls = {make_linear(96, K, true), make_linear(17, K, false),
                                make_linear(200, K, true), make_linear(8, K, false)};
  auto [nw_bits, nw] = as_bf16(random_f32({K}));
  const Tensor dnw = cuda::to_device(nw_bits);
  for (int64_t M : {1, 4, 8}) {
    const Tensor x = random_f32({M, K}), dx = cuda::to_device(x);
    const Tensor normed = cpu.rms_norm(x, nw, 1e-6f);
    for (cuda::GemvConfig c :
         {cuda::GemvConfig{1, 2, 4, 2, false, 8, 2}, cuda::GemvConfig{2, 1, 4, 2, false, 8, 3},
          cuda::GemvConfig{1, 2, 4, 2, false, 4, 5}}) {
      std::vector<Tensor> ys;
      cuda::GemvMatrix mats[4];
      for (size_t i = 0; i < ls.size(); ++i) {
        ys.push_back(Tensor::empty_on(Device::kCuda, DType::F32, {M, ls[i].gpu.out_features()}));
        mats[i] = {ls[i].gpu.weight.data<uint16_t>(),
                   ls[i].gpu.bias ? ls[i].gpu.bias.data<uint16_t>() : nullptr, ys[i].data<float>(),
                   ls[i].gpu.out_features()};
      }
      cuda::launch_gemv(dx.data<float>(), M, K, mats, 4, {dnw.data<uint16_t>(), 1e-6f}, false, c);
      for (size_t i = 0; i < ls.size(); ++i)
        EXPECT_LT(rel_err(cuda::to_host(ys[i]), cpu.linear(normed, ls[i].cpu)), 1e-5)
            << "M " << M << " i " << i << " warps " << c.warps << " tiles " << c.tiles << " ksplit "
            << c.ksplit;
    }
  }
}

TEST_F(CudaLinearTest, GemvSplitKSwigluMatchesCpu) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{83, 1288}, {45, 520}}) {
    for (int64_t M : {1, 3, 8}) {
      for (float limit : {0.0f, 3.0f}) {
        const bool norm = M != 3, bias = M != 1;
        LinearPair g = make_linear(N, K, bias), u = make_linear(N, K, bias);
        auto [nw_bits, nw] = as_bf16(random_f32({K}));
        const Tensor x = random_f32({M, K});
        const Tensor xn = norm ? cpu.rms_norm(x, nw, 1e-5f) : x;
        const Tensor ref = swiglu(cpu.linear(xn, g.cpu), cpu.linear(xn, u.cpu), limit);
        const Tensor dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
        for (cuda::GemvConfig c : cuda::gemv_configs(true)) {
          for (int ks : {2, 3, 8}) {
            c.ksplit = ks;
            Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {M, N});
            cuda::launch_gemv_swiglu(dx.data<float>(), M, K, g.gpu.weight.data<uint16_t>(),
                                     bias ? g.gpu.bias.data<uint16_t>() : nullptr,
                                     u.gpu.weight.data<uint16_t>(),
                                     bias ? u.gpu.bias.data<uint16_t>() : nullptr, out.data<float>(), N,
                                     {norm ? dnw.data<uint16_t>() : nullptr, 1e-5f}, limit, c);
            EXPECT_LT(rel_err(cuda::to_host(out), ref), 2e-5)
                << "M " << M << " N " << N << " K " << K << " limit " << limit << " warps " << c.warps
                << " unroll " << c.unroll << " stages " << c.stages << " splits " << c.splits << " ksplit "
                << ks;
          }
        }
      }
    }
  }
}

// A split launch gives the same bits on every launch (whichever block of a tile arrives last) and when
// replayed from a CUDA graph, and leaves the arrival counters zeroed for the next launch; the default
// config gives the same bits as the config it resolves to.
TEST_F(CudaLinearTest, GemvSplitKIsBitIdenticalEagerAndReplayed) {
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  const int64_t M = 4, K = 2056;
  for (auto [N, swiglu] : {std::pair<int64_t, bool>{300, false}, {576, false}, {83, true}}) {
    LinearPair g = make_linear(N, K, true), u = make_linear(N, K, false);
    auto [nw_bits, nw] = as_bf16(random_f32({K}));
    const Tensor x = random_f32({M, K}), y0 = random_f32({M, N});
    const Tensor dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
    Tensor y = cuda::to_device(y0);
    // y = y0, then y += (or, SwiGLU: =) the product: accumulate covers the fix-up's read of y.
    auto reset = [&] { cuda::copy_to_device(y.raw(), y0.raw(), y0.nbytes()); };
    auto launch = [&](cuda::GemvConfig c) {
      if (swiglu) {
        cuda::launch_gemv_swiglu(dx.data<float>(), M, K, g.gpu.weight.data<uint16_t>(),
                                 g.gpu.bias.data<uint16_t>(), u.gpu.weight.data<uint16_t>(), nullptr,
                                 y.data<float>(), N, {dnw.data<uint16_t>(), 1e-5f}, 0.0f, c);
      } else {
        const cuda::GemvMatrix mat{g.gpu.weight.data<uint16_t>(), g.gpu.bias.data<uint16_t>(),
                                   y.data<float>(), N};
        cuda::launch_gemv(dx.data<float>(), M, K, &mat, 1, {dnw.data<uint16_t>(), 1e-5f}, true, c);
      }
    };
    std::vector<cuda::GemvConfig> configs = {
        cuda::GemvConfig{swiglu ? 2 : 1, 2, swiglu ? 3 : 4, 2, false, 8, 4},
        cuda::GemvConfig{2, 1, 4, 2, false, 4, 8}, cuda::GemvConfig{2, 1, 4, 2, false, 8, 1},
        cuda::GemvConfig{2, 1, 4, 2, false, 8, 1, 1}};  // the last: persistent
    configs.push_back(cuda::resolve_gemv_config(M, K, &N, 1, swiglu));
    for (const cuda::GemvConfig& c : configs) {
      const std::string what = "N " + std::to_string(N) + (swiglu ? " swiglu" : "") + " warps " +
                               std::to_string(c.warps) + " tiles " + std::to_string(c.tiles) + " ksplit " +
                               std::to_string(c.ksplit);
      auto run = [&](cuda::GemvConfig cfg) {
        reset();
        launch(cfg);
      };
      run(c);
      const Tensor first = cuda::to_host(y);
      for (int rep = 0; rep < 4; ++rep) {
        run(c);
        EXPECT_TRUE(same_bits(cuda::to_host(y), first)) << what << " launch " << rep;
      }
      cuda::begin_capture();
      launch(c);
      cuda::GraphHandle graph = nullptr;
      ASSERT_NO_THROW(graph = cuda::end_capture(true)) << what;
      for (int rep = 0; rep < 3; ++rep) {
        reset();
        cuda::launch_graph(graph);
        EXPECT_TRUE(same_bits(cuda::to_host(y), first)) << what << " replay " << rep;
      }
      cuda::destroy_graph(graph);
    }
    // The default (auto) config runs what resolve_gemv_config names.
    reset();
    launch({});
    const Tensor automatic = cuda::to_host(y);
    reset();
    launch(configs.back());
    EXPECT_TRUE(same_bits(cuda::to_host(y), automatic))
        << "N " << N << " auto ksplit " << configs.back().ksplit;
  }
}

// The decode launches the GEMV sweep times (Llama-3.1-8B and DeepSeek-V2-Lite) and the persistent
// kernel's bit-identity test runs.
enum class GemvKind { kNorm, kResidual, kSwiglu };
struct GemvSweepShape {
  const char* name;
  std::vector<int64_t> N;  // matrices of one launch (SwiGLU: gate, up)
  int64_t K;
  GemvKind kind;
};
const std::vector<GemvSweepShape>& gemv_sweep_shapes() {
  static const std::vector<GemvSweepShape> shapes = {
      {"l8b qkv", {4096, 1024, 1024}, 4096, GemvKind::kNorm},
      {"l8b o", {4096}, 4096, GemvKind::kResidual},
      {"l8b gate_up", {14336, 14336}, 4096, GemvKind::kSwiglu},
      {"l8b down", {4096}, 14336, GemvKind::kResidual},
      {"l8b lm_head", {128256}, 4096, GemvKind::kNorm},
      {"v2l q+kv_a", {512, 64, 2048, 1024}, 2048, GemvKind::kNorm},  // the attention's one launch (no q_lora)
      {"v2l q", {2048, 1024}, 2048, GemvKind::kNorm},
      {"v2l kv_a", {512, 64}, 2048, GemvKind::kNorm},
      {"v2l o", {2048}, 2048, GemvKind::kResidual},
      {"v2l shared", {2816, 2816}, 2048, GemvKind::kSwiglu},
      {"v2l dense", {10944, 10944}, 2048, GemvKind::kSwiglu},
  };
  return shapes;
}

std::string gemv_config_name(const cuda::GemvConfig& c) {
  return "w" + std::to_string(c.warps) + " t" + std::to_string(c.tiles) + " u" + std::to_string(c.unroll) +
         " s" + std::to_string(c.stages) + " k" + std::to_string(c.ksplit) +
         (c.persist > 0 ? " p" + std::to_string(c.persist) : "");
}

// Copies the bf16 pattern `block` over t (device) again and again; a block length that is not a multiple
// of a row keeps the rows distinct.
void fill_repeating(Tensor& t, const Tensor& block) {
  const int64_t n = t.numel(), b = block.numel();
  for (int64_t i = 0; i < n; i += b)
    cuda::copy_to_device(static_cast<uint16_t*>(t.raw()) + i, block.raw(), std::min(b, n - i) * 2);
}

// The persistent kernel gives the same bits as the per-launch kernel of the same shape (same K order and
// reduction order) on every launch the sweep times, M = 1..8, with every epilogue: RMSNorm, bias,
// accumulate, SwiGLU with and without the clamp. Each persistent config of gemv_configs (1, 2 and 4 blocks
// per SM) walks several row tiles per block on the large shapes.
TEST_F(CudaLinearTest, GemvPersistentIsBitIdenticalToPerLaunch) {
  CudaBackend gpu;  // registers the device allocator
  const Tensor block_bits = as_bf16(random_f32({(int64_t{1} << 22) + 24})).first;
  for (const GemvSweepShape& sh : gemv_sweep_shapes()) {
    const bool swiglu = sh.kind == GemvKind::kSwiglu;
    int64_t n_total = 0;
    for (int64_t n : sh.N) n_total += n;
    Tensor w = Tensor::empty_on(Device::kCuda, DType::BF16, {n_total, sh.K});
    fill_repeating(w, block_bits);
    const Tensor bias = cuda::to_device(as_bf16(random_f32({n_total})).first);
    const Tensor norm_w = cuda::to_device(as_bf16(random_f32({sh.K})).first);
    const int64_t out_cols = swiglu ? sh.N[0] : n_total;
    const int count = swiglu ? 1 : static_cast<int>(sh.N.size());
    for (int64_t M = 1; M <= 8; ++M) {
      const bool with_bias = M % 2 == 1;
      const float limit = swiglu && M % 4 >= 2 ? 3.0f : 0.0f;
      const Tensor x = cuda::to_device(random_f32({M, sh.K}));
      const Tensor y0 = random_f32({M, out_cols});
      Tensor y = cuda::to_device(y0);
      auto run = [&](cuda::GemvConfig cfg) {
        cuda::copy_to_device(y.raw(), y0.raw(), y0.nbytes());
        const uint16_t* base = w.data<uint16_t>();
        const uint16_t* b = with_bias ? bias.data<uint16_t>() : nullptr;
        const cuda::GemvNorm nrm{sh.kind == GemvKind::kResidual ? nullptr : norm_w.data<uint16_t>(), 1e-5f};
        if (swiglu) {
          cuda::launch_gemv_swiglu(x.data<float>(), M, sh.K, base, b, base + sh.N[0] * sh.K,
                                   b ? b + sh.N[0] : nullptr, y.data<float>(), sh.N[0], nrm, limit, cfg);
        } else {
          cuda::GemvMatrix mats[cuda::kGemvMaxMatrices];
          int64_t row = 0, col = 0;
          for (size_t i = 0; i < sh.N.size(); ++i) {
            mats[i] = {base + row * sh.K, b ? b + row : nullptr, y.data<float>() + col, sh.N[i]};
            row += sh.N[i];
            col += M * sh.N[i];
          }
          cuda::launch_gemv(x.data<float>(), M, sh.K, mats, count, nrm, sh.kind == GemvKind::kResidual, cfg);
        }
        return cuda::to_host(y);
      };
      for (cuda::GemvConfig c : cuda::gemv_configs(swiglu)) {
        if (c.persist == 0) continue;
        cuda::GemvConfig plain = c;
        plain.persist = 0;
        plain.ksplit = 1;
        const Tensor want = run(plain), got = run(c);
        ASSERT_EQ(got.nbytes(), want.nbytes());
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
            << sh.name << " M " << M << " bias " << with_bias << " limit " << limit << " "
            << gemv_config_name(c);
      }
    }
  }
}

// The persistent kernel against the CPU with tails: N not a multiple of the tile, K not a multiple of a
// warp iteration's columns, several matrices of one launch, SwiGLU, and more row tiles than blocks (one
// block per SM walks several).
TEST_F(CudaLinearTest, GemvPersistentMatchesCpuWithTails) {
  const int64_t many = 16 * 2 * 132 * 2 + 37;  // > 2 tiles of 32 rows per block on up to 132 SMs
  for (auto [N, K] : {std::pair<int64_t, int64_t>{many, 1000}, {45, 520}, {2050, 1288}}) {
    for (int64_t M : {1, 3, 8}) {
      const bool bias = M != 3, norm = M != 8, accumulate = M == 3;
      LinearPair l = make_linear(N, K, bias);
      auto [nw_bits, nw] = as_bf16(random_f32({K}));
      const Tensor x = random_f32({M, K}), y0 = random_f32({M, N});
      Tensor ref = cpu.linear(norm ? cpu.rms_norm(x, nw, 1e-5f) : x, l.cpu);
      if (accumulate) cpu.add_inplace(ref, y0);
      const Tensor dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
      for (cuda::GemvConfig c : cuda::gemv_configs(false)) {
        if (c.persist == 0) continue;
        Tensor y = cuda::to_device(y0);
        const cuda::GemvMatrix mat{l.gpu.weight.data<uint16_t>(),
                                   bias ? l.gpu.bias.data<uint16_t>() : nullptr, y.data<float>(), N};
        cuda::launch_gemv(dx.data<float>(), M, K, &mat, 1, {norm ? dnw.data<uint16_t>() : nullptr, 1e-5f},
                          accumulate, c);
        EXPECT_LT(rel_err(cuda::to_host(y), ref), 1e-5)
            << "M " << M << " N " << N << " K " << K << " " << gemv_config_name(c);
      }
      // SwiGLU over gate = l and a second matrix of the same shape.
      LinearPair u = make_linear(N, K, bias);
      const Tensor xn = norm ? cpu.rms_norm(x, nw, 1e-5f) : x;
      const float limit = M == 1 ? 3.0f : 0.0f;
      const Tensor sref = swiglu(cpu.linear(xn, l.cpu), cpu.linear(xn, u.cpu), limit);
      for (cuda::GemvConfig c : cuda::gemv_configs(true)) {
        if (c.persist == 0) continue;
        Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {M, N});
        cuda::launch_gemv_swiglu(dx.data<float>(), M, K, l.gpu.weight.data<uint16_t>(),
                                 bias ? l.gpu.bias.data<uint16_t>() : nullptr, u.gpu.weight.data<uint16_t>(),
                                 bias ? u.gpu.bias.data<uint16_t>() : nullptr, out.data<float>(), N,
                                 {norm ? dnw.data<uint16_t>() : nullptr, 1e-5f}, limit, c);
        EXPECT_LT(rel_err(cuda::to_host(out), sref), 2e-5)
            << "swiglu M " << M << " N " << N << " K " << K << " " << gemv_config_name(c);
      }
    }
  }
  // Three matrices of one launch whose tiles a block walks across matrix boundaries.
  const int64_t K = 776;
  std::vector<LinearPair> ls = {make_linear(4100, K, true), make_linear(37, K, false),
                                make_linear(3000, K, true)};
  auto [nw_bits, nw] = as_bf16(random_f32({K}));
  const Tensor dnw = cuda::to_device(nw_bits);
  for (int64_t M : {1, 5}) {
    const Tensor x = random_f32({M, K}), dx = cuda::to_device(x);
    const Tensor normed = cpu.rms_norm(x, nw, 1e-6f);
    for (cuda::GemvConfig c : cuda::gemv_configs(false)) {
      if (c.persist == 0) continue;
      std::vector<Tensor> ys;
      cuda::GemvMatrix mats[3];
      for (size_t i = 0; i < ls.size(); ++i) {
        ys.push_back(Tensor::empty_on(Device::kCuda, DType::F32, {M, ls[i].gpu.out_features()}));
        mats[i] = {ls[i].gpu.weight.data<uint16_t>(),
                   ls[i].gpu.bias ? ls[i].gpu.bias.data<uint16_t>() : nullptr, ys[i].data<float>(),
                   ls[i].gpu.out_features()};
      }
      cuda::launch_gemv(dx.data<float>(), M, K, mats, 3, {dnw.data<uint16_t>(), 1e-6f}, false, c);
      for (size_t i = 0; i < ls.size(); ++i)
        EXPECT_LT(rel_err(cuda::to_host(ys[i]), cpu.linear(normed, ls[i].cpu)), 1e-5)
            << "M " << M << " i " << i << " " << gemv_config_name(c);
    }
  }
}

// Decode GEMV sweep (H200: the lead runs it with --gtest_also_run_disabled_tests): Llama-3.1-8B and
// DeepSeek-V2-Lite decode launches at M = 1 and 4, every compiled two-part kernel shape (warps w, tiles t,
// unroll u, stages s) at every split k, each timed as a CUDA graph of launches over enough weight copies
// to defeat the 50 MB L2. One line per (shape, M): the old default (the shape the launch picks, no split),
// the auto choice (GemvConfig{}: the split model or DSINFER_GEMV_SPLITK), the best measured config, in us
// and % of 4290 GB/s (weight bytes only), and the best persistent config alone. A config "w8 t1 u2 s4 k3"
// is GemvConfig{tiles 1, unroll 2, stages 4, splits 2, generic false, warps 8, ksplit 3}; a trailing "p2"
// is the persistent kernel at most 2 blocks per SM (persist 2). "Old default" and "auto" are the persistent
// choice unless DSINFER_GEMV_PERSISTENT=0.
// DSINFER_GEMV_SWEEP_ALL=1 also prints every config's time.
TEST_F(CudaLinearTest, DISABLED_BenchGemvSweep) {
  CudaBackend gpu;  // registers the device allocator
  using Kind = GemvKind;
  const std::vector<GemvSweepShape>& shapes = gemv_sweep_shapes();
  const double peak_gbs = 4290.0;
  const bool print_all = [] {
    const char* e = std::getenv("DSINFER_GEMV_SWEEP_ALL");
    return e && std::string(e) == "1";
  }();
  auto name_of = gemv_config_name;
  // One host block of small bf16 values, repeated over the device buffers.
  const Tensor block_bits = as_bf16(random_f32({int64_t{1} << 22})).first;
  auto fill = [&](Tensor& t) { fill_repeating(t, block_bits); };
  std::printf("%-12s %2s %7s | %-16s %8s %6s | %-16s %8s %6s | %-16s %8s %6s | %-19s %8s %6s | %s\n", "shape",
              "M", "MB", "old default", "us", "%bw", "auto", "us", "%bw", "best", "us", "%bw",
              "best persistent", "us", "%bw", "old/best");
  for (const GemvSweepShape& sh : shapes) {
    const bool swiglu = sh.kind == Kind::kSwiglu;
    int64_t n_total = 0;
    for (int64_t n : sh.N) n_total += n;
    const double bytes = 2.0 * static_cast<double>(n_total) * static_cast<double>(sh.K);
    const int copies = static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes)));
    std::vector<Tensor> w;  // per copy: all matrices back to back
    for (int c = 0; c < copies; ++c) {
      w.push_back(Tensor::empty_on(Device::kCuda, DType::BF16, {n_total, sh.K}));
      fill(w.back());
    }
    Tensor norm_w = Tensor::empty_on(Device::kCuda, DType::BF16, {sh.K});
    fill(norm_w);
    const int64_t out_cols = swiglu ? sh.N[0] : n_total;
    for (int64_t M : {1, 4}) {
      const Tensor x = cuda::to_device(random_f32({M, sh.K}));
      Tensor y = cuda::to_device(random_f32({M, out_cols}));
      auto call = [&](int c, cuda::GemvConfig cfg) {
        const uint16_t* base = w[c].data<uint16_t>();
        const cuda::GemvNorm nrm{sh.kind == Kind::kResidual ? nullptr : norm_w.data<uint16_t>(), 1e-5f};
        if (swiglu) {
          cuda::launch_gemv_swiglu(x.data<float>(), M, sh.K, base, nullptr, base + sh.N[0] * sh.K, nullptr,
                                   y.data<float>(), sh.N[0], nrm, 0.0f, cfg);
          return;
        }
        cuda::GemvMatrix mats[cuda::kGemvMaxMatrices];
        int64_t row = 0, col = 0;
        for (size_t i = 0; i < sh.N.size(); ++i) {
          mats[i] = {base + row * sh.K, nullptr, y.data<float>() + col, sh.N[i]};
          row += sh.N[i];
          col += M * sh.N[i];
        }
        cuda::launch_gemv(x.data<float>(), M, sh.K, mats, static_cast<int>(sh.N.size()), nrm,
                          sh.kind == Kind::kResidual, cfg);
      };
      auto time_us = [&](cuda::GemvConfig cfg) {
        const double ms = cuda::time_graph_ms(
            [&] {
              for (int c = 0; c < copies; ++c) call(c, cfg);
            },
            10);
        return 1e3 * ms / copies;
      };
      auto pct = [&](double us) { return 100.0 * bytes / (us * 1e-6) / 1e9 / peak_gbs; };
      const int count = swiglu ? 1 : static_cast<int>(sh.N.size());
      const cuda::GemvConfig automatic = cuda::resolve_gemv_config(M, sh.K, sh.N.data(), count, swiglu);
      cuda::GemvConfig old = automatic;
      old.ksplit = 1;
      const double old_us = time_us(old), auto_us = time_us({});
      std::string best_name = name_of(old), best_persist_name = "-";
      double best_us = old_us, best_persist_us = 1e30;
      for (cuda::GemvConfig c : cuda::gemv_configs(swiglu)) {
        if (c.splits != 2) continue;  // three parts: exact but slower, never the default
        int last = 0;
        for (int ks : {1, 2, 3, 4, 6, 8, 12, 16}) {
          c.ksplit = ks;
          c.ksplit = cuda::resolve_gemv_config(M, sh.K, sh.N.data(), count, swiglu, c).ksplit;
          if (c.ksplit == last) continue;  // clamped to a split already timed
          last = c.ksplit;
          const double us = time_us(c);
          if (print_all)
            std::printf("  %-12s %2lld  %-16s %8.2f %5.1f%%\n", sh.name, static_cast<long long>(M),
                        name_of(c).c_str(), us, pct(us));
          if (us < best_us) {
            best_us = us;
            best_name = name_of(c);
          }
          if (c.persist > 0 && us < best_persist_us) {
            best_persist_us = us;
            best_persist_name = name_of(c);
          }
        }
      }
      std::printf(
          "%-12s %2lld %7.1f | %-16s %8.2f %5.1f%% | %-16s %8.2f %5.1f%% | %-16s %8.2f %5.1f%% | %-19s %8.2f "
          "%5.1f%% | %.2fx\n",
          sh.name, static_cast<long long>(M), bytes / 1e6, name_of(old).c_str(), old_us, pct(old_us),
          name_of(automatic).c_str(), auto_us, pct(auto_us), best_name.c_str(), best_us, pct(best_us),
          best_persist_name.c_str(), best_persist_us, pct(best_persist_us), old_us / best_us);
      std::fflush(stdout);
    }
  }
}

// The CudaBackend linear ops against the CPU backend's (default, composed) ones: GEMV rows (M <= 8) to the
// hi/lo activation split (~5e-6 a stage, two stages in the MLP), cuBLASLt rows (M > 8) to the bf16
// activation rounding (split: ~1e-5).
TEST_F(CudaLinearTest, BackendLinearOpsMatchCpu) {
  CudaBackend plain, split(CudaBackendOptions{true});
  const int64_t H = 256, I = 344;
  LinearPair q = make_linear(128, H, true), k = make_linear(40, H, true), v = make_linear(40, H, false);
  LinearPair o = make_linear(H, 128, false);
  auto [nw_bits, nw] = as_bf16(random_f32({H}));
  const Tensor dnw = cuda::to_device(nw_bits);
  for (int64_t M : {1, 2, 5, 8, 9, 40, 130}) {
    const double tol_plain = M <= 8 ? 3e-5 : 1e-2, tol_split = M <= 8 ? 3e-5 : 1e-4;
    for (CudaBackend* gpu : {&plain, &split}) {
      const double tol = gpu == &plain ? tol_plain : tol_split;
      const std::string what = "M " + std::to_string(M) + (gpu == &plain ? " bf16" : " split");
      const Tensor x = random_f32({M, H}), dx = cuda::to_device(x);
      // norm_linears (q, k, v) and linear.
      const std::vector<Tensor> ref = cpu.norm_linears(x, nw, 1e-5f, {&q.cpu, &k.cpu, &v.cpu});
      const std::vector<Tensor> out = gpu->norm_linears(dx, dnw, 1e-5f, {&q.gpu, &k.gpu, &v.gpu});
      ASSERT_EQ(out.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(out[i].shape(), ref[i].shape());
        EXPECT_LT(rel_err(gpu->to_host(out[i]), ref[i]), tol) << what << " norm_linears " << i;
      }
      EXPECT_LT(rel_err(gpu->to_host(gpu->linear(dx, q.gpu)), cpu.linear(x, q.cpu)), tol)
          << what << " linear";
      // linear_residual: compare the added part.
      const Tensor a = random_f32({M, 128}), r0 = random_f32({M, H});
      Tensor r = cuda::to_device(r0), rc = r0.clone();
      gpu->linear_residual(cuda::to_device(a), o.gpu, r);
      cpu.linear_residual(a, o.cpu, rc);
      EXPECT_LT(rel_err(minus(gpu->to_host(r), r0), minus(rc, r0)), tol) << what << " linear_residual";
      // norm_mlp_residual and mlp, with and without swiglu_limit and biases.
      for (float limit : {0.0f, 20.0f}) {
        auto [mc, mg] = make_mlp(H, I, limit > 0.0f, limit);
        Tensor h = cuda::to_device(r0), hc = r0.clone();
        gpu->norm_mlp_residual(h, dnw, 1e-5f, mg);
        cpu.norm_mlp_residual(hc, nw, 1e-5f, mc);
        EXPECT_LT(rel_err(minus(gpu->to_host(h), r0), minus(hc, r0)), tol)
            << what << " norm_mlp_residual limit " << limit;
        EXPECT_LT(rel_err(gpu->to_host(gpu->mlp(dx, mg)), cpu.mlp(x, mc)), tol)
            << what << " mlp limit " << limit;
      }
    }
  }
}

// cuBLASLt with bf16 activations, accumulate (beta = 1) and the fallback kernel for unaligned operands.
TEST_F(CudaLinearTest, GemmBf16AccumulatesAndFallsBack) {
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{16, 64, 64}, {300, 130, 256}}) {
    auto [x_bits, x] = as_bf16(random_f32({M, K}));
    LinearPair l = make_linear(N, K, true);
    const Tensor y0 = random_f32({M, N});
    Tensor ref = cpu.linear(x, l.cpu);
    cpu.add_inplace(ref, y0);
    const Tensor dx = cuda::to_device(x_bits);
    Tensor y = cuda::to_device(y0);
    cuda::gemm_bf16(dx.data<uint16_t>(), l.gpu.weight.data<uint16_t>(), l.gpu.bias.data<uint16_t>(),
                    y.data<float>(), M, N, K, true);
    EXPECT_LT(rel_err(cuda::to_host(y), ref), 1e-5) << M << "x" << N << "x" << K;
    // Rows 1.. of x as a [M - 1, K] operand: not 256-byte aligned, so the reference kernel runs.
    Tensor y1 = Tensor::empty_on(Device::kCuda, DType::F32, {M - 1, N});
    cuda::gemm_bf16(dx.data<uint16_t>() + K, l.gpu.weight.data<uint16_t>(), nullptr, y1.data<float>(), M - 1,
                    N, K, false);
    const Tensor ref1 = cpu.linear(x, Linear{l.cpu.weight, Tensor()});
    const Tensor got1 = cuda::to_host(y1);
    double d = 0, n = 0;
    for (int64_t i = 0; i < (M - 1) * N; ++i) {
      d += std::pow(double(got1.f32()[i]) - ref1.f32()[N + i], 2);
      n += std::pow(double(ref1.f32()[N + i]), 2);
    }
    EXPECT_LT(std::sqrt(d / n), 1e-5) << "unaligned " << M << "x" << N << "x" << K;
  }
  cuda::gemm_reserve(4096, 4096);  // sizing the scratch up front works and later calls still run
  CudaBackend plain;
  LinearPair l = make_linear(64, 96, false);
  const Tensor x = random_f32({20, 96});
  EXPECT_LT(rel_err(plain.to_host(plain.linear(cuda::to_device(x), l.gpu)), cpu.linear(x, l.cpu)), 1e-2);
}

TEST_F(CudaOpsTest, FactorySelectsCuda) {
  EXPECT_EQ(make_backend("cuda")->name(), "cuda");
  EXPECT_EQ(make_backend("auto")->name(), "cuda");
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
}

#else

TEST(CudaOpsTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
