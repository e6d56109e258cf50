// Tests for the CPU reference backend ops against naive double-precision references written here, on random
// inputs with fixed seeds and odd sizes that reach every GEMM remainder path; attention runs over a paged
// cache with several sequences, shuffled block ids and chunked context.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "backend/batch_plan.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"
#include "kv/kv_cache.h"

namespace dsinfer {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor random_tensor(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return Tensor::from_f32(random_vec(static_cast<size_t>(shape_numel(shape)), seed, lo, hi), shape);
}

void expect_all_near(const float* actual, const std::vector<double>& expected, double atol, double rtol,
                     const std::string& what) {
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double tol = atol + rtol * std::abs(expected[i]);
    if (!(std::abs(actual[i] - expected[i]) <= tol)) {
      ADD_FAILURE() << what << ": index " << i << " got " << actual[i] << " expected " << expected[i];
      if (++reported >= 5) return;
    }
  }
}

void expect_all_near(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                     const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  expect_all_near(actual.f32(), expected, atol, rtol, what);
}

// ---------------------------------------------------------------------------------------------------------
// GEMM

struct GemmCase {
  int64_t M, N, K;
};

const GemmCase kGemmCases[] = {{1, 1, 1},    {1, 5, 3},     {3, 7, 5},    {5, 9, 13},   {4, 4, 8},
                               {7, 3, 16},   {1, 300, 40},  {9, 300, 40}, {17, 33, 70}, {65, 67, 129},
                               {130, 20, 7}, {66, 130, 31}, {2, 1, 9}};

TEST(GemmTest, MatchesNaiveWithStridesBiasAndAccumulate) {
  uint32_t seed = 100;
  for (const GemmCase& c : kGemmCases) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool use_bias = variant & 1, accumulate = variant & 2;
      const bool serial = (seed % 3) == 0;
      // Row strides larger than the logical sizes.
      const int64_t lda = c.K + 3, ldb = c.K + 1, ldc = c.N + 2;
      std::vector<float> A = random_vec(c.M * lda, ++seed), B = random_vec(c.N * ldb, ++seed);
      std::vector<float> bias = random_vec(c.N, ++seed);
      std::vector<float> C = random_vec(c.M * ldc, ++seed);
      const std::vector<float> C0 = C;
      std::vector<double> expected(c.M * ldc);
      for (int64_t m = 0; m < c.M; ++m) {
        for (int64_t n = 0; n < ldc; ++n) {
          if (n >= c.N) {
            expected[m * ldc + n] = C0[m * ldc + n];  // padding columns stay untouched
            continue;
          }
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k) s += static_cast<double>(A[m * lda + k]) * B[n * ldb + k];
          if (use_bias) s += bias[n];
          if (accumulate) s += C0[m * ldc + n];
          expected[m * ldc + n] = s;
        }
      }
      auto fn = serial ? cpu::gemm_nt_serial : cpu::gemm_nt;
      fn(c.M, c.N, c.K, A.data(), lda, B.data(), ldb, C.data(), ldc, use_bias ? bias.data() : nullptr,
         accumulate);
      expect_all_near(C.data(), expected, 1e-5, 1e-5,
                      testing::PrintToString(std::vector<int64_t>{c.M, c.N, c.K, variant, serial}));
    }
  }
}

TEST(GemmTest, Dot) {
  for (int64_t n : {1, 3, 7, 8, 9, 16, 31, 100}) {
    std::vector<float> a = random_vec(n, 7 + n), b = random_vec(n, 8 + n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(cpu::dot(a.data(), b.data(), n), s, 1e-5) << n;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Basic ops

TEST(CpuOpsTest, EmbedAndOutOfRangeIds) {
  CpuBackend be;
  Tensor table = random_tensor({10, 3}, 1);
  Tensor out = be.embed(table, {0, 9, 3, 3});
  ASSERT_EQ(out.shape(), (Shape{4, 3}));
  const int ids[] = {0, 9, 3, 3};
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(out.f32()[t * 3 + i], table.f32()[ids[t] * 3 + i]);
  try {
    be.embed(table, {1, 10});
    ADD_FAILURE() << "expected an error for id 10";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("10"));
  }
  EXPECT_THROW(be.embed(table, {-1}), Error);
}

TEST(CpuOpsTest, Linear) {
  CpuBackend be;
  for (bool bias : {false, true}) {
    for (const GemmCase& c : {GemmCase{6, 11, 13}, GemmCase{1, 7, 5}, GemmCase{33, 65, 70}}) {
      Linear l;
      l.weight = random_tensor({c.N, c.K}, 11);
      if (bias) l.bias = random_tensor({c.N}, 12);
      // A 3-D input: leading dims are flattened.
      Tensor x = random_tensor({3, c.M, c.K}, 13);
      Tensor y = be.linear(x, l);
      ASSERT_EQ(y.shape(), (Shape{3, c.M, c.N}));
      std::vector<double> ref(3 * c.M * c.N);
      for (int64_t r = 0; r < 3 * c.M; ++r) {
        for (int64_t n = 0; n < c.N; ++n) {
          double s = bias ? l.bias.f32()[n] : 0.0;
          for (int64_t k = 0; k < c.K; ++k)
            s += static_cast<double>(x.f32()[r * c.K + k]) * l.weight.f32()[n * c.K + k];
          ref[r * c.N + n] = s;
        }
      }
      expect_all_near(y, ref, 1e-5, 1e-5, "linear");
    }
  }
  Linear l;
  l.weight = random_tensor({4, 5}, 1);
  EXPECT_THROW(be.linear(random_tensor({2, 6}, 2), l), Error);
}

TEST(CpuOpsTest, RmsNorm) {
  CpuBackend be;
  for (int64_t H : {1, 7, 64, 129}) {
    Tensor x = random_tensor({2, 3, H}, 20 + H, -3.0f, 3.0f);
    Tensor w = random_tensor({H}, 21 + H, 0.5f, 1.5f);
    const float eps = 1e-5f;
    Tensor y = be.rms_norm(x, w, eps);
    ASSERT_EQ(y.shape(), x.shape());
    std::vector<double> ref(x.numel());
    for (int64_t r = 0; r < 6; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(x.f32()[r * H + i]) * x.f32()[r * H + i];
      const double inv = 1.0 / std::sqrt(ss / H + eps);
      for (int64_t i = 0; i < H; ++i) ref[r * H + i] = w.f32()[i] * x.f32()[r * H + i] * inv;
    }
    expect_all_near(y, ref, 1e-5, 1e-5, "rms_norm");
  }
  EXPECT_THROW(be.rms_norm(random_tensor({2, 4}, 1), random_tensor({5}, 2), 1e-6f), Error);
}

TEST(CpuOpsTest, AddInplaceAndGatherRows) {
  CpuBackend be;
  Tensor a = random_tensor({3, 5}, 1), b = random_tensor({3, 5}, 2);
  Tensor a0 = a.clone();
  be.add_inplace(a, b);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(a.f32()[i], a0.f32()[i] + b.f32()[i]);
  EXPECT_THROW(be.add_inplace(a, random_tensor({4}, 3)), Error);
  Tensor g = be.gather_rows(a, {2, 0, 2});
  ASSERT_EQ(g.shape(), (Shape{3, 5}));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(g.f32()[i], a.f32()[10 + i]);
    EXPECT_EQ(g.f32()[5 + i], a.f32()[i]);
  }
  EXPECT_THROW(be.gather_rows(a, {3}), Error);
}

// ---------------------------------------------------------------------------------------------------------
// Rope

RopeTable test_table(int64_t rope_dim, float scaling) {
  RopeTable t;
  t.rope_dim = rope_dim;
  t.attention_scaling = scaling;
  for (int64_t i = 0; i < rope_dim / 2; ++i)
    t.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / rope_dim) * 0.9f);
  return t;
}

