// CudaBackend's DeepSeek-V4 ops against the CPU reference on random inputs: the hyper-connections (expand,
// pre with Sinkhorn, post, head) at the tiny fixture's and V4-Flash's widths, the hash-routed experts'
// weights under each scoring function, the compressor's pooling (CSA overlap and HCA) and compressed-row
// writes, the indexer's top-k over compressed keys (the CPU set to the lowest-position tie rule the GPU
// follows) and the sliding-window + compressed attention with sinks (all rows, selections with skipped
// entries, empty selections). Runs where a GPU is visible; CI compiles it and skips. Cached rows are
// bf16-representable so both backends read the same values.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/v4_kernels.h"
#include "cuda_deepseek_test_util.h"
#include "index_selection_check.h"
#include "kv/kv_cache.h"
#include "model/arch/deepseek_v4_compressor.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

// Random hyper-connection weights for n streams of H values (fn [(2 + n) n, n H], base, scale [3]) on the
// host.
HyperConnWeights random_hc(CudaDeepseekOpsTest& test, int64_t n, int64_t H) {
  const int64_t M = (2 + n) * n;
  return HyperConnWeights{test.random_bf16_values({M, n * H}, 0.05f), test.random_bf16_values({M}, 0.5f),
                          test.random_bf16_values({3}, 0.5f)};
}

// The bf16 GPU copy of every layer of a host cache (whose values are bf16-representable).
KvCache gpu_copy(const KvCache& host) {
  std::vector<KvLayerSpec> layers;
  for (int64_t l = 0; l < host.num_layers(); ++l) layers.push_back(host.layer(l));
  KvCache gpu(layers, host.num_blocks(), host.block_size(), Device::kCuda, DType::BF16);
  for (int64_t l = 0; l < host.num_layers(); ++l) {
    const Tensor bits = CudaDeepseekOpsTest::to_bf16_bits(host.storage(l));
    cuda::copy_to_device(const_cast<void*>(gpu.storage(l).raw()), bits.raw(), bits.nbytes());
  }
  return gpu;
}

// Fills every slot of layer `l` with bf16-representable normal values.
void fill_layer(KvCache& cache, int64_t l, CudaDeepseekOpsTest& test, float sd = 1.0f) {
  const int64_t slots = cache.num_blocks() * cache.block_size(), W = cache.width(l);
  const Tensor v = test.random_bf16_values({slots, W}, sd);
  std::copy(v.f32(), v.f32() + v.numel(), cache.slot(l, 0));
}

// Blocks for the scrambled plan of `seqs` (make_plan's block order needs a count not divisible by 7).
int32_t blocks_for(const std::vector<std::pair<int32_t, int32_t>>& seqs, int32_t bs) {
  int32_t blocks = 2;
  for (auto [cached, fresh] : seqs) blocks += (cached + fresh + bs - 1) / bs;
  while (blocks % 7 == 0) ++blocks;
  return blocks;
}

HyperConnWeights device_hc(const HyperConnWeights& w) {
  return {cuda::to_device(w.fn), cuda::to_device(w.base), cuda::to_device(w.scale)};
}

TEST_F(CudaDeepseekOpsTest, HyperConnectionsMatchCpu) {
  CudaBackend gpu;
  // (tokens, streams, hidden): the tiny fixture, a prefill, V4-Flash's width, many streams (Sinkhorn in
  // shared memory; up to 5 streams it runs in registers).
  for (auto [T, n, H] : {std::tuple<int64_t, int64_t, int64_t>{1, 4, 64},
                         {37, 4, 64},
                         {3, 4, 4096},
                         {5, 2, 300},
                         {2, 16, 96},
                         {2, 3, 75}}) {  // n * H odd: the mixing logits' one-value loads
    SCOPED_TRACE("T " + std::to_string(T) + " n " + std::to_string(n) + " H " + std::to_string(H));
    const Tensor x = random_bf16_values({T, H});
    const Tensor streams = random_bf16_values({T, n, H});
    const HyperConnWeights w = random_hc(*this, n, H);
    const HyperConnWeights wd = device_hc(w);

    const Tensor expanded = gpu.to_host(gpu.hc_expand(cuda::to_device(x), n));
    const Tensor expanded_ref = cpu.hc_expand(x, n);
    ASSERT_EQ(expanded.shape(), expanded_ref.shape());
    EXPECT_EQ(rel_err(expanded, expanded_ref), 0.0);

    Tensor post_ref, comb_ref, post, comb;
    const Tensor pre_ref = cpu.hc_pre(streams, w, 20, 1e-6f, 1e-6f, &post_ref, &comb_ref);
    const Tensor pre = gpu.to_host(gpu.hc_pre(cuda::to_device(streams), wd, 20, 1e-6f, 1e-6f, &post, &comb));
    ASSERT_EQ(pre.shape(), pre_ref.shape());
    ASSERT_EQ(comb.shape(), comb_ref.shape());
    EXPECT_LT(rel_err(pre, pre_ref), 1e-5);
    EXPECT_LT(rel_err(gpu.to_host(post), post_ref), 1e-5);
    EXPECT_LT(rel_err(gpu.to_host(comb), comb_ref), 1e-5);

    const Tensor y = random_bf16_values({T, H});
    const Tensor out_ref = cpu.hc_post(streams, y, post_ref, comb_ref);
    const Tensor out = gpu.to_host(gpu.hc_post(cuda::to_device(streams), cuda::to_device(y),
                                               cuda::to_device(post_ref), cuda::to_device(comb_ref)));
    ASSERT_EQ(out.shape(), out_ref.shape());
    EXPECT_LT(rel_err(out, out_ref), 1e-6);

    HyperConnWeights head{random_bf16_values({n, n * H}, 0.05f), random_bf16_values({n}, 0.5f),
                          random_bf16_values({1}, 0.5f)};
    const Tensor head_ref = cpu.hc_head(streams, head, 1e-6f, 1e-6f);
    const Tensor head_out = gpu.to_host(gpu.hc_head(cuda::to_device(streams), device_hc(head), 1e-6f, 1e-6f));
    ASSERT_EQ(head_out.shape(), head_ref.shape());
    EXPECT_LT(rel_err(head_out, head_ref), 1e-5);
  }
}

