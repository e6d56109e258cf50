// Micro-benchmarks of the CUDA DeepSeek-V2/V3 ops (MLA decode and prefill, routing, head_matmul, experts),
// disabled by default: run with `cuda_device_tests --gtest_also_run_disabled_tests --gtest_filter='*Bench*'`
// on the GPU machine.
#include "core/env_choice.h"
#include "cuda_deepseek_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

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
  // DSINFER_BENCH_QUICK: 1 only the tensor-core table's first three shapes, 2 only batch 64 x 4096 x 16
  // heads, 3 only 64 x 4096 x 128 (for profilers).
  const int quick = env_int("DSINFER_BENCH_QUICK", 0, 0, 3);
  for (auto [batch, ctx, H] : {std::tuple<int32_t, int32_t, int64_t>{64, 4096, 16},
                               {64, 4096, 128},
                               {1, 4096, 16},
                               {1, 4096, 128},
                               {1, 192, 16},
                               {1, 256, 16},
                               {64, 256, 16},
                               {256, 256, 16},
                               {256, 256, 128}}) {
    if (quick) break;
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
  // The tensor-core instances on the bf16 cache (R 512, P 64), launched directly: auto (mla_choose_split's
  // choice), 64-row tiles (one block per SM) and 32-row tiles (two), and on Hopper the second design
  // (DSINFER_MLA_KERNEL: v2 one block per SM of five stages, v2x2 two blocks of two stages), each with split
  // (hi + lo) and bf16 (tile name ending in b) queries and probabilities, cycling through copies of the cache
  // (100 MB or more, twice the L2) so that no call finds the previous one's rows in L2: us per call launched
  // back to back and replayed in a CUDA graph of one call per copy, and the latent bytes per second of the
  // graph figure as a share of 4290 GB/s and of the copy bandwidth measured above.
  std::printf("\n%-24s %-5s %6s %6s %7s %10s %9s %8s %7s\n", "tensor cores", "tile", "splits", "chunk",
              "blocks", "stream us", "graph us", "% 4290", "% copy");
  for (auto [batch, ctx, H] : {std::tuple<int32_t, int32_t, int64_t>{64, 4096, 16},
                               {64, 4096, 128},
                               {256, 256, 16},
                               {256, 256, 128},
                               {64, 256, 16},
                               {8, 4096, 16},
                               {4, 4096, 16},
                               {2, 4096, 16},
                               {1, 4096, 16},
                               {1, 4096, 128},
                               {1, 256, 16}}) {
    if (quick == 1 && !(ctx == 4096 && batch == 64) && !(ctx == 256 && batch == 256 && H == 16)) continue;
    if (quick >= 2 && !(ctx == 4096 && batch == 64 && H == (quick == 2 ? 16 : 128))) continue;
    const int64_t R = 512, P = 64, D = R + P;
    const int32_t bs = 64, nb = (ctx + bs - 1) / bs;  // blocks per sequence
    const int64_t copy_blocks = int64_t{batch} * nb;
    const int64_t copy_bytes = copy_blocks * bs * D * 2;
    const int64_t copies =
        std::min<int64_t>(512, std::max<int64_t>(1, ((int64_t{100} << 20) + copy_bytes - 1) / copy_bytes));
    const Tensor cache = device_bf16_filled(this, {copies * copy_blocks * bs, D});  // [slots, 576]
    // Plan arrays: sequence i of copy c holds blocks c * copy_blocks + i * nb + [0, nb).
    Tensor positions = Tensor::empty(DType::I32, {batch}), token_seq = Tensor::empty(DType::I32, {batch}),
           indptr = Tensor::empty(DType::I32, {batch + 1}),
           table = Tensor::empty(DType::I32, {copies * copy_blocks});
    for (int32_t i = 0; i <= batch; ++i) {
      indptr.data<int32_t>()[i] = i * nb;
      if (i == batch) break;
      positions.data<int32_t>()[i] = ctx - 1;
      token_seq.data<int32_t>()[i] = i;
    }
    for (int64_t b = 0; b < copies * copy_blocks; ++b) table.data<int32_t>()[b] = static_cast<int32_t>(b);
    const Tensor d_positions = cuda::to_device(positions), d_token_seq = cuda::to_device(token_seq),
                 d_indptr = cuda::to_device(indptr), d_table = cuda::to_device(table);
    const Tensor q_lat = cuda::to_device(random_bf16_values({batch, H, R}, 0.1f));  // [batch, H, 512]
    const Tensor q_pe = cuda::to_device(random_bf16_values({batch, H, P}, 0.1f));   // [batch, H, 64]
    Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {batch, H, R});        // [batch, H, 512]
    ASSERT_TRUE(cuda::mla_tc_supported(R, P, true, reinterpret_cast<uintptr_t>(cache.raw()),
                                       reinterpret_cast<uintptr_t>(q_lat.raw()),
                                       reinterpret_cast<uintptr_t>(q_pe.raw())));
    const int saved = cuda::mla_tile_rows(), saved_v2 = cuda::mla_kernel_v2();
    const bool saved_qp = cuda::mla_bf16_qp();
    for (int variant = 0; variant < 12; ++variant) {
      // tile 0: auto (the default choice; its rows are named awg, a32v, a64 or a32 after the kernel); 64,
      // 32: mla_tc_kernel's instances; -1, -2: the second design, 1 or 2 blocks per SM; -3: the third
      // (wgmma, TMA) design.
      const int tile = std::array<int, 6>{0, 64, 32, -1, -2, -3}[variant % 6];
      if ((tile == -1 || tile == -2) && !cuda::mla_tc_v2_supported()) continue;
      if (tile == -3 && (variant >= 6 || !cuda::mla_wgmma_supported())) continue;  // split Q and P only
      cuda::mla_set_tile_rows(std::max(tile, 0));
      cuda::mla_set_kernel_v2(tile == 0 ? -1 : std::max(-tile, 0));
      cuda::mla_set_bf16_qp(variant >= 6);
      const cuda::MlaSplit split =
          cuda::mla_choose_split(batch, H, R, cuda::attention_max_context_bucket(ctx), true);
      const size_t ws_floats = cuda::mla_workspace_floats(batch, H, R, split);
      Tensor ws =
          Tensor::empty_on(Device::kCuda, DType::F32, {static_cast<int64_t>(std::max<size_t>(1, ws_floats))});
      auto call = [&](int64_t c) {
        cuda::MlaPlanView view;
        view.positions = d_positions.data<int32_t>();
        view.token_seq = d_token_seq.data<int32_t>();
        view.block_table = d_table.data<int32_t>() + c * copy_blocks;
        view.block_table_indptr = d_indptr.data<int32_t>();
        view.block_size = bs;
        view.cache_rows = copies * copy_blocks * bs;
        cuda::launch_attention_mla(q_lat.data<float>(), q_pe.data<float>(), cache.raw(), true, D, view,
                                   out.data<float>(), ws_floats ? ws.data<float>() : nullptr, batch, H, R, P,
                                   0.07f, split);
      };
      int64_t next = 0;
      const int reps = static_cast<int>(std::max<int64_t>(50, std::min<int64_t>(400, 2 * copies)));
      const double stream_us = 1e3 * cuda::time_stream_ms([&] { call(next++ % copies); }, reps);
      const double graph_us = 1e3 *
                              cuda::time_graph_ms(
                                  [&] {
                                    for (int64_t c = 0; c < copies; ++c) call(c);
                                  },
                                  std::max(3, static_cast<int>(400 / copies))) /
                              copies;
      const double bytes = static_cast<double>(batch) * ctx * D * 2;
      char name[64];
      std::snprintf(name, sizeof(name), "batch %d ctx %d heads %lld", batch, ctx, static_cast<long long>(H));
      const std::string tile_name = (tile == 0    ? std::string(split.wgmma             ? "awg"
                                                                : split.tile_rows == 64 ? "a64"
                                                                : split.v2_blocks       ? "a32v"
                                                                                        : "a32")
                                     : tile == -1 ? std::string("v2")
                                     : tile == -2 ? std::string("v2x2")
                                     : tile == -3 ? std::string("wg")
                                                  : std::to_string(tile)) +
                                    (split.bf16_qp ? "b" : "");
      const double gbs = bytes / (graph_us * 1e-6) / 1e9;
      std::printf("%-24s %-5s %6d %6lld %7lld %10.2f %9.2f %7.1f%% %6.1f%%\n", name, tile_name.c_str(),
                  split.splits, static_cast<long long>(split.chunk),
                  static_cast<long long>(cuda::next_pow2(batch) * ((H + 15) / 16) * split.splits), stream_us,
                  graph_us, 100.0 * gbs / 4290.0, 100.0 * gbs / copy_gbs);
    }
    cuda::mla_set_kernel_v2(saved_v2);
    cuda::mla_set_tile_rows(saved);
    cuda::mla_set_bf16_qp(saved_qp);
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

// The MLA decode merge with W_UV applied (attention_mla_uv: the merge + W_UV kernel in place of the split
// combine kernel and the W_UV head GEMV) against the composition attention_mla + head_matmul, V2-Lite shape
// (16 heads, R 512, W_UV [16, 128, 512] bf16 = 2 MB), bf16 cache, T 1/2/4/8 decode tokens x contexts
// 192/1024/4096: one call per (cache, W_UV) copy (100 MB or more of copies, twice the L2) inside one step,
// captured into a CUDA graph (PDL edges kept) and replayed; us per call. "fused" is 0 where the plan has
// one split (attention_mla_uv then runs the composition). DSINFER_CUDA_PDL=0 times them without PDL.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchMlaUvFused) {
  if (!cuda::mla_tc_supported(512, 64, true, 0, 0, 0)) GTEST_SKIP() << "no tensor-core MLA kernel here";
  CudaBackend gpu;  // registers the device allocator
  const int64_t H = 16, R = 512, P = 64, V = 128, D = R + P;
  const int32_t bs = 64;
  std::printf("%2s %5s %6s %5s %6s %12s %9s %8s\n", "T", "ctx", "splits", "fused", "copies", "composed us",
              "fused us", "saved us");
  for (const int32_t ctx : {192, 1024, 4096}) {
    for (const int64_t T : {1, 2, 4, 8}) {
      const int32_t nb = (ctx + bs - 1) / bs, blocks = static_cast<int32_t>(T) * nb + 1;
      const BatchPlan plan = make_plan(std::vector<std::pair<int32_t, int32_t>>(T, {ctx - 1, 1}), bs,
                                       blocks % 7 ? blocks : blocks + 1);
      const int64_t num_blocks = static_cast<int64_t>(plan.block_table.size()) + 2;
      const int64_t copy_bytes = num_blocks * bs * D * 2 + H * V * R * 2;
      const int64_t copies =
          std::min<int64_t>(64, std::max<int64_t>(4, ((int64_t{100} << 20) + copy_bytes - 1) / copy_bytes));
      const Tensor filled = device_bf16_filled(this, {num_blocks * bs, D});  // [slots, 576]
      std::vector<std::unique_ptr<KvCache>> caches;
      std::vector<Tensor> w_uv;  // copies x [H, V, R]
      for (int64_t c = 0; c < copies; ++c) {
        caches.push_back(
            std::make_unique<KvCache>(std::vector<KvLayerSpec>{KvLayerSpec{KvKind::kFullHistory, D}},
                                      num_blocks, bs, Device::kCuda, DType::BF16));
        cuda::copy_device_to_device(const_cast<void*>(caches.back()->storage(0).raw()), filled.raw(),
                                    filled.nbytes());
        w_uv.push_back(device_bf16_filled(this, {H, V, R}));
      }
      const Tensor q_lat = cuda::to_device(random_bf16_values({T, H, R}, 0.1f));  // [T, H, 512]
      const Tensor q_pe = cuda::to_device(random_bf16_values({T, H, P}, 0.1f));   // [T, H, 64]
      const float scale = 0.07f;
      const cuda::MlaSplit split =
          cuda::mla_choose_split(T, H, R, cuda::attention_max_context_bucket(ctx), /*tensor_cores=*/true);
      const bool fused =
          split.splits > 1 &&
          cuda::mla_merge_uv_supported(T, H, R, V, split.splits, reinterpret_cast<uintptr_t>(w_uv[0].raw()));
      StepScope scope(gpu, plan);
      auto graph_us = [&](bool use_uv) {
        const bool saved = cuda::mla_uv_fused();
        cuda::mla_set_uv_fused(use_uv);
        const double ms = cuda::time_graph_ms(
            [&] {
              for (int64_t c = 0; c < copies; ++c) {
                if (use_uv)
                  gpu.attention_mla_uv(q_lat, q_pe, *caches[c], 0, plan, scale, w_uv[c]);
                else
                  gpu.head_matmul(gpu.attention_mla(q_lat, q_pe, *caches[c], 0, plan, scale), w_uv[c], false);
              }
            },
            std::max(5, static_cast<int>(400 / copies)));
        cuda::mla_set_uv_fused(saved);
        return ms * 1e3 / static_cast<double>(copies);
      };
      const double composed_us = graph_us(false), fused_us = graph_us(true);
      std::printf("%2lld %5d %6d %5d %6lld %12.2f %9.2f %8.2f\n", static_cast<long long>(T), ctx,
                  split.splits, fused ? 1 : 0, static_cast<long long>(copies), composed_us, fused_us,
                  composed_us - fused_us);
    }
  }
}

