// Benchmark (disabled by default; run with --gtest_also_run_disabled_tests) of DeepSeek-V4's decode-side ops
// at V4-Flash's shapes: attention_v4 (64 heads x 512, window 128) on a sliding-window layer, a CSA layer
// (ratio 4, 512 selected compressed rows) and an HCA layer (ratio 128, every compressed row), and the
// hyper-connection pre (mixing logits, Sinkhorn and collapse of 4 x 4096 streams, in CudaBackend's default
// form: the one-launch cluster kernel at these shapes on Hopper; also with one Sinkhorn
// iteration for V4's 20, the difference being the other 19 iterations' chain), at batch 1 and 32 and
// contexts of 256 to 32768 tokens. Microseconds per call, replayed in a CUDA graph inside one step (no plan
// upload per call), with the distinct cached bytes an attention call reads (each head re-reads them, from L2
// after the first).
#include "cuda_deepseek_test_util.h"
#include "kv/kv_cache.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

TEST_F(CudaDeepseekOpsTest, DISABLED_BenchV4Decode) {
  const int64_t H = 64, D = 512, window = 128, top_k = 512, n = 4, hidden = 4096, M = (2 + n) * n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::printf("%-22s %20s %20s %20s %10s %10s   (us per call; MB of cached rows)\n", "V4-Flash decode",
              "sliding attention", "CSA attention", "HCA attention", "hc_pre", "1 iter");
  for (auto [batch, ctx] : {std::pair<int32_t, int32_t>{1, 256}, {1, 4096}, {1, 32768}, {32, 4096}}) {
    const int32_t bs = 64, blocks = batch * ((ctx + bs - 1) / bs) + 8;
    const BatchPlan plan =
        make_plan(std::vector<std::pair<int32_t, int32_t>>(batch, {ctx - 1, 1}), bs, blocks);
    KvCache cache({KvLayerSpec{KvKind::kSlidingWindow, D, window, 1},
                   KvLayerSpec{KvKind::kCompressed, D, 0, 4}, KvLayerSpec{KvKind::kCompressed, D, 0, 128}},
                  blocks, bs, Device::kCuda, DType::BF16);
    for (int64_t l = 0; l < 3; ++l) fill_gpu_cache(this, cache, l);
    const Tensor q = cuda::to_device(random_bf16_values({batch, H, D}, 0.05f));  // [batch, H, D]
    const Tensor sinks = cuda::to_device(random_bf16_values({H}));
    // [batch, top_k]: distinct visible rows, -1 holes once the context has fewer than top_k
    const int64_t visible = ctx / 4;
    Tensor sel = Tensor::empty(DType::I32, {batch, top_k});
    for (int64_t i = 0; i < sel.numel(); ++i) {
      const int64_t k = i % top_k;
      sel.data<int32_t>()[i] = k < visible ? static_cast<int32_t>((k * 7919) % visible) : -1;
    }
    const Tensor selected = cuda::to_device(sel);
    const Tensor streams = cuda::to_device(random_bf16_values({batch, n, hidden}));  // [batch, n, hidden]
    const HyperConnWeights hc{cuda::to_device(random_bf16_values({M, n * hidden}, 0.05f)),
                              cuda::to_device(random_bf16_values({M}, 0.5f)),
                              cuda::to_device(random_bf16_values({3}, 0.5f))};
    CudaBackend gpu;
    gpu.begin_step(plan);
    auto attention_us = [&](int64_t comp_layer, int64_t ratio, const Tensor& s) {
      return 1e3 *
             cuda::time_graph_ms(
                 [&] { gpu.attention_v4(q, cache, 0, window, comp_layer, ratio, s, plan, sinks, scale); },
                 20);
    };
    const double sliding_us = attention_us(-1, 0, Tensor()), csa_us = attention_us(1, 4, selected),
                 hca_us = attention_us(2, 128, Tensor());
    auto hc_pre_us = [&](int64_t iters) {
      return 1e3 * cuda::time_graph_ms(
                       [&] {
                         Tensor post, comb;
                         gpu.hc_pre(streams, hc, iters, 1e-6f, 1e-6f, &post, &comb);
                       },
                       20);
    };
    const double hc_us = hc_pre_us(20), hc_one_us = hc_pre_us(1);
    gpu.end_step();
    const int64_t nw = std::min<int64_t>(window, ctx);
    auto cell = [&](double us, int64_t rows) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.1f (%.2f)", us, 1e-6 * batch * rows * D * 2);
      return std::string(buf);
    };
    char name[64];
    std::snprintf(name, sizeof(name), "batch %d ctx %d", batch, ctx);
    std::printf("%-22s %20s %20s %20s %10.1f %10.1f\n", name, cell(sliding_us, nw).c_str(),
                cell(csa_us, nw + std::min(top_k, visible)).c_str(), cell(hca_us, nw + ctx / 128).c_str(),
                hc_us, hc_one_us);
  }
}

#endif  // DSINFER_HAVE_CUDA

}  // namespace
}  // namespace dsinfer