// Float32 tensors with the same bits (sizes first).
void expect_same_bits(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    differ += static_cast<const uint32_t*>(a.raw())[i] != static_cast<const uint32_t*>(b.raw())[i];
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.numel() << " values differ";
}

// hc_post_pre where the one-launch form is off or does not take the shape (the Backend's composition), with
// its results written over its inputs as the model does: against hc_post then hc_pre on the GPU, bit for bit,
// and against the CPU.
TEST_F(CudaDeepseekOpsTest, HyperConnPostPreEqualsPostThenPre) {
  CudaBackendOptions options;
  options.hc_fused = false;  // (HyperConnFusedEqualsSeparateLaunches checks the one-launch form)
  CudaBackend gpu(options);
  // (tokens, streams, hidden): decode and prefill at V4-Flash's width, the tiny fixture's, many streams,
  // hidden % 4 != 0 with n * hidden % 4 == 0 and n * hidden odd (one value a load).
  for (auto [T, n, H] : {std::tuple<int64_t, int64_t, int64_t>{1, 4, 4096},
                         {8, 4, 4096},
                         {37, 4, 64},
                         {2, 16, 96},
                         {2, 4, 75},
                         {2, 3, 75}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " n " + std::to_string(n) + " H " + std::to_string(H));
    const Tensor streams = random_bf16_values({T, n, H});
    const Tensor y = random_bf16_values({T, H});
    const HyperConnWeights w0 = random_hc(*this, n, H), w1 = random_hc(*this, n, H);
    const HyperConnWeights w0d = device_hc(w0), w1d = device_hc(w1);

    // The previous sublayer's post and comb.
    Tensor post0, comb0;
    gpu.hc_pre(cuda::to_device(streams), w0d, 20, 1e-6f, 1e-6f, &post0, &comb0);
    // Unfused.
    const Tensor h = cuda::to_device(streams), yd = cuda::to_device(y);
    const Tensor h_ref = gpu.hc_post(h, yd, post0, comb0);
    Tensor post_ref, comb_ref;
    const Tensor x_ref = gpu.hc_pre(h_ref, w1d, 20, 1e-6f, 1e-6f, &post_ref, &comb_ref);
    // Fused, its outputs replacing its inputs.
    Tensor hf = cuda::to_device(streams), post = post0, comb = comb0;
    const Tensor x = gpu.hc_post_pre(hf, yd, post, comb, w1d, 20, 1e-6f, 1e-6f, &hf, &post, &comb);
    expect_same_bits(gpu.to_host(hf), gpu.to_host(h_ref), "streams");
    expect_same_bits(gpu.to_host(x), gpu.to_host(x_ref), "collapsed");
    expect_same_bits(gpu.to_host(post), gpu.to_host(post_ref), "post");
    expect_same_bits(gpu.to_host(comb), gpu.to_host(comb_ref), "comb");

    // The CPU's (Backend's default: the two ops) from the same post and comb.
    Tensor h_cpu = streams, post_cpu = gpu.to_host(post0), comb_cpu = gpu.to_host(comb0);
    const Tensor x_cpu =
        cpu.hc_post_pre(h_cpu, y, post_cpu, comb_cpu, w1, 20, 1e-6f, 1e-6f, &h_cpu, &post_cpu, &comb_cpu);
    EXPECT_LT(rel_err(gpu.to_host(hf), h_cpu), 1e-6);
    EXPECT_LT(rel_err(gpu.to_host(x), x_cpu), 1e-5);
    EXPECT_LT(rel_err(gpu.to_host(post), post_cpu), 1e-5);
    EXPECT_LT(rel_err(gpu.to_host(comb), comb_cpu), 1e-5);
  }
  // Mismatched shapes are refused with the op named.
  const Tensor h = cuda::to_device(random_bf16_values({2, 4, 8}));
  HyperConnWeights wd = device_hc(
      HyperConnWeights{random_bf16_values({24, 32}), random_bf16_values({24}), random_bf16_values({3})});
  Tensor post, comb, hs;
  gpu.hc_pre(h, wd, 20, 1e-6f, 1e-6f, &post, &comb);
  const Tensor short_y = cuda::to_device(random_bf16_values({2, 7}));
  EXPECT_THROW(gpu.hc_post_pre(h, short_y, post, comb, wd, 20, 1e-6f, 1e-6f, &hs, &post, &comb), Error);
}

