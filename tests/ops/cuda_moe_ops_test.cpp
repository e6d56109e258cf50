// CudaBackend's DeepSeekMoE ops (routing, the fused decode routing, routed experts on every kernel path)
// against the CPU reference and against each other on random inputs (runs where a GPU is visible; CI
// compiles it and skips).
#include "cuda_deepseek_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

// ---- routing ----

struct RouteCase {
  std::string scoring, method;
  int64_t E, K, groups, topk_group;
  bool norm;
  float scale;
  bool bias;
};

// Router inputs on a coarse grid (x in {-2..2}/8, router in {-2..2}/16) so that logits are exact in fp32
// whatever the summation order; equal router rows (and biases) plant exact ties. Tokens whose biased
// selection values would come within 1e-5 of each other without being equal are drawn again, so the two
// backends cannot disagree through rounding.
TEST_F(CudaDeepseekOpsTest, MoeRouteMatchesCpu) {
  CudaBackend gpu;
  const int64_t H = 64;
  for (const RouteCase& c : {RouteCase{"softmax", "greedy", 64, 6, 1, 1, false, 1.0f, false},
                             RouteCase{"softmax", "greedy", 64, 6, 1, 1, true, 1.0f, false},
                             RouteCase{"softmax", "group_limited_greedy", 64, 6, 8, 3, false, 16.0f, false},
                             RouteCase{"sigmoid", "noaux_tc", 256, 8, 8, 4, true, 2.5f, true},
                             RouteCase{"sigmoid", "noaux_tc", 8, 3, 4, 2, true, 2.5f, true},
                             RouteCase{"sigmoid", "noaux_tc", 4, 2, 1, 1, true, 2.5f, false},
                             RouteCase{"sigmoid", "noaux_tc", 256, 8, 1, 1, true, 2.5f, true},
                             RouteCase{"sigmoid", "noaux_tc", 64, 4, 4, 4, true, 2.5f, true},
                             RouteCase{"softmax", "greedy", 6, 1, 1, 1, true, 1.0f, false},
                             RouteCase{"sqrtsoftplus", "greedy", 32, 4, 1, 1, true, 1.5f, false}}) {
    const int64_t E = c.E, T = 600;
    std::uniform_int_distribution<int> small(-2, 2);
    Tensor router = Tensor::empty(DType::F32, {E, H});
    for (int64_t i = 0; i < E * H; ++i) router.f32()[i] = small(rng) / 16.0f;
    Tensor bias;
    if (c.bias) {
      bias = Tensor::empty(DType::F32, {E});
      // Whole numbers: sigmoid scores differ by less than 1, so experts of different biases never tie.
      for (int64_t e = 0; e < E; ++e) bias.f32()[e] = static_cast<float>((e * 37) % 3);
    }
    // Planted ties: expert 1 copies expert 0; with groups, group 1 copies group 0.
    auto copy_expert = [&](int64_t dst, int64_t src) {
      std::copy(router.f32() + src * H, router.f32() + (src + 1) * H, router.f32() + dst * H);
      if (bias) bias.f32()[dst] = bias.f32()[src];
    };
    copy_expert(1, 0);
    if (c.groups > 1) {
      const int64_t per = E / c.groups;
      for (int64_t i = 0; i < per; ++i) copy_expert(per + i, i);
    }
    Tensor x = Tensor::empty(DType::F32, {T, H});
    for (int64_t t = 0; t < T; ++t) {
      for (int attempt = 0;; ++attempt) {
        for (int64_t i = 0; i < H; ++i) x.f32()[t * H + i] = small(rng) / 8.0f;
        if (!bias) break;
        // Biased selection values in double: distinct (logit, bias) pairs must stay 1e-5 apart.
        std::vector<std::pair<double, double>> key(E);
        std::vector<double> v(E);
        for (int64_t e = 0; e < E; ++e) {
          double l = 0;
          for (int64_t i = 0; i < H; ++i) l += double(x.f32()[t * H + i]) * router.f32()[e * H + i];
          key[e] = {l, bias.f32()[e]};
          v[e] = 1.0 / (1.0 + std::exp(-l)) + bias.f32()[e];
        }
        bool separated = true;
        for (int64_t a = 0; a < E && separated; ++a)
          for (int64_t b = a + 1; b < E && separated; ++b)
            if (key[a] != key[b] && std::abs(v[a] - v[b]) < 1e-5) separated = false;
        // Group scores (sum of the top two) likewise.
        const int64_t per = E / c.groups;
        std::vector<double> gs(c.groups);
        std::vector<std::vector<std::pair<double, double>>> gkey(c.groups);
        for (int64_t g = 0; g < c.groups; ++g) {
          std::vector<int64_t> idx(per);
          for (int64_t i = 0; i < per; ++i) idx[i] = g * per + i;
          std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
          for (int64_t i = 0; i < std::min<int64_t>(2, per); ++i) {
            gs[g] += v[idx[i]];
            gkey[g].push_back(key[idx[i]]);
          }
          std::sort(gkey[g].begin(), gkey[g].end());
        }
        for (int64_t a = 0; a < c.groups && separated; ++a)
          for (int64_t b = a + 1; b < c.groups && separated; ++b)
            if (gkey[a] != gkey[b] && std::abs(gs[a] - gs[b]) < 1e-5) separated = false;
        if (separated) break;
        ASSERT_LT(attempt, 100) << "could not draw separated router inputs";
      }
    }
    RoutingParams p;
    p.scoring = c.scoring;
    p.method = c.method;
    p.top_k = c.K;
    p.n_group = c.groups;
    p.topk_group = c.topk_group;
    p.norm_topk_prob = c.norm;
    p.routed_scaling_factor = c.scale;
    Tensor ref_ids, ref_w;
    cpu.moe_route(x, router, bias, p, &ref_ids, &ref_w);
    Tensor ids, w;
    gpu.moe_route(cuda::to_device(x), gpu.prepare_weight(router),
                  bias ? gpu.prepare_weight_f32(bias) : Tensor(), p, &ids, &w);
    const Tensor hids = cuda::to_host(ids), hw = gpu.to_host(w);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < T * c.K; ++i) mismatches += hids.data<int32_t>()[i] != ref_ids.data<int32_t>()[i];
    EXPECT_EQ(mismatches, 0) << c.scoring << "/" << c.method << " E=" << E;
    EXPECT_LT(rel_err(hw, ref_w), 1e-5) << c.scoring << "/" << c.method << " E=" << E;
    // Smaller batches (tails of the 8-token logits tiles and 4-token selection blocks) give the same rows.
    for (int64_t Ts : {1, 3, 64, 257}) {
      Tensor ids_s, w_s;
      gpu.moe_route(cuda::to_device(x.rows(0, Ts)), gpu.prepare_weight(router),
                    bias ? gpu.prepare_weight_f32(bias) : Tensor(), p, &ids_s, &w_s);
      const Tensor hids_s = cuda::to_host(ids_s), hw_s = gpu.to_host(w_s);
      int64_t differ = 0;
      for (int64_t i = 0; i < Ts * c.K; ++i)
        differ += hids_s.data<int32_t>()[i] != ref_ids.data<int32_t>()[i] || hw_s.f32()[i] != hw.f32()[i];
      EXPECT_EQ(differ, 0) << c.scoring << "/" << c.method << " E=" << E << " T=" << Ts;
    }
    // The planted tie is taken in index order whenever both experts are chosen.
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* row = hids.data<int32_t>() + t * c.K;
      const int32_t* pos1 = std::find(row, row + c.K, 1);
      if (pos1 != row + c.K) {
        EXPECT_NE(std::find(row, pos1, 0), pos1) << "expert 1 chosen before its tie partner 0, token " << t;
      }
    }
  }
}