std::vector<double> ref_rope(const Tensor& x, const std::vector<int32_t>& pos, const RopeTable& table,
                             int64_t offset, RopeLayout layout, bool inverse) {
  const int64_t T = x.dim(0), Hh = x.dim(1), D = x.dim(2), half = table.rope_dim / 2;
  std::vector<double> out(x.f32(), x.f32() + x.numel());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hh; ++h) {
      double* v = out.data() + (t * Hh + h) * D + offset;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos[t]) * table.inv_freq[i] * (inverse ? -1 : 1);
        const double c = std::cos(angle) * table.attention_scaling,
                     s = std::sin(angle) * table.attention_scaling;
        const int64_t a = layout == RopeLayout::kHalf ? i : 2 * i;
        const int64_t b = layout == RopeLayout::kHalf ? i + half : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x1 * c + x0 * s;
      }
    }
  }
  return out;
}

TEST(CpuOpsTest, RopeBothLayoutsWithOffset) {
  CpuBackend be;
  const std::vector<int32_t> pos = {0, 1, 5, 17, 40};
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    for (int64_t offset : {0, 4, 6}) {
      for (float scaling : {1.0f, 1.3f}) {
        const int64_t D = 14, R = 8;
        RopeTable table = test_table(R, scaling);
        Tensor x = random_tensor({5, 3, D}, 31 + offset);
        std::vector<double> ref = ref_rope(x, pos, table, offset, layout, false);
        Tensor y = x.clone();
        be.rope(y, pos, table, offset, layout, false);
        expect_all_near(y, ref, 2e-5, 2e-5, "rope");
        // Dims outside [offset, offset + R) are untouched, bit for bit.
        for (int64_t r = 0; r < 15; ++r) {
          for (int64_t d = 0; d < D; ++d) {
            if (d >= offset && d < offset + R) continue;
            EXPECT_EQ(y.f32()[r * D + d], x.f32()[r * D + d]);
          }
        }
        // The inverse rotation is the reference's inverse too.
        Tensor z = x.clone();
        be.rope(z, pos, table, offset, layout, true);
        expect_all_near(z, ref_rope(x, pos, table, offset, layout, true), 2e-5, 2e-5, "inverse rope");
      }
    }
  }
}

TEST(CpuOpsTest, RopeLayoutsDiffer) {
  CpuBackend be;
  RopeTable table = test_table(8, 1.0f);
  Tensor x = random_tensor({1, 1, 8}, 3);
  Tensor a = x.clone(), b = x.clone();
  be.rope(a, {3}, table, 0, RopeLayout::kHalf, false);
  be.rope(b, {3}, table, 0, RopeLayout::kInterleaved, false);
  bool differ = false;
  for (int i = 0; i < 8; ++i) differ = differ || std::abs(a.f32()[i] - b.f32()[i]) > 1e-3f;
  EXPECT_TRUE(differ);
}

TEST(CpuOpsTest, RopeInverseUndoesForward) {
  CpuBackend be;
  const std::vector<int32_t> pos = {3, 0, 250, 1023};
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    RopeTable table = test_table(16, 1.0f);
    Tensor x = random_tensor({4, 2, 20}, 44);
    Tensor y = x.clone();
    be.rope(y, pos, table, 2, layout, false);
    be.rope(y, pos, table, 2, layout, true);
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(y.f32()[i], x.f32()[i], 2e-6) << i;
  }
}

TEST(CpuOpsTest, RopeErrors) {
  CpuBackend be;
  RopeTable table = test_table(8, 1.0f);
  Tensor x = random_tensor({2, 1, 10}, 1);
  EXPECT_THROW(be.rope(x, {0}, table, 0, RopeLayout::kHalf, false), Error);     // positions != tokens
  EXPECT_THROW(be.rope(x, {0, 1}, table, 4, RopeLayout::kHalf, false), Error);  // 4 + 8 > 10
}

