// CudaBackend's linear layers against the CPU reference on random inputs (runs where a GPU is visible; CI
// compiles it and skips): the GEMV kernels (M <= 8: plain, several matrices, SwiGLU, split-K, persistent)
// and the cuBLASLt path (M > 8), plus the GEMV shape sweep benchmark (disabled by default).
#include <initializer_list>
#include <utility>

#include "cuda_ops_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using cuda_ops_test::CudaOpsTest;

// ---- Linear layers: GEMV kernels (M <= 8) and the cuBLASLt path (M > 8) ----

// A Linear on both sides: the CPU one holds the bf16 values widened to float32.
struct LinearPair {
  Linear cpu, gpu;
};

struct GemvSweepShape;
struct GemvOperands;
std::string gemv_config_name(const cuda::GemvConfig& c);

class CudaLinearTest : public CudaOpsTest {
 protected:
  // Random bf16 weights, biases and norm weight of `sh` (drawn from the test's generator).
  std::unique_ptr<GemvOperands> random_gemv_operands(const GemvSweepShape& sh);
  // A GEMV switch that changes no bits: over the shapes below (incl. K = 256, fewer warp iterations than
  // pipeline stages), M 1 and 3, every compiled kernel shape (persistent; also per-launch when
  // with_per_launch) and both weight layouts where they run (row-major; packed on Hopper's persistent
  // kernel), the outputs after set(v) for each v of `settings` equal those after set(settings[0]).
  template <typename Set, typename Value>
  void expect_same_bits_across(Set set, std::initializer_list<Value> settings, bool with_per_launch);
  // A GEMV config's tolerance against the fp32 CPU reference: one activation part rounds activations to bf16
  // (~1e-3 relative; SwiGLU with a clamp measured up to 9.2e-3), bounded by `one_part`; the others keep
  // `tol`. GemvOnePartRoundsActivationsToBf16 holds one part to its exact rounding.
  static double gemv_tol(const cuda::GemvConfig& c, double tol, double one_part = 6e-3) {
    return c.splits == 1 && !c.generic ? one_part : tol;
  }
  // What a one-part GEMV computes, in double: y [M, N] = inv_m (bf16(x_m nw) . w_n) + b_n, x nw the fp32
  // product rounded to bf16 (nearest even), inv_m the RMSNorm scale of x_m (without nw: bf16(x_m) . w_n +
  // b_n).
  static Tensor one_part_reference(const Tensor& x, const Tensor* nw, const Linear& w, float eps) {
    const int64_t M = x.dim(0), K = x.dim(1), N = w.weight.dim(0);
    Tensor y = Tensor::zeros(DType::F32, {M, N});  // [M, N]
    std::vector<double> xb(K);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x.f32() + m * K;
      double ss = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        ss += static_cast<double>(xr[k]) * xr[k];
        const float v = nw ? xr[k] * nw->f32()[k] : xr[k];
        xb[k] = bf16_to_f32(f32_to_bf16(v));
      }
      const double inv = nw ? 1.0 / std::sqrt(ss / static_cast<double>(K) + eps) : 1.0;
      for (int64_t n = 0; n < N; ++n) {
        double dot = 0.0;
        for (int64_t k = 0; k < K; ++k) dot += xb[k] * w.weight.f32()[n * K + k];
        y.f32()[m * N + n] = static_cast<float>(dot * inv + (w.bias ? w.bias.f32()[n] : 0.0f));
      }
    }
    return y;
  }
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
        EXPECT_LT(rel_err(cuda::to_host(y), ref), gemv_tol(c, 1e-5))
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

