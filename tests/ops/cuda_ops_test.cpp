// CUDA kernels and CudaBackend ops against the CPU reference on random inputs (runs where a GPU is visible;
// CI compiles it and skips). Weights are bf16 on the GPU; the CPU op gets the same bf16 values widened to
// float32, so elementwise results agree to float32 rounding and GEMMs to the activation rounding
// (GEMV kernels, 2 or 3 bf16 parts per activation: ~5e-6 / ~1e-7; hi/lo split GEMMs: ~1e-5; plain bf16
// activations: ~1e-3).
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/sampling_kernels.h"
#include "cuda_ops_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda_ops_test::CudaOpsTest;

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

// The embedding and row gathers at widths that take the vector paths (several rounds of pieces: 8200 = 1025
// pieces of 8, one more than a round) and the scalar ones (H not a multiple of 8 or 4), equal to the CPU's to
// the bit; a gather of every row in order gives x's values (the CUDA backend hands back x itself).
TEST_F(CudaOpsTest, EmbedAndGatherAtEveryRowWidth) {
  CudaBackend gpu;
  for (int64_t H : {96, 100, 4098, 8200, 16416}) {
    SCOPED_TRACE("H " + std::to_string(H));
    auto [tab_bits, tab] = as_bf16(random_f32({40, H}));
    const std::vector<int32_t> ids = {3, 39, 0, 17, 17};
    EXPECT_EQ(rel_err(gpu.to_host(gpu.embed(gpu.prepare_weight(tab), ids)), cpu.embed(tab, ids)), 0.0);
    const Tensor a = random_f32({5, H});
    const Tensor da = cuda::to_device(a);
    const std::vector<int32_t> rows = {4, 0, 4, 2};
    EXPECT_EQ(rel_err(gpu.to_host(gpu.gather_rows(da, rows)), cpu.gather_rows(a, rows)), 0.0);
    EXPECT_EQ(rel_err(gpu.to_host(gpu.gather_rows(da, {0, 1, 2, 3, 4})), a), 0.0);
  }
}

// The kernel that reads page-locked host memory (the small per-step uploads, host_reads.h) copies every byte:
// sizes around its 16-byte pieces and rounds, an unaligned source or destination (the byte path), up to its
// limit; bytes past the end stay untouched; larger transfers are refused.
TEST_F(CudaOpsTest, CopyFromHostByKernelCopiesEveryByte) {
  CudaBackend gpu;
  const size_t cap = cuda::kHostReadMaxBytes + 64;
  char* pinned = static_cast<char*>(cuda::host_alloc_pinned(cap));
  ASSERT_NE(pinned, nullptr);
  Tensor dev = Tensor::empty_on(Device::kCuda, DType::U8, {static_cast<int64_t>(cap)});
  std::vector<char> sentinel(cap, 0x5a), back(cap);
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4099}, size_t{16400},
                       cuda::kHostReadMaxBytes - 7}) {
    for (size_t src_off : {size_t{0}, size_t{3}}) {
      for (size_t dst_off : {size_t{0}, size_t{16}, size_t{5}}) {
        for (size_t i = 0; i < bytes; ++i) pinned[src_off + i] = static_cast<char>(rng() & 0xff);
        cuda::copy_to_device(dev.raw(), sentinel.data(), cap);
        cuda::copy_from_host_by_kernel(static_cast<char*>(dev.raw()) + dst_off, pinned + src_off, bytes);
        cuda::copy_to_host(back.data(), dev.raw(), cap);
        const std::string what = std::to_string(bytes) + " bytes from +" + std::to_string(src_off) + " to +" +
                                 std::to_string(dst_off);
        EXPECT_EQ(std::memcmp(back.data() + dst_off, pinned + src_off, bytes), 0) << what;
        EXPECT_EQ(back[dst_off + bytes], 0x5a) << what;
        if (dst_off > 0) {
          EXPECT_EQ(back[dst_off - 1], 0x5a) << what;
        }
      }
    }
  }
  EXPECT_THROW(cuda::copy_from_host_by_kernel(dev.raw(), pinned, cuda::kHostReadMaxBytes + 1), Error);
  cuda::host_free_pinned(pinned);
}