// The one-launch pre-step (CudaBackendOptions::hc_fused: a thread block cluster per token) against the
// separate launches on the GPU and against the CPU: hc_pre alone and after the write-back (hc_post_pre), at
// V4-Flash's width and narrower ones it takes, and shapes it leaves to the separate launches (more streams,
// H % 32 != 0). The new streams equal hc_post's bit for bit; the collapse, post and comb differ by the mixes'
// summation order only.
TEST_F(CudaDeepseekOpsTest, HyperConnFusedEqualsSeparateLaunches) {
  CudaBackendOptions fused_options, plain_options;
  fused_options.hc_fused = true;
  plain_options.hc_fused = false;
  CudaBackend fused(fused_options), plain(plain_options);
  for (auto [T, n, H] : {std::tuple<int64_t, int64_t, int64_t>{1, 4, 4096},
                         {8, 4, 4096},
                         {3, 4, 64},
                         {2, 4, 2080},
                         {2, 16, 96},
                         {2, 4, 75}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " n " + std::to_string(n) + " H " + std::to_string(H));
    const int64_t M = (2 + n) * n;
    const Tensor streams = random_bf16_values({T, n, H});
    const Tensor y = random_bf16_values({T, H});
    const HyperConnWeights w0 = random_hc(*this, n, H), w1 = random_hc(*this, n, H);
    const HyperConnWeights w0d = device_hc(w0), w1d = device_hc(w1);
    const Tensor h = cuda::to_device(streams), yd = cuda::to_device(y);
    // On the Hopper path the fused kernel must take V4-Flash's decode shape (else this test checks nothing).
    if (cuda::arch_path() == cuda::ArchPath::kHopper && n == 4 && H == 4096) {
      cuda::HcFusedArgs probe;
      probe.x = static_cast<const float*>(h.raw());
      probe.fn = static_cast<const float*>(w0d.fn.raw());
      EXPECT_TRUE(cuda::hc_pre_fused_supported(T, n, H, M, probe));
    }

    // hc_pre alone.
    Tensor post_ref, comb_ref, post, comb;
    const Tensor x_ref = plain.hc_pre(h, w0d, 20, 1e-6f, 1e-6f, &post_ref, &comb_ref);
    const Tensor x = fused.hc_pre(h, w0d, 20, 1e-6f, 1e-6f, &post, &comb);
    ASSERT_EQ(x.shape(), x_ref.shape());
    EXPECT_LT(rel_err(plain.to_host(x), plain.to_host(x_ref)), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(post), plain.to_host(post_ref)), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(comb), plain.to_host(comb_ref)), 1e-5);
    Tensor post_cpu, comb_cpu;
    const Tensor x_cpu = cpu.hc_pre(streams, w0, 20, 1e-6f, 1e-6f, &post_cpu, &comb_cpu);
    EXPECT_LT(rel_err(plain.to_host(x), x_cpu), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(post), post_cpu), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(comb), comb_cpu), 1e-5);

    // After the write-back, its outputs replacing its inputs as the model does.
    Tensor hs_ref, post2_ref, comb2_ref;
    const Tensor x2_ref =
        plain.hc_post_pre(h, yd, post, comb, w1d, 20, 1e-6f, 1e-6f, &hs_ref, &post2_ref, &comb2_ref);
    Tensor hf = cuda::to_device(streams), post2 = post, comb2 = comb;
    const Tensor x2 = fused.hc_post_pre(hf, yd, post2, comb2, w1d, 20, 1e-6f, 1e-6f, &hf, &post2, &comb2);
    expect_same_bits(plain.to_host(hf), plain.to_host(hs_ref), "streams");
    EXPECT_LT(rel_err(plain.to_host(x2), plain.to_host(x2_ref)), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(post2), plain.to_host(post2_ref)), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(comb2), plain.to_host(comb2_ref)), 1e-5);
    Tensor h_cpu = streams, p_cpu = plain.to_host(post), c_cpu = plain.to_host(comb);
    const Tensor x2_cpu =
        cpu.hc_post_pre(h_cpu, y, p_cpu, c_cpu, w1, 20, 1e-6f, 1e-6f, &h_cpu, &p_cpu, &c_cpu);
    EXPECT_LT(rel_err(plain.to_host(hf), h_cpu), 1e-6);
    EXPECT_LT(rel_err(plain.to_host(x2), x2_cpu), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(post2), p_cpu), 1e-5);
    EXPECT_LT(rel_err(plain.to_host(comb2), c_cpu), 1e-5);
  }
}

