// One token's DeepSeekMoE experts as the two units GEMV launches (CudaBackendOptions::moe_units,
// cuda::GemvMoeUnits: the shared experts' slices and the routed experts in one gate/up + SwiGLU launch, then
// one down launch over every unit's columns into the residual; no permutation, no combine) against the CPU
// reference and the weight-streaming path. Runs where a GPU is visible; CI compiles it and skips.
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/gemv_stamps.h"
#include "cuda_deepseek_test_util.h"

namespace dsinfer {
namespace {

#ifdef DSINFER_HAVE_CUDA

using namespace deepseek_ops_test;

CudaBackendOptions units_on() {
  CudaBackendOptions o;
  o.moe_units = true;
  return o;
}

CudaBackendOptions units_off() {  // the weight-streaming path (DSINFER_CUDA_MOE_UNITS=0)
  CudaBackendOptions o;
  o.moe_units = false;
  return o;
}

// As the model calls it (norm_moe_route's x, ids, weights and dispatch, then moe_experts_residual with the
// shared experts): 0, 1 and 2 shared units, top 6 of 64 and top 8 of 16 experts, intermediate 128 and 256
// (the units launches take multiples of 32 from 128). What the units path adds to the residual is within the
// expert tests' tolerance of the CPU's and of the streaming path's, and not bit-equal to the streaming path's
// (so it ran: its sums run in another order).
TEST_F(CudaDeepseekOpsTest, MoeUnitsOneTokenMatchCpuAndStreaming) {
  CudaBackend units(units_on()), streaming(units_off());
  const float eps = 1e-6f;
  RoutingParams rp;
  rp.scoring = "softmax";
  rp.method = "greedy";
  for (auto [E, H, I, K] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 256, 128, 6}, {16, 512, 256, 8}}) {
    ExpertSet experts = make_experts(this, units, E, H, I);
    units.prepare_experts(experts.gpu);
    const Tensor router = units.prepare_weight(random_bf16_values({E, H}, 0.5f));
    rp.top_k = K;
    for (int64_t shared_units : {0, 1, 2}) {
      const SharedMlp shared = make_shared_mlp(this, units, std::max<int64_t>(shared_units, 1), H, I);
      const Tensor norm_c = norm_weight(this, H), norm_g = device_bf16(norm_c);
      const MoeSharedExperts sc{&shared.cpu, norm_c, eps}, sg{&shared.gpu, norm_g, eps};
      const MoeSharedExperts* shared_c = shared_units > 0 ? &sc : nullptr;
      const MoeSharedExperts* shared_g = shared_units > 0 ? &sg : nullptr;
      for (int trial = 0; trial < 3; ++trial) {
        const std::string what = "E=" + std::to_string(E) + " I=" + std::to_string(I) +
                                 " shared=" + std::to_string(shared_units) + " trial " +
                                 std::to_string(trial);
        const Tensor h = random_bf16_values({1, H}, 4.0f);
        const Tensor dh = cuda::to_device(h);
        Tensor ids, weights;
        MoeDispatch dispatch;
        const Tensor x = units.norm_moe_route(dh, norm_g, eps, router, Tensor(), rp, experts.gpu, &ids,
                                              &weights, &dispatch);
        const Tensor ids_h = cuda::to_host(ids), weights_h = cuda::to_host(weights);
        Tensor by_units = cuda::to_device(h), by_streaming = cuda::to_device(h);
        units.moe_experts_residual(by_units, x, ids, weights, experts.gpu, &dispatch, shared_g);
        streaming.moe_experts_residual(by_streaming, x, ids, weights, experts.gpu, nullptr, shared_g);
        Tensor ref = h.clone();
        cpu.moe_experts_residual(ref, cpu.rms_norm(h, norm_c, eps), ids_h, weights_h, experts.cpu, nullptr,
                                 shared_c);
        const Tensor a = units.to_host(by_units), b = streaming.to_host(by_streaming);
        const Tensor want = added_part(ref, h);
        EXPECT_LT(rel_err(added_part(a, h), want), 1e-4) << "units vs CPU, " << what;
        EXPECT_LT(rel_err(added_part(b, h), want), 1e-4) << "streaming vs CPU, " << what;
        EXPECT_GT(differing(a, b), 0) << "the units path did not run? " << what;
        // The routing outputs are the launches' inputs: unchanged.
        const Tensor ids_after = cuda::to_host(ids);
        EXPECT_EQ(std::memcmp(ids_after.raw(), ids_h.raw(), ids_h.nbytes()), 0) << what;
      }
    }
  }
}

