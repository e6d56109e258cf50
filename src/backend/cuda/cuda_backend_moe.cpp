// CudaBackend's DeepSeekMoE ops: moe_route, norm_moe_route (decode sizes: RMSNorm, routing and the experts'
// permutation in one kernel, the permutation handed to moe_experts_residual as a MoeDispatch), moe_experts
// and moe_experts_residual (device-side permutation by expert, grouped gate/up + SiLU-mul and down kernels
// over all experts: weight streaming at decode sizes, bf16 grouped GEMMs for many rows per expert; weighted
// un-permute into a new tensor or added to the residual; a block's shared experts ride in the streaming
// launches as extra experts of every token), and the load-time hooks that keep the router bias in float32
// and stack each layer's experts into one gate/up and one down tensor.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/arch_path.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/packed_matrix.h"
#include "backend/cuda/runtime.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::dev_bf16;
using cuda::dev_f32;

namespace {

// The bf16 parts per activation of a shared MLP run apart from the experts' launches at decode sizes: the
// experts' own (the units and streaming kernels split activations into hi and lo), whatever the dense GEMVs
// use, so that the shared experts' sum is the same whether they run inside those launches or apart.
constexpr int kExpertGemvParts = 2;

cuda::MoeScoring scoring_of(const std::string& s) {
  if (s == "softmax") return cuda::MoeScoring::kSoftmax;
  if (s == "sigmoid") return cuda::MoeScoring::kSigmoid;
  if (s == "sqrtsoftplus") return cuda::MoeScoring::kSqrtSoftplus;
  fail("moe_route: unsupported scoring function ", s);
}

cuda::MoeTopk method_of(const std::string& m) {
  if (m == "greedy") return cuda::MoeTopk::kGreedy;
  if (m == "group_limited_greedy") return cuda::MoeTopk::kGroupLimitedGreedy;
  if (m == "noaux_tc") return cuda::MoeTopk::kNoauxTc;
  fail("moe_route: unsupported top-k method ", m);
}

using MatrixOf = const Tensor& (*)(const MlpWeights&);
const Tensor& gate_of(const MlpWeights& m) {
  return m.gate.weight;
}
const Tensor& up_of(const MlpWeights& m) {
  return m.up.weight;
}
const Tensor& down_of(const MlpWeights& m) {
  return m.down.weight;
}

// The experts' matrices as one base pointer and a fixed stride, when they already lie that way (as
// prepare_experts leaves them).
bool uniform_stride(const std::vector<MlpWeights>& experts, MatrixOf get, cuda::StackedWeights* out) {
  const auto* base = static_cast<const uint16_t*>(get(experts[0]).raw());
  const int64_t stride = experts.size() > 1 ? static_cast<const uint16_t*>(get(experts[1]).raw()) - base : 0;
  for (size_t e = 0; e < experts.size(); ++e)
    if (static_cast<const uint16_t*>(get(experts[e]).raw()) != base + static_cast<int64_t>(e) * stride)
      return false;
  *out = {base, stride};
  return true;
}

// One [E, N, K] bf16 device tensor holding every expert's [N, K] matrix.
Tensor stack_matrices(const std::vector<MlpWeights>& experts, MatrixOf get) {
  const Tensor& first = get(experts[0]);
  const int64_t E = static_cast<int64_t>(experts.size()), N = first.dim(0), K = first.dim(1);
  Tensor stacked = Tensor::empty_on(Device::kCuda, DType::BF16, {E, N, K});
  for (int64_t e = 0; e < E; ++e) {
    const Tensor& m = get(experts[e]);
    cuda::copy_device_to_device(static_cast<char*>(stacked.raw()) + e * m.nbytes(), m.raw(), m.nbytes());
  }
  return stacked;
}

// Whether to make a packed copy of an expert matrix for the units launches, `bytes` for the allocation that
// holds it (CudaBackendOptions::moe_units_packed: never, always, or while 30% of the GPU stays free).
bool units_packing_wanted(const CudaBackendOptions& o, int64_t bytes) {
  if (o.moe_units_packed == 0 || cuda::arch_path() != cuda::ArchPath::kHopper) return false;
  return o.moe_units_packed == 1 || cuda::gemv_packed_copy_fits(bytes);
}

// The experts' stacks as prepare_experts leaves them with packed copies: gate/up [E, 2I, H] (expert e's gate
// rows then its up rows) and down [E H, I], each registered with its copy. Null pointers otherwise.
struct PackedStacks {
  const uint16_t* gate_up = nullptr;
  const uint16_t* down = nullptr;
};
PackedStacks packed_stacks(const std::vector<MlpWeights>& experts, const cuda::StackedWeights& gate,
                           const cuda::StackedWeights& up, const cuda::StackedWeights& down, int64_t I,
                           int64_t H) {
  const int64_t E = static_cast<int64_t>(experts.size());
  if (E < 2 || gate.stride != 2 * I * H || up.stride != gate.stride || up.base != gate.base + I * H ||
      down.stride != H * I)
    return {};
  const uint16_t* gu = cuda::gemv_packed_for(gate.base, E * 2 * I, H);
  const uint16_t* dn = cuda::gemv_packed_for(down.base, E * H, I);
  if (!gu || !dn) return {};
  return {gu, dn};
}

void check_experts(const std::vector<MlpWeights>& experts, int64_t H) {
  DSI_CHECK(!experts.empty(), "moe_experts: no experts");
  const int64_t I = experts[0].gate.out_features();
  for (const MlpWeights& m : experts) {
    DSI_CHECK(!m.gate.bias && !m.up.bias && !m.down.bias,
              "moe_experts: expert biases are not supported on CUDA");
    DSI_CHECK(m.gate.weight.ndim() == 2 && m.gate.in_features() == H && m.gate.out_features() == I &&
                  m.up.weight.ndim() == 2 && m.up.in_features() == H && m.up.out_features() == I &&
                  m.down.weight.ndim() == 2 && m.down.in_features() == I && m.down.out_features() == H,
              "moe_experts: experts of differing shapes (hidden ", H, ", intermediate ", I, ")");
    DSI_CHECK(m.swiglu_limit == experts[0].swiglu_limit, "moe_experts: experts with differing swiglu limits");
    dev_bf16(m.gate.weight, "moe_experts", "an expert weight");
    dev_bf16(m.up.weight, "moe_experts", "an expert weight");
    dev_bf16(m.down.weight, "moe_experts", "an expert weight");
  }
}

// Rows per expert on average from which moe_experts runs the 64-row tensor-core kernels when the streaming
// kernels do not take the shape (below: CUDA cores).
constexpr int64_t kMoeMmaRowsPerExpert = 16;

// The expert kernels moe_experts runs for T tokens of top K over E experts of [I, H] / [H, I] matrices, x
// the activations' address (its alignment matters), and the permutation's tile size for them.
struct MoeKernelPlan {
  bool grouped = false, stream = false, mma = false;
  int grouped_variant = 0;
  int tile_rows = 1;
};

MoeKernelPlan plan_moe_kernels(const CudaBackendOptions& o, int64_t T, int64_t K, int64_t E, int64_t H,
                               int64_t I, const float* xd, const cuda::StackedWeights& gate,
                               const cuda::StackedWeights& up, const cuda::StackedWeights& down) {
  // Decided on the token count rounded up to a power of two (as a CUDA graph's padded batch would be), so
  // that eager and replayed steps of one bucket run the same kernels. From moe_grouped_min_rows rows per
  // expert: the grouped bf16 GEMMs (activations rounded to bf16); below it, or with split activations, up to
  // kMoeStreamMaxRows rows per expert: the weight-streaming tensor-core kernels (tiles of 8 to 64 rows, each
  // expert tile's weights read once); more (split activations, or the grouped kernels off): the 64-row
  // tensor-core tiles; shapes or alignments none takes: CUDA cores.
  MoeKernelPlan plan;
  const int64_t rows_per_expert = (cuda::next_pow2(T) * K + E - 1) / E;
  plan.grouped_variant =
      o.moe_grouped_variant > 0 ? o.moe_grouped_variant : cuda::moe_grouped_variant_for(rows_per_expert);
  // A forced grouped variant (benchmarks, tests) runs the grouped GEMMs at any rows per expert.
  plan.grouped = (rows_per_expert >= o.moe_grouped_min_rows || o.moe_grouped_variant > 0) &&
                 !o.split_gemm_activations && o.moe_grouped_variant >= 0 &&
                 cuda::moe_grouped_supported(H, reinterpret_cast<uintptr_t>(xd), gate.base, gate.stride) &&
                 cuda::moe_grouped_supported(H, 0, up.base, up.stride) &&
                 cuda::moe_grouped_supported(I, 0, down.base, down.stride);
  const int stream_rows = plan.grouped ? 0 : cuda::moe_stream_tile_rows(rows_per_expert);
  plan.stream = stream_rows > 0 &&
                cuda::moe_stream_supported(H, reinterpret_cast<uintptr_t>(xd), gate.base, gate.stride) &&
                cuda::moe_stream_supported(H, 0, up.base, up.stride) &&
                cuda::moe_stream_supported(I, 0, down.base, down.stride);
  plan.mma = !plan.stream && !plan.grouped && cuda::next_pow2(T) * K >= kMoeMmaRowsPerExpert * E &&
             cuda::moe_mma_supported(H, reinterpret_cast<uintptr_t>(xd), gate.base, gate.stride) &&
             cuda::moe_mma_supported(H, 0, up.base, up.stride) &&
             cuda::moe_mma_supported(I, 0, down.base, down.stride);
  plan.tile_rows = plan.stream    ? stream_rows
                   : plan.grouped ? cuda::moe_grouped_tile_rows(plan.grouped_variant)
                   : plan.mma     ? cuda::kMoeMmaTileRows
                                  : cuda::moe_rows_per_tile(cuda::next_pow2(T) * K, E);
  return plan;
}

// The shared experts (MLP m: [SI, H] gate and up, [H, SI] down) as SI / I units of the routed experts'
// intermediate size I in the streaming launches (gate/up: rows [uI, (u + 1)I) of gate and up; down: columns
// [uI, (u + 1)I)): when moe_shared_fused, the streaming kernels run (plan.stream) and every unit takes one
// tile (next_pow2(T) <= tile rows: decided on the bucket, like every launch choice; more tiles would read
// the shared weights once per tile). False: the shared MLP runs apart (norm_mlp_residual).
bool fused_shared_units(const CudaBackendOptions& o, const MoeKernelPlan& plan, int64_t T, int64_t H,
                        int64_t I, float limit, const MlpWeights& m, cuda::MoeSharedUnits* gate_up,
                        cuda::MoeSharedUnits* down) {
  if (!o.moe_shared_fused || !plan.stream || cuda::next_pow2(T) > plan.tile_rows || I <= 0) return false;
  const Tensor *g = &m.gate.weight, *u = &m.up.weight, *d = &m.down.weight;
  for (const Tensor* w : {g, u, d})
    if (w->ndim() != 2 || w->device() != Device::kCuda || w->dtype() != DType::BF16) return false;
  const int64_t SI = g->dim(0);
  if (m.gate.bias || m.up.bias || m.down.bias || m.swiglu_limit != limit || SI == 0 || SI % I != 0 ||
      g->dim(1) != H || u->dim(0) != SI || u->dim(1) != H || d->dim(0) != H || d->dim(1) != SI)
    return false;
  const int64_t units = SI / I;
  *gate_up = cuda::MoeSharedUnits{{static_cast<const uint16_t*>(g->raw()), I * H},
                                  {static_cast<const uint16_t*>(u->raw()), I * H},
                                  H,
                                  units,
                                  T};
  *down = cuda::MoeSharedUnits{{static_cast<const uint16_t*>(d->raw()), I}, {}, SI, units, T};
  return cuda::moe_stream_shared_supported(H, *gate_up) && cuda::moe_stream_shared_supported(I, *down);
}

// One token's experts as the two units launches (cuda::GemvMoeUnits; ids and weights left to the caller):
// when moe_units is on, T == 1, the k routed experts lie at a fixed stride without biases, and the shared
// MLP (if any) is n_shared units of the routed intermediate size with the same swiglu_limit.
bool moe_units_for(const CudaBackendOptions& o, int64_t T, int64_t H, int64_t k, const float* x,
                   const std::vector<MlpWeights>& experts, const MlpWeights* shared, cuda::GemvMoeUnits* u) {
  if (!o.moe_units || T != 1 || experts.empty() || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  cuda::StackedWeights gate, up, down;
  if (!uniform_stride(experts, gate_of, &gate) || !uniform_stride(experts, up_of, &up) ||
      !uniform_stride(experts, down_of, &down))
    return false;
  const MlpWeights& e0 = experts[0];
  if (e0.gate.bias || e0.up.bias || e0.down.bias || gate_of(e0).dtype() != DType::BF16 ||
      gate_of(e0).device() != Device::kCuda)
    return false;
  const int64_t I = gate_of(e0).dim(0);
  *u = cuda::GemvMoeUnits{};
  u->len = I;
  u->gate = gate.base;
  u->up = up.base;
  u->down = down.base;
  u->gate_stride = gate.stride;
  u->up_stride = up.stride;
  u->down_stride = down.stride;
  u->experts = static_cast<int>(experts.size());
  if (shared) {
    const Tensor &g = shared->gate.weight, &w_up = shared->up.weight, &d = shared->down.weight;
    for (const Tensor* w : {&g, &w_up, &d})
      if (w->ndim() != 2 || w->device() != Device::kCuda || w->dtype() != DType::BF16) return false;
    const int64_t SI = g.dim(0);
    if (shared->gate.bias || shared->up.bias || shared->down.bias ||
        shared->swiglu_limit != e0.swiglu_limit || SI == 0 || SI % I != 0 || g.dim(1) != H ||
        w_up.dim(0) != SI || w_up.dim(1) != H || d.dim(0) != H || d.dim(1) != SI)
      return false;
    u->known = static_cast<int>(SI / I);
    u->shared_gate = static_cast<const uint16_t*>(g.raw());
    u->shared_up = static_cast<const uint16_t*>(w_up.raw());
    u->shared_down = static_cast<const uint16_t*>(d.raw());
  }
  if (u->known + k > cuda::kGemvMaxUnits) return false;
  u->count = u->known + static_cast<int>(k);
  if (o.moe_units_packed != 0) {  // the packed copies prepare_experts / prepare_shared_experts made, if any
    const PackedStacks stacks = packed_stacks(experts, gate, up, down, I, H);
    if (stacks.gate_up) {
      u->gate_packed = stacks.gate_up;
      u->up_packed = stacks.gate_up + I * H;  // a row group's offset is its row-major offset (H % 32 == 0)
      u->down_packed = stacks.down;
    }
    if (shared) {
      const int64_t SI = u->known * I;
      u->shared_gate_packed = cuda::gemv_packed_for(u->shared_gate, SI, H);
      u->shared_up_packed = cuda::gemv_packed_for(u->shared_up, SI, H);
      u->shared_down_packed = cuda::gemv_packed_for(u->shared_down, H, SI);
    }
  }
  return cuda::gemv_moe_units_supported(*u, H);
}

// The CUDA kernels' routing parameters.
cuda::MoeRouteParams route_params(const RoutingParams& p) {
  cuda::MoeRouteParams rp;
  rp.scoring = scoring_of(p.scoring);
  rp.method = method_of(p.method);
  rp.top_k = static_cast<int>(p.top_k);
  rp.n_group = static_cast<int>(p.n_group);
  rp.topk_group = static_cast<int>(p.topk_group);
  rp.norm_topk_prob = p.norm_topk_prob;
  rp.routed_scaling_factor = p.routed_scaling_factor;
  return rp;
}

}  // namespace

Tensor CudaBackend::prepare_weight_f32(Tensor host_f32) {
  DSI_CHECK(host_f32.is_cpu() && host_f32.dtype() == DType::F32,
            "prepare_weight_f32: expected a host float32 tensor");
  return cuda::to_device(host_f32);
}

void CudaBackend::prepare_experts(std::vector<MlpWeights>& experts) {
  if (experts.empty()) return;
  check_experts(experts, experts[0].gate.in_features());
  const int64_t E = static_cast<int64_t>(experts.size());
  const int64_t I = experts[0].gate.out_features(), H = experts[0].gate.in_features();
  // With moe_units_packed, the stacks are made (again, if the checkpoint stacked them) in allocations that
  // carry their packed copies, where the units launches could read them (H and I multiples of 32).
  const bool pack = E >= 2 && H % 32 == 0 && I % 32 == 0 &&
                    units_packing_wanted(options_, cuda::matrix_with_packed_copy_bytes(E * 2 * I, H) +
                                                       cuda::matrix_with_packed_copy_bytes(E * H, I));
  cuda::StackedWeights gate_at, up_at, down_at;
  if (uniform_stride(experts, gate_of, &gate_at) && uniform_stride(experts, up_of, &up_at) &&
      uniform_stride(experts, down_of, &down_at) &&
      (!pack || packed_stacks(experts, gate_at, up_at, down_at, I, H).gate_up))
    return;  // already one tensor per kind (e.g. transformers' fused gate_up_proj / down_proj)
  // gate_up [E, 2I, H]: expert e's gate rows [2eI, 2eI + I), up rows [2eI + I, 2(e + 1)I); down [E, H, I].
  const size_t half = static_cast<size_t>(I * H) * sizeof(uint16_t);
  auto fill_gate_up = [&](void* to) {
    for (int64_t e = 0; e < E; ++e) {
      char* dst = static_cast<char*>(to) + 2 * e * half;
      cuda::copy_device_to_device(dst, experts[e].gate.weight.raw(), half);
      cuda::copy_device_to_device(dst + half, experts[e].up.weight.raw(), half);
    }
  };
  Tensor gate_up, down;
  if (pack) {
    gate_up = cuda::matrix_with_packed_copy(E * 2 * I, H, fill_gate_up);  // [E 2I, H]
    down = cuda::matrix_with_packed_copy(E * H, I, [&](void* to) {        // [E H, I]
      for (int64_t e = 0; e < E; ++e) {
        const Tensor& m = experts[e].down.weight;
        cuda::copy_device_to_device(static_cast<char*>(to) + e * m.nbytes(), m.raw(), m.nbytes());
      }
    });
  } else {
    gate_up = Tensor::empty_on(Device::kCuda, DType::BF16, {E * 2 * I, H});
    fill_gate_up(gate_up.raw());
    down = stack_matrices(experts, down_of).reshape({E * H, I});
  }
  for (int64_t e = 0; e < E; ++e) {
    experts[e].gate.weight = gate_up.rows(2 * e * I, 2 * e * I + I);
    experts[e].up.weight = gate_up.rows(2 * e * I + I, 2 * (e + 1) * I);
    experts[e].down.weight = down.rows(e * H, (e + 1) * H);
  }
}

void CudaBackend::prepare_shared_experts(MlpWeights& shared) {
  Tensor* const matrices[3] = {&shared.gate.weight, &shared.up.weight, &shared.down.weight};
  for (const Tensor* w : matrices)
    if (w->ndim() != 2 || w->device() != Device::kCuda || w->dtype() != DType::BF16 || w->dim(1) % 32 != 0)
      return;
  for (Tensor* w : matrices) {
    const int64_t N = w->dim(0), K = w->dim(1);
    if (cuda::gemv_packed_for(static_cast<const uint16_t*>(w->raw()), N, K) ||
        !units_packing_wanted(options_, cuda::matrix_with_packed_copy_bytes(N, K)))
      continue;
    const Tensor old = *w;
    *w = cuda::matrix_with_packed_copy(N, K, [&](void* to) {
      cuda::copy_device_to_device(to, old.raw(), static_cast<size_t>(old.nbytes()));
    });
  }
}

void CudaBackend::moe_route(const Tensor& x, const Tensor& router, const Tensor& bias, const RoutingParams& p,
                            Tensor* ids, Tensor* weights) {
  DSI_CHECK(x.ndim() == 2 && router.ndim() == 2, "moe_route: x ", shape_str(x.shape()), " and router ",
            shape_str(router.shape()), " must be 2-D");
  const int64_t T = x.dim(0), H = x.dim(1), E = router.dim(0), K = p.top_k;
  DSI_CHECK(router.dim(1) == H, "moe_route: router expects ", router.dim(1), " features, got ", H);
  DSI_CHECK(!bias || bias.numel() == E, "moe_route: bias has ", bias.numel(), " values for ", E, " experts");
  const cuda::MoeRouteParams rp = route_params(p);
  *ids = Tensor::empty_on(Device::kCuda, DType::I32, {T, K});
  *weights = Tensor::empty_on(Device::kCuda, DType::F32, {T, K});
  Tensor logits = Tensor::empty_on(Device::kCuda, DType::F32, {T, E});  // [T, E] scratch
  cuda::launch_moe_route(dev_f32(x, "moe_route", "x"), dev_bf16(router, "moe_route", "the router"),
                         bias ? dev_f32(bias, "moe_route", "the bias (prepare_weight_f32)") : nullptr,
                         logits.data<float>(), ids->data<int32_t>(), weights->data<float>(), T, H, E, rp);
}

Tensor CudaBackend::norm_moe_route(const Tensor& h, const Tensor& norm, float eps, const Tensor& router,
                                   const Tensor& bias, const RoutingParams& p,
                                   const std::vector<MlpWeights>& experts, Tensor* ids, Tensor* weights,
                                   MoeDispatch* dispatch) {
  if (dispatch) *dispatch = MoeDispatch{};
  DSI_CHECK(h.ndim() == 2 && router.ndim() == 2, "norm_moe_route: h ", shape_str(h.shape()), " and router ",
            shape_str(router.shape()), " must be 2-D");
  const int64_t T = h.dim(0), H = h.dim(1), E = router.dim(0), K = p.top_k;
  DSI_CHECK(router.dim(1) == H && norm.numel() == H, "norm_moe_route: router ", shape_str(router.shape()),
            " and norm ", shape_str(norm.shape()), " for hidden ", H);
  DSI_CHECK(!bias || bias.numel() == E, "norm_moe_route: bias has ", bias.numel(), " values for ", E,
            " experts");
  // Chosen on next_pow2(T) (the graph bucket), like every launch choice (the fused kernel gives the bits of
  // the separate kernels anyway); shapes it does not take, or no counter (a capture before any eager decode
  // step): the separate kernels.
  auto separate = [&] {
    Tensor normed = rms_norm(h, norm, eps);  // [T, H]
    moe_route(normed, router, bias, p, ids, weights);
    return normed;
  };
  if (!options_.moe_fused_route || cuda::next_pow2(T) > cuda::kMoeNormRouteMaxTokens ||
      cuda::next_pow2(T) * E > cuda::kMoeNormRouteMaxTokenExperts || H > (int64_t{1} << 30) ||
      E > (int64_t{1} << 30))
    return separate();
  Tensor x = Tensor::empty_on(Device::kCuda, DType::F32, {T, H});  // [T, H] rms_norm(h)
  const cuda::MoeRouteParams rp = route_params(p);
  cuda::MoeNormRouteArgs a;
  a.h = dev_f32(h, "norm_moe_route", "h");
  a.norm = dev_bf16(norm, "norm_moe_route", "the norm weight");
  a.eps = eps;
  a.router = dev_bf16(router, "norm_moe_route", "the router");
  a.bias = bias ? dev_f32(bias, "norm_moe_route", "the bias (prepare_weight_f32)") : nullptr;
  a.x = x.data<float>();
  a.T = static_cast<int>(T);
  a.H = static_cast<int>(H);
  a.E = static_cast<int>(E);
  if (!cuda::moe_norm_route_supported(a, rp)) return separate();
  // The cluster form at one token only: DISABLED_BenchNormMoeRoute on the H200 (2026-12-05, V2-Lite's router
  // in a graph) 7.15 us against 7.71 at T 1, but 13.27 against 10.60 at T 4 and 21.64 against 14.93 at T 8,
  // where its 8 CTAs each compute T x 8 logits.
  a.cluster = options_.moe_route_cluster && T == 1 && cuda::moe_norm_route_cluster_supported(a, rp);
  Tensor logits;
  if (!a.cluster) {
    a.arrivals = cuda::decode_arrivals(1);
    if (!a.arrivals) return separate();
    logits = Tensor::empty_on(Device::kCuda, DType::F32, {T, E});  // [T, E] scratch
    a.logits = logits.data<float>();
  }
  *ids = Tensor::empty_on(Device::kCuda, DType::I32, {T, K});
  *weights = Tensor::empty_on(Device::kCuda, DType::F32, {T, K});
  a.ids = ids->data<int32_t>();
  a.weights = weights->data<float>();
  // The permutation moe_experts_residual would run for these ids: its tile size for x and these experts.
  cuda::StackedWeights gate, up, down;
  Tensor perm;
  cuda::GemvMoeUnits units;  // one token's experts as units launches: no permutation to make
  if (dispatch && static_cast<int64_t>(experts.size()) == E && uniform_stride(experts, gate_of, &gate) &&
      uniform_stride(experts, up_of, &up) && uniform_stride(experts, down_of, &down) &&
      !moe_units_for(options_, T, H, K, a.x, experts, nullptr, &units)) {
    const int64_t I = experts[0].gate.out_features();
    const MoeKernelPlan plan = plan_moe_kernels(options_, T, K, E, H, I, a.x, gate, up, down);
    const int64_t pairs = T * K;
    perm = Tensor::empty_on(Device::kCuda, DType::I32, {2 * (E + 1) + 2 * pairs});  // see run_moe_experts
    a.tile_rows = plan.tile_rows;
    a.offsets = perm.data<int32_t>();
    a.tiles = a.offsets + E + 1;
    a.slot_pair = a.tiles + E + 1;
    a.pair_slot = a.slot_pair + pairs;
  }
  cuda::launch_moe_norm_route(a, rp);
  if (a.tile_rows > 0) *dispatch = MoeDispatch{perm, a.tile_rows};
  return x;
}

Tensor CudaBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                const std::vector<MlpWeights>& experts) {
  // x [T, H], ids [T, k] I32, weights [T, k] F32 -> [T, H]
  DSI_CHECK(x.ndim() == 2, "moe_experts: x ", shape_str(x.shape()), " must be [T, H]");
  Tensor out = Tensor::empty_on(Device::kCuda, DType::F32, {x.dim(0), x.dim(1)});
  run_moe_experts(x, ids, weights, experts, out.data<float>(), /*accumulate=*/false);
  return out;
}