// norm_rope_write_kv (one launch) against the Backend default on the GPU (rms_norm, rope, rms_norm, rope,
// write_kv): the query bits and every bit of the cache layer equal; against the CPU reference within float32
// (query) and one bf16 step (cache rows). A mixed step: decode tokens and a prefill chunk, scrambled blocks.
TEST_F(CudaDeepseekOpsTest, V4NormRopeWriteKvEqualsUnfused) {
  CudaBackend gpu;
  CpuBackend ref;
  ref.set_bf16_cache_values(true);
  const int32_t bs = 16;
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{5, 1}, {0, 7}, {30, 1}};
  const int32_t blocks = blocks_for(seqs, bs);
  const BatchPlan plan = make_plan(seqs, bs, blocks);
  const int64_t T = plan.num_tokens();
  // (heads, head dim, rope dim): V4-Flash, the tiny fixture, a head dim that is no multiple of 256's loops.
  for (auto [H, D, R] : {std::tuple<int64_t, int64_t, int64_t>{64, 512, 64}, {4, 32, 8}, {3, 200, 16}}) {
    SCOPED_TRACE("H " + std::to_string(H) + " D " + std::to_string(D) + " R " + std::to_string(R));
    KvCache host({{KvKind::kSlidingWindow, D, 8, 1}}, blocks, bs);
    fill_layer(host, 0, *this);
    KvCache fused = gpu_copy(host), unfused = gpu_copy(host);
    const Tensor q = random_bf16_values({T, H, D}, 2.0f), kv = random_bf16_values({T, D}, 2.0f);
    Tensor ones = Tensor::empty(DType::F32, {D});
    std::fill(ones.f32(), ones.f32() + D, 1.0f);
    const Tensor kv_norm = norm_weight(this, D);
    RopeConfig rc;
    rc.theta = 10000.0;
    const RopeTable rope = make_rope_table(rc, R);
    const Tensor qd = cuda::to_device(q), kvd = cuda::to_device(kv);
    const Tensor ones_d = device_bf16(ones), kv_norm_d = device_bf16(kv_norm);

    const Tensor q_fused =
        gpu.to_host(gpu.norm_rope_write_kv(qd, kvd, ones_d, kv_norm_d, 1e-6f, rope, fused, 0, plan));
    const Tensor q_unfused = gpu.to_host(
        gpu.Backend::norm_rope_write_kv(qd, kvd, ones_d, kv_norm_d, 1e-6f, rope, unfused, 0, plan));
    expect_same_bits(q_fused, q_unfused, "q");
    const Tensor image = cuda::to_host(fused.storage(0)), image_ref = cuda::to_host(unfused.storage(0));
    ASSERT_EQ(image.nbytes(), image_ref.nbytes());
    EXPECT_EQ(std::memcmp(image.raw(), image_ref.raw(), image.nbytes()), 0) << "cache layers differ";

    const Tensor q_cpu = ref.norm_rope_write_kv(q, kv, ones, kv_norm, 1e-6f, rope, host, 0, plan);
    EXPECT_LT(rel_err(q_fused, q_cpu), 1e-5);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t slot = plan.slot_mapping[t];
      for (int64_t d = 0; d < D; ++d) {
        const float want = host.slot(0, slot)[d], got = bf16_to_f32(image.data<uint16_t>()[slot * D + d]);
        ASSERT_LE(std::abs(got - want), std::abs(want) / 128 + 1e-6f) << "token " << t << " value " << d;
      }
    }
  }
  // A cache layer of another width is refused before any launch.
  KvCache wide({{KvKind::kSlidingWindow, 64, 8, 1}}, blocks, bs, Device::kCuda, DType::BF16);
  const Tensor q = cuda::to_device(random_bf16_values({T, 4, 32})),
               kv = cuda::to_device(random_bf16_values({T, 32}));
  const Tensor w = device_bf16(norm_weight(this, 32));
  RopeConfig rc;
  EXPECT_THROW(gpu.norm_rope_write_kv(q, kv, w, w, 1e-6f, make_rope_table(rc, 8), wide, 0, plan), Error);
}

TEST_F(CudaDeepseekOpsTest, HyperConnectionRefusals) {
  CudaBackend gpu;
  const Tensor streams = cuda::to_device(random_bf16_values({2, 4, 8}));
  HyperConnWeights w{random_bf16_values({24, 32}), random_bf16_values({24}), random_bf16_values({3})};
  Tensor post, comb;
  // Host (not prepared) weights, bf16 weights and a wrong mix count are refused with the op named.
  EXPECT_THROW(gpu.hc_pre(streams, w, 20, 1e-6f, 1e-6f, &post, &comb), Error);
  HyperConnWeights bf16{device_bf16(w.fn), device_bf16(w.base), device_bf16(w.scale)};
  EXPECT_THROW(gpu.hc_pre(streams, bf16, 20, 1e-6f, 1e-6f, &post, &comb), Error);
  HyperConnWeights short_fn{cuda::to_device(random_bf16_values({20, 32})), cuda::to_device(w.base),
                            cuda::to_device(w.scale)};
  EXPECT_THROW(gpu.hc_pre(streams, short_fn, 20, 1e-6f, 1e-6f, &post, &comb), Error);
  const Tensor many = cuda::to_device(random_bf16_values({1, 17, 8}));
  HyperConnWeights w17{cuda::to_device(random_bf16_values({19 * 17, 17 * 8})),
                       cuda::to_device(random_bf16_values({19 * 17})), cuda::to_device(w.scale)};
  EXPECT_THROW(gpu.hc_pre(many, w17, 20, 1e-6f, 1e-6f, &post, &comb), Error);
}