// The upload kernel's feed (HostReadFeed): after the copy, each token whose previous-sampling row is one of
// the call's rows takes that row's token (0 when the token is outside the vocabulary, an error row's -1
// included); the other tokens keep their copied ids; more tokens than the block has threads.
TEST_F(CudaOpsTest, CopyFromHostByKernelFeedsSampledTokens) {
  CudaBackend gpu;
  const int32_t T = 300, R = 4, vocab = 1000;
  const size_t ids_at = 0, prev_at = 2048, bytes = prev_at + 4 * T;
  char* pinned = static_cast<char*>(cuda::host_alloc_pinned(bytes));
  ASSERT_NE(pinned, nullptr);
  std::vector<int32_t> ids(T), prev(T);
  for (int32_t t = 0; t < T; ++t) {
    ids[t] = static_cast<int32_t>(rng() % vocab);
    prev[t] = static_cast<int32_t>(rng() % (R + 3)) - 1;  // -1 .. R + 1: known tokens and rows out of range
  }
  std::memcpy(pinned + ids_at, ids.data(), 4 * T);
  std::memcpy(pinned + prev_at, prev.data(), 4 * T);
  std::vector<cuda::SampleRowResult> results(R);
  const int32_t tokens[R] = {5, -1, 2000, 999};
  for (int32_t r = 0; r < R; ++r) results[r].token = tokens[r];
  Tensor dev_results =
      Tensor::empty_on(Device::kCuda, DType::U8, {static_cast<int64_t>(R * sizeof(results[0]))});
  cuda::copy_to_device(dev_results.raw(), results.data(), R * sizeof(results[0]));
  Tensor dev = Tensor::empty_on(Device::kCuda, DType::U8, {static_cast<int64_t>(bytes)});
  cuda::HostReadFeed feed;
  feed.token_ids_at = ids_at;
  feed.prev_rows_at = prev_at;
  feed.tokens = T;
  feed.results = static_cast<const cuda::SampleRowResult*>(dev_results.raw());
  feed.rows = R;
  feed.vocab = vocab;
  cuda::copy_from_host_by_kernel(dev.raw(), pinned, bytes, &feed);
  std::vector<int32_t> got(T), got_prev(T);
  cuda::copy_to_host(got.data(), static_cast<char*>(dev.raw()) + ids_at, 4 * T);
  cuda::copy_to_host(got_prev.data(), static_cast<char*>(dev.raw()) + prev_at, 4 * T);
  EXPECT_EQ(got_prev, prev);
  int fed = 0;
  for (int32_t t = 0; t < T; ++t) {
    const int32_t r = prev[t];
    const bool row = r >= 0 && r < R;
    const int32_t want = !row ? ids[t] : tokens[r] >= 0 && tokens[r] < vocab ? tokens[r] : 0;
    EXPECT_EQ(got[t], want) << "token " << t << ", row " << r;
    fed += row ? 1 : 0;
  }
  EXPECT_GT(fed, 100);
  // The feed's arrays must lie inside the copied bytes.
  feed.prev_rows_at = bytes - 8;
  EXPECT_THROW(cuda::copy_from_host_by_kernel(dev.raw(), pinned, bytes, &feed), Error);
  cuda::host_free_pinned(pinned);
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
  // The device plan of f.plan (token i of sequence token_seq[i]) and its cache, as the decode kernels take
  // them; the tensors live as long as this.
  struct DeviceViews {
    Tensor positions, token_seq, table, indptr;
    cuda::DevicePlanView plan;
    cuda::DeviceCacheView cache;
  };
  static DeviceViews device_views(const Filled& f, const std::vector<int32_t>& token_seq, int32_t bs) {
    DeviceViews d{device_i32(f.plan.positions),
                  device_i32(token_seq),
                  device_i32(f.plan.block_table),
                  device_i32(f.plan.block_table_indptr),
                  {},
                  {}};
    d.plan = {d.positions.data<int32_t>(), d.token_seq.data<int32_t>(), d.table.data<int32_t>(),
              d.indptr.data<int32_t>(), bs};
    d.cache = {const_cast<void*>(f.gpu_cache->storage(0).raw()), f.gpu_cache->width(0), true};
    return d;
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
  const DeviceViews dv = device_views(f, {0, 1, 2}, 16);
  const cuda::DevicePlanView& view = dv.plan;
  const cuda::DeviceCacheView& cv = dv.cache;
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
  const bool cluster_default = cuda::decode_cluster_merge();
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
      Tensor dtokens = device_i32(reversed);
      const DeviceViews dv = device_views(f, seq_of, bs);
      const cuda::DevicePlanView& view = dv.plan;
      const cuda::DeviceCacheView& cv = dv.cache;
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
          // The last arrival merges, or (Hopper, 2..8 splits) the splits merge as one cluster.
          for (bool cluster : {false, true}) {
            cuda::decode_set_cluster_merge(cluster);
            const std::string merge = cluster ? " cluster merge" : " arrival merge";
            for (int rep = 0; rep < 3; ++rep) {
              Tensor fused = Tensor::empty_on(Device::kCuda, DType::F32, {n, c.Hq * c.Dv});
              cuda::launch_attention_decode(dq.data<float>(), cv, view, tokens, n, fused.data<float>(), shape,
                                            max_context, partials.data<float>(), arrivals);
              EXPECT_TRUE(same_bits(cuda::to_host(fused), unfused)) << what << merge << " launch " << rep;
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
              EXPECT_TRUE(same_bits(cuda::to_host(graphed), unfused)) << what << merge << " replay " << rep;
            }
            cuda::destroy_graph(graph);
          }
          cuda::decode_set_cluster_merge(cluster_default);
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

// With GEMV stamps on, the decode warp kernel records every CTA's timeline in a stamp slot (a launch of 1
// row and K = D, gemv_stamps.h) and computes the same bits: a batch-1 decode that runs its splits as one
// cluster, including splits past the context.
TEST_F(CudaAttentionTest, DecodeStampsRecordEveryCtaWithTheSameBits) {
  CudaBackend gpu;
  const GqaCase c{32, 8, 128, 128};
  const SeqSpec seqs = {{150, 1}};
  const int32_t bs = 16;
  Filled f = fill(gpu, seqs, bs, c, DType::BF16);
  const int64_t n = f.plan.num_tokens();
  const Tensor q = random_f32({n, c.Hq, c.D});
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  const DeviceViews dv = device_views(f, {0}, bs);
  const cuda::DevicePlanView& view = dv.plan;
  const cuda::DeviceCacheView& cv = dv.cache;
  const cuda::GqaShape shape{c.Hq, c.Hkv, c.D, c.Dv, scale};
  const int64_t max_context = 256;  // 8 splits of 32: the last three start past the 151 positions
  const int64_t splits = cuda::decode_splits(n, shape, max_context);
  ASSERT_GT(splits * 32, 151) << "some split should start past the context";
  Tensor dq = cuda::to_device(q);
  Tensor partials = Tensor::empty_on(
      Device::kCuda, DType::F32, {std::max<int64_t>(cuda::decode_partial_floats(n, shape, max_context), 1)});
  int32_t* arrivals = cuda::decode_arrivals(cuda::decode_arrival_slots(n, shape, max_context));
  ASSERT_NE(arrivals, nullptr);
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {n, c.Hq * c.Dv});
  auto run = [&] {
    cuda::launch_attention_decode(dq.data<float>(), cv, view, nullptr, n, out.data<float>(), shape,
                                  max_context, partials.data<float>(), arrivals);
    return cuda::to_host(out);
  };
  const Tensor want = run();
  ASSERT_TRUE(cuda::enable_gemv_stamps(2));
  const Tensor got = run();
  const std::vector<cuda::GemvStampLaunch> launches = cuda::read_gemv_stamps();
  cuda::disable_gemv_stamps();
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0);
  ASSERT_EQ(launches.size(), 1u);
  const cuda::GemvStampLaunch& l = launches[0];
  EXPECT_EQ(l.rows, 1);
  EXPECT_EQ(l.K, c.D);
  // One CTA per (query, head chunk, split): head chunks of 1 (batch 1) to G heads.
  EXPECT_EQ(l.grid % splits, 0);
  EXPECT_GE(l.grid, n * c.Hkv * splits);
  EXPECT_LE(l.grid, n * c.Hq * splits);
  ASSERT_EQ(static_cast<int64_t>(l.blocks.size()), l.grid);
  for (size_t i = 0; i < l.blocks.size(); ++i) {
    const cuda::GemvStampBlock& s = l.blocks[i];
    ASSERT_GT(s.t[cuda::kStampStart], 0u) << "CTA " << i << " has no stamps";
    for (int p = 1; p < cuda::kStampPoints; ++p)
      EXPECT_LE(s.t[p - 1], s.t[p]) << "CTA " << i << " point " << p;
  }
  EXPECT_EQ(std::memcmp(run().raw(), want.raw(), want.nbytes()), 0);  // the plain instance again
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
