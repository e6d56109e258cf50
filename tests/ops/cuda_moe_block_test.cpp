// One token's DeepSeekMoE block as one launch (CudaBackendOptions::moe_block, cuda::launch_moe_block)
// against the path it replaces (norm_moe_route's kernel, then the two units launches): the same residual,
// ids and weights bit for bit, eagerly and replayed from a CUDA graph, for DeepSeek-V2-Lite's shape and
// others (no shared experts, one, sigmoid routing with groups and a correction bias, planted ties), and
// within the expert tests' tolerance of the CPU reference. DISABLED_BenchMoeBlock times both on V2-Lite's
// shape. Runs where a GPU is visible; CI compiles it and skips.
#include "backend/cuda/moe_block.h"
#include "cuda_deepseek_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

CudaBackendOptions block_on() {
  CudaBackendOptions o;
  o.moe_block = true;
  return o;
}

// Uniform values in [-scale, scale) rounded to bf16, from a xorshift stream (V2-Lite's experts are 553M
// values: a normal draw each would take minutes).
Tensor fast_values(Shape shape, float scale, uint64_t& state) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float u = static_cast<float>(state >> 40) / static_cast<float>(1 << 24);  // [0, 1)
    t.f32()[i] = bf16_to_f32(f32_to_bf16(scale * (2.0f * u - 1.0f)));
  }
  return t;
}

// A MoE block's weights: E experts of H x I, `shared_units` x I shared experts (none: 0), the router (rows
// 2e + 1 copies of rows 2e where `ties`), the norm, a correction bias (sigmoid routing).
struct Block {
  int64_t E = 0, H = 0, I = 0, K = 0, shared_units = 0;
  RoutingParams routing;
  ExpertSet experts;
  SharedMlp shared;
  Tensor router_c, router_g, norm_c, norm_g, bias_c, bias_g;
};

Block make_block(CudaDeepseekOpsTest* test, CudaBackend& gpu, int64_t E, int64_t H, int64_t I, int64_t K,
                 int64_t shared_units, bool sigmoid, bool ties) {
  Block b;
  b.E = E;
  b.H = H;
  b.I = I;
  b.K = K;
  b.shared_units = shared_units;
  b.routing.top_k = K;
  if (sigmoid) {
    b.routing.scoring = "sigmoid";
    b.routing.method = "noaux_tc";
    b.routing.n_group = 8;
    b.routing.topk_group = 3;
    b.routing.norm_topk_prob = true;
    b.routing.routed_scaling_factor = 2.5f;
  } else {
    b.routing.scoring = "softmax";
    b.routing.method = "greedy";
  }
  uint64_t state = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(test->rng());
  auto matrix = [&](int64_t rows, int64_t cols, MlpWeights& c, Linear MlpWeights::*which, MlpWeights& g) {
    (c.*which).weight = fast_values({rows, cols}, 0.1f, state);
    (g.*which).weight = gpu.prepare_weight((c.*which).weight);
  };
  for (int64_t e = 0; e < E; ++e) {
    MlpWeights c, g;
    matrix(I, H, c, &MlpWeights::gate, g);
    matrix(I, H, c, &MlpWeights::up, g);
    matrix(H, I, c, &MlpWeights::down, g);
    b.experts.cpu.push_back(std::move(c));
    b.experts.gpu.push_back(std::move(g));
  }
  gpu.prepare_experts(b.experts.gpu);
  const int64_t SI = std::max<int64_t>(shared_units, 1) * I;
  matrix(SI, H, b.shared.cpu, &MlpWeights::gate, b.shared.gpu);
  matrix(SI, H, b.shared.cpu, &MlpWeights::up, b.shared.gpu);
  matrix(H, SI, b.shared.cpu, &MlpWeights::down, b.shared.gpu);
  b.router_c = test->random_bf16_values({E, H}, 0.5f);
  if (ties)
    for (int64_t e = 0; e + 1 < E; e += 2)
      std::memcpy(b.router_c.f32() + (e + 1) * H, b.router_c.f32() + e * H, sizeof(float) * H);
  b.router_g = gpu.prepare_weight(b.router_c);
  b.norm_c = norm_weight(test, H);
  b.norm_g = device_bf16(b.norm_c);
  if (sigmoid) {
    b.bias_c = Tensor::empty(DType::F32, {E});
    for (int64_t e = 0; e < E; ++e) b.bias_c.f32()[e] = 0.01f * static_cast<float>((e * 37) % 11);
    b.bias_g = gpu.prepare_weight_f32(b.bias_c);
  }
  return b;
}