// One activation part rounds as documented (one_part_reference): every one-part shape, per-launch and
// persistent, and the auto choice asked for one part are within 1e-5 of that reference (the fp32 sums' order
// only), SwiGLU included; the auto choice keeps the parts it is asked for, and refuses 3.
TEST_F(CudaLinearTest, GemvOnePartRoundsActivationsToBf16) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{300, 2048}, {45, 520}, {2050, 1288}}) {
    for (int64_t M : {1, 3}) {
      const bool norm = M == 1;
      LinearPair l = make_linear(N, K, true), u = make_linear(N, K, false);
      auto [nw_bits, nw] = as_bf16(random_f32({K}));
      const Tensor x = random_f32({M, K}), dx = cuda::to_device(x), dnw = cuda::to_device(nw_bits);
      const Tensor ref = one_part_reference(x, norm ? &nw : nullptr, l.cpu, 1e-5f);
      const Tensor sref = swiglu(ref, one_part_reference(x, norm ? &nw : nullptr, u.cpu, 1e-5f), 0.0f);
      cuda::GemvConfig auto_one;
      auto_one.splits = 1;
      EXPECT_EQ(cuda::resolve_gemv_config(M, K, &N, 1, false, auto_one).splits, 1);
      EXPECT_EQ(cuda::resolve_gemv_config(M, K, &N, 1, true, auto_one).splits, 1);
      EXPECT_EQ(cuda::resolve_gemv_config(M, K, &N, 1, false).splits, 2);
      for (bool swiglu_launch : {false, true}) {
        std::vector<cuda::GemvConfig> configs = cuda::gemv_configs(swiglu_launch);
        configs.push_back(auto_one);
        int one_part = 0;
        for (const cuda::GemvConfig& c : configs) {
          if (c.splits != 1) continue;
          ++one_part;
          Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {M, N});
          const cuda::GemvNorm nrm{norm ? dnw.data<uint16_t>() : nullptr, 1e-5f};
          if (swiglu_launch) {
            cuda::launch_gemv_swiglu(dx.data<float>(), M, K, l.gpu.weight.data<uint16_t>(),
                                     l.gpu.bias.data<uint16_t>(), u.gpu.weight.data<uint16_t>(), nullptr,
                                     y.data<float>(), N, nrm, 0.0f, c);
          } else {
            const cuda::GemvMatrix mat{l.gpu.weight.data<uint16_t>(), l.gpu.bias.data<uint16_t>(),
                                       y.data<float>(), N};
            cuda::launch_gemv(dx.data<float>(), M, K, &mat, 1, nrm, false, c);
          }
          EXPECT_LT(rel_err(cuda::to_host(y), swiglu_launch ? sref : ref), 1e-5)
              << (swiglu_launch ? "swiglu" : "linear") << " M " << M << " N " << N << " K " << K << " "
              << gemv_config_name(c);
        }
        EXPECT_GT(one_part, 8) << "one-part shapes compiled";
      }
    }
  }
  cuda::GemvConfig three;
  three.splits = 3;
  const int64_t N = 64;
  EXPECT_THROW(cuda::resolve_gemv_config(1, 256, &N, 1, false, three), Error);
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
          EXPECT_LT(rel_err(cuda::to_host(out), ref), gemv_tol(c, 2e-5, 2e-2))
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
          EXPECT_LT(rel_err(cuda::to_host(y), ref), gemv_tol(c, 1e-5))
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
            EXPECT_LT(rel_err(cuda::to_host(out), ref), gemv_tol(c, 2e-5, 2e-2))
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
         " s" + std::to_string(c.stages) + " parts " + std::to_string(c.splits) + " k" +
         std::to_string(c.ksplit) + (c.persist > 0 ? " p" + std::to_string(c.persist) : "") +
         (c.cap_per_sm ? " cap" : "");
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

// A capped persistent launch (GemvConfig::cap_per_sm: the qkv-sized launches, at most 3 one-tile blocks per
// SM) holds at most its cap on an SM, whether its kernel reads row-major or packed weights, and exactly the
// cap (so the padding does not leave the SM emptier than planned). The padding range must count the packed
// instance's static mbarriers: counted from gemv_block_smem alone, every padding read as no occupancy there,
// no cap was set, and Llama-8B's 384 qkv blocks landed four to an SM on 96 SMs.
TEST_F(CudaLinearTest, CappedLaunchesHoldTheirCapPerSmPackedOrNot) {
  CudaBackend gpu;
  const int64_t qkv[3] = {4096, 1024, 1024};  // Llama-8B: 384 16-row tiles, K 4096
  const cuda::GemvConfig c = cuda::resolve_gemv_config(1, 4096, qkv, 3, false);
  if (!c.cap_per_sm) GTEST_SKIP() << "no capped shape for the 8B qkv on this device (" << c.persist << ")";
  EXPECT_EQ(cuda::gemv_resident_blocks_per_sm(4096, qkv, 3, false, false), c.persist);
  if (cuda::arch_path() == cuda::ArchPath::kHopper) {
    EXPECT_EQ(cuda::gemv_resident_blocks_per_sm(4096, qkv, 3, false, true), c.persist);
  }
}

