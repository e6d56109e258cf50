// Shared set-up of the CUDA DeepSeek-V2/V3 op tests and benchmarks (cuda_mla_ops_test.cpp,
// cuda_moe_ops_test.cpp, cuda_moe_units_test.cpp, cuda_deepseek_bench_test.cpp): the fixture with its
// bf16-representable random values, and the helpers more than one of them uses. One fixture type for every
// file, so that the test suite CudaDeepseekOpsTest may span them in the single cuda_device_tests binary.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"
#include "model/rope.h"
#include "scrambled_plan.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/arch_path.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/head_matmul_kernels.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/mla_prepare_kernels.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/timing.h"
#endif

namespace dsinfer::deepseek_ops_test {

#ifdef DSINFER_HAVE_CUDA

class CudaDeepseekOpsTest : public ::testing::Test {
 public:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device visible";
  }
  std::mt19937 rng{20261130};
  // Normal values rounded to bf16 (exactly representable in the bf16 cache and weights).
  Tensor random_bf16_values(Shape shape, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_f32(f32_to_bf16(d(rng)));
    return t;
  }
  // A random indexer query of T tokens (V3.2's and V4's indexer tests): q [T, Hi, D], head weights [T, Hi],
  // the scales the models use (D^-0.5 on q . k, Hi^-0.5 on the weights) and a label for SCOPED_TRACE.
  struct IndexerQuery {
    Tensor q, w;
    float scale = 1.0f, wscale = 1.0f;
    std::string label;
  };
  IndexerQuery random_indexer_query(int64_t T, int64_t Hi, int64_t D, int64_t top_k) {
    IndexerQuery iq;
    iq.q = random_bf16_values({T, Hi, D});
    iq.w = random_bf16_values({T, Hi});
    iq.scale = 1.0f / std::sqrt(static_cast<float>(D));
    iq.wscale = 1.0f / std::sqrt(static_cast<float>(Hi));
    iq.label = "Hi " + std::to_string(Hi) + " D " + std::to_string(D) + " top_k " + std::to_string(top_k) +
               " tokens " + std::to_string(T);
    return iq;
  }
  static Tensor to_bf16_bits(const Tensor& values) {
    Tensor bits = Tensor::empty(DType::BF16, values.shape());
    for (int64_t i = 0; i < values.numel(); ++i) bits.data<uint16_t>()[i] = f32_to_bf16(values.f32()[i]);
    return bits;
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

// Runs body() with the MLA step split's thresholds set (min_query query tokens of a sequence for the
// multi-query kernel, min_blocks of its blocks x head groups in a step), then restores them.
template <class Fn>
void with_prefill_policy(int min_query, int min_blocks, Fn&& body) {
  const int saved_query = cuda::mla_prefill_min_query(), saved_blocks = cuda::mla_prefill_min_blocks();
  cuda::mla_set_prefill_min_query(min_query);
  cuda::mla_set_prefill_min_blocks(min_blocks);
  body();
  cuda::mla_set_prefill_min_query(saved_query);
  cuda::mla_set_prefill_min_blocks(saved_blocks);
}
inline constexpr int kPrefillOff = 1 << 30;

// [T, K] I32 expert ids, K distinct experts of E per token, uniformly drawn.
inline Tensor distinct_expert_ids(std::mt19937& rng, int64_t T, int64_t K, int64_t E) {
  Tensor ids = Tensor::empty(DType::I32, {T, K});
  std::uniform_int_distribution<int> pick(0, static_cast<int>(E) - 1);
  for (int64_t t = 0; t < T; ++t) {
    std::set<int> used;
    for (int64_t k = 0; k < K; ++k) {
      int e;
      do e = pick(rng);
      while (!used.insert(e).second);
      ids.data<int32_t>()[t * K + k] = e;
    }
  }
  return ids;
}

// An RMSNorm weight near 1, bf16-representable.
inline Tensor norm_weight(CudaDeepseekOpsTest* test, int64_t H) {
  Tensor w = test->random_bf16_values({H}, 0.1f);
  for (int64_t i = 0; i < H; ++i) w.f32()[i] = bf16_to_f32(f32_to_bf16(1.0f + w.f32()[i]));
  return w;
}

// Device copy of host values as bf16 bits (raw bf16 device tensor, as prepare_weight leaves weights).
inline Tensor device_bf16(const Tensor& values) {
  Tensor bits = Tensor::empty(DType::BF16, values.shape());
  for (int64_t i = 0; i < values.numel(); ++i) bits.data<uint16_t>()[i] = f32_to_bf16(values.f32()[i]);
  return cuda::to_device(bits);
}

struct FusedRouteCase {
  const char* scoring;
  const char* method;
  int64_t E, K, groups, topk_group;
  bool norm, bias;
};

inline cuda::MoeRouteParams kernel_route_params(const FusedRouteCase& c) {
  cuda::MoeRouteParams p;
  p.scoring = std::string(c.scoring) == "softmax"   ? cuda::MoeScoring::kSoftmax
              : std::string(c.scoring) == "sigmoid" ? cuda::MoeScoring::kSigmoid
                                                    : cuda::MoeScoring::kSqrtSoftplus;
  p.method = std::string(c.method) == "greedy"                 ? cuda::MoeTopk::kGreedy
             : std::string(c.method) == "group_limited_greedy" ? cuda::MoeTopk::kGroupLimitedGreedy
                                                               : cuda::MoeTopk::kNoauxTc;
  p.top_k = static_cast<int>(c.K);
  p.n_group = static_cast<int>(c.groups);
  p.topk_group = static_cast<int>(c.topk_group);
  p.norm_topk_prob = c.norm;
  p.routed_scaling_factor = 2.5f;
  return p;
}

// E experts of H x I, small bf16 values, on the host and as the GPU's bf16 copies.
struct ExpertSet {
  std::vector<MlpWeights> cpu, gpu;
};

inline ExpertSet make_experts(CudaDeepseekOpsTest* test, CudaBackend& gpu, int64_t E, int64_t H, int64_t I) {
  ExpertSet s;
  for (int64_t e = 0; e < E; ++e) {
    MlpWeights c, g;
    c.gate.weight = test->random_bf16_values({I, H}, 0.1f);
    c.up.weight = test->random_bf16_values({I, H}, 0.1f);
    c.down.weight = test->random_bf16_values({H, I}, 0.1f);
    g.gate.weight = gpu.prepare_weight(c.gate.weight);
    g.up.weight = gpu.prepare_weight(c.up.weight);
    g.down.weight = gpu.prepare_weight(c.down.weight);
    s.cpu.push_back(c);
    s.gpu.push_back(g);
  }
  return s;
}

// A block's shared MLP of `units` x I intermediate ([units I, H] gate and up, [H, units I] down), small
// bf16 values, on the host and as the GPU's bf16 copies.
struct SharedMlp {
  MlpWeights cpu, gpu;
};

inline SharedMlp make_shared_mlp(CudaDeepseekOpsTest* test, CudaBackend& gpu, int64_t units, int64_t H,
                                 int64_t I) {
  SharedMlp s;
  s.cpu.gate.weight = test->random_bf16_values({units * I, H}, 0.1f);
  s.cpu.up.weight = test->random_bf16_values({units * I, H}, 0.1f);
  s.cpu.down.weight = test->random_bf16_values({H, units * I}, 0.1f);
  s.gpu.gate.weight = gpu.prepare_weight(s.cpu.gate.weight);
  s.gpu.up.weight = gpu.prepare_weight(s.cpu.up.weight);
  s.gpu.down.weight = gpu.prepare_weight(s.cpu.down.weight);
  return s;
}

// How many elements of two host tensors of one shape (4-byte elements) differ in their bits.
inline int64_t differing(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += static_cast<const uint32_t*>(a.raw())[i] != static_cast<const uint32_t*>(b.raw())[i];
  return n;
}

// Every slot of a bf16 GPU cache layer set to small random values (the benchmarks' caches).
inline void fill_gpu_cache(CudaDeepseekOpsTest* test, KvCache& cache, int64_t layer) {
  const Tensor& storage = cache.storage(layer);
  const int64_t n = storage.numel(), block = std::min<int64_t>(n, 1 << 22);
  const Tensor bits = CudaDeepseekOpsTest::to_bf16_bits(test->random_bf16_values({block}, 0.05f));
  for (int64_t i = 0; i < n; i += block)
    cuda::copy_to_device(static_cast<uint16_t*>(const_cast<void*>(storage.raw())) + i, bits.raw(),
                         std::min(block, n - i) * 2);
}

// a - h elementwise (host tensors of one shape): what an op added to the residual h.
inline Tensor added_part(const Tensor& a, const Tensor& h) {
  Tensor d = Tensor::empty(DType::F32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) d.f32()[i] = a.f32()[i] - h.f32()[i];
  return d;
}

#endif

}  // namespace dsinfer::deepseek_ops_test