TEST_F(CudaDeepseekOpsTest, HashRoutedWeightsMatchCpu) {
  CudaBackend gpu;
  for (const char* scoring : {"sqrtsoftplus", "softmax", "sigmoid"}) {
    for (auto [T, H, E, K] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 64, 8, 3},
                              {9, 64, 8, 3},
                              {4, 4096, 256, 6},
                              {2, 128, 1024, 8}}) {
      for (bool norm : {true, false}) {
        SCOPED_TRACE(std::string(scoring) + " T " + std::to_string(T) + " E " + std::to_string(E) + " norm " +
                     std::to_string(norm));
        RoutingParams p;
        p.scoring = scoring;
        p.top_k = K;
        p.norm_topk_prob = norm;
        p.routed_scaling_factor = 1.5f;
        const Tensor x = random_bf16_values({T, H});
        const Tensor router = random_bf16_values({E, H}, 0.05f);
        const Tensor ids = distinct_expert_ids(rng, T, K, E);
        const Tensor ref = cpu.moe_weights_for(x, router, ids, p);
        const Tensor xd = cuda::to_device(x), rd = device_bf16(router);
        const Tensor from_host = gpu.to_host(gpu.moe_weights_for(xd, rd, ids, p));
        const Tensor from_device = gpu.to_host(gpu.moe_weights_for(xd, rd, cuda::to_device(ids), p));
        ASSERT_EQ(from_host.shape(), ref.shape());
        EXPECT_LT(rel_err(from_host, ref), 1e-5);
        EXPECT_EQ(rel_err(from_device, from_host), 0.0);
      }
    }
  }
  // The hash layers' expert ids: rows of the token table by token id.
  const Tensor table = distinct_expert_ids(rng, 512, 6, 256);  // [vocab, k]
  const std::vector<int32_t> tokens = {0, 511, 7, 7, 300};
  const Tensor rows_ref = cpu.table_rows(table, tokens);
  const Tensor rows = cuda::to_host(gpu.table_rows(gpu.prepare_table(table), tokens));
  ASSERT_EQ(rows.shape(), rows_ref.shape());
  EXPECT_EQ(std::memcmp(rows.raw(), rows_ref.raw(), rows.nbytes()), 0);
  EXPECT_THROW(gpu.table_rows(gpu.prepare_table(table), {512}), Error);
  EXPECT_THROW(gpu.table_rows(table, {1}), Error);  // a host table
  // A host id outside the experts is refused; an unknown scoring function too.
  RoutingParams p;
  p.scoring = "sqrtsoftplus";
  const Tensor xd = cuda::to_device(random_bf16_values({1, 64})),
               rd = device_bf16(random_bf16_values({8, 64}));
  Tensor bad = Tensor::empty(DType::I32, {1, 2});
  bad.data<int32_t>()[0] = 1;
  bad.data<int32_t>()[1] = 8;
  EXPECT_THROW(gpu.moe_weights_for(xd, rd, bad, p), Error);
  bad.data<int32_t>()[1] = 2;
  p.scoring = "tanh";
  EXPECT_THROW(gpu.moe_weights_for(xd, rd, bad, p), Error);
}

// A compressor's two cache layers for the scrambled plan of `seqs` (cached, new tokens each): layer 0 the
// inputs [kv | gate] (c = 2 with overlap), layer 1 the compressed rows of D values, both filled with
// bf16-representable values on the host and copied to the GPU.
struct CompressorCaches {
  int32_t blocks;
  BatchPlan plan;
  KvCache host;
  KvCache dev;
  CompressorCaches(const std::vector<std::pair<int32_t, int32_t>>& seqs, int64_t D, int64_t ratio,
                   bool overlap, int32_t bs, CudaDeepseekOpsTest& test)
      : blocks(blocks_for(seqs, bs)),
        plan(make_plan(seqs, bs, blocks)),
        host({{KvKind::kSlidingWindow, 2 * (overlap ? 2 : 1) * D, (overlap ? 2 : 1) * ratio, 1},
              {KvKind::kCompressed, D, 0, ratio}},
             blocks, bs),
        dev(filled_copy(host, test)) {}
  static KvCache filled_copy(KvCache& host, CudaDeepseekOpsTest& test) {
    fill_layer(host, 0, test);
    fill_layer(host, 1, test);
    return gpu_copy(host);
  }
};

struct CompressCase {
  int64_t D, ratio;
  bool overlap;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (cached, new) per sequence
};

TEST_F(CudaDeepseekOpsTest, CompressorPoolingAndWritesMatchCpu) {
  const std::vector<CompressCase> cases = {
      {32, 4, true, {{0, 40}}},                    // the tiny fixture's CSA, a prefill
      {32, 128, false, {{0, 300}}},                // the tiny fixture's HCA
      {16, 4, true, {{25, 7}, {3, 1}, {0, 17}}},   // the indexer's compressor, chunks and decode
      {512, 4, true, {{4095, 1}, {10, 2}}},        // V4-Flash's head dim, decode closing windows
      {512, 128, false, {{127, 1}, {1000, 300}}},  // V4-Flash's HCA
      {8, 4, true, {{1, 2}}},                      // nothing closes
  };
  CudaBackend gpu;
  const int32_t bs = 16;
  for (const CompressCase& c : cases) {
    const int64_t cf = c.overlap ? 2 : 1;
    CompressorCaches caches(c.seqs, c.D, c.ratio, c.overlap, bs, *this);
    const BatchPlan& plan = caches.plan;
    KvCache &host = caches.host, &dev = caches.dev;
    const CompressedRows rows = v4_closing_rows(plan, c.ratio);
    SCOPED_TRACE("D " + std::to_string(c.D) + " ratio " + std::to_string(c.ratio) + " rows " +
                 std::to_string(rows.size()));
    const Tensor ape = random_bf16_values({c.ratio, cf * c.D});
    const Tensor ref = cpu.compress_rows(host, 0, plan, rows, ape, c.ratio, c.overlap);
    const Tensor got =
        gpu.to_host(gpu.compress_rows(dev, 0, plan, rows, cuda::to_device(ape), c.ratio, c.overlap));
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_LT(rel_err(got, ref), 1e-6);
    if (rows.size() == 0) continue;
    // The writes: bf16-representable values land in the same slots on both.
    const Tensor values = random_bf16_values({static_cast<int64_t>(rows.size()), c.D});
    cpu.write_compressed(host, 1, plan, rows, values);
    gpu.write_compressed(dev, 1, plan, rows, cuda::to_device(values));
    const Tensor image = cuda::to_host(dev.storage(1));  // [slots, D] bf16 bits
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t slot = plan.slot_of(rows.seqs[i], rows.rows[i]);
      for (int64_t d = 0; d < c.D; ++d) {
        ASSERT_EQ(bf16_to_f32(image.data<uint16_t>()[slot * c.D + d]), host.slot(1, slot)[d])
            << "row " << i << " value " << d;
      }
    }
  }
}