// A persistent launch with no more row tiles than SMs (DeepSeek-V2-Lite's o and its layer-0 down: 128 16-row
// tiles) runs one block per SM, padded so that the block scheduler cannot stack two of them on one SM
// (gemv_set_spread(1); DSINFER_GEMV_SPREAD=1); with the rule off they keep the plan's blocks per SM,
// and a launch with more tiles than twice the SMs keeps them either way.
TEST_F(CudaLinearTest, LaunchesWithFewTilesRunOneBlockPerSm) {
  CudaBackend gpu;
  struct Restore {
    int saved = cuda::gemv_spread();
    ~Restore() { cuda::gemv_set_spread(saved); }
  } restore;
  EXPECT_THROW(cuda::gemv_set_spread(3), Error);
  cuda::gemv_set_spread(1);
  const int sms = cuda::device_sm_count(132);
  for (const auto& [rows, K] : {std::pair<int64_t, int64_t>{2048, 2048}, {2048, 10944}}) {
    if (rows / 16 > sms) continue;
    const cuda::GemvConfig c = cuda::resolve_gemv_config(1, K, &rows, 1, false);
    ASSERT_GT(c.persist, 0) << rows << " x " << K;
    if (c.tiles != 1) continue;  // another device's shape: 32-row tiles
    EXPECT_EQ(c.persist, 1) << rows << " x " << K;
    EXPECT_TRUE(c.cap_per_sm) << rows << " x " << K;
    EXPECT_EQ(cuda::gemv_resident_blocks_per_sm(K, &rows, 1, false, false), 1) << rows << " x " << K;
    cuda::gemv_set_spread(0);
    EXPECT_FALSE(cuda::resolve_gemv_config(1, K, &rows, 1, false).cap_per_sm) << rows << " x " << K;
    cuda::gemv_set_spread(1);
  }
  const int64_t head = 102400;  // an LM head: thousands of tiles, blocks per SM by the plan
  cuda::gemv_set_spread(2);
  EXPECT_FALSE(cuda::resolve_gemv_config(1, 2048, &head, 1, false).cap_per_sm);
}

// One GEMV sweep shape's operands on the device: the matrices row-major in one allocation (`views` into it)
// with each matrix's packed copy (gemv_packed.h) beside it, registered only while a run asks for it; a bias
// for every row and the RMSNorm weight.
struct GemvOperands {
  GemvSweepShape sh;
  Tensor w, bias, norm_w;
  std::vector<const uint16_t*> views;
  std::vector<Tensor> packed;

  GemvOperands(const GemvSweepShape& shape, const Tensor& w_host, const Tensor& bias_host,
               const Tensor& norm_host)
      : sh(shape),
        w(cuda::to_device(w_host)),
        bias(cuda::to_device(bias_host)),
        norm_w(cuda::to_device(norm_host)) {
    int64_t row = 0;
    for (int64_t n : sh.N) {
      views.push_back(w.data<uint16_t>() + row * sh.K);
      packed.push_back(Tensor::empty_on(Device::kCuda, DType::BF16, {cuda::gemv_packed_bytes(n, sh.K) / 2}));
      cuda::pack_gemv_weight(views.back(), n, sh.K, packed.back().data<uint16_t>());
      row += n;
    }
  }
  ~GemvOperands() {
    for (const uint16_t* v : views) cuda::gemv_unregister_packed(v);
  }
  bool swiglu() const { return sh.kind == GemvKind::kSwiglu; }
  int64_t out_cols() const {
    int64_t n_total = 0;
    for (int64_t n : sh.N) n_total += n;
    return swiglu() ? sh.N[0] : n_total;
  }