// ---- experts ----

// [T, K] I32 expert ids, skewed: slot 0 always takes expert E / 2 + 1 (the busy one, T rows); the rest come
// from the lower half, so the upper experts but one stay empty (K < E / 2 + 1).
Tensor skewed_expert_ids(std::mt19937& rng, int64_t T, int64_t K, int64_t E) {
  Tensor ids = Tensor::empty(DType::I32, {T, K});
  std::uniform_int_distribution<int> lower(0, static_cast<int>(std::max<int64_t>(E / 2, K)) - 1);
  for (int64_t t = 0; t < T; ++t) {
    std::set<int> used = {static_cast<int>(E / 2 + 1)};
    ids.data<int32_t>()[t * K] = static_cast<int32_t>(E / 2 + 1);
    for (int64_t k = 1; k < K; ++k) {
      int e;
      do e = lower(rng);
      while (!used.insert(e).second);
      ids.data<int32_t>()[t * K + k] = e;
    }
  }
  return ids;
}

TEST_F(CudaDeepseekOpsTest, MoeExpertsMatchCpuWithSkewedRouting) {
  CudaBackend gpu(CudaBackendOptions{true});  // tensor-core tiles keep ~16 bits of each activation
  CudaBackend plain;                          // tensor-core tiles round activations to bf16 (the default)
  for (auto [E, H, I, K] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 96, 6},
                            {8, 64, 32, 3},
                            {6, 72, 40, 3},
                            {5, 60, 36, 2},
                            {4, 62, 20, 2}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    std::vector<MlpWeights> stacked = experts.gpu;
    gpu.prepare_experts(stacked);
    // prepare_experts leaves every kind at one fixed stride (restacked, or already so when the allocator
    // happened to place the separate tensors that way).
    const auto* gate0 = static_cast<const char*>(stacked[0].gate.weight.raw());
    const int64_t stride = static_cast<const char*>(stacked[1].gate.weight.raw()) - gate0;
    for (int64_t e = 0; e < E; ++e)
      EXPECT_EQ(static_cast<const char*>(stacked[e].gate.weight.raw()) - gate0, e * stride) << "expert " << e;
    // Streaming tiles of 8, 16, 32 and 64 rows (72 x 40: feature and K tails), the 64-row tensor-core tiles
    // (more rows per expert) and the CUDA-core tiles of 1, 2, 4 and 8 rows (H 60: not a multiple of 8).
    for (int64_t T : {1, 3, 7, 64, 128, 200, 257, 600, 1366}) {
      const Tensor ids = skewed_expert_ids(rng, T, K, E);
      const Tensor weights = random_bf16_values({T, K});
      const Tensor x = random_bf16_values({T, H});
      const Tensor ref = cpu.moe_experts(x, ids, weights, experts.cpu);
      const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
      for (const std::vector<MlpWeights>* set : {&experts.gpu, &stacked}) {
        const Tensor out = gpu.to_host(gpu.moe_experts(dx, dids, dw, *set));
        EXPECT_LT(rel_err(out, ref), 1e-4) << "E=" << E << " H=" << H << " I=" << I << " T=" << T
                                           << (set == &stacked ? " stacked" : " separate");
      }
      EXPECT_LT(rel_err(plain.to_host(plain.moe_experts(dx, dids, dw, stacked)), ref), 1e-2)
          << "bf16 activations, E=" << E << " T=" << T;
    }
  }
}

// A token's output does not depend on the other tokens of its batch as long as the batch stays in one
// next_pow2 bucket (as a CUDA graph pads it): the rows a tile shares with others never change its sums.
TEST_F(CudaDeepseekOpsTest, MoeExpertsRowsIndependentOfBatchInBucket) {
  CudaBackend gpu(CudaBackendOptions{true});
  const int64_t E = 64, H = 256, I = 96, K = 6, Tmax = 512;
  ExpertSet experts = make_experts(this, gpu, E, H, I);
  gpu.prepare_experts(experts.gpu);
  const Tensor x = random_bf16_values({Tmax, H}), weights = random_bf16_values({Tmax, K});
  const Tensor ids = distinct_expert_ids(rng, Tmax, K, E);  // [Tmax, K]
  // The first T rows of x, ids and weights as device tensors.
  auto head = [](const Tensor& t, int64_t T) {
    Tensor h = Tensor::empty(t.dtype(), {T, t.dim(1)});
    std::copy_n(static_cast<const char*>(t.raw()), h.nbytes(), static_cast<char*>(h.raw()));
    return cuda::to_device(h);
  };
  auto run = [&](int64_t T) {
    return gpu.to_host(gpu.moe_experts(head(x, T), head(ids, T), head(weights, T), experts.gpu));
  };
  for (auto [small, big] : {std::pair<int64_t, int64_t>{5, 8}, {33, 64}, {65, 128}, {129, 256}, {257, 512}}) {
    const Tensor a = run(small), b = run(big);
    int64_t differ = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
    EXPECT_EQ(differ, 0) << "T " << small << " vs " << big;
  }
}