// moe_experts (a new tensor, no residual) of one token through the units launches against the CPU, with ids
// outside [0, E) in some slots: they add nothing, as the streaming path's permutation drops them.
TEST_F(CudaDeepseekOpsTest, MoeUnitsDropIdsOutsideTheExperts) {
  CudaBackend units(units_on()), streaming(units_off());
  const int64_t E = 32, H = 256, I = 128, K = 6;
  ExpertSet experts = make_experts(this, units, E, H, I);
  units.prepare_experts(experts.gpu);
  for (int trial = 0; trial < 4; ++trial) {
    Tensor ids = distinct_expert_ids(rng, 1, K, E);
    const Tensor weights = random_bf16_values({1, K}), x = random_bf16_values({1, H});
    // The CPU reference on the valid slots only (weight 0 where the id is out of range).
    Tensor valid_ids = ids.clone(), valid_weights = weights.clone();
    if (trial > 0) {
      ids.data<int32_t>()[trial] = trial % 2 ? static_cast<int32_t>(E) : -1;
      valid_weights.f32()[trial] = 0.0f;
    }
    const Tensor want = cpu.moe_experts(x, valid_ids, valid_weights, experts.cpu);
    const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
    const Tensor a = units.to_host(units.moe_experts(dx, dids, dw, experts.gpu));
    const Tensor b = streaming.to_host(streaming.moe_experts(dx, dids, dw, experts.gpu));
    EXPECT_LT(rel_err(a, want), 1e-4) << "units, trial " << trial;
    EXPECT_LT(rel_err(b, want), 1e-4) << "streaming, trial " << trial;
    EXPECT_GT(differing(a, b), 0) << "the units path did not run? trial " << trial;
  }
}

// One token's experts at a small V2-Lite-like shape (64 experts, top 6, two shared units of 128 rows), on
// `gpu`.
struct OneTokenUnits {
  static constexpr int64_t E = 64, H = 256, I = 128, K = 6;
  ExpertSet experts;
  SharedMlp shared;
  Tensor norm_g;
  MoeSharedExperts sg;
  OneTokenUnits(CudaDeepseekOpsTest* test, CudaBackend& gpu)
      : experts(make_experts(test, gpu, E, H, I)),
        shared(make_shared_mlp(test, gpu, 2, H, I)),
        norm_g(device_bf16(norm_weight(test, H))),
        sg{&shared.gpu, norm_g, 1e-6f} {
    gpu.prepare_experts(experts.gpu);
  }
  OneTokenUnits(const OneTokenUnits&) = delete;
  OneTokenUnits& operator=(const OneTokenUnits&) = delete;
};

// Two activation parts as MMA columns (gemv_set_parts_in_columns) give the units launches the same bits:
// one token's experts, with and without shared units, the switch off and on.
TEST_F(CudaDeepseekOpsTest, MoeUnitsPartsInColumnsChangeNoBits) {
  struct Restore {
    bool saved = cuda::gemv_parts_in_columns();
    ~Restore() { cuda::gemv_set_parts_in_columns(saved); }
  } restore;
  CudaBackend units(units_on());
  const OneTokenUnits u(this, units);
  const int64_t E = u.E, H = u.H, K = u.K;
  for (bool with_shared : {false, true}) {
    for (int trial = 0; trial < 2; ++trial) {
      const Tensor ids = cuda::to_device(distinct_expert_ids(rng, 1, K, E));
      const Tensor weights = cuda::to_device(random_bf16_values({1, K}));
      const Tensor x = cuda::to_device(random_bf16_values({1, H}));
      const Tensor h = random_bf16_values({1, H}, 4.0f);
      auto run = [&](bool on) {
        cuda::gemv_set_parts_in_columns(on);
        Tensor out = cuda::to_device(h);
        units.moe_experts_residual(out, x, ids, weights, u.experts.gpu, nullptr,
                                   with_shared ? &u.sg : nullptr);
        return units.to_host(out);
      };
      const Tensor off = run(false), on = run(true);
      EXPECT_EQ(differing(off, on), 0) << "shared " << with_shared << " trial " << trial;
    }
  }
}