  // y [M, out_cols] = the shape's launch on x [M, K] (device) starting from y0 (host), reading the packed
  // copies when use_packed; with_bias adds the biases, limit > 0 clamps SwiGLU's inputs.
  Tensor run(const Tensor& x, const Tensor& y0, cuda::GemvConfig cfg, bool use_packed, bool with_bias,
             float limit) {
    const int64_t M = x.shape()[0];
    for (size_t i = 0; i < views.size(); ++i) {
      if (use_packed)
        cuda::gemv_register_packed(views[i], packed[i].data<uint16_t>(), sh.N[i], sh.K);
      else
        cuda::gemv_unregister_packed(views[i]);
    }
    Tensor y = cuda::to_device(y0);  // [M, out_cols]
    const uint16_t* b = with_bias ? bias.data<uint16_t>() : nullptr;
    const cuda::GemvNorm nrm{sh.kind == GemvKind::kResidual ? nullptr : norm_w.data<uint16_t>(), 1e-5f};
    if (swiglu()) {
      cuda::launch_gemv_swiglu(x.data<float>(), M, sh.K, views[0], b, views[1], b ? b + sh.N[0] : nullptr,
                               y.data<float>(), sh.N[0], nrm, limit, cfg);
    } else {
      cuda::GemvMatrix mats[cuda::kGemvMaxMatrices];
      int64_t r = 0, col = 0;
      for (size_t i = 0; i < sh.N.size(); ++i) {
        mats[i] = {views[i], b ? b + r : nullptr, y.data<float>() + col, sh.N[i]};
        r += sh.N[i];
        col += M * sh.N[i];
      }
      cuda::launch_gemv(x.data<float>(), M, sh.K, mats, static_cast<int>(sh.N.size()), nrm,
                        sh.kind == GemvKind::kResidual, cfg);
    }
    return cuda::to_host(y);
  }
};

std::unique_ptr<GemvOperands> CudaLinearTest::random_gemv_operands(const GemvSweepShape& sh) {
  int64_t n_total = 0;
  for (int64_t n : sh.N) n_total += n;
  return std::make_unique<GemvOperands>(sh, as_bf16(random_f32({n_total, sh.K})).first,
                                        as_bf16(random_f32({n_total})).first,
                                        as_bf16(random_f32({sh.K})).first);
}

template <typename Set, typename Value>
void CudaLinearTest::expect_same_bits_across(Set set, std::initializer_list<Value> settings,
                                             bool with_per_launch) {
  const bool hopper = cuda::arch_path() == cuda::ArchPath::kHopper;
  for (const GemvSweepShape& sh : {GemvSweepShape{"l8b o", {4096}, 4096, GemvKind::kResidual},
                                   GemvSweepShape{"odd rows and K", {200, 72}, 1064, GemvKind::kNorm},
                                   GemvSweepShape{"odd swiglu", {136, 136}, 1064, GemvKind::kSwiglu},
                                   GemvSweepShape{"short K", {512}, 256, GemvKind::kNorm},
                                   GemvSweepShape{"short K swiglu", {512, 512}, 256, GemvKind::kSwiglu}}) {
    const std::unique_ptr<GemvOperands> operands = random_gemv_operands(sh);
    GemvOperands& ops = *operands;
    for (int64_t M : {1, 3}) {
      const Tensor x = cuda::to_device(random_f32({M, sh.K}));  // [M, K]
      const Tensor y0 = random_f32({M, ops.out_cols()});        // [M, out_cols]
      for (cuda::GemvConfig c : cuda::gemv_configs(ops.swiglu())) {
        for (bool persistent : {false, true}) {
          if (persistent ? c.persist == 0 : !with_per_launch) continue;
          cuda::GemvConfig cfg = c;
          if (!persistent) cfg.persist = 0;
          for (bool use_packed : {false, true}) {
            if (use_packed && !(persistent && hopper)) continue;
            set(*settings.begin());
            const Tensor want = ops.run(x, y0, cfg, use_packed, M == 1, 0.0f);
            for (const Value& v : settings) {
              set(v);
              const Tensor got = ops.run(x, y0, cfg, use_packed, M == 1, 0.0f);
              ASSERT_EQ(got.nbytes(), want.nbytes());
              EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
                  << sh.name << " M " << M << " " << gemv_config_name(cfg) << " persistent " << persistent
                  << " packed " << use_packed << " setting " << v;
            }
          }
        }
      }
    }
  }
}