// The grouped bf16 GEMMs (above 64 bucketed rows per expert; activations and the SiLU-mul output rounded to
// bf16, so the bf16 tolerance of the unsplit path) in every tile variant: skewed routing (one expert with
// every token, empty experts, rows not a multiple of the tile), feature and K tails (I 96, 40; H 72), a
// swiglu limit, and the V2-Lite and V3 expert shapes (few experts, so that the CPU reference stays quick).
TEST_F(CudaDeepseekOpsTest, MoeExpertsGroupedGemmMatchesCpu) {
  CudaBackend gpu;
  struct Case {
    int64_t E, H, I, K;
    float limit;
    std::vector<int64_t> tokens;
  };
  for (const Case& c : {Case{64, 256, 96, 6, 0.0f, {600, 1366}}, Case{8, 64, 32, 3, 0.5f, {200, 600}},
                        Case{6, 72, 40, 3, 0.0f, {200, 257}}, Case{4, 2048, 1408, 2, 0.0f, {130, 300}},
                        Case{4, 7168, 2048, 2, 0.0f, {150}}}) {
    ExpertSet experts = make_experts(this, gpu, c.E, c.H, c.I);
    for (size_t e = 0; e < experts.cpu.size(); ++e)
      experts.cpu[e].swiglu_limit = experts.gpu[e].swiglu_limit = c.limit;
    gpu.prepare_experts(experts.gpu);
    for (int64_t T : c.tokens) {
      const Tensor ids = skewed_expert_ids(rng, T, c.K, c.E);
      const Tensor weights = random_bf16_values({T, c.K});
      const Tensor x = random_bf16_values({T, c.H});
      const Tensor ref = cpu.moe_experts(x, ids, weights, experts.cpu);
      const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
      for (int variant = 0; variant <= cuda::kMoeGroupedVariants; ++variant) {
        CudaBackend b(CudaBackendOptions{.moe_grouped_variant = variant});
        const Tensor out = b.to_host(b.moe_experts(dx, dids, dw, experts.gpu));
        EXPECT_LT(rel_err(out, ref), 1e-2) << "variant " << variant << " E=" << c.E << " H=" << c.H
                                           << " I=" << c.I << " K=" << c.K << " T=" << T;
      }
    }
  }
}

// The wgmma grouped kernels (Hopper path only) on one expert's tile(s) against an exact CPU product: small
// integer operands, so every fp32 sum is exact and a descriptor, swizzle or accumulator-layout mistake shows
// as mismatching (row, column) positions (the first few are printed). Down (fp32 out) exactly; gate/up
// (SiLU-mul, bf16 out, x rows gathered through slot_pair / topk) within bf16 rounding. Cases: 64 x 128 x 64
// (one k step), padding rows (a 128-row tile with 64 or 100 rows: an idle warpgroup), several k steps, K and
// N tails (K 72, N 136).
TEST_F(CudaDeepseekOpsTest, MoeWgmmaSingleTileExact) {
  if (cuda::arch_path() != cuda::ArchPath::kHopper) GTEST_SKIP() << "wgmma runs on the Hopper path only";
  CudaBackend gpu;  // registers the device allocator
  struct Case {
    int variant;
    int64_t rows, K, N;
  };
  std::uniform_int_distribution<int> small(-3, 3);
  auto ints = [&](Shape shape) {
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(small(rng));
    return t;
  };
  for (const Case& c :
       {Case{7, 64, 64, 128}, Case{7, 37, 64, 128}, Case{5, 64, 64, 128}, Case{5, 128, 128, 256},
        Case{6, 128, 192, 256}, Case{6, 200, 128, 512}, Case{8, 100, 72, 136}}) {
    const int tile_rows = cuda::moe_grouped_tile_rows(c.variant);
    const std::string what = "variant " + std::to_string(c.variant) + " rows " + std::to_string(c.rows) +
                             " K " + std::to_string(c.K) + " N " + std::to_string(c.N);
    const Tensor a = ints({c.rows, c.K}), w = ints({c.N, c.K}), w_up = ints({c.N, c.K});  // [rows, K], [N, K]
    Tensor off = Tensor::empty(DType::I32, {2}), tiles = Tensor::empty(DType::I32, {2});
    off.data<int32_t>()[0] = 0;
    off.data<int32_t>()[1] = static_cast<int32_t>(c.rows);
    tiles.data<int32_t>()[0] = 0;
    tiles.data<int32_t>()[1] = static_cast<int32_t>((c.rows + tile_rows - 1) / tile_rows);
    // Gate/up gathers row r from x row p(r) = rows - 1 - r through slot_pair[r] = 2 p(r) + r % 2 (topk 2).
    Tensor slot_pair = Tensor::empty(DType::I32, {c.rows});
    for (int64_t r = 0; r < c.rows; ++r)
      slot_pair.data<int32_t>()[r] = static_cast<int32_t>(2 * (c.rows - 1 - r) + r % 2);
    Tensor da = cuda::to_device(to_bf16_bits(a)), dw = cuda::to_device(to_bf16_bits(w)),
           dw_up = cuda::to_device(to_bf16_bits(w_up)), doff = cuda::to_device(off),
           dtiles = cuda::to_device(tiles), dslot = cuda::to_device(slot_pair);
    Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {c.rows, c.N});     // [rows, N]
    Tensor act = Tensor::empty_on(Device::kCuda, DType::BF16, {c.rows, c.N});  // [rows, N]
    cuda::launch_moe_down_grouped(
        c.variant, da.data<uint16_t>(), doff.data<int32_t>(), dtiles.data<int32_t>(),
        cuda::StackedWeights{dw.data<uint16_t>(), c.N * c.K}, y.data<float>(), c.rows, 1, c.N, c.K);
    cuda::launch_moe_gate_up_grouped(c.variant, da.data<uint16_t>(), 2, doff.data<int32_t>(),
                                     dtiles.data<int32_t>(), dslot.data<int32_t>(),
                                     cuda::StackedWeights{dw.data<uint16_t>(), c.N * c.K},
                                     cuda::StackedWeights{dw_up.data<uint16_t>(), c.N * c.K},
                                     act.data<uint16_t>(), c.rows, 1, c.K, c.N, 0.0f);
    const Tensor hy = gpu.to_host(y), hact = gpu.to_host(act);
    int64_t bad_down = 0, bad_gate_up = 0;
    std::string first;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t n = 0; n < c.N; ++n) {
        double dot = 0, gate = 0, up = 0;
        const int64_t src = c.rows - 1 - r;
        for (int64_t k = 0; k < c.K; ++k) {
          dot += double(a.f32()[r * c.K + k]) * w.f32()[n * c.K + k];
          gate += double(a.f32()[src * c.K + k]) * w.f32()[n * c.K + k];
          up += double(a.f32()[src * c.K + k]) * w_up.f32()[n * c.K + k];
        }
        const float got = hy.f32()[r * c.N + n];
        if (got != static_cast<float>(dot) && ++bad_down <= 8)
          first += " down(" + std::to_string(r) + "," + std::to_string(n) + ")=" + std::to_string(got) +
                   " want " + std::to_string(dot);
        const double want = gate / (1.0 + std::exp(-gate)) * up, got_act = hact.f32()[r * c.N + n];
        if (std::abs(got_act - want) > std::abs(want) / 128 + 1e-3 && ++bad_gate_up <= 8)
          first += " act(" + std::to_string(r) + "," + std::to_string(n) + ")=" + std::to_string(got_act) +
                   " want " + std::to_string(want);
      }
    }
    EXPECT_EQ(bad_down, 0) << what << ":" << first;
    EXPECT_EQ(bad_gate_up, 0) << what << ":" << first;
  }
}