// compress_close in one launch against the CPU's composition (compress_rows, rms_norm, rope,
// write_compressed) with bf16 cache rounding: decode steps (each token finds on the GPU whether it closes a
// row, most do not) and prefill / mixed steps (host-listed rows). Every slot of the compressed layer is
// compared, so a row written where none closes, or to the wrong slot, fails too.
TEST_F(CudaDeepseekOpsTest, CompressCloseMatchesCpu) {
  struct CloseCase {
    int64_t D, rope_dim, ratio;
    bool overlap;
    std::vector<std::pair<int32_t, int32_t>> seqs;  // (cached, new) per sequence
  };
  const std::vector<CloseCase> cases = {
      {32, 8, 4, true, {{3, 1}, {4, 1}, {6, 1}, {11, 1}}},          // the tiny CSA, decode, two close
      {16, 8, 4, true, {{0, 17}, {25, 7}, {3, 1}}},                 // the tiny indexer, prefill and mixed
      {32, 8, 128, false, {{127, 1}, {200, 1}}},                    // the tiny HCA, decode, one closes
      {512, 64, 4, true, {{4095, 1}, {10, 1}, {1, 1}, {2046, 1}}},  // V4-Flash's CSA, decode
      {128, 64, 4, true, {{8191, 1}, {100, 1}}},                    // V4-Flash's indexer, decode
      {512, 64, 128, false, {{255, 1}, {1000, 300}}},               // V4-Flash's HCA, mixed
      {512, 64, 128, false, {{126, 1}, {0, 1}}},                    // decode, nothing closes
  };
  CudaBackend gpu;
  CpuBackend ref;
  ref.set_bf16_cache_values(true);
  const int32_t bs = 16;
  for (const CloseCase& c : cases) {
    const int64_t cf = c.overlap ? 2 : 1;
    CompressorCaches caches(c.seqs, c.D, c.ratio, c.overlap, bs, *this);
    const BatchPlan& plan = caches.plan;
    KvCache &host = caches.host, &dev = caches.dev;
    const int32_t blocks = caches.blocks;
    const size_t closing = v4_closing_rows(plan, c.ratio).size();
    SCOPED_TRACE("D " + std::to_string(c.D) + " ratio " + std::to_string(c.ratio) + " closing " +
                 std::to_string(closing));
    const Tensor ape = random_bf16_values({c.ratio, cf * c.D}), norm = norm_weight(this, c.D);
    RopeConfig rc;
    rc.theta = 160000.0;
    const RopeTable rope = make_rope_table(rc, c.rope_dim);
    CompressCloseSpec spec;
    spec.in_layer = 0;
    spec.out_layer = 1;
    spec.ratio = c.ratio;
    spec.overlap = c.overlap;
    spec.rope = &rope;
    spec.eps = 1e-6f;
    spec.ape = &ape;
    spec.norm = &norm;
    const int64_t slots = blocks * bs;
    const std::vector<float> before(host.slot(1, 0), host.slot(1, 0) + slots * c.D);
    ref.compress_close(host, plan, spec);
    const Tensor ape_d = cuda::to_device(ape), norm_d = device_bf16(norm);
    spec.ape = &ape_d;
    spec.norm = &norm_d;
    gpu.compress_close(dev, plan, spec);
    const Tensor image = cuda::to_host(dev.storage(1));  // [slots, D] bf16 bits
    size_t written = 0;
    for (int64_t slot = 0; slot < slots; ++slot) {
      bool changed = false;
      for (int64_t d = 0; d < c.D; ++d) {
        const float want = host.slot(1, slot)[d], got = bf16_to_f32(image.data<uint16_t>()[slot * c.D + d]);
        changed = changed || want != before[slot * c.D + d];
        // One bf16 step apart at most (float32 sums in another order may round the other way).
        ASSERT_LE(std::abs(got - want), std::abs(want) / 128 + 1e-6f) << "slot " << slot << " value " << d;
      }
      written += changed;
    }
    EXPECT_EQ(written, closing);  // the reference wrote exactly the closing rows
  }
}

TEST_F(CudaDeepseekOpsTest, CompressorRefusesOpenWindows) {
  CudaBackend gpu;
  const BatchPlan plan = make_plan({{0, 6}}, 16, 3);
  KvCache dev({{KvKind::kSlidingWindow, 4 * 8, 8, 1}}, 3, 16, Device::kCuda, DType::BF16);
  CompressedRows rows;
  rows.seqs = {0};
  rows.rows = {1};  // positions 4..7: only 6 tokens are cached
  EXPECT_THROW(gpu.compress_rows(dev, 0, plan, rows, cuda::to_device(random_bf16_values({4, 16})), 4, true),
               Error);
  rows.rows = {0};
  EXPECT_THROW(gpu.compress_rows(dev, 0, plan, rows, cuda::to_device(random_bf16_values({3, 16})), 4, true),
               Error);  // ape of the wrong size
}

struct V4IndexCase {
  int64_t Hi, D, top_k, ratio;
  std::vector<std::pair<int32_t, int32_t>> seqs;
};