// The packed weights (gemv_packed.h): every persistent shape reading the packed copies by bulk copies gives
// the bits of the same shape reading the row-major matrices, also where K is not a whole number of warp
// iterations (the last stages' fragments past K zeroed by the lanes) or of 32 columns, and where N is not a
// whole number of tiles; packing pads with zeros.
TEST_F(CudaLinearTest, GemvPackedWeightsGiveTheSameBits) {
  CudaBackend gpu;  // registers the device allocator
  if (cuda::arch_path() != cuda::ArchPath::kHopper) GTEST_SKIP() << "packed weights need the Hopper path";
  std::vector<GemvSweepShape> shapes = gemv_sweep_shapes();
  shapes.push_back({"v2l dense down", {2048}, 10944, GemvKind::kResidual});
  shapes.push_back({"odd rows and K", {200, 72}, 1064, GemvKind::kNorm});
  shapes.push_back({"odd swiglu", {136, 136}, 1064, GemvKind::kSwiglu});
  for (const GemvSweepShape& sh : shapes) {
    const std::unique_ptr<GemvOperands> operands = random_gemv_operands(sh);
    GemvOperands& ops = *operands;
    for (int64_t M : {1, 3, 8}) {
      const bool with_bias = M % 2 == 1;
      const float limit = ops.swiglu() && M == 3 ? 3.0f : 0.0f;
      const Tensor x = cuda::to_device(random_f32({M, sh.K}));  // [M, K]
      const Tensor y0 = random_f32({M, ops.out_cols()});        // [M, out_cols]
      for (cuda::GemvConfig c : cuda::gemv_configs(ops.swiglu())) {
        if (c.persist == 0) continue;
        const Tensor want = ops.run(x, y0, c, false, with_bias, limit);
        const Tensor got = ops.run(x, y0, c, true, with_bias, limit);
        ASSERT_EQ(got.nbytes(), want.nbytes());
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
            << sh.name << " M " << M << " " << gemv_config_name(c);
      }
    }
  }
}

// The weights' L2 policy (gemv_set_weights_evict_first) is a cache hint only: every GEMV path (the per-launch
// kernel, the persistent kernel reading row-major or, on Hopper, packed weights; several matrices, SwiGLU)
// and the head GEMVs (w^T x and w x: the tiles MLA's W_UK and W_UV kernels run) give the same bits with
// evict-first on and off, and the switch reads back as set.
TEST_F(CudaLinearTest, WeightsEvictFirstChangesNoBits) {
  CudaBackend gpu;  // registers the device allocator
  struct Restore {
    bool saved = cuda::gemv_weights_evict_first();
    ~Restore() { cuda::gemv_set_weights_evict_first(saved); }
  } restore;
  for (bool on : {false, true}) {
    cuda::gemv_set_weights_evict_first(on);
    EXPECT_EQ(cuda::gemv_weights_evict_first(), on);
  }
  expect_same_bits_across([](bool on) { cuda::gemv_set_weights_evict_first(on); }, {false, true}, true);
  // Head GEMVs, [T, H, A] -> [T, H, B]: w^T x (w [H, A, B]) and w x (w [H, B, A]).
  for (bool transpose : {true, false}) {
    const int64_t H = 16, A = transpose ? 128 : 512, B = transpose ? 512 : 128;
    const Tensor w = cuda::to_device(as_bf16(random_f32({H * A * B})).first);
    for (int64_t T : {1, 2}) {
      const Tensor x = cuda::to_device(random_f32({T, H, A}));            // [T, H, A]
      Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {T, H, B});  // [T, H, B]
      auto run = [&](bool evict_first) {
        cuda::gemv_set_weights_evict_first(evict_first);
        EXPECT_TRUE(cuda::launch_head_gemv_tiled(x.data<float>(), w.data<uint16_t>(), y.data<float>(), T, H,
                                                 A, B, transpose));
        return cuda::to_host(y);
      };
      const Tensor want = run(false), got = run(true);
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
          << "head GEMV transpose " << transpose << " T " << T;
    }
  }
}