// Every grouped variant (the wgmma ones on Hopper, and forced onto the Ampere path, where they run their
// mma.sync twins) on ragged experts: an empty one and 64 to 259 rows (tile tails on both tile sizes), with
// K tails (H 72, I 40 and 200), feature tails (I 40, 200) and top-2 gathers.
TEST_F(CudaDeepseekOpsTest, MoeExpertsGroupedRaggedExpertsMatchCpu) {
  CudaBackend gpu;
  const std::vector<int64_t> counts = {0, 1, 63, 64, 65, 127, 128, 131};
  const int64_t E = static_cast<int64_t>(counts.size()), K = 2;
  for (auto [H, I] : {std::pair<int64_t, int64_t>{72, 40}, {256, 200}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    gpu.prepare_experts(experts.gpu);
    // Slot 0 of the tokens of block e takes expert e, slot 1 expert e + 1 (the last block: expert 1), so
    // expert e holds counts[e] + counts[e - 1] rows: 0 (empty), 132, 64, 127, 129, 192, 255, 259.
    int64_t T = 0;
    for (int64_t c : counts) T += c;
    Tensor ids = Tensor::empty(DType::I32, {T, K});
    int64_t t = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < counts[e]; ++i, ++t) {
        ids.data<int32_t>()[t * K] = static_cast<int32_t>(e);
        ids.data<int32_t>()[t * K + 1] = static_cast<int32_t>(e + 1 < E ? e + 1 : 1);
      }
    }
    const Tensor weights = random_bf16_values({T, K}), x = random_bf16_values({T, H});
    const Tensor ref = cpu.moe_experts(x, ids, weights, experts.cpu);
    const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
    for (const char* path : {"", "sm_80"}) {
      cuda::init_arch_path(path);
      for (int variant = 1; variant <= cuda::kMoeGroupedVariants; ++variant) {
        CudaBackend b(CudaBackendOptions{.moe_grouped_variant = variant});
        const Tensor out = b.to_host(b.moe_experts(dx, dids, dw, experts.gpu));
        EXPECT_LT(rel_err(out, ref), 1e-2)
            << "variant " << variant << " path '" << path << "' H=" << H << " I=" << I;
      }
    }
    cuda::init_arch_path("");
  }
}

// ---- fused decode routing (norm_moe_route) ----

const FusedRouteCase kFusedRouteCases[] = {
    {"softmax", "greedy", 64, 6, 1, 1, false, false},                 // V2-Lite
    {"softmax", "greedy", 64, 6, 1, 1, true, false},                  //
    {"softmax", "group_limited_greedy", 160, 6, 8, 3, false, false},  // V2
    {"sigmoid", "noaux_tc", 256, 8, 8, 4, true, true},                // V3
    {"sigmoid", "noaux_tc", 64, 8, 4, 2, true, true},                 //
    {"sqrtsoftplus", "greedy", 160, 8, 1, 1, true, false},            //
    {"sigmoid", "group_limited_greedy", 256, 6, 8, 4, false, true},   // bias ignored outside noaux_tc
    {"softmax", "greedy", 6, 2, 1, 1, false, false},                  // tiny-deepseek-v2 (one block)
    {"sigmoid", "noaux_tc", 8, 3, 4, 2, true, true},                  // tiny-deepseek-v3
    {"sqrtsoftplus", "noaux_tc", 256, 6, 1, 1, true, true},           // V4-Flash: one group, none masked
    {"sigmoid", "noaux_tc", 64, 4, 4, 4, true, true},                 // every group kept
};

// Random router [E, H] with planted ties (expert 1 = expert 0; with groups, group 1 = group 0).
Tensor tied_router(CudaDeepseekOpsTest* test, int64_t E, int64_t H, int64_t groups) {
  Tensor router = test->random_bf16_values({E, H}, 0.05f);
  auto copy_expert = [&](int64_t dst, int64_t src) {
    std::copy(router.f32() + src * H, router.f32() + (src + 1) * H, router.f32() + dst * H);
  };
  copy_expert(1, 0);
  if (groups > 1)
    for (int64_t i = 0; i < E / groups; ++i) copy_expert(E / groups + i, i);
  return router;
}