// ---------------------------------------------------------------------------------------------------------
// MLP and experts

MlpWeights random_mlp(int64_t H, int64_t I, uint32_t seed, bool bias) {
  MlpWeights w;
  w.gate.weight = random_tensor({I, H}, seed + 1);
  w.up.weight = random_tensor({I, H}, seed + 2);
  w.down.weight = random_tensor({H, I}, seed + 3);
  if (bias) {
    w.gate.bias = random_tensor({I}, seed + 4);
    w.up.bias = random_tensor({I}, seed + 5);
    w.down.bias = random_tensor({H}, seed + 6);
  }
  return w;
}

std::vector<double> ref_mlp_row(const float* x, const MlpWeights& w) {
  const int64_t H = w.gate.in_features(), I = w.gate.out_features();
  auto lin = [](const Linear& l, const std::vector<double>& in) {
    const int64_t N = l.out_features(), K = l.in_features();
    std::vector<double> out(N);
    for (int64_t n = 0; n < N; ++n) {
      double s = l.bias ? l.bias.f32()[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += l.weight.f32()[n * K + k] * in[k];
      out[n] = s;
    }
    return out;
  };
  std::vector<double> xin(x, x + H);
  std::vector<double> g = lin(w.gate, xin), u = lin(w.up, xin), act(I);
  const double limit = w.swiglu_limit;
  for (int64_t i = 0; i < I; ++i) {
    double gv = g[i], uv = u[i];
    if (limit > 0) {
      gv = std::min(gv, limit);
      uv = std::max(-limit, std::min(uv, limit));
    }
    act[i] = gv / (1 + std::exp(-gv)) * uv;
  }
  return lin(w.down, act);
}

TEST(CpuOpsTest, Mlp) {
  CpuBackend be;
  for (bool bias : {false, true}) {
    for (int64_t T : {1, 5, 20}) {
      const int64_t H = 13, I = 21;
      MlpWeights w = random_mlp(H, I, 50 + T, bias);
      Tensor x = random_tensor({T, H}, 60 + T, -2.0f, 2.0f);
      Tensor y = be.mlp(x, w);
      ASSERT_EQ(y.shape(), (Shape{T, H}));
      std::vector<double> ref;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> r = ref_mlp_row(x.f32() + t * H, w);
        ref.insert(ref.end(), r.begin(), r.end());
      }
      expect_all_near(y, ref, 1e-4, 1e-4, "mlp");
    }
  }
  MlpWeights w = random_mlp(4, 6, 1, false);
  EXPECT_THROW(be.mlp(random_tensor({2, 5}, 1), w), Error);
}

TEST(CpuOpsTest, MlpSwigluLimitClamps) {
  CpuBackend be;
  const int64_t H = 11, I = 17, T = 6;
  MlpWeights w = random_mlp(H, I, 70, true);
  Tensor x = random_tensor({T, H}, 71, -3.0f, 3.0f);
  Tensor unclamped = be.mlp(x, w);
  w.swiglu_limit = 0.75f;
  Tensor y = be.mlp(x, w);
  std::vector<double> ref;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> r = ref_mlp_row(x.f32() + t * H, w);
    ref.insert(ref.end(), r.begin(), r.end());
  }
  expect_all_near(y, ref, 1e-4, 1e-4, "mlp with swiglu_limit");
  // The limit must be active for these inputs (pre-activations well beyond 0.75 both ways).
  double max_diff = 0;
  for (int64_t i = 0; i < y.numel(); ++i)
    max_diff = std::max(max_diff, std::abs(double(y.f32()[i]) - unclamped.f32()[i]));
  EXPECT_GT(max_diff, 0.1);
}

TEST(CpuOpsTest, MoeExpertsMatchPerTokenLoop) {
  CpuBackend be;
  const int64_t T = 7, H = 9, I = 6, E = 5, K = 3;
  std::vector<MlpWeights> experts;
  for (int64_t e = 0; e < E; ++e) experts.push_back(random_mlp(H, I, 100 + 10 * e, e % 2 == 0));
  experts[3].swiglu_limit = 0.5f;
  Tensor x = random_tensor({T, H}, 90, -2.0f, 2.0f);
  Tensor ids = Tensor::empty(DType::I32, {T, K});
  Tensor weights = random_tensor({T, K}, 91, 0.0f, 1.0f);
  std::mt19937 rng(92);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t k = 0; k < K; ++k) ids.data<int32_t>()[t * K + k] = perm[k];
  }
  ids.data<int32_t>()[K] = ids.data<int32_t>()[K + 1];  // a repeated expert within one token is allowed
  Tensor y = be.moe_experts(x, ids, weights, experts);
  ASSERT_EQ(y.shape(), (Shape{T, H}));
  std::vector<double> ref(T * H, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      std::vector<double> r = ref_mlp_row(x.f32() + t * H, experts[ids.data<int32_t>()[t * K + k]]);
      for (int64_t i = 0; i < H; ++i) ref[t * H + i] += weights.f32()[t * K + k] * r[i];
    }
  }
  expect_all_near(y, ref, 1e-4, 1e-4, "moe_experts");

  ids.data<int32_t>()[4] = static_cast<int32_t>(E);
  EXPECT_THROW(be.moe_experts(x, ids, weights, experts), Error);
  ids.data<int32_t>()[4] = -1;
  EXPECT_THROW(be.moe_experts(x, ids, weights, experts), Error);
}