// With GEMV stamps on (DSINFER_GEMV_STAMPS), the 16-warp units launches run their stamped instances: the
// same bits, and one stamped launch each for gate/up (SwiGLU, 2 x 2 x 128 rows of units) and down (K = the
// units' columns), every block with its points in order (its last issue, which may come before the wait when
// all its stages are the shared units', between its start and end).
TEST_F(CudaDeepseekOpsTest, MoeUnitsStampsChangeNoBits) {
  CudaBackend units(units_on());
  const OneTokenUnits u(this, units);
  const int64_t E = u.E, H = u.H, K = u.K;
  const Tensor ids = cuda::to_device(distinct_expert_ids(rng, 1, K, E));
  const Tensor weights = cuda::to_device(random_bf16_values({1, K}));
  const Tensor x = cuda::to_device(random_bf16_values({1, H}));
  const Tensor h = random_bf16_values({1, H}, 4.0f);
  auto run = [&] {
    Tensor out = cuda::to_device(h);
    units.moe_experts_residual(out, x, ids, weights, u.experts.gpu, nullptr, &u.sg);
    return units.to_host(out);
  };
  const Tensor plain = run();
  ASSERT_TRUE(cuda::enable_gemv_stamps(4));
  const Tensor stamped = run();
  const std::vector<cuda::GemvStampLaunch> launches = cuda::read_gemv_stamps();
  cuda::disable_gemv_stamps();
  EXPECT_EQ(differing(plain, stamped), 0);
  if (launches.empty()) GTEST_SKIP() << "no 16-warp units shape on this device";
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_TRUE(launches[0].swiglu);
  EXPECT_EQ(launches[0].rows, (K + 2) * u.I);
  EXPECT_EQ(launches[0].K, H);
  EXPECT_FALSE(launches[1].swiglu);
  EXPECT_EQ(launches[1].rows, H);
  EXPECT_EQ(launches[1].K, (K + 2) * u.I);
  for (const cuda::GemvStampLaunch& l : launches) {
    ASSERT_EQ(static_cast<int64_t>(l.blocks.size()), l.grid);
    for (size_t b = 0; b < l.blocks.size(); ++b) {
      const uint64_t* t = l.blocks[b].t;
      ASSERT_GT(t[cuda::kStampStart], 0u) << "block " << b << " has no stamps";
      EXPECT_LE(t[cuda::kStampStart], t[cuda::kStampIssued]) << "block " << b;
      EXPECT_LE(t[cuda::kStampIssued], t[cuda::kStampWaited]) << "block " << b;
      EXPECT_LE(t[cuda::kStampWaited], t[cuda::kStampConsumed]) << "block " << b;
      EXPECT_LE(t[cuda::kStampConsumed], t[cuda::kStampEnd]) << "block " << b;
      EXPECT_LE(t[cuda::kStampStart], t[cuda::kStampLastIssue]) << "block " << b;
      EXPECT_LE(t[cuda::kStampLastIssue], t[cuda::kStampEnd]) << "block " << b;
    }
  }
  EXPECT_EQ(differing(run(), plain), 0);  // the plain instances again
}