// The fused decode routing kernel against launch_rms_norm + launch_moe_route + launch_moe_permute on random
// inputs: x, logits (the plain form; the cluster form keeps them in shared memory), ids and weights bit for
// bit, offsets and tiles equal, and both permutations consistent (the fused one in pair order within an
// expert); the arrival counter is zero again after each launch.
TEST_F(CudaDeepseekOpsTest, MoeNormRouteKernelEqualsSeparateKernels) {
  CudaBackend gpu;       // registers the device allocator
  int cluster_runs = 0;  // the cluster form at V2-Lite's router shape
  for (const FusedRouteCase& c : kFusedRouteCases) {
    for (int64_t H : {2048, 7168, 264, 64}) {
      const int64_t E = c.E, K = c.K;
      const cuda::MoeRouteParams rp = kernel_route_params(c);
      const Tensor router = device_bf16(tied_router(this, E, H, c.groups));
      const Tensor norm = device_bf16(random_bf16_values({H}, 0.5f));
      Tensor bias_host = Tensor::empty(DType::F32, {E});
      for (int64_t e = 0; e < E; ++e) bias_host.f32()[e] = 0.01f * static_cast<float>((e * 37) % 11);
      bias_host.f32()[1] = bias_host.f32()[0];
      const Tensor bias = c.bias ? cuda::to_device(bias_host) : Tensor();
      const float* bias_d = c.bias ? bias.data<float>() : nullptr;
      for (int64_t T = 1; T <= cuda::kMoeNormRouteMaxTokens; ++T) {
        const int64_t pairs = T * K;
        const Tensor h = cuda::to_device(random_bf16_values({T, H}, 3.0f));
        for (int tile_rows : {1, 8, 64}) {
          auto i32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::I32, {n}); };
          auto f32 = [](int64_t n) { return Tensor::empty_on(Device::kCuda, DType::F32, {n}); };
          // Separate kernels.
          Tensor x_s = f32(T * H), logits_s = f32(T * E), ids_s = i32(pairs), w_s = f32(pairs);
          Tensor off_s = i32(E + 1), tiles_s = i32(E + 1), sp_s = i32(pairs), ps_s = i32(pairs);
          cuda::launch_rms_norm(h.data<float>(), norm.data<uint16_t>(), x_s.data<float>(), T, H, 1e-6f);
          cuda::launch_moe_route(x_s.data<float>(), router.data<uint16_t>(), bias_d, logits_s.data<float>(),
                                 ids_s.data<int32_t>(), w_s.data<float>(), T, H, E, rp);
          cuda::launch_moe_permute(ids_s.data<int32_t>(), pairs, E, tile_rows, off_s.data<int32_t>(),
                                   tiles_s.data<int32_t>(), sp_s.data<int32_t>(), ps_s.data<int32_t>());
          // The fused kernel, twice (the counter must be back at zero for the second launch); then its
          // cluster form where it takes the shape (no counter, no logits scratch).
          for (const bool cluster : {false, true}) {
            Tensor x_f = f32(T * H), logits_f = f32(T * E), ids_f = i32(pairs), w_f = f32(pairs);
            Tensor off_f = i32(E + 1), tiles_f = i32(E + 1), sp_f = i32(pairs), ps_f = i32(pairs);
            cuda::MoeNormRouteArgs a;
            a.h = h.data<float>();
            a.norm = norm.data<uint16_t>();
            a.eps = 1e-6f;
            a.router = router.data<uint16_t>();
            a.bias = bias_d;
            a.x = x_f.data<float>();
            a.logits = logits_f.data<float>();
            a.ids = ids_f.data<int32_t>();
            a.weights = w_f.data<float>();
            a.tile_rows = tile_rows;
            a.offsets = off_f.data<int32_t>();
            a.tiles = tiles_f.data<int32_t>();
            a.slot_pair = sp_f.data<int32_t>();
            a.pair_slot = ps_f.data<int32_t>();
            a.arrivals = cluster ? nullptr : cuda::decode_arrivals(1);
            a.logits = cluster ? nullptr : a.logits;
            a.cluster = cluster;
            a.T = static_cast<int>(T);
            a.H = static_cast<int>(H);
            a.E = static_cast<int>(E);
            ASSERT_TRUE(cuda::moe_norm_route_supported(a, rp)) << "E=" << E << " H=" << H << " T=" << T;
            if (cluster && !cuda::moe_norm_route_cluster_supported(a, rp)) continue;
            cluster_runs += cluster && E == 64 && H == 2048;
            for (int rep = 0; rep < 2; ++rep) {
              cuda::launch_moe_norm_route(a, rp);
              if (cluster) continue;
              int32_t counter = -1;
              cuda::copy_to_host(&counter, a.arrivals, sizeof(counter));
              ASSERT_EQ(counter, 0) << "the arrival counter was not reset";
            }
            const std::string where = std::string(cluster ? "cluster " : "") + c.scoring + "/" + c.method +
                                      " E=" + std::to_string(E) + " K=" + std::to_string(K) +
                                      " H=" + std::to_string(H) + " T=" + std::to_string(T) + " tile " +
                                      std::to_string(tile_rows);
            auto same_bits = [&](const Tensor& u, const Tensor& v, const char* what) {
              const Tensor hu = cuda::to_host(u), hv = cuda::to_host(v);
              int64_t differ = 0;
              for (int64_t i = 0; i < hu.numel(); ++i)
                differ +=
                    static_cast<const uint32_t*>(hu.raw())[i] != static_cast<const uint32_t*>(hv.raw())[i];
              EXPECT_EQ(differ, 0) << what << " differ, " << where;
            };
            same_bits(x_f, x_s, "x");
            if (!cluster) same_bits(logits_f, logits_s, "logits");
            same_bits(ids_f, ids_s, "ids");
            same_bits(w_f, w_s, "weights");
            same_bits(off_f, off_s, "offsets");
            same_bits(tiles_f, tiles_s, "tiles");
            if (tile_rows == 8) {
              // As the model runs it: three launches back to back captured in a CUDA graph (each one's weight
              // loads before its PDL wait overlap the previous one), replayed into zeroed outputs.
              const std::vector<std::pair<Tensor, int64_t>> outs = {{x_f, T * H * 4},
                                                                    {ids_f, pairs * 4},
                                                                    {w_f, pairs * 4},
                                                                    {off_f, (E + 1) * 4},
                                                                    {tiles_f, (E + 1) * 4}};
              const std::vector<char> zeros(static_cast<size_t>(std::max(T * H, E + 1) * 4), 0);
              cuda::begin_capture();
              for (int rep = 0; rep < 3; ++rep) cuda::launch_moe_norm_route(a, rp);
              cuda::GraphHandle graph = cuda::end_capture(true);
              for (int replay = 0; replay < 2; ++replay) {
                for (const auto& [t, bytes] : outs)
                  cuda::copy_to_device(const_cast<void*>(t.raw()), zeros.data(), bytes);
                cuda::launch_graph(graph);
                same_bits(x_f, x_s, "x (graph)");
                same_bits(ids_f, ids_s, "ids (graph)");
                same_bits(w_f, w_s, "weights (graph)");
                same_bits(off_f, off_s, "offsets (graph)");
                same_bits(tiles_f, tiles_s, "tiles (graph)");
                if (cluster) continue;
                int32_t counter = -1;
                cuda::copy_to_host(&counter, a.arrivals, sizeof(counter));
                ASSERT_EQ(counter, 0) << "the arrival counter was not reset (graph)";
              }
              cuda::destroy_graph(graph);
            }
            // Permutations: pair i sits in its expert's rows (the fused one at rank i among that expert's
            // pairs), and slot_pair inverts pair_slot.
            const Tensor ids = cuda::to_host(ids_f), off = cuda::to_host(off_f);
            for (const auto& [sp, ps, ordered] :
                 {std::tuple<Tensor, Tensor, bool>{sp_f, ps_f, true}, {sp_s, ps_s, false}}) {
              const Tensor hsp = cuda::to_host(sp), hps = cuda::to_host(ps);
              std::vector<int32_t> seen(E, 0);
              for (int64_t i = 0; i < pairs; ++i) {
                const int32_t e = ids.data<int32_t>()[i], slot = hps.data<int32_t>()[i];
                ASSERT_TRUE(e >= 0 && e < E) << where;
                EXPECT_TRUE(slot >= off.data<int32_t>()[e] && slot < off.data<int32_t>()[e + 1]) << where;
                if (ordered) {
                  EXPECT_EQ(slot, off.data<int32_t>()[e] + seen[e]) << where;
                }
                ++seen[e];
                if (slot >= 0 && slot < pairs) {
                  EXPECT_EQ(hsp.data<int32_t>()[slot], i) << where;
                }
              }
            }
          }
        }
      }
    }
  }
  // The cluster form takes V2-Lite's router size on the Hopper path (every such case x 8 token counts x 3
  // tile sizes).
  int v2_lite_cases = 0;
  for (const FusedRouteCase& c : kFusedRouteCases) v2_lite_cases += c.E == 64;
  if (cuda::arch_path() == cuda::ArchPath::kHopper) {
    EXPECT_EQ(cluster_runs, v2_lite_cases * cuda::kMoeNormRouteMaxTokens * 3);
  }
}