// moe_experts_residual given the block's shared experts (Backend's default, the CPU's): the bits of the
// sequence the model ran before, norm_mlp_residual on the residual and then the routed experts.
TEST(CpuOpsTest, MoeExpertsResidualWithSharedEqualsSeparateOps) {
  CpuBackend be;
  const int64_t T = 5, H = 12, I = 8, E = 4, K = 2;
  std::vector<MlpWeights> experts;
  for (int64_t e = 0; e < E; ++e) experts.push_back(random_mlp(H, I, 200 + 10 * e, false));
  const MlpWeights shared = random_mlp(H, 2 * I, 300, false);
  const Tensor norm = random_tensor({H}, 301, 0.5f, 1.5f);
  const float eps = 1e-6f;
  const Tensor h = random_tensor({T, H}, 302, -2.0f, 2.0f);
  const Tensor weights = random_tensor({T, K}, 303, 0.0f, 1.0f);
  Tensor ids = Tensor::empty(DType::I32, {T, K});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) ids.data<int32_t>()[t * K + k] = static_cast<int32_t>((t + 2 * k) % E);
  const Tensor x = be.rms_norm(h, norm, eps);  // [T, H]
  Tensor fused = h.clone(), separate = h.clone();
  const MoeSharedExperts s{&shared, norm, eps};
  be.moe_experts_residual(fused, x, ids, weights, experts, nullptr, &s);
  be.norm_mlp_residual(separate, norm, eps, shared);
  be.moe_experts_residual(separate, x, ids, weights, experts);
  for (int64_t i = 0; i < fused.numel(); ++i) ASSERT_EQ(fused.f32()[i], separate.f32()[i]) << i;
}

// ---------------------------------------------------------------------------------------------------------
// head_matmul

TEST(CpuOpsTest, HeadMatmulBothModes) {
  CpuBackend be;
  struct Case {
    int64_t T, H, A, B;
  };
  for (const Case& c : {Case{3, 4, 5, 7}, Case{1, 1, 1, 1}, Case{9, 8, 33, 40}, Case{2, 3, 16, 9}}) {
    Tensor x = random_tensor({c.T, c.H, c.A}, 200 + c.A);
    for (bool transpose : {false, true}) {
      Tensor w =
          transpose ? random_tensor({c.H, c.A, c.B}, 300 + c.B) : random_tensor({c.H, c.B, c.A}, 400 + c.B);
      Tensor y = be.head_matmul(x, w, transpose);
      ASSERT_EQ(y.shape(), (Shape{c.T, c.H, c.B}));
      std::vector<double> ref(c.T * c.H * c.B);
      for (int64_t t = 0; t < c.T; ++t) {
        for (int64_t h = 0; h < c.H; ++h) {
          for (int64_t b = 0; b < c.B; ++b) {
            double s = 0;
            for (int64_t a = 0; a < c.A; ++a) {
              const float wv =
                  transpose ? w.f32()[(h * c.A + a) * c.B + b] : w.f32()[(h * c.B + b) * c.A + a];
              s += static_cast<double>(wv) * x.f32()[(t * c.H + h) * c.A + a];
            }
            ref[(t * c.H + h) * c.B + b] = s;
          }
        }
      }
      expect_all_near(y, ref, 1e-5, 1e-5, transpose ? "head_matmul transposed" : "head_matmul");
    }
  }
  EXPECT_THROW(be.head_matmul(random_tensor({2, 3, 4}, 1), random_tensor({2, 5, 4}, 2), false), Error);
  EXPECT_THROW(be.head_matmul(random_tensor({2, 3, 4}, 1), random_tensor({3, 5, 4}, 2), true), Error);
}

// ---------------------------------------------------------------------------------------------------------
// Attention over the paged cache

// Three sequences in one plan: a 5-token prefill, a chunk of 3 new tokens after 8 cached ones, and a single
// decode token after 19 cached ones. Blocks of 4 slots, ids shuffled across the cache.
struct PagedSetup {
  BatchPlan plan;
  std::vector<int32_t> cached;  // per sequence: tokens already in the cache before this step
  int64_t num_blocks = 20;
};