// Runs the block on a device copy of h [1, H] through `gpu`; returns the residual and the routing (host).
struct Outcome {
  Tensor residual, ids, weights;
};
Outcome run_block(CudaBackend& gpu, const Block& b, const Tensor& h) {
  Tensor d = cuda::to_device(h), ids, weights;
  gpu.norm_moe_experts_residual(d, b.norm_g, 1e-6f, b.router_g, b.bias_g, b.routing, b.experts.gpu,
                                b.shared_units > 0 ? &b.shared.gpu : nullptr, &ids, &weights);
  return {gpu.to_host(d), cuda::to_host(ids), cuda::to_host(weights)};
}

struct BlockCase {
  int64_t E, H, I, K, shared_units;
  bool sigmoid, ties;
};

// V2-Lite (2 shared units of 1408, top 6 of 64, hidden 2048); without shared experts; one shared unit of
// 256 at hidden 512 with top 8 of 32; sigmoid routing over 8 groups with a bias at hidden 1024; planted
// ties (pairs of identical router rows: the lower expert wins, as the reference); more experts than SMs (two
// logits on some blocks, the second row read without its copy ahead).
const BlockCase kCases[] = {
    {64, 2048, 1408, 6, 2, false, false}, {64, 2048, 1408, 6, 0, false, false},
    {32, 512, 256, 8, 1, false, false},   {64, 1024, 512, 6, 1, true, false},
    {64, 2048, 1408, 6, 2, false, true},  {160, 1024, 256, 8, 2, false, false},
};

TEST_F(CudaDeepseekOpsTest, MoeBlockGivesTheSeparateKernelsBits) {
  CudaBackend fused(block_on()), separate;  // separate: the units launches (moe_block off by default)
  for (const BlockCase& c : kCases) {
    Block b = make_block(this, fused, c.E, c.H, c.I, c.K, c.shared_units, c.sigmoid, c.ties);
    for (int trial = 0; trial < 3; ++trial) {
      const std::string what = "E=" + std::to_string(c.E) + " H=" + std::to_string(c.H) +
                               " I=" + std::to_string(c.I) + " shared=" + std::to_string(c.shared_units) +
                               (c.sigmoid ? " sigmoid" : "") + (c.ties ? " ties" : "") + " trial " +
                               std::to_string(trial);
      const Tensor h = random_bf16_values({1, c.H}, 4.0f);
      const int64_t before = cuda::moe_block_launches();
      const Outcome f = run_block(fused, b, h);
      ASSERT_EQ(cuda::moe_block_launches(), before + 1) << "the one-launch block did not run: " << what;
      const Outcome s = run_block(separate, b, h);
      ASSERT_EQ(cuda::moe_block_launches(), before + 1) << "moe_block is off by default";
      EXPECT_EQ(differing(f.ids, s.ids), 0) << "ids, " << what;
      EXPECT_EQ(differing(f.weights, s.weights), 0) << "weights, " << what;
      EXPECT_EQ(differing(f.residual, s.residual), 0) << "residual, " << what;
      std::vector<int32_t> counters(cuda::kMoeBlockCounters, -1);
      cuda::copy_to_host(counters.data(), cuda::decode_arrivals(cuda::kMoeBlockCounters),
                         counters.size() * sizeof(int32_t));
      for (int i = 0; i < cuda::kMoeBlockCounters; ++i)
        EXPECT_EQ(counters[i], 0) << "counter " << i << ", " << what;
      if (c.ties) {
        // A tied pair (2e, 2e + 1) never gives the upper expert without the lower one.
        std::set<int32_t> chosen(f.ids.data<int32_t>(), f.ids.data<int32_t>() + c.K);
        for (int32_t e : chosen)
          if (e % 2 == 1) {
            EXPECT_TRUE(chosen.count(e - 1)) << "expert " << e << " without " << e - 1 << ", " << what;
          }
      }
      // Against the CPU reference on the routing the kernel chose.
      Tensor ref = h.clone();
      const MoeSharedExperts shared_c{&b.shared.cpu, b.norm_c, 1e-6f};
      cpu.moe_experts_residual(ref, cpu.rms_norm(h, b.norm_c, 1e-6f), f.ids, f.weights, b.experts.cpu,
                               nullptr, c.shared_units > 0 ? &shared_c : nullptr);
      EXPECT_LT(rel_err(added_part(f.residual, h), added_part(ref, h)), 1e-4) << "vs CPU, " << what;
    }
  }
}