// The backend op: norm_moe_route (fused up to 8 tokens, its dispatch used by moe_experts_residual) gives the
// bits of rms_norm + moe_route + moe_experts_residual, and x within rounding of the CPU reference's norm.
TEST_F(CudaDeepseekOpsTest, NormMoeRouteAndDispatchEqualUnfused) {
  const int64_t H = 256, I = 96;
  CudaBackendOptions on, split_on;
  on.moe_fused_route = true;     // DSINFER_CUDA_MOE_FUSED_ROUTE=1
  on.moe_route_cluster = false;  // DSINFER_CUDA_MOE_ROUTE_CLUSTER=0
  split_on.split_gemm_activations = true;
  split_on.moe_fused_route = true;
  split_on.moe_route_cluster = false;
  CudaBackendOptions off;
  off.moe_fused_route = false;  // DSINFER_CUDA_MOE_FUSED_ROUTE=0
  CudaBackendOptions cluster = on;
  cluster.moe_route_cluster =
      true;  // the default: at T 1 the cluster form (V2-Lite's 64 experts, the tiny ones)
  for (CudaBackendOptions opts : {on, split_on, off, cluster}) {
    CudaBackend gpu(opts);
    for (const FusedRouteCase& c : kFusedRouteCases) {
      const int64_t E = c.E;
      ExpertSet experts = make_experts(this, gpu, E, H, I);
      gpu.prepare_experts(experts.gpu);
      const Tensor router_host = tied_router(this, E, H, c.groups);
      const Tensor router = gpu.prepare_weight(router_host);
      const Tensor norm_host = random_bf16_values({H}, 0.5f);
      const Tensor norm = gpu.prepare_weight(norm_host);
      Tensor bias;
      if (c.bias) {
        Tensor b = Tensor::empty(DType::F32, {E});
        for (int64_t e = 0; e < E; ++e) b.f32()[e] = 0.01f * static_cast<float>((e * 37) % 11);
        bias = gpu.prepare_weight_f32(b);
      }
      RoutingParams p;
      p.scoring = c.scoring;
      p.method = c.method;
      p.top_k = c.K;
      p.n_group = c.groups;
      p.topk_group = c.topk_group;
      p.norm_topk_prob = c.norm;
      p.routed_scaling_factor = 2.5f;
      for (int64_t T : {1, 2, 3, 5, 8, 16}) {
        const Tensor h_host = random_bf16_values({T, H}, 3.0f);
        const Tensor h = cuda::to_device(h_host);
        // Unfused.
        const Tensor x_u = gpu.rms_norm(h, norm, 1e-6f);
        Tensor ids_u, w_u;
        gpu.moe_route(x_u, router, bias, p, &ids_u, &w_u);
        Tensor res_u = cuda::to_device(h_host);
        gpu.moe_experts_residual(res_u, x_u, ids_u, w_u, experts.gpu);
        // Fused.
        Tensor ids_f, w_f;
        MoeDispatch dispatch;
        const Tensor x_f =
            gpu.norm_moe_route(h, norm, 1e-6f, router, bias, p, experts.gpu, &ids_f, &w_f, &dispatch);
        const bool fused = cuda::next_pow2(T) <= cuda::kMoeNormRouteMaxTokens &&
                           cuda::next_pow2(T) * E <= cuda::kMoeNormRouteMaxTokenExperts;
        EXPECT_EQ(static_cast<bool>(dispatch.data), fused && opts.moe_fused_route) << "T=" << T;
        Tensor res_f = cuda::to_device(h_host);
        gpu.moe_experts_residual(res_f, x_f, ids_f, w_f, experts.gpu, &dispatch);
        const std::string where =
            std::string(c.scoring) + "/" + c.method + " E=" + std::to_string(E) + " T=" + std::to_string(T);
        for (const auto& [u, f, what] : {std::tuple<Tensor, Tensor, const char*>{x_u, x_f, "x"},
                                         {ids_u, ids_f, "ids"},
                                         {w_u, w_f, "weights"},
                                         {res_u, res_f, "residual"}}) {
          const Tensor hu = cuda::to_host(u), hf = cuda::to_host(f);
          ASSERT_EQ(hu.shape(), hf.shape()) << what << ", " << where;
          int64_t differ = 0;
          for (int64_t i = 0; i < hu.numel(); ++i)
            differ += static_cast<const uint32_t*>(hu.raw())[i] != static_cast<const uint32_t*>(hf.raw())[i];
          EXPECT_EQ(differ, 0) << what << " differ, " << where;
        }
        EXPECT_LT(rel_err(gpu.to_host(x_f), cpu.rms_norm(h_host, norm_host, 1e-6f)), 1e-6) << where;
      }
    }
  }
}