PagedSetup make_paged_setup() {
  PagedSetup s;
  BatchPlan& p = s.plan;
  p.block_size = 4;
  const std::vector<int32_t> context = {5, 11, 20};
  s.cached = {0, 8, 19};
  std::vector<int32_t> ids(s.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(777);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  p.cu_seqlens = {0};
  p.block_table_indptr = {0};
  for (size_t q = 0; q < context.size(); ++q) {
    const int32_t blocks = (context[q] + p.block_size - 1) / p.block_size;
    for (int32_t b = 0; b < blocks; ++b) p.block_table.push_back(ids[next++]);
    p.block_table_indptr.push_back(static_cast<int32_t>(p.block_table.size()));
    p.context_lens.push_back(context[q]);
    p.seq_ids.push_back(static_cast<int64_t>(q) + 10);
    for (int32_t pos = s.cached[q]; pos < context[q]; ++pos) {
      p.token_ids.push_back(pos);
      p.positions.push_back(pos);
    }
    p.cu_seqlens.push_back(static_cast<int32_t>(p.token_ids.size()));
  }
  for (int32_t q = 0; q < p.num_seqs(); ++q)
    for (int32_t t = p.cu_seqlens[q]; t < p.cu_seqlens[q + 1]; ++t)
      p.slot_mapping.push_back(p.slot_of(q, p.positions[t]));
  p.logits_rows = {4, 7, 8};
  return s;
}

std::vector<double> softmax(const std::vector<double>& s) {
  double mx = *std::max_element(s.begin(), s.end()), sum = 0;
  std::vector<double> p(s.size());
  for (size_t i = 0; i < s.size(); ++i) sum += (p[i] = std::exp(s[i] - mx));
  for (double& v : p) v /= sum;
  return p;
}

TEST(CpuAttentionTest, GqaPagedChunkedMultiSequence) {
  CpuBackend be;
  PagedSetup setup = make_paged_setup();
  const BatchPlan& plan = setup.plan;
  ASSERT_NO_THROW(plan.validate(setup.num_blocks));
  const int64_t Hq = 6, Hkv = 2, D = 5, Dv = 3, W = Hkv * (D + Dv);
  const int64_t T = plan.num_tokens();
  ASSERT_EQ(T, 5 + 3 + 1);
  // Layer 0 is filled with garbage to catch a wrong layer index; attention runs on layer 1.
  KvCache cache({KvLayerSpec{KvKind::kFullHistory, W}, KvLayerSpec{KvKind::kFullHistory, W}},
                setup.num_blocks, plan.block_size);
  std::vector<float> junk = random_vec(setup.num_blocks * plan.block_size * W, 5, 50.0f, 60.0f);
  std::copy(junk.begin(), junk.end(), cache.slot(0, 0));
  // Per sequence, every position's K [Hkv*D] and V [Hkv*Dv].
  std::vector<std::vector<float>> K(plan.num_seqs()), V(plan.num_seqs());
  for (int32_t q = 0; q < plan.num_seqs(); ++q) {
    K[q] = random_vec(plan.context_lens[q] * Hkv * D, 600 + q, -2.0f, 2.0f);
    V[q] = random_vec(plan.context_lens[q] * Hkv * Dv, 700 + q);
    // The cached prefix is already in the cache.
    for (int32_t pos = 0; pos < setup.cached[q]; ++pos) {
      float* row = cache.slot(1, plan.slot_of(q, pos));
      std::copy_n(&K[q][pos * Hkv * D], Hkv * D, row);
      std::copy_n(&V[q][pos * Hkv * Dv], Hkv * Dv, row + Hkv * D);
    }
  }
  // The new tokens go in through write_kv.
  std::vector<float> knew, vnew;
  for (int32_t q = 0; q < plan.num_seqs(); ++q) {
    for (int32_t pos = setup.cached[q]; pos < plan.context_lens[q]; ++pos) {
      knew.insert(knew.end(), &K[q][pos * Hkv * D], &K[q][(pos + 1) * Hkv * D]);
      vnew.insert(vnew.end(), &V[q][pos * Hkv * Dv], &V[q][(pos + 1) * Hkv * Dv]);
    }
  }
  be.write_kv(cache, 1, plan, Tensor::from_f32(knew, {T, Hkv * D}), Tensor::from_f32(vnew, {T, Hkv * Dv}));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = cache.slot(1, plan.slot_mapping[t]);
    for (int64_t i = 0; i < Hkv * D; ++i) ASSERT_EQ(row[i], knew[t * Hkv * D + i]);
    for (int64_t i = 0; i < Hkv * Dv; ++i) ASSERT_EQ(row[Hkv * D + i], vnew[t * Hkv * Dv + i]);
  }

  Tensor qt = random_tensor({T, Hq, D}, 800);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor out = be.attention_gqa(qt, cache, 1, plan, Hkv, D, Dv, scale);
  ASSERT_EQ(out.shape(), (Shape{T, Hq * Dv}));
  std::vector<double> ref(T * Hq * Dv);
  for (int32_t q = 0; q < plan.num_seqs(); ++q) {
    for (int32_t t = plan.cu_seqlens[q]; t < plan.cu_seqlens[q + 1]; ++t) {
      const int32_t pos = plan.positions[t];
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kvh = h / (Hq / Hkv);
        std::vector<double> s(pos + 1);
        for (int32_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i)
            d += static_cast<double>(qt.f32()[(t * Hq + h) * D + i]) * K[q][(j * Hkv + kvh) * D + i];
          s[j] = d * scale;
        }
        std::vector<double> p = softmax(s);
        for (int64_t i = 0; i < Dv; ++i) {
          double o = 0;
          for (int32_t j = 0; j <= pos; ++j) o += p[j] * V[q][(j * Hkv + kvh) * Dv + i];
          ref[t * Hq * Dv + h * Dv + i] = o;
        }
      }
    }
  }
  expect_all_near(out, ref, 1e-5, 1e-5, "attention_gqa");

  EXPECT_THROW(be.attention_gqa(qt, cache, 1, plan, 4, D, Dv, scale), Error);        // 6 heads, 4 kv heads
  EXPECT_THROW(be.attention_gqa(qt, cache, 1, plan, Hkv, D, Dv + 1, scale), Error);  // row width
  EXPECT_THROW(be.write_kv(cache, 1, plan, Tensor::from_f32(knew, {T, Hkv * D}), Tensor()), Error);
}

TEST(CpuAttentionTest, PlanValidation) {
  PagedSetup setup = make_paged_setup();
  EXPECT_NO_THROW(setup.plan.validate(setup.num_blocks));
  const int32_t max_id = *std::max_element(setup.plan.block_table.begin(), setup.plan.block_table.end());
  EXPECT_NO_THROW(setup.plan.validate(max_id + 1));
  EXPECT_THROW(setup.plan.validate(max_id), Error);  // a block id past the cache
  BatchPlan p = setup.plan;
  p.context_lens[2] = 40;  // needs more blocks than listed
  EXPECT_THROW(p.validate(setup.num_blocks), Error);
  p = setup.plan;
  p.positions.pop_back();
  EXPECT_THROW(p.validate(setup.num_blocks), Error);
  p = setup.plan;
  p.logits_rows.push_back(9);
  EXPECT_THROW(p.validate(setup.num_blocks), Error);
}