// Paced pre-issue (gemv_set_preissue_inflight) changes only when a warp issues its first weight stages: every
// persistent GEMV path (row-major and, on Hopper, packed weights; several matrices, a norm, SwiGLU) gives the
// same bits with 0, 1 and 2 stages in flight before the wait, the switch reads back as set, and an
// out-of-range value is refused. K = 256 gives warps fewer iterations than pipeline stages
// (small-deepseek-v3-fp8's packed MLP and LM head): a paced warp must not wait for a stage it never issued
// (it hung on the GPU so).
TEST_F(CudaLinearTest, PacedPreissueChangesNoBits) {
  CudaBackend gpu;  // registers the device allocator
  struct Restore {
    int saved = cuda::gemv_preissue_inflight();
    ~Restore() { cuda::gemv_set_preissue_inflight(saved); }
  } restore;
  for (int n : {0, 2, 1}) {
    cuda::gemv_set_preissue_inflight(n);
    EXPECT_EQ(cuda::gemv_preissue_inflight(), n);
  }
  EXPECT_THROW(cuda::gemv_set_preissue_inflight(3), Error);
  EXPECT_THROW(cuda::gemv_set_preissue_inflight(-1), Error);
  EXPECT_EQ(cuda::gemv_preissue_inflight(), 1);
  expect_same_bits_across([](int n) { cuda::gemv_set_preissue_inflight(n); }, {0, 1, 2}, false);
}

// Two activation parts as MMA columns (gemv_set_parts_in_columns) change no bits: every persistent GEMV path
// (row-major and packed weights, several matrices, a norm, SwiGLU, short K) at M 1 and 3 gives the same
// outputs with the switch off and on, and the switch reads back as set.
TEST_F(CudaLinearTest, PartsInColumnsChangeNoBits) {
  CudaBackend gpu;  // registers the device allocator
  struct Restore {
    bool saved = cuda::gemv_parts_in_columns();
    ~Restore() { cuda::gemv_set_parts_in_columns(saved); }
  } restore;
  for (bool on : {true, false}) {
    cuda::gemv_set_parts_in_columns(on);
    EXPECT_EQ(cuda::gemv_parts_in_columns(), on);
  }
  expect_same_bits_across([](bool on) { cuda::gemv_set_parts_in_columns(on); }, {false, true}, false);
}

// Which weights get a packed copy (gemv_wants_packed_copy): the dense MLP's gate and up projections and the
// LM head, not the attention, down or experts' matrices; the copy lives exactly as long as the weight, and a
// weight with a copy holds the same values as one without.
TEST_F(CudaLinearTest, NamedWeightsGetPackedCopiesByRole) {
  CudaBackend gpu;
  if (cuda::arch_path() != cuda::ArchPath::kHopper) GTEST_SKIP() << "packed weights need the Hopper path";
  const char* env = std::getenv("DSINFER_GEMV_PACKED");
  if (env && std::string(env) == "0") GTEST_SKIP() << "DSINFER_GEMV_PACKED=0";
  const Tensor host = random_f32({256, 512});
  const struct {
    const char* name;
    bool packed;
  } cases[] = {
      {"model.layers.3.mlp.gate_proj.weight", true},
      {"model.layers.3.mlp.up_proj.weight", true},
      {"lm_head.weight", true},
      {"model.layers.3.mlp.down_proj.weight", false},
      {"model.layers.3.self_attn.q_proj.weight", false},
      {"model.layers.3.mlp.shared_experts.gate_proj.weight", false},
      {"model.layers.3.mlp.experts.7.up_proj.weight", false},
  };
  const Tensor plain = gpu.prepare_weight(host.clone());
  for (const auto& c : cases) {
    const uint16_t* w = nullptr;
    {
      const Tensor t = gpu.prepare_named_weight(host.clone(), c.name);
      w = t.data<uint16_t>();
      EXPECT_EQ(t.device(), Device::kCuda) << c.name;
      EXPECT_EQ(cuda::gemv_packed_for(w, 256, 512) != nullptr, c.packed) << c.name;
      const Tensor a = cuda::to_host(t), b = cuda::to_host(plain);
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << c.name;
    }
    EXPECT_EQ(cuda::gemv_packed_for(w, 256, 512), nullptr) << c.name << ": registered after the weight died";
  }
  // A shape the GEMV does not pack (K not a multiple of 32) stays plain whatever its name.
  const Tensor odd = gpu.prepare_named_weight(random_f32({256, 200}), "lm_head.weight");
  EXPECT_EQ(cuda::gemv_packed_for(odd.data<uint16_t>(), 256, 200), nullptr);
}

