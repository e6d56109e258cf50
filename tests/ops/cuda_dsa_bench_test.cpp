// Benchmark (disabled by default; run with --gtest_also_run_disabled_tests) of the DeepSeek-V3.2 decode ops
// at V3.2's shapes: the lightning indexer's top-k (64 heads x 128, top_k 2048) and sparse MLA over 2048
// positions (128 heads, latent 512 + rope 64), next to dense MLA over the whole context (what V3 reads), at
// batch 1 and 32 and contexts of 4096 and 32768 tokens. Microseconds per call, replayed in a CUDA graph
// inside one step (no plan upload per call), with the bytes each reads and its share of the 4.29 TB/s copy
// rate.
#include "cuda_deepseek_test_util.h"
#include "kv/kv_cache.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

TEST_F(CudaDeepseekOpsTest, DISABLED_BenchDsaDecode) {
  const int64_t Hi = 64, Di = 128, top_k = 2048, H = 128, R = 512, P = 64;
  std::printf("%-28s %12s %12s %12s   (us per call; GB read; %% of 4290 GB/s)\n", "V3.2 decode", "indexer",
              "sparse MLA", "dense MLA");
  for (auto [batch, ctx] : {std::pair<int32_t, int32_t>{1, 4096}, {1, 32768}, {32, 4096}, {32, 32768}}) {
    const int32_t bs = 64, blocks = batch * ((ctx + bs - 1) / bs) + 8;
    const BatchPlan plan =
        make_plan(std::vector<std::pair<int32_t, int32_t>>(batch, {ctx - 1, 1}), bs, blocks);
    KvCache cache({KvLayerSpec{KvKind::kFullHistory, R + P}, KvLayerSpec{KvKind::kFullHistory, Di}}, blocks,
                  bs, Device::kCuda, DType::BF16);
    fill_gpu_cache(this, cache, 0);
    fill_gpu_cache(this, cache, 1);
    const Tensor q_idx = cuda::to_device(random_bf16_values({batch, Hi, Di}, 0.3f));
    const Tensor w_idx = cuda::to_device(random_bf16_values({batch, Hi}));
    const Tensor q_lat = cuda::to_device(random_bf16_values({batch, H, R}, 0.1f));
    const Tensor q_pe = cuda::to_device(random_bf16_values({batch, H, P}, 0.1f));
    CudaBackend gpu;
    gpu.begin_step(plan);
    Tensor selected = gpu.dsa_indexer_topk(q_idx, w_idx, cache, 1, plan, 0.088f, 0.125f, top_k);
    const double idx_us =
        1e3 * cuda::time_graph_ms(
                  [&] { gpu.dsa_indexer_topk(q_idx, w_idx, cache, 1, plan, 0.088f, 0.125f, top_k); }, 20);
    const double sparse_us =
        1e3 * cuda::time_graph_ms(
                  [&] { gpu.attention_mla_sparse(q_lat, q_pe, cache, 0, plan, selected, 0.07f); }, 20);
    const double dense_us =
        1e3 * cuda::time_graph_ms([&] { gpu.attention_mla(q_lat, q_pe, cache, 0, plan, 0.07f); }, 20);
    gpu.end_step();
    const double idx_gb = 1e-9 * batch * ctx * Di * 2, sparse_gb = 1e-9 * batch * top_k * (R + P) * 2,
                 dense_gb = 1e-9 * batch * ctx * (R + P) * 2;
    char name[64];
    std::snprintf(name, sizeof(name), "batch %d ctx %d", batch, ctx);
    auto cell = [](double us, double gb) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.1f (%.3f, %.0f%%)", us, gb, 100.0 * gb / (us * 1e-6) / 4290.0);
      return std::string(buf);
    };
    std::printf("%-28s %22s %22s %22s\n", name, cell(idx_us, idx_gb).c_str(),
                cell(sparse_us, sparse_gb).c_str(), cell(dense_us, dense_gb).c_str());
  }
}

#endif  // DSINFER_HAVE_CUDA

}  // namespace
}  // namespace dsinfer