TEST(CpuAttentionTest, MlaAbsorbedMatchesExplicitDecompression) {
  CpuBackend be;
  PagedSetup setup = make_paged_setup();
  const BatchPlan& plan = setup.plan;
  const int64_t H = 3, R = 6, P = 4, Dn = 5, Dv = 7, T = plan.num_tokens();
  KvCache cache({KvLayerSpec{KvKind::kFullHistory, R + P}}, setup.num_blocks, plan.block_size);
  // Latents and rope keys of every position; cached ones written directly, new ones through write_kv.
  std::vector<std::vector<float>> C(plan.num_seqs()), KPE(plan.num_seqs());
  std::vector<float> cnew, kpenew;
  for (int32_t q = 0; q < plan.num_seqs(); ++q) {
    C[q] = random_vec(plan.context_lens[q] * R, 900 + q);
    KPE[q] = random_vec(plan.context_lens[q] * P, 950 + q);
    for (int32_t pos = 0; pos < plan.context_lens[q]; ++pos) {
      if (pos < setup.cached[q]) {
        float* row = cache.slot(0, plan.slot_of(q, pos));
        std::copy_n(&C[q][pos * R], R, row);
        std::copy_n(&KPE[q][pos * P], P, row + R);
      } else {
        cnew.insert(cnew.end(), &C[q][pos * R], &C[q][(pos + 1) * R]);
        kpenew.insert(kpenew.end(), &KPE[q][pos * P], &KPE[q][(pos + 1) * P]);
      }
    }
  }
  be.write_kv(cache, 0, plan, Tensor::from_f32(cnew, {T, R}), Tensor::from_f32(kpenew, {T, P}));

  Tensor w_uk = random_tensor({H, Dn, R}, 1001);  // k_nope = W_UK c
  Tensor w_uv = random_tensor({H, Dv, R}, 1002);  // v = W_UV c
  Tensor q_nope = random_tensor({T, H, Dn}, 1003, -2.0f, 2.0f);
  Tensor q_pe = random_tensor({T, H, P}, 1004, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dn + P));

  // Absorbed: q_lat = W_UK^T q_nope; attention over latents; out = W_UV o_lat.
  Tensor q_lat = be.head_matmul(q_nope, w_uk, true);
  ASSERT_EQ(q_lat.shape(), (Shape{T, H, R}));
  Tensor o_lat = be.attention_mla(q_lat, q_pe, cache, 0, plan, scale);
  ASSERT_EQ(o_lat.shape(), (Shape{T, H, R}));
  Tensor out = be.head_matmul(o_lat, w_uv, false);
  ASSERT_EQ(out.shape(), (Shape{T, H, Dv}));

  // Explicit: decompress every key and value, ordinary attention over [q_nope | q_pe] . [k_nope | k_pe].
  std::vector<double> ref(T * H * Dv), ref_lat(T * H * R);
  for (int32_t q = 0; q < plan.num_seqs(); ++q) {
    for (int32_t t = plan.cu_seqlens[q]; t < plan.cu_seqlens[q + 1]; ++t) {
      const int32_t pos = plan.positions[t];
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> s(pos + 1);
        std::vector<std::vector<double>> v(pos + 1, std::vector<double>(Dv));
        for (int32_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t n = 0; n < Dn; ++n) {
            double k = 0;
            for (int64_t r = 0; r < R; ++r)
              k += static_cast<double>(w_uk.f32()[(h * Dn + n) * R + r]) * C[q][j * R + r];
            d += k * q_nope.f32()[(t * H + h) * Dn + n];
          }
          for (int64_t i = 0; i < P; ++i)
            d += static_cast<double>(q_pe.f32()[(t * H + h) * P + i]) * KPE[q][j * P + i];
          s[j] = d * scale;
          for (int64_t i = 0; i < Dv; ++i) {
            double vv = 0;
            for (int64_t r = 0; r < R; ++r)
              vv += static_cast<double>(w_uv.f32()[(h * Dv + i) * R + r]) * C[q][j * R + r];
            v[j][i] = vv;
          }
        }
        std::vector<double> p = softmax(s);
        for (int64_t i = 0; i < Dv; ++i) {
          double o = 0;
          for (int32_t j = 0; j <= pos; ++j) o += p[j] * v[j][i];
          ref[(t * H + h) * Dv + i] = o;
        }
        for (int64_t r = 0; r < R; ++r) {
          double o = 0;
          for (int32_t j = 0; j <= pos; ++j) o += p[j] * C[q][j * R + r];
          ref_lat[(t * H + h) * R + r] = o;
        }
      }
    }
  }
  expect_all_near(o_lat, ref_lat, 1e-5, 1e-5, "attention_mla latent");
  expect_all_near(out, ref, 2e-5, 2e-5, "attention_mla decompressed");

  KvCache wrong({KvLayerSpec{KvKind::kFullHistory, R + P + 1}}, setup.num_blocks, plan.block_size);
  EXPECT_THROW(be.attention_mla(q_lat, q_pe, wrong, 0, plan, scale), Error);
}

// ---------------------------------------------------------------------------------------------------------
// MoE routing

// Router over identity weights so that the router logits are exactly the given values.
void route(const std::vector<std::vector<float>>& logits, const std::vector<float>& bias,
           const RoutingParams& p, Tensor* ids, Tensor* weights) {
  CpuBackend be;
  const int64_t T = static_cast<int64_t>(logits.size()), E = static_cast<int64_t>(logits[0].size());
  std::vector<float> x, eye(E * E, 0.0f);
  for (const auto& row : logits) x.insert(x.end(), row.begin(), row.end());
  for (int64_t e = 0; e < E; ++e) eye[e * E + e] = 1.0f;
  be.moe_route(Tensor::from_f32(x, {T, E}), Tensor::from_f32(eye, {E, E}),
               bias.empty() ? Tensor() : Tensor::from_f32(bias, {E}), p, ids, weights);
}