// The decode routing of one MoE layer: the fused kernel (norm_moe_route: RMSNorm, logits, selection and
// the experts' permutation in one launch) against the four separate launches it replaces (rms_norm,
// moe_route's logits and selection, moe_permute) at the V2-Lite and V3 router shapes, T 1/4/8, as the model
// runs them: one call per router copy (100 MB or more of copies, twice the L2) captured into a CUDA graph
// (PDL edges kept) and replayed, so launch overhead is not counted; us per call. Splits of the separate path
// (each piece alone in its own graph): rms_norm, moe_route (logits + selection), moe_permute. "cluster": the
// fused kernel's cluster form where it takes the shape (0 where not). "fused eager":
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
  std::printf("%-8s %2s %8s %8s %9s %7s %9s %8s %8s %8s %7s %10s\n", "shape", "T", "fused", "cluster",
              "separate", "saved", "rms_norm", "route", "permute", "f.eager", "f. %BW", "saved/tok");
  for (const RouterShape& r : {RouterShape{"V2-Lite", 2048, 64, 6, 1, 1, "softmax", "greedy", 26},
                               RouterShape{"V3", 7168, 256, 8, 8, 4, "sigmoid", "noaux_tc", 58},
                               RouterShape{"V4-Flash", 4096, 256, 6, 1, 1, "sqrtsoftplus", "noaux_tc", 40}}) {
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
        return cuda::time_graph_us_per_copy(copies, one, 5);
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
      // The cluster form (DSINFER_CUDA_MOE_ROUTE_CLUSTER=1) where it takes the shape.
      cuda::MoeNormRouteArgs ac = a;
      ac.cluster = true;
      const bool clusterable = cuda::moe_norm_route_cluster_supported(ac, rp);
      auto cluster = [&](int64_t i) {
        ac.router = router(i);
        cuda::launch_moe_norm_route(ac, rp);
      };
      const double cluster_us = clusterable ? graph_us(cluster) : 0.0;
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
      std::printf("%-8s %2lld %8.2f %8.2f %9.2f %7.2f %9.2f %8.2f %8.2f %8.2f %6.1f%% %10.0f%s\n", r.name,
                  static_cast<long long>(T), fused_us, cluster_us, separate_us, saved_us, norm_us, route_us,
                  permute_us, eager_us,
                  fusable ? 100.0 * router_elems * 2 / (fused_us * 1e-6) / 1e9 / 4290.0 : 0.0,
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
      CudaBackend b(CudaBackendOptions{.moe_grouped_variant = variant});
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
    CudaBackend old(CudaBackendOptions{.moe_grouped_variant = -1});
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
      return cuda::time_graph_us_per_copy(copies, one, 20);
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

// One MLA layer's decode preparation at the V2-Lite (16 heads, 2 MB W_UK) and V3 (128 heads, 16.8 MB) shapes
// (A 128, R 512, P 64, bf16 cache), T 1/2/4/8: mla_prepare as the model calls it, unfused
// (DSINFER_MLA_PREPARE_FUSED=0: the cache write kernel, then head_matmul's W_UK GEMV) against fused (both in
// one launch). Each call reads its own W_UK copy (100 MB or more of copies, twice the L2). "graph": every
// copy's call captured in one CUDA graph and replayed (PDL edges kept, no launch overhead), us per call;
// "eager": back to back from the host (CUDA events). The pieces (graph): the write alone and the W_UK GEMV
// alone. saved/tok: (unfused - fused) graph us x the model's layers (27 for V2-Lite, 61 for V3).
// DSINFER_CUDA_PDL=0 times them without programmatic launch.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchMlaPrepareFused) {
  CudaBackendOptions off;
  off.mla_prepare_fused = false;
  CudaBackend gpu, unfused(off);
  const int64_t A = 128, R = 512, P = 64;
  const int32_t bs = 64, blocks = 64;
  const float eps = 1e-6f;
  const RopeTable table = make_rope_table(RopeConfig{}, P);
  const Tensor norm = device_bf16(norm_weight(this, R));
  KvCache cache({KvLayerSpec{KvKind::kFullHistory, R + P}}, blocks, bs, Device::kCuda, DType::BF16);
  std::printf("%-8s %2s %9s %9s %7s %9s %9s %9s %9s %10s\n", "shape", "T", "unfused", "fused", "saved",
              "u.eager", "f.eager", "write", "W_UK", "saved/tok");
  struct Shape {
    const char* name;
    int64_t H, layers;
  };
  for (const Shape& s : {Shape{"V2-Lite", 16, 27}, Shape{"V3", 128, 61}}) {
    const int64_t bytes = s.H * A * R * 2;
    const int64_t copies = std::max<int64_t>(4, (int64_t{100} << 20) / bytes + 1);
    std::vector<Tensor> w_uk(copies);
    for (Tensor& w : w_uk) w = device_bf16_filled(this, {s.H, A, R});  // [H, A, R]
    for (int64_t T : {1, 2, 4, 8}) {
      std::vector<std::pair<int32_t, int32_t>> seqs;
      for (int64_t i = 0; i < T; ++i) seqs.push_back({static_cast<int32_t>(100 + 37 * i), 1});
      const BatchPlan plan = make_plan(seqs, bs, blocks);
      const Tensor q_nope = cuda::to_device(random_bf16_values({T, s.H, A}));  // [T, H, A]
      const Tensor latent = cuda::to_device(random_bf16_values({T, R}));       // [T, R]
      Tensor q_pe = cuda::to_device(random_bf16_values({T, s.H, P}));          // [T, H, P]
      Tensor k_pe = cuda::to_device(random_bf16_values({T, 1, P}));            // [T, 1, P]
      auto layer = [&](CudaBackend& b, int64_t c) {
        b.mla_prepare(q_nope, w_uk[c], q_pe, k_pe, latent, norm, eps, table, RopeLayout::kInterleaved, cache,
                      0, plan);
      };
      auto graph_us = [&](const std::function<void(int64_t)>& one) {
        return cuda::time_graph_us_per_copy(copies, one, 20);
      };
      auto eager_us = [&](CudaBackend& b) {
        int64_t next = 0;
        return cuda::time_stream_ms([&] { layer(b, next++ % copies); }, 400) * 1e3;
      };
      const double unfused_us = graph_us([&](int64_t c) { layer(unfused, c); });
      const double fused_us = graph_us([&](int64_t c) { layer(gpu, c); });
      const double write_us = graph_us([&](int64_t) {
        gpu.mla_rope_write_kv(q_pe, k_pe, latent, norm, eps, table, RopeLayout::kInterleaved, cache, 0, plan);
      });
      const double uk_us = graph_us([&](int64_t c) { gpu.head_matmul(q_nope, w_uk[c], true); });
      const double ue = eager_us(unfused), fe = eager_us(gpu);
      std::printf("%-8s %2lld %9.2f %9.2f %7.2f %9.2f %9.2f %9.2f %9.2f %10.1f\n", s.name,
                  static_cast<long long>(T), unfused_us, fused_us, unfused_us - fused_us, ue, fe, write_us,
                  uk_us, (unfused_us - fused_us) * s.layers);
    }
  }
}

#else

TEST(CudaDeepseekBench, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