TEST_F(CudaDeepseekOpsTest, V4IndexerTopkMatchesCpu) {
  const std::vector<V4IndexCase> cases = {
      {2, 16, 4, 4, {{0, 40}}},                   // the tiny fixture's indexer, a prefill
      {2, 16, 4, 4, {{25, 7}, {3, 1}, {0, 17}}},  // chunks and decode of several sequences
      {64, 128, 512, 4, {{8000, 1}, {100, 1}}},   // V4-Flash's indexer, decode past and under top_k
      {64, 128, 512, 4, {{0, 600}}},              // a V4-Flash prefill
      {8, 32, 3, 4, {{0, 3}, {2, 1}}},            // nothing visible yet
  };
  CudaBackend gpu;
  CpuBackend ref;
  ref.set_index_ties(CpuBackend::IndexTies::kLowestPosition);
  const int32_t bs = 16;
  for (const V4IndexCase& c : cases) {
    const int32_t blocks = blocks_for(c.seqs, bs);
    const BatchPlan plan = make_plan(c.seqs, bs, blocks);
    KvCache host({{KvKind::kCompressed, c.D, 0, c.ratio}}, blocks, bs);
    fill_layer(host, 0, *this);
    const KvCache dev = gpu_copy(host);
    const int64_t T = plan.num_tokens();
    const IndexerQuery iq = random_indexer_query(T, c.Hi, c.D, c.top_k);
    SCOPED_TRACE(iq.label);
    const Tensor expected =
        ref.indexer_topk(iq.q, iq.w, host, 0, plan, c.ratio, c.top_k, iq.scale, iq.wscale);
    const Tensor got = cuda::to_host(gpu.indexer_topk(cuda::to_device(iq.q), cuda::to_device(iq.w), dev, 0,
                                                      plan, c.ratio, c.top_k, iq.scale, iq.wscale));
    ASSERT_EQ(got.dtype(), DType::I32);
    expect_same_selection(got, expected, iq.q, iq.w, host, plan, iq.scale, iq.wscale);
  }
}

struct V4AttentionCase {
  int64_t H, D, window, ratio, K;  // K: -1 no compressed rows, 0 all visible rows, > 0 a selection of K
  std::vector<std::pair<int32_t, int32_t>> seqs;
};

TEST_F(CudaDeepseekOpsTest, V4AttentionMatchesCpu) {
  const std::vector<V4AttentionCase> cases = {
      {4, 32, 8, 4, -1, {{0, 20}}},                    // the tiny fixture's sliding-window layer
      {4, 32, 8, 128, 0, {{0, 300}}},                  // its HCA layer (all compressed rows)
      {4, 32, 8, 4, 4, {{0, 40}, {13, 1}}},            // its CSA layer (a selection)
      {4, 32, 8, 4, 0, {{2, 1}, {0, 3}}},              // no compressed row visible yet
      {16, 512, 128, 4, 512, {{3000, 1}, {40, 1}}},    // V4-Flash's CSA at decode
      {16, 512, 128, 128, 0, {{5000, 2}, {200, 30}}},  // V4-Flash's HCA
      {64, 512, 128, 4, 512, {{200, 1}}},              // V4-Flash's 64 heads, decode: most of 512 picks holes
      {64, 512, 128, 4, 512, {{3000, 1}, {900, 1}, {70, 1}}},  // a decode batch (key splits merged)
      {8, 64, 16, 4, 0, {{100, 1}}},                           // an empty selection ([T, 0]) below
  };
  CudaBackend gpu;
  const int32_t bs = 16;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const V4AttentionCase& c = cases[ci];
    const int32_t blocks = blocks_for(c.seqs, bs);
    const BatchPlan plan = make_plan(c.seqs, bs, blocks);
    KvCache host({{KvKind::kSlidingWindow, c.D, c.window, 1}, {KvKind::kCompressed, c.D, 0, c.ratio}}, blocks,
                 bs);
    fill_layer(host, 0, *this, 0.5f);
    fill_layer(host, 1, *this, 0.5f);
    const KvCache dev = gpu_copy(host);
    const int64_t T = plan.num_tokens();
    const Tensor q = random_bf16_values({T, c.H, c.D}, 0.5f);
    const Tensor sinks = random_bf16_values({c.H});
    const int64_t comp_layer = c.K < 0 ? -1 : 1;
    Tensor selected;  // [T, K]: visible rows, -1 holes and rows not yet visible
    if (c.K > 0) {
      selected = Tensor::empty(DType::I32, {T, c.K});
      std::uniform_int_distribution<int> pick(-1, static_cast<int>(plan.context_lens[0] / c.ratio) + 2);
      for (int64_t i = 0; i < selected.numel(); ++i) selected.data<int32_t>()[i] = pick(rng);
    }
    if (ci + 1 == cases.size()) selected = Tensor::empty(DType::I32, {T, 0});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    SCOPED_TRACE("case " + std::to_string(ci) + " H " + std::to_string(c.H) + " D " + std::to_string(c.D) +
                 " K " + std::to_string(c.K) + " tokens " + std::to_string(T));
    const Tensor ref =
        cpu.attention_v4(q, host, 0, c.window, comp_layer, c.ratio, selected, plan, sinks, scale);
    for (bool device_selection : {false, true}) {
      const Tensor sel =
          device_selection && selected && selected.numel() ? cuda::to_device(selected) : selected;
      const Tensor got = gpu.to_host(gpu.attention_v4(cuda::to_device(q), dev, 0, c.window, comp_layer,
                                                      c.ratio, sel, plan, cuda::to_device(sinks), scale));
      ASSERT_EQ(got.shape(), ref.shape());
      EXPECT_LT(rel_err(got, ref), 2e-6) << "device selection " << device_selection;
    }
  }
}