// (expert, weight) pairs of token t, sorted by expert id.
std::vector<std::pair<int32_t, float>> picks(const Tensor& ids, const Tensor& weights, int64_t t) {
  const int64_t K = ids.dim(1);
  std::vector<std::pair<int32_t, float>> out;
  for (int64_t k = 0; k < K; ++k) out.emplace_back(ids.data<int32_t>()[t * K + k], weights.f32()[t * K + k]);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int32_t> expert_ids(const Tensor& ids, const Tensor& weights, int64_t t) {
  std::vector<int32_t> out;
  for (const auto& [e, w] : picks(ids, weights, t)) out.push_back(e);
  return out;
}

std::vector<double> softmax_f(const std::vector<float>& v) {
  return softmax(std::vector<double>(v.begin(), v.end()));
}
double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

TEST(MoeRouteTest, SoftmaxGreedy) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 1.9f};
  const std::vector<double> prob = softmax_f(logits);
  RoutingParams p{"softmax", "greedy", 2, 1, 1, false, 1.0f};
  Tensor ids, w;
  route({logits}, {}, p, &ids, &w);
  ASSERT_EQ(ids.shape(), (Shape{1, 2}));
  ASSERT_EQ(ids.dtype(), DType::I32);
  auto got = picks(ids, w, 0);
  ASSERT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{1, 5}));
  EXPECT_NEAR(got[0].second, prob[1], 1e-6);
  EXPECT_NEAR(got[1].second, prob[5], 1e-6);

  // norm_topk_prob with k > 1 renormalises; routed scaling multiplies.
  p.norm_topk_prob = true;
  p.routed_scaling_factor = 2.0f;
  route({logits}, {}, p, &ids, &w);
  got = picks(ids, w, 0);
  EXPECT_NEAR(got[0].second, 2.0 * prob[1] / (prob[1] + prob[5]), 1e-6);
  EXPECT_NEAR(got[1].second, 2.0 * prob[5] / (prob[1] + prob[5]), 1e-6);

  // With k = 1 the softmax weight is not renormalised (transformers DeepSeek-V2: top_k > 1 and
  // norm_topk_prob).
  p.top_k = 1;
  p.routed_scaling_factor = 1.0f;
  route({logits}, {}, p, &ids, &w);
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
  EXPECT_NEAR(w.f32()[0], prob[1], 1e-6);
}

TEST(MoeRouteTest, GroupLimitedGreedyMasksGroups) {
  // 4 groups of 2. Group maxima: g0 6, g1 5.5, g2 5, g3 0.1; topk_group 2 keeps g0 and g1, so expert 4
  // (5.0, the third best overall) is excluded and expert 1 (0.3) is picked instead.
  const std::vector<float> logits = {6.0f, 0.3f, 5.5f, 0.2f, 5.0f, 4.9f, 0.1f, 0.0f};
  const std::vector<double> prob = softmax_f(logits);
  RoutingParams p{"softmax", "group_limited_greedy", 3, 4, 2, false, 1.0f};
  Tensor ids, w;
  route({logits}, {}, p, &ids, &w);
  EXPECT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{0, 1, 2}));
  auto got = picks(ids, w, 0);
  EXPECT_NEAR(got[1].second, prob[1], 1e-6);
  // Plain greedy picks expert 4 instead.
  p.method = "greedy";
  route({logits}, {}, p, &ids, &w);
  EXPECT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{0, 2, 4}));
  // With 3 groups kept, expert 4 is back.
  p.method = "group_limited_greedy";
  p.topk_group = 3;
  route({logits}, {}, p, &ids, &w);
  EXPECT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{0, 2, 4}));
}

TEST(MoeRouteTest, NoauxTcGroupsBiasAndWeights) {
  // 4 groups of 2; group score = sum of the top 2 of (sigmoid + bias). Expert 0 has the highest score
  // (sigmoid(3) = 0.95) but its group sums to 1.0, below g1 (1.44) and g2 (1.36): it is excluded.
  const std::vector<float> logits = {3.0f, -3.0f, 1.0f, 0.9f, 0.8f, 0.7f, -1.0f, -1.1f};
  RoutingParams p{"sigmoid", "noaux_tc", 2, 4, 2, false, 1.0f};
  Tensor ids, w;
  route({logits}, {}, p, &ids, &w);
  auto got = picks(ids, w, 0);
  ASSERT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(got[0].second, sigmoid(1.0), 1e-6);
  EXPECT_NEAR(got[1].second, sigmoid(0.9), 1e-6);

  // A correction bias changes the choice, but weights stay the unbiased sigmoid scores.
  std::vector<float> bias(8, 0.0f);
  bias[4] = 0.1f;  // expert 4: 0.69 + 0.1 > expert 3's 0.71
  route({logits}, bias, p, &ids, &w);
  got = picks(ids, w, 0);
  ASSERT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{2, 4}));
  EXPECT_NEAR(got[1].second, sigmoid(0.8), 1e-6);

  // A bias can also bring a group back: g0 becomes 0.95 + 0.05 + 0.6 = 1.6, the best group.
  bias.assign(8, 0.0f);
  bias[1] = 0.6f;
  route({logits}, bias, p, &ids, &w);
  ASSERT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{0, 2}));

  // norm_topk_prob normalises (also for sigmoid with any k) and the scaling factor multiplies.
  p.norm_topk_prob = true;
  p.routed_scaling_factor = 2.5f;
  route({logits}, {}, p, &ids, &w);
  got = picks(ids, w, 0);
  const double s2 = sigmoid(1.0), s3 = sigmoid(0.9);
  EXPECT_NEAR(got[0].second, 2.5 * s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(got[1].second, 2.5 * s3 / (s2 + s3), 1e-6);
  p.top_k = 1;
  route({logits}, {}, p, &ids, &w);
  EXPECT_EQ(ids.data<int32_t>()[0], 2);
  EXPECT_NEAR(w.f32()[0], 2.5, 1e-6);

  // One group: plain top-k over the biased scores.
  p = RoutingParams{"sigmoid", "noaux_tc", 2, 1, 1, false, 1.0f};
  route({logits}, {}, p, &ids, &w);
  EXPECT_EQ(expert_ids(ids, w, 0), (std::vector<int32_t>{0, 2}));
}