TEST_F(CudaDeepseekOpsTest, MoeExpertsResidualMatchesCpuAndUnfused) {
  // The combine adding into the residual: residual + the experts' sum, the same bits as moe_experts followed
  // by add_inplace, within tolerance of the CPU (streaming, tensor-core and CUDA-core tiles).
  CudaBackend gpu(CudaBackendOptions{true});
  for (auto [E, H, I, K] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 96, 6}, {6, 60, 36, 2}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    gpu.prepare_experts(experts.gpu);
    for (int64_t T : {1, 3, 8, 64, 600}) {
      const Tensor ids = distinct_expert_ids(rng, T, K, E);
      const Tensor weights = random_bf16_values({T, K}), x = random_bf16_values({T, H});
      const Tensor h = random_bf16_values({T, H}, 4.0f);
      Tensor ref = h.clone();
      cpu.moe_experts_residual(ref, x, ids, weights, experts.cpu);
      const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
      Tensor fused = cuda::to_device(h), unfused = cuda::to_device(h);
      gpu.moe_experts_residual(fused, dx, dids, dw, experts.gpu);
      gpu.add_inplace(unfused, gpu.moe_experts(dx, dids, dw, experts.gpu));
      const Tensor a = gpu.to_host(fused), b = gpu.to_host(unfused);
      EXPECT_LT(rel_err(a, ref), 1e-5) << "E=" << E << " T=" << T;
      int64_t differ = 0;
      for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
      EXPECT_EQ(differ, 0) << "E=" << E << " T=" << T;
    }
  }
}

// ---- shared experts inside the routed experts' launches ----

// moe_experts_residual with the block's shared experts, as the model calls it (x, ids, weights and the
// dispatch from norm_moe_route): at T 1..8 the shared experts run as extra experts of the streaming launches
// (units of the routed intermediate size, weight 1, added by the combine). Against the unfused path (the
// shared MLP's own launches, then the routed experts: the bits of norm_mlp_residual followed by
// moe_experts_residual) and the CPU, 1 and 2 shared units, 64 and 6 experts: what both add to the residual
// within the expert tests' tolerance of the CPU's, and the fused result not bit-equal to the unfused one
// (the fused path ran: its sums run in another order).
TEST_F(CudaDeepseekOpsTest, MoeSharedExpertsFusedMatchCpuAndUnfused) {
  CudaBackendOptions off;
  off.moe_shared_fused = false;
  // The separate path's norm_mlp_residual at the experts' two activation parts, which the unfused
  // moe_experts_residual runs its shared MLP with (the dense default is one).
  off.gemv_activation_parts = 2;
  CudaBackend gpu, unfused(off);
  const float eps = 1e-6f;
  RoutingParams rp;
  rp.scoring = "softmax";
  rp.method = "greedy";
  for (auto [E, H, I, K] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 96, 6}, {6, 128, 40, 2}}) {
    ExpertSet experts = make_experts(this, gpu, E, H, I);
    gpu.prepare_experts(experts.gpu);
    const Tensor router = gpu.prepare_weight(random_bf16_values({E, H}, 0.5f));
    rp.top_k = K;
    for (int64_t units : {1, 2}) {
      const SharedMlp shared = make_shared_mlp(this, gpu, units, H, I);
      const Tensor norm_c = norm_weight(this, H), norm_g = device_bf16(norm_c);
      const MoeSharedExperts sc{&shared.cpu, norm_c, eps}, sg{&shared.gpu, norm_g, eps};
      for (int64_t T = 1; T <= 8; ++T) {
        const std::string what =
            "E=" + std::to_string(E) + " units=" + std::to_string(units) + " T=" + std::to_string(T);
        const Tensor h = random_bf16_values({T, H}, 4.0f);
        const Tensor dh = cuda::to_device(h);
        Tensor ids, weights;
        MoeDispatch dispatch;
        const Tensor x =
            gpu.norm_moe_route(dh, norm_g, eps, router, Tensor(), rp, experts.gpu, &ids, &weights, &dispatch);
        // [T, K] as routed (raw copies: CudaBackend::to_host would give the int32 ids as floats)
        const Tensor ids_h = cuda::to_host(ids), weights_h = cuda::to_host(weights);
        for (int64_t i = 0; i < ids_h.numel(); ++i)
          ASSERT_TRUE(ids_h.data<int32_t>()[i] >= 0 && ids_h.data<int32_t>()[i] < E)
              << "routing gave expert " << ids_h.data<int32_t>()[i] << ", " << what;
        Tensor fused = cuda::to_device(h), split = cuda::to_device(h), separate = cuda::to_device(h);
        gpu.moe_experts_residual(fused, x, ids, weights, experts.gpu, &dispatch, &sg);
        unfused.moe_experts_residual(split, x, ids, weights, experts.gpu, nullptr, &sg);
        unfused.norm_mlp_residual(separate, norm_g, eps, shared.gpu);
        unfused.moe_experts_residual(separate, x, ids, weights, experts.gpu);
        // The CPU on its own norm of h, with the GPU's routing.
        Tensor ref = h.clone();
        // The routing outputs are inputs of the expert calls: none of them may write into them.
        const Tensor ids_after = cuda::to_host(ids), weights_after = cuda::to_host(weights);
        ASSERT_EQ(std::memcmp(ids_after.raw(), ids_h.raw(), ids_h.nbytes()), 0)
            << "ids overwritten, " << what;
        ASSERT_EQ(std::memcmp(weights_after.raw(), weights_h.raw(), weights_h.nbytes()), 0)
            << "weights overwritten, " << what;
        cpu.moe_experts_residual(ref, cpu.rms_norm(h, norm_c, eps), ids_h, weights_h, experts.cpu, nullptr,
                                 &sc);
        const Tensor a = gpu.to_host(fused), b = gpu.to_host(split), c = gpu.to_host(separate);
        const Tensor want = added_part(ref, h);
        EXPECT_LT(rel_err(added_part(a, h), want), 1e-4) << "fused " << what;
        EXPECT_LT(rel_err(added_part(b, h), want), 1e-4) << "unfused " << what;
        int64_t differ_split = 0, differ_fused = 0;
        for (int64_t i = 0; i < a.numel(); ++i) {
          differ_split += b.f32()[i] != c.f32()[i];
          differ_fused += a.f32()[i] != b.f32()[i];
        }
        EXPECT_EQ(differ_split, 0) << "unfused vs norm_mlp_residual + moe_experts_residual, " << what;
        EXPECT_GT(differ_fused, 0) << "the fused path did not run? " << what;
      }
    }
  }
}