// The stamped persistent kernels (gemv_stamps.h): the same bits as the plain ones, every block of the launch
// recorded once with its points in time order, its SM and the row tiles it walked (the launch's tiles in
// all); slots go round robin and keep the latest launches; the text file has a line per launch and block.
TEST_F(CudaLinearTest, GemvStampsRecordEveryBlockWithTheSameBits) {
  CudaBackend gpu;  // registers the device allocator
  const int sms = cuda::device_sm_count(0);
  for (const bool swiglu : {false, true}) {
    const int64_t K = swiglu ? 2048 : 4096, N = swiglu ? 10944 : 14336, M = swiglu ? 3 : 1;
    LinearPair a = make_linear(N, K, false), b = make_linear(N, K, false);
    const Tensor x = cuda::to_device(random_f32({M, K}));
    const Tensor norm_w = cuda::to_device(as_bf16(random_f32({K})).first);
    Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {M, N});
    for (cuda::GemvConfig c : cuda::gemv_configs(swiglu)) {
      if (c.persist != 2) continue;
      auto run = [&] {
        if (swiglu)
          cuda::launch_gemv_swiglu(x.data<float>(), M, K, a.gpu.weight.data<uint16_t>(), nullptr,
                                   b.gpu.weight.data<uint16_t>(), nullptr, y.data<float>(), N,
                                   {norm_w.data<uint16_t>(), 1e-5f}, 0.0f, c);
        else {
          const cuda::GemvMatrix mat{a.gpu.weight.data<uint16_t>(), nullptr, y.data<float>(), N};
          cuda::launch_gemv(x.data<float>(), M, K, &mat, 1, {norm_w.data<uint16_t>(), 1e-5f}, false, c);
        }
        return cuda::to_host(y);
      };
      const Tensor want = run();
      ASSERT_TRUE(cuda::enable_gemv_stamps(2));
      const Tensor got = run();
      std::vector<cuda::GemvStampLaunch> launches = cuda::read_gemv_stamps();
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << gemv_config_name(c);
      ASSERT_EQ(launches.size(), 1u) << gemv_config_name(c);
      const cuda::GemvStampLaunch l = launches[0];  // a copy: `launches` is read again below
      EXPECT_EQ(l.rows, N);
      EXPECT_EQ(l.K, K);
      EXPECT_EQ(l.swiglu, swiglu);
      EXPECT_EQ(l.tiles, (N + (swiglu ? 16 : 16 * c.tiles) - 1) / (swiglu ? 16 : 16 * c.tiles));
      ASSERT_EQ(static_cast<int64_t>(l.blocks.size()), l.grid);
      EXPECT_LT(l.grid, l.tiles) << "the shape should make blocks walk several tiles";
      int64_t tiles = 0;
      for (size_t i = 0; i < l.blocks.size(); ++i) {
        const cuda::GemvStampBlock& s = l.blocks[i];
        ASSERT_GT(s.t[cuda::kStampStart], 0u) << "block " << i << " has no stamps";
        for (int p = 1; p < cuda::kStampPoints; ++p)
          EXPECT_LE(s.t[p - 1], s.t[p]) << "block " << i << " point " << p;
        EXPECT_LT(s.sm, static_cast<uint32_t>(sms));
        EXPECT_EQ(s.tiles, (l.tiles - 1 - static_cast<int64_t>(i)) / l.grid + 1) << "block " << i;
        tiles += s.tiles;
      }
      EXPECT_EQ(tiles, l.tiles);
      // Round robin over the two slots: three more launches leave the last two.
      for (int i = 0; i < 3; ++i) run();
      launches = cuda::read_gemv_stamps();
      EXPECT_EQ(launches.size(), 2u);
      const std::string path = ::testing::TempDir() + "gemv_stamps.txt";
      ASSERT_TRUE(cuda::write_gemv_stamps(path.c_str(), launches));
      std::ifstream in(path);
      std::string line;
      int headers = 0, blocks = 0;
      while (std::getline(in, line)) {
        if (line.rfind("launch ", 0) == 0)
          ++headers;
        else if (!line.empty() && line[0] != '#')
          ++blocks;
      }
      EXPECT_EQ(headers, 2);
      EXPECT_EQ(blocks, 2 * l.grid);
      const uint64_t invalidations = cuda::graph_invalidations();
      cuda::disable_gemv_stamps();
      EXPECT_GT(cuda::graph_invalidations(), invalidations) << "graphs hold the freed slots' addresses";
      EXPECT_TRUE(cuda::read_gemv_stamps().empty());
      const Tensor after = run();  // the plain instance again
      EXPECT_EQ(std::memcmp(after.raw(), want.raw(), want.nbytes()), 0);
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
        EXPECT_LT(rel_err(cuda::to_host(y), ref), gemv_tol(c, 1e-5))
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
        EXPECT_LT(rel_err(cuda::to_host(out), sref), gemv_tol(c, 2e-5, 2e-2))
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
        EXPECT_LT(rel_err(cuda::to_host(ys[i]), cpu.linear(normed, ls[i].cpu)), gemv_tol(c, 1e-5))
            << "M " << M << " i " << i << " " << gemv_config_name(c);
    }
  }
}