// Naive reference of the three routing methods (transformers DeepSeek-V2/V3), in double.
std::vector<std::pair<int32_t, double>> ref_route(const std::vector<float>& logits,
                                                  const std::vector<float>& bias, const RoutingParams& p) {
  const int64_t E = static_cast<int64_t>(logits.size()), per = E / p.n_group;
  std::vector<double> scores(E);
  if (p.scoring == "softmax") {
    scores = softmax_f(logits);
  } else {
    for (int64_t e = 0; e < E; ++e) scores[e] = sigmoid(logits[e]);
  }
  std::vector<double> choice = scores;
  if (!bias.empty())
    for (int64_t e = 0; e < E; ++e) choice[e] += bias[e];
  std::vector<bool> allowed(E, true);
  if (p.method != "greedy") {
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < p.n_group; ++g) {
      std::vector<double> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(members.rbegin(), members.rend());
      const double gs = p.method == "noaux_tc" ? members[0] + (per > 1 ? members[1] : 0.0) : members[0];
      groups.emplace_back(-gs, g);
    }
    std::sort(groups.begin(), groups.end());
    std::vector<bool> keep(p.n_group, false);
    for (int64_t i = 0; i < p.topk_group; ++i) keep[groups[i].second] = true;
    for (int64_t e = 0; e < E; ++e) allowed[e] = keep[e / per];
  }
  std::vector<std::pair<double, int32_t>> order;
  for (int64_t e = 0; e < E; ++e)
    order.emplace_back(-(allowed[e] ? choice[e] : 0.0), static_cast<int32_t>(e));
  std::sort(order.begin(), order.end());
  std::vector<std::pair<int32_t, double>> out;
  double denom = 0;
  for (int64_t k = 0; k < p.top_k; ++k) denom += scores[order[k].second];
  const bool norm = p.norm_topk_prob && (p.top_k > 1 || p.scoring == "sigmoid");
  for (int64_t k = 0; k < p.top_k; ++k) {
    const int32_t e = order[k].second;
    out.emplace_back(e, (norm ? scores[e] / denom : scores[e]) * p.routed_scaling_factor);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(MoeRouteTest, RandomTokensMatchNaiveReference) {
  const RoutingParams params[] = {
      {"softmax", "greedy", 3, 1, 1, true, 1.0f},
      {"softmax", "greedy", 2, 1, 1, false, 16.0f},
      {"softmax", "group_limited_greedy", 4, 4, 2, true, 1.5f},
      {"softmax", "group_limited_greedy", 3, 8, 3, false, 1.0f},
      {"sigmoid", "noaux_tc", 6, 8, 4, true, 2.5f},
      {"sigmoid", "noaux_tc", 3, 4, 2, false, 1.0f},
      {"sigmoid", "noaux_tc", 4, 1, 1, true, 1.0f},
  };
  const int64_t E = 32, H = 19, T = 23;
  uint32_t seed = 5000;
  for (const RoutingParams& p : params) {
    SCOPED_TRACE(p.scoring + " " + p.method + " k=" + std::to_string(p.top_k));
    Tensor x = random_tensor({T, H}, ++seed, -1.0f, 1.0f);
    Tensor router = random_tensor({E, H}, ++seed, -1.0f, 1.0f);
    std::vector<float> bias =
        p.method == "noaux_tc" ? random_vec(E, ++seed, -0.3f, 0.3f) : std::vector<float>{};
    CpuBackend be;
    Tensor ids, w;
    be.moe_route(x, router, bias.empty() ? Tensor() : Tensor::from_f32(bias, {E}), p, &ids, &w);
    ASSERT_EQ(ids.shape(), (Shape{T, p.top_k}));
    ASSERT_EQ(w.shape(), (Shape{T, p.top_k}));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> logits(E);
      for (int64_t e = 0; e < E; ++e) {
        double s = 0;
        for (int64_t i = 0; i < H; ++i)
          s += static_cast<double>(x.f32()[t * H + i]) * router.f32()[e * H + i];
        logits[e] = static_cast<float>(s);
      }
      auto ref = ref_route(logits, bias, p);
      auto got = picks(ids, w, t);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t k = 0; k < ref.size(); ++k) {
        EXPECT_EQ(got[k].first, ref[k].first) << "token " << t;
        EXPECT_NEAR(got[k].second, ref[k].second, 1e-5 * (1 + std::abs(ref[k].second))) << "token " << t;
      }
    }
  }
}

TEST(MoeRouteTest, Errors) {
  Tensor ids, w;
  EXPECT_THROW(route({{1.0f, 2.0f}}, {}, RoutingParams{"tanh", "greedy", 1, 1, 1, false, 1.0f}, &ids, &w),
               Error);
  EXPECT_THROW(route({{1.0f, 2.0f}}, {}, RoutingParams{"softmax", "random", 1, 1, 1, false, 1.0f}, &ids, &w),
               Error);
  CpuBackend be;
  EXPECT_THROW(be.moe_route(random_tensor({2, 3}, 1), random_tensor({4, 5}, 2), Tensor(),
                            RoutingParams{"softmax", "greedy", 1, 1, 1, false, 1.0f}, &ids, &w),
               Error);
}

}  // namespace
}  // namespace dsinfer

// The OpenMP paths of gemm_nt (packed panels for M >= 8, row tiles below) agree with the serial kernel even
// when the test runner limits threads (CI runs tests with OMP_NUM_THREADS=1).
TEST(CpuGemmThreads, ParallelEqualsSerial) {
  omp_set_num_threads(2);
  std::mt19937 rng(123);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{300, 190, 77}, {5, 333, 129}, {64, 64, 64}}) {
    std::vector<float> A(M * K), B(N * K), bias(N), C1(M * N), C2(M * N);
    for (float& v : A) v = dist(rng);
    for (float& v : B) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    dsinfer::cpu::gemm_nt(M, N, K, A.data(), K, B.data(), K, C1.data(), N, bias.data());
    dsinfer::cpu::gemm_nt_serial(M, N, K, A.data(), K, B.data(), K, C2.data(), N, bias.data());
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_NEAR(C1[i], C2[i], 1e-4f) << M << "x" << N << "x" << K << " at " << i;
  }
}