// With the shared experts fused, a token's result does not depend on the other tokens of its bucket (a
// shared unit's tile holds the bucket's tokens; a row's sums never see the others), and graph replay gives
// the eager bits.
TEST_F(CudaDeepseekOpsTest, MoeSharedExpertsFusedRowsIndependentOfBatchInBucket) {
  CudaBackend gpu;
  const int64_t E = 64, H = 256, I = 96, K = 6, units = 2, Tmax = 8;
  const float eps = 1e-6f;
  ExpertSet experts = make_experts(this, gpu, E, H, I);
  gpu.prepare_experts(experts.gpu);
  const SharedMlp shared = make_shared_mlp(this, gpu, units, H, I);
  const Tensor norm_g = device_bf16(norm_weight(this, H));
  const MoeSharedExperts sg{&shared.gpu, norm_g, eps};
  const Tensor h = random_bf16_values({Tmax, H}, 4.0f), x = random_bf16_values({Tmax, H});
  const Tensor weights = random_bf16_values({Tmax, K}), ids = distinct_expert_ids(rng, Tmax, K, E);
  auto head = [](const Tensor& t, int64_t T) {
    Tensor r = Tensor::empty(t.dtype(), {T, t.dim(1)});
    std::copy_n(static_cast<const char*>(t.raw()), r.nbytes(), static_cast<char*>(r.raw()));
    return cuda::to_device(r);
  };
  auto run = [&](int64_t T) {
    Tensor res = head(h, T);
    gpu.moe_experts_residual(res, head(x, T), head(ids, T), head(weights, T), experts.gpu, nullptr, &sg);
    return gpu.to_host(res);
  };
  for (auto [small, big] : {std::pair<int64_t, int64_t>{3, 4}, {5, 8}, {7, 8}}) {
    const Tensor a = run(small), b = run(big);
    int64_t differ = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
    EXPECT_EQ(differ, 0) << "T " << small << " vs " << big;
  }
  // A captured graph of the op (the residual reset from a copy first) replays the eager bits.
  for (int64_t T : {1, 6}) {
    const Tensor eager = run(T);
    const Tensor h0 = head(h, T), dx = head(x, T), dids = head(ids, T), dw = head(weights, T);
    Tensor res = head(h, T);
    cuda::time_graph_ms(
        [&] {
          cuda::copy_device_to_device(res.raw(), h0.raw(), res.nbytes());
          gpu.moe_experts_residual(res, dx, dids, dw, experts.gpu, nullptr, &sg);
        },
        2);
    const Tensor replayed = gpu.to_host(res);
    int64_t differ = 0;
    for (int64_t i = 0; i < eager.numel(); ++i) differ += eager.f32()[i] != replayed.f32()[i];
    EXPECT_EQ(differ, 0) << "graph replay, T " << T;
  }
}

// The grouped GEMMs keep a token's output independent of the other tokens of its bucket: an output row
// depends only on its own activation row (the tile it shares and its position there never enter its sums).
TEST_F(CudaDeepseekOpsTest, MoeExpertsGroupedRowsIndependentOfBatchInBucket) {
  CudaBackend base;
  const int64_t E = 64, H = 256, I = 96, K = 6, Tmax = 2048;
  ExpertSet experts = make_experts(this, base, E, H, I);
  base.prepare_experts(experts.gpu);
  const Tensor x = random_bf16_values({Tmax, H}), weights = random_bf16_values({Tmax, K});
  const Tensor ids = distinct_expert_ids(rng, Tmax, K, E);  // [Tmax, K]
  auto head = [](const Tensor& t, int64_t T) {
    Tensor h = Tensor::empty(t.dtype(), {T, t.dim(1)});
    std::copy_n(static_cast<const char*>(t.raw()), h.nbytes(), static_cast<char*>(h.raw()));
    return cuda::to_device(h);
  };
  // The default choice and the wgmma variants (their mma.sync twins off Hopper).
  for (int variant : {0, 5, 6, 7, 8}) {
    CudaBackend gpu(CudaBackendOptions{.moe_grouped_variant = variant});
    auto run = [&](int64_t T) {
      return gpu.to_host(gpu.moe_experts(head(x, T), head(ids, T), head(weights, T), experts.gpu));
    };
    // Buckets 1024 (96 rows per expert: the 64-row tiles) and 2048 (192: the 128-row tiles).
    for (auto [small, big] : {std::pair<int64_t, int64_t>{600, 1024}, {1100, 2048}}) {
      const Tensor a = run(small), b = run(big);
      int64_t differ = 0;
      for (int64_t i = 0; i < a.numel(); ++i) differ += a.f32()[i] != b.f32()[i];
      EXPECT_EQ(differ, 0) << "variant " << variant << " T " << small << " vs " << big;
    }
  }
}

#else

TEST(CudaMoeOpsTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