// Decode GEMV sweep (H200: the lead runs it with --gtest_also_run_disabled_tests): Llama-3.1-8B and
// DeepSeek-V2-Lite decode launches at M = 1 and 4, every compiled kernel shape (warps w, tiles t, parts,
// unroll u, stages s) at every split k, each timed as a CUDA graph of launches over enough weight copies
// to defeat the 50 MB L2. One line per (shape, M): the old default (the shape the launch picks, no split),
// the auto choice (GemvConfig{}: the split model or DSINFER_GEMV_SPLITK), the best measured config, in us
// and % of 4290 GB/s (weight bytes only), and the best persistent config alone. A config "w8 t1 u2 s4 parts 2
// k3" is GemvConfig{tiles 1, unroll 2, stages 4, splits 2, generic false, warps 8, ksplit 3}; a trailing "p2"
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

// The CudaBackend linear ops against the CPU backend's (default, composed) ones, to the bf16 activation
// rounding (~1e-3: GEMV rows M <= 8 with one activation part, cuBLASLt rows M > 8), with split GEMMs to the
// hi/lo activation split (GEMV rows: two parts, ~5e-6 a stage, two stages in the MLP; cuBLASLt: ~1e-5).
TEST_F(CudaLinearTest, BackendLinearOpsMatchCpu) {
  CudaBackend plain, split(CudaBackendOptions{true});
  const int64_t H = 256, I = 344;
  LinearPair q = make_linear(128, H, true), k = make_linear(40, H, true), v = make_linear(40, H, false);
  LinearPair o = make_linear(H, 128, false);
  auto [nw_bits, nw] = as_bf16(random_f32({H}));
  const Tensor dnw = cuda::to_device(nw_bits);
  for (int64_t M : {1, 2, 5, 8, 9, 40, 130}) {
    // bf16: every M rounds activations to bf16 (GEMV rows: one activation part).
    const double tol_plain = 1e-2, tol_split = M <= 8 ? 3e-5 : 1e-4;
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

#else

TEST(CudaLinearTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