// Captured once in a CUDA graph (with the block's counters' resets) and replayed on new residuals: every
// replay gives the eager separate path's bits; the counters are back at zero after every launch.
TEST_F(CudaDeepseekOpsTest, MoeBlockReplaysFromAGraph) {
  CudaBackend fused(block_on()), separate;
  const BlockCase c = kCases[0];
  Block b = make_block(this, fused, c.E, c.H, c.I, c.K, c.shared_units, c.sigmoid, c.ties);
  Tensor d = cuda::to_device(random_bf16_values({1, c.H}, 4.0f));
  auto body = [&] {
    fused.norm_moe_experts_residual(d, b.norm_g, 1e-6f, b.router_g, b.bias_g, b.routing, b.experts.gpu,
                                    &b.shared.gpu);
  };
  body();  // eager first: allots the counters
  const int64_t before = cuda::moe_block_launches();
  cuda::begin_capture();
  body();
  cuda::GraphHandle graph = cuda::end_capture(true);
  ASSERT_EQ(cuda::moe_block_launches(), before + 1) << "the capture did not take the one-launch block";
  for (int replay = 0; replay < 4; ++replay) {
    const Tensor h = random_bf16_values({1, c.H}, 4.0f);
    cuda::copy_to_device(d.raw(), h.raw(), h.nbytes());
    cuda::launch_graph(graph);
    const Tensor got = fused.to_host(d);
    const Outcome want = run_block(separate, b, h);
    EXPECT_EQ(differing(got, want.residual), 0) << "replay " << replay;
    std::vector<int32_t> counters(cuda::kMoeBlockCounters, -1);
    cuda::copy_to_host(counters.data(), cuda::decode_arrivals(cuda::kMoeBlockCounters),
                       counters.size() * sizeof(int32_t));
    for (int i = 0; i < cuda::kMoeBlockCounters; ++i)
      EXPECT_EQ(counters[i], 0) << "counter " << i << " not reset, replay " << replay;
  }
  cuda::destroy_graph(graph);
}

// Shapes the kernel does not take run the separate path (the same bits, no launch of the kernel): more than
// one token; an intermediate size that is not a multiple of 128; top k past the units the launch holds.
TEST_F(CudaDeepseekOpsTest, MoeBlockFallsBackWhereItDoesNotApply) {
  CudaBackend fused(block_on()), separate;
  for (auto [E, H, I, K, T] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{64, 2048, 1408, 6, 2},
                               {64, 2048, 1440, 6, 1},
                               {64, 2048, 1408, 15, 1}}) {
    Block b = make_block(this, fused, E, H, I, K, 2, false, false);
    const Tensor h = random_bf16_values({T, H}, 4.0f);
    Tensor df = cuda::to_device(h), ds = cuda::to_device(h);
    const int64_t before = cuda::moe_block_launches();
    fused.norm_moe_experts_residual(df, b.norm_g, 1e-6f, b.router_g, b.bias_g, b.routing, b.experts.gpu,
                                    &b.shared.gpu);
    separate.norm_moe_experts_residual(ds, b.norm_g, 1e-6f, b.router_g, b.bias_g, b.routing, b.experts.gpu,
                                       &b.shared.gpu);
    EXPECT_EQ(cuda::moe_block_launches(), before) << "I=" << I << " K=" << K << " T=" << T;
    EXPECT_EQ(differing(fused.to_host(df), separate.to_host(ds)), 0) << "I=" << I << " K=" << K << " T=" << T;
  }
}