// attention_v4_unrope (the inverse rope in the attention's last stores) against the Backend default on the
// GPU (attention_v4, then rope's inverse) bit for bit, through the single-split epilogue and the split merge;
// and against the CPU.
TEST_F(CudaDeepseekOpsTest, V4AttentionUnropeEqualsAttentionThenRope) {
  struct Case {
    int64_t H, D, R, ratio, K;
    std::vector<std::pair<int32_t, int32_t>> seqs;
  };
  const std::vector<Case> cases = {
      {64, 512, 64, 4, 512, {{3000, 1}}},  // V4-Flash's CSA, one token: splits merge
      {64,
       512,
       64,
       128,
       0,
       {{500, 1}, {90, 1}, {7, 1}, {1200, 1}, {3, 1}, {60, 1}, {33, 1}, {2, 1}}},  // 8 tokens
      {4, 32, 8, 4, -1, {{0, 20}, {5, 1}}},  // the tiny fixture's sliding layer
      {4, 36, 6, 4, -1, {{0, 9}}},           // D - R = 30: a pair's float4 half in range
  };
  CudaBackend gpu;
  const int32_t bs = 16;
  for (const Case& c : cases) {
    const int32_t blocks = blocks_for(c.seqs, bs);
    const BatchPlan plan = make_plan(c.seqs, bs, blocks);
    KvCache host({{KvKind::kSlidingWindow, c.D, 8, 1}, {KvKind::kCompressed, c.D, 0, c.ratio}}, blocks, bs);
    fill_layer(host, 0, *this, 0.5f);
    fill_layer(host, 1, *this, 0.5f);
    const KvCache dev = gpu_copy(host);
    const int64_t T = plan.num_tokens();
    const Tensor q = random_bf16_values({T, c.H, c.D}, 0.5f), sinks = random_bf16_values({c.H});
    const int64_t comp_layer = c.K < 0 ? -1 : 1;
    Tensor selected;  // [T, K]
    if (c.K > 0) {
      selected = Tensor::empty(DType::I32, {T, c.K});
      std::uniform_int_distribution<int> pick(-1, static_cast<int>(plan.context_lens[0] / c.ratio));
      for (int64_t i = 0; i < selected.numel(); ++i) selected.data<int32_t>()[i] = pick(rng);
    }
    RopeConfig rc;
    rc.theta = 160000.0;
    const RopeTable rope = make_rope_table(rc, c.R);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    SCOPED_TRACE("H " + std::to_string(c.H) + " D " + std::to_string(c.D) + " tokens " + std::to_string(T) +
                 " splits " + std::to_string(cuda::attention_v4_splits(T, c.H)));
    const Tensor qd = cuda::to_device(q), sd = cuda::to_device(sinks);
    const Tensor fused = gpu.to_host(
        gpu.attention_v4_unrope(qd, dev, 0, 8, comp_layer, c.ratio, selected, plan, sd, scale, rope));
    const Tensor unfused = gpu.to_host(gpu.Backend::attention_v4_unrope(qd, dev, 0, 8, comp_layer, c.ratio,
                                                                        selected, plan, sd, scale, rope));
    expect_same_bits(fused, unfused, "attention output");
    const Tensor ref =
        cpu.attention_v4_unrope(q, host, 0, 8, comp_layer, c.ratio, selected, plan, sinks, scale, rope);
    EXPECT_LT(rel_err(fused, ref), 5e-6);
  }
}

TEST_F(CudaDeepseekOpsTest, V4AttentionRefusals) {
  CudaBackend gpu;
  const BatchPlan plan = make_plan({{0, 4}}, 16, 3);
  KvCache dev({{KvKind::kSlidingWindow, 32, 8, 1}, {KvKind::kCompressed, 16, 0, 4}}, 3, 16, Device::kCuda,
              DType::BF16);
  const Tensor q = cuda::to_device(random_bf16_values({4, 2, 32}));
  const Tensor sinks = cuda::to_device(random_bf16_values({2}));
  // Compressed rows of another width, sinks for other heads, bf16 sinks, a head dim past the kernel's.
  EXPECT_THROW(gpu.attention_v4(q, dev, 0, 8, 1, 4, Tensor(), plan, sinks, 1.0f), Error);
  EXPECT_THROW(
      gpu.attention_v4(q, dev, 0, 8, -1, 4, Tensor(), plan, cuda::to_device(random_bf16_values({3})), 1.0f),
      Error);
  EXPECT_THROW(
      gpu.attention_v4(q, dev, 0, 8, -1, 4, Tensor(), plan, device_bf16(random_bf16_values({2})), 1.0f),
      Error);
  KvCache wide({{KvKind::kSlidingWindow, 1024, 8, 1}}, 3, 16, Device::kCuda, DType::BF16);
  EXPECT_THROW(gpu.attention_v4(cuda::to_device(random_bf16_values({4, 2, 1024})), wide, 0, 8, -1, 4,
                                Tensor(), plan, sinks, 1.0f),
               Error);
}

#endif  // DSINFER_HAVE_CUDA

}  // namespace
}  // namespace dsinfer