void CudaBackend::moe_experts_residual(Tensor& residual, const Tensor& x, const Tensor& ids,
                                       const Tensor& weights, const std::vector<MlpWeights>& experts,
                                       const MoeDispatch* dispatch, const MoeSharedExperts* shared) {
  // residual [T, H] += shared(x) (when given), then += moe_experts(x [T, H], ids, weights)
  DSI_CHECK(residual.shape() == x.shape(), "moe_experts_residual: residual ", shape_str(residual.shape()),
            " and x ", shape_str(x.shape()), " differ");
  DSI_CHECK(!shared || shared->mlp, "moe_experts_residual: shared experts without weights");
  run_moe_experts(x, ids, weights, experts, dev_f32(residual, "moe_experts_residual", "residual"),
                  /*accumulate=*/true, dispatch, shared, &residual);
}

void CudaBackend::run_moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                  const std::vector<MlpWeights>& experts, float* out, bool accumulate,
                                  const MoeDispatch* dispatch, const MoeSharedExperts* shared,
                                  Tensor* residual) {
  DSI_CHECK(!shared || (accumulate && residual), "moe_experts: shared experts only into a residual");
  DSI_CHECK(x.ndim() == 2 && ids.ndim() == 2 && weights.shape() == ids.shape() && ids.dim(0) == x.dim(0),
            "moe_experts: x ", shape_str(x.shape()), ", ids ", shape_str(ids.shape()), ", weights ",
            shape_str(weights.shape()));
  DSI_CHECK(ids.device() == Device::kCuda && ids.dtype() == DType::I32,
            "moe_experts: ids must be I32 on the GPU");
  const int64_t T = x.dim(0), H = x.dim(1), K = ids.dim(1), E = static_cast<int64_t>(experts.size());
  check_experts(experts, H);
  const int64_t I = experts[0].gate.out_features(), pairs = T * K;
  if (pairs == 0) {
    if (shared) norm_mlp_residual_parts(*residual, shared->norm, shared->eps, *shared->mlp, kExpertGemvParts);
    return;
  }
  // One token: the shared and routed experts as two persistent GEMV launches over units (no permutation, no
  // combine; the routed experts' ids and weights are read on the device).
  cuda::GemvMoeUnits one_token;
  const float* xd = dev_f32(x, "moe_experts", "x");
  if (moe_units_for(options_, T, H, K, xd, experts, shared ? shared->mlp : nullptr, &one_token)) {
    DSI_CHECK(weights.device() == Device::kCuda && weights.dtype() == DType::F32,
              "moe_experts: weights must be F32 on the GPU");
    one_token.ids = ids.data<int32_t>();
    one_token.weights = weights.data<float>();
    Tensor act = Tensor::empty_on(Device::kCuda, DType::F32, {one_token.count * one_token.len});  // [units I]
    cuda::launch_gemv_moe_gate_up(xd, H, one_token, act.data<float>(), experts[0].swiglu_limit);
    cuda::launch_gemv_moe_down(act.data<float>(), H, one_token, out, accumulate);
    return;
  }
  // Experts not laid out at a fixed stride (not through prepare_experts) are stacked for this call.
  Tensor gate_tmp, up_tmp, down_tmp;
  cuda::StackedWeights gate, up, down;
  if (!uniform_stride(experts, gate_of, &gate)) {
    gate_tmp = stack_matrices(experts, gate_of);
    gate = {gate_tmp.data<uint16_t>(), I * H};
  }
  if (!uniform_stride(experts, up_of, &up)) {
    up_tmp = stack_matrices(experts, up_of);
    up = {up_tmp.data<uint16_t>(), I * H};
  }
  if (!uniform_stride(experts, down_of, &down)) {
    down_tmp = stack_matrices(experts, down_of);
    down = {down_tmp.data<uint16_t>(), H * I};
  }
  const MoeKernelPlan plan = plan_moe_kernels(options_, T, K, E, H, I, xd, gate, up, down);
  const bool grouped = plan.grouped, stream = plan.stream, mma = plan.mma;
  const int grouped_variant = plan.grouped_variant, tile_rows = plan.tile_rows;
  // The shared experts: units of the streaming launches (rows [pairs, pairs + units * T) of act and y), or
  // their own MLP first (as the model ran them before: the same kernels, the same bits).
  cuda::MoeSharedUnits shared_gate_up, shared_down;
  const bool fuse_shared = shared && fused_shared_units(options_, plan, T, H, I, experts[0].swiglu_limit,
                                                        *shared->mlp, &shared_gate_up, &shared_down);
  if (shared && !fuse_shared)
    norm_mlp_residual_parts(*residual, shared->norm, shared->eps, *shared->mlp, kExpertGemvParts);
  const int64_t units = fuse_shared ? shared_gate_up.units : 0, rows = pairs + units * T;
  // The permutation: offsets [E + 1], tiles [E + 1], slot_pair [pairs], pair_slot [pairs] (one I32 tensor),
  // norm_moe_route's when it made it for this tile size, else the permutation kernel's.
  Tensor perm;
  if (dispatch && dispatch->data && dispatch->tile_rows == tile_rows &&
      dispatch->data.device() == Device::kCuda && dispatch->data.dtype() == DType::I32 &&
      dispatch->data.numel() == 2 * (E + 1) + 2 * pairs) {
    perm = dispatch->data;
  } else {
    perm = Tensor::empty_on(Device::kCuda, DType::I32, {2 * (E + 1) + 2 * pairs});
    int32_t* base = perm.data<int32_t>();
    cuda::launch_moe_permute(ids.data<int32_t>(), pairs, E, tile_rows, base, base + E + 1, base + 2 * (E + 1),
                             base + 2 * (E + 1) + pairs);
  }
  int32_t* const offsets_d = perm.data<int32_t>();
  int32_t* const tiles_d = offsets_d + E + 1;
  int32_t* const slot_pair_d = tiles_d + E + 1;
  int32_t* const pair_slot_d = slot_pair_d + pairs;
  // [pairs + units * T, H]: the permuted rows, then the shared units' rows (unit u, token t: pairs + u T + t)
  Tensor y = Tensor::empty_on(Device::kCuda, DType::F32, {rows, H});
  if (grouped) {
    Tensor xb = Tensor::empty_on(Device::kCuda, DType::BF16, {T, H});       // [T, H] x rounded to bf16
    Tensor act = Tensor::empty_on(Device::kCuda, DType::BF16, {pairs, I});  // [pairs, I] permuted rows
    cuda::launch_moe_x_bf16(xd, xb.data<uint16_t>(), T * H);
    cuda::launch_moe_gate_up_grouped(grouped_variant, xb.data<uint16_t>(), K, offsets_d, tiles_d, slot_pair_d,
                                     gate, up, act.data<uint16_t>(), pairs, E, H, I, experts[0].swiglu_limit);
    cuda::launch_moe_down_grouped(grouped_variant, act.data<uint16_t>(), offsets_d, tiles_d, down,
                                  y.data<float>(), pairs, E, H, I);
  } else {
    Tensor act = Tensor::empty_on(Device::kCuda, DType::F32, {rows, I});  // [rows, I] as y
    if (stream) {
      cuda::launch_moe_gate_up_stream(tile_rows, xd, K, offsets_d, tiles_d, slot_pair_d, gate, up,
                                      act.data<float>(), pairs, E, H, I, experts[0].swiglu_limit,
                                      fuse_shared ? shared_gate_up : cuda::MoeSharedUnits{});
      cuda::launch_moe_down_stream(tile_rows, act.data<float>(), offsets_d, tiles_d, down, y.data<float>(),
                                   pairs, E, H, I, fuse_shared ? shared_down : cuda::MoeSharedUnits{});
    } else if (mma) {
      cuda::launch_moe_gate_up_mma(options_.split_gemm_activations, xd, K, offsets_d, tiles_d, slot_pair_d,
                                   gate, up, act.data<float>(), pairs, E, H, I, experts[0].swiglu_limit);
      cuda::launch_moe_down_mma(options_.split_gemm_activations, act.data<float>(), offsets_d, tiles_d, down,
                                y.data<float>(), pairs, E, H, I);
    } else {
      cuda::launch_moe_gate_up(tile_rows, xd, K, offsets_d, tiles_d, slot_pair_d, gate, up, act.data<float>(),
                               pairs, E, H, I, experts[0].swiglu_limit);
      cuda::launch_moe_down(tile_rows, act.data<float>(), offsets_d, tiles_d, down, y.data<float>(), pairs, E,
                            H, I);
    }
  }
  cuda::launch_moe_combine(y.data<float>(), pair_slot_d, dev_f32(weights, "moe_experts", "weights"), out, T,
                           K, H, accumulate, units > 0 ? y.data<float>() + pairs * H : nullptr, units);
}

}  // namespace dsinfer