// V2-Lite's block at batch 1, us per block in a CUDA graph of 4 blocks on distinct copies of the weights
// (so that the L2 does not serve repeats): the one launch against norm_moe_route + the two units launches.
TEST_F(CudaDeepseekOpsTest, DISABLED_BenchMoeBlock) {
  CudaBackend fused(block_on()), separate;
  constexpr int kCopies = 4;
  const Block b = make_block(this, fused, 64, 2048, 1408, 6, 2, false, false);
  // Device copies of the experts and the shared MLP (restacked by prepare_experts).
  auto copy = [](const Tensor& w) {
    Tensor out = Tensor::empty_on(Device::kCuda, w.dtype(), w.shape());
    cuda::copy_device_to_device(out.raw(), w.raw(), w.nbytes());
    return out;
  };
  std::vector<std::vector<MlpWeights>> experts(kCopies);
  std::vector<MlpWeights> shared(kCopies);
  for (int l = 0; l < kCopies; ++l) {
    for (const MlpWeights& m : b.experts.gpu) {
      MlpWeights c;
      c.gate.weight = copy(m.gate.weight);
      c.up.weight = copy(m.up.weight);
      c.down.weight = copy(m.down.weight);
      experts[l].push_back(std::move(c));
    }
    fused.prepare_experts(experts[l]);
    shared[l].gate.weight = copy(b.shared.gpu.gate.weight);
    shared[l].up.weight = copy(b.shared.gpu.up.weight);
    shared[l].down.weight = copy(b.shared.gpu.down.weight);
  }
  Tensor d = cuda::to_device(random_bf16_values({1, 2048}, 4.0f));
  for (auto [name, backend] :
       {std::pair<const char*, CudaBackend*>{"one launch", &fused}, {"separate", &separate}}) {
    auto one = [&, backend = backend](int64_t l) {
      backend->norm_moe_experts_residual(d, b.norm_g, 1e-6f, b.router_g, b.bias_g, b.routing,
                                         experts[static_cast<size_t>(l)], &shared[static_cast<size_t>(l)]);
    };
    const double us = cuda::time_graph_us_per_copy(kCopies, one, 50);
    std::printf("V2-Lite MoE block, batch 1, %-10s: %7.2f us a block (its 138.2 MB at 4.29 TB/s: 32.2 us)\n",
                name, us);
  }

  // One launch's timeline: per point, us after the first block's start over the blocks that have it.
  const Block& l0 = b;
  cuda::MoeBlockArgs a;
  a.residual = d.data<float>();
  a.norm = l0.norm_g.data<uint16_t>();
  a.eps = 1e-6f;
  a.H = 2048;
  a.router = l0.router_g.data<uint16_t>();
  a.E = 64;
  const auto base = [](const std::vector<MlpWeights>& ex, Linear MlpWeights::*which, int64_t* stride) {
    const auto* p0 = static_cast<const uint16_t*>((ex[0].*which).weight.raw());
    *stride = static_cast<const uint16_t*>((ex[1].*which).weight.raw()) - p0;
    return p0;
  };
  cuda::GemvMoeUnits& u = a.units;
  u.count = 8;
  u.known = 2;
  u.len = 1408;
  u.experts = 64;
  u.gate = base(experts[0], &MlpWeights::gate, &u.gate_stride);
  u.up = base(experts[0], &MlpWeights::up, &u.up_stride);
  u.down = base(experts[0], &MlpWeights::down, &u.down_stride);
  u.shared_gate = shared[0].gate.weight.data<uint16_t>();
  u.shared_up = shared[0].up.weight.data<uint16_t>();
  u.shared_down = shared[0].down.weight.data<uint16_t>();
  const auto i32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::I32, {n}); };
  const auto f32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::F32, {n}); };
  Tensor ids = i32(6), weights = f32(6), logits = f32(64), act = f32(8 * 1408);
  const int grid = cuda::moe_block_grid();
  Tensor stamps = Tensor::empty_on(Device::kCuda, DType::I64, {grid * cuda::kMoeBlockStampPoints});
  a.ids = ids.data<int32_t>();
  a.weights = weights.data<float>();
  a.logits = logits.data<float>();
  a.act = act.data<float>();
  a.counters = cuda::decode_arrivals(cuda::kMoeBlockCounters);
  a.stamps = reinterpret_cast<uint64_t*>(stamps.raw());
  cuda::MoeRouteParams rp;
  rp.top_k = 6;
  ASSERT_TRUE(cuda::moe_block_supported(a, rp));
  const std::vector<char> zeros(static_cast<size_t>(stamps.nbytes()), 0);
  cuda::copy_to_device(stamps.raw(), zeros.data(), zeros.size());
  cuda::launch_moe_block(a, rp);
  std::vector<uint64_t> t(static_cast<size_t>(grid * cuda::kMoeBlockStampPoints));
  cuda::copy_to_host(t.data(), stamps.raw(), t.size() * sizeof(uint64_t));
  uint64_t t0 = ~uint64_t{0};
  for (int blk = 0; blk < grid; ++blk)
    t0 = std::min(t0, t[static_cast<size_t>(blk * cuda::kMoeBlockStampPoints)]);
  const char* names[cuda::kMoeBlockStampPoints] = {
      "start",       "x formed",     "routing published", "shared gate/up", "barrier A",
      "shared down", "routing seen", "gate/up done",      "barrier C",      "end"};
  std::printf(
      "one launch's timeline (us after the first block's start, over the blocks that have the point)\n");
  for (int point = 0; point < cuda::kMoeBlockStampPoints; ++point) {
    std::vector<double> v;
    for (int blk = 0; blk < grid; ++blk) {
      const uint64_t x = t[static_cast<size_t>(blk * cuda::kMoeBlockStampPoints + point)];
      if (x != 0) v.push_back(static_cast<double>(x - t0) / 1000.0);
    }
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    std::printf("  %-18s blocks %3zu  min %7.2f  median %7.2f  max %7.2f\n", names[point], v.size(),
                v.front(), v[v.size() / 2], v.back());
  }
}

#else

TEST(CudaMoeBlockTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