// With moe_units_packed (DSINFER_GEMV_UNITS_PACKED) prepare_experts and prepare_shared_experts keep packed
// copies of the stacks and of the shared MLP, and the units launches read them by bulk copies: the same bits
// as the row-major launches (gemv_set_units_packed off), both launches reading packed copies where every
// matrix has one, and within the expert tests' tolerance of the CPU. Shapes: top 6 of 16 and of 64 experts,
// intermediate 256 and 384 (multiples of down's 128 columns a stage), 0 and 2 shared units, hidden 256 and
// 512; and an id outside the experts (it adds nothing). The copies are made on the Hopper path only.
TEST_F(CudaDeepseekOpsTest, MoeUnitsPackedCopiesChangeNoBits) {
  struct Restore {
    bool saved = cuda::gemv_units_packed();
    ~Restore() { cuda::gemv_set_units_packed(saved); }
  } restore;
  CudaBackendOptions o = units_on();
  o.moe_units_packed = 1;
  CudaBackend units(o);
  for (auto [E, H, I, K] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{16, 256, 256, 6}, {64, 512, 384, 6}}) {
    ExpertSet experts = make_experts(this, units, E, H, I);
    units.prepare_experts(experts.gpu);
    const bool copies = cuda::gemv_packed_for(static_cast<const uint16_t*>(experts.gpu[0].gate.weight.raw()),
                                              E * 2 * I, H) != nullptr;
    if (!copies) GTEST_SKIP() << "no packed copies here (not the Hopper path)";
    EXPECT_NE(cuda::gemv_packed_for(static_cast<const uint16_t*>(experts.gpu[0].down.weight.raw()), E * H, I),
              nullptr);
    SharedMlp shared = make_shared_mlp(this, units, 2, H, I);
    units.prepare_shared_experts(shared.gpu);
    EXPECT_NE(cuda::gemv_packed_for(static_cast<const uint16_t*>(shared.gpu.down.weight.raw()), H, 2 * I),
              nullptr);
    const Tensor norm_c = norm_weight(this, H), norm_g = device_bf16(norm_c);
    const MoeSharedExperts sc{&shared.cpu, norm_c, 1e-6f}, sg{&shared.gpu, norm_g, 1e-6f};
    for (bool with_shared : {false, true}) {
      for (int trial = 0; trial < 3; ++trial) {
        const std::string what = "E=" + std::to_string(E) + " I=" + std::to_string(I) +
                                 " shared=" + std::to_string(with_shared) + " trial " + std::to_string(trial);
        const Tensor valid_ids = distinct_expert_ids(rng, 1, K, E);  // the CPU's (weight 0 where replaced)
        Tensor ids_h = valid_ids.clone();
        if (trial == 2) ids_h.data<int32_t>()[1] = static_cast<int32_t>(E);  // outside: adds nothing
        const Tensor weights_h = random_bf16_values({1, K});
        const Tensor ids = cuda::to_device(ids_h), weights = cuda::to_device(weights_h);
        const Tensor h = random_bf16_values({1, H}, 4.0f);
        const Tensor x_h = cpu.rms_norm(h, norm_c, 1e-6f), x = cuda::to_device(x_h);
        auto run = [&](bool packed, int64_t* launches) {
          cuda::gemv_set_units_packed(packed);
          const int64_t before = cuda::gemv_units_packed_launches();
          Tensor out = cuda::to_device(h);
          units.moe_experts_residual(out, x, ids, weights, experts.gpu, nullptr, with_shared ? &sg : nullptr);
          const Tensor host = units.to_host(out);
          *launches = cuda::gemv_units_packed_launches() - before;
          return host;
        };
        int64_t row_major_launches = 0, packed_launches = 0;
        const Tensor row_major = run(false, &row_major_launches), packed = run(true, &packed_launches);
        EXPECT_EQ(row_major_launches, 0) << what;
        EXPECT_EQ(packed_launches, 2) << "gate/up and down read packed copies, " << what;
        EXPECT_EQ(differing(row_major, packed), 0) << what;
        Tensor valid_weights = weights_h.clone();
        if (trial == 2) valid_weights.f32()[1] = 0.0f;
        Tensor ref = h.clone();
        cpu.moe_experts_residual(ref, x_h, valid_ids, valid_weights, experts.cpu, nullptr,
                                 with_shared ? &sc : nullptr);
        EXPECT_LT(rel_err(added_part(packed, h), added_part(ref, h)), 1e-4) << "packed vs CPU, " << what;
      }
    }
  }
}

// Where the units launches do not apply (more than one token; an intermediate size that is not a multiple of
// 32 or below 128; more units than kGemvMaxUnits) moe_units changes nothing: the streaming path's bits.
TEST_F(CudaDeepseekOpsTest, MoeUnitsFallBackToStreamingBitForBit) {
  CudaBackend units(units_on()), streaming(units_off());
  for (auto [E, H, I, K, T] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{64, 256, 128, 6, 2},
                               {64, 256, 96, 6, 1},
                               {64, 256, 64, 6, 1},
                               {64, 256, 128, 17, 1}}) {
    ExpertSet experts = make_experts(this, units, E, H, I);
    units.prepare_experts(experts.gpu);
    const Tensor ids = distinct_expert_ids(rng, T, K, E);
    const Tensor weights = random_bf16_values({T, K}), x = random_bf16_values({T, H});
    const Tensor h = random_bf16_values({T, H}, 4.0f);
    const Tensor dx = cuda::to_device(x), dids = cuda::to_device(ids), dw = cuda::to_device(weights);
    Tensor a = cuda::to_device(h), b = cuda::to_device(h);
    units.moe_experts_residual(a, dx, dids, dw, experts.gpu);
    streaming.moe_experts_residual(b, dx, dids, dw, experts.gpu);
    EXPECT_EQ(differing(units.to_host(a), streaming.to_host(b)), 0)
        << "E=" << E << " I=" << I << " K=" << K << " T=" << T;
  }
}

#else

TEST(CudaMoeUnitsTest, NotBuilt) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace dsinfer
