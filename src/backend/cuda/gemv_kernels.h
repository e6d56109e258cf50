// GEMV kernels for Linear layers at decode batch sizes (M <= 8 rows of activations), CUDA-header free.
// y [M, N] = x [M, K] (float32) w [N, K]^T (bf16, row-major as Hugging Face stores it) (+ bf16 bias),
// accumulated in fp32 without rounding x to bf16: each activation is split into bf16 parts (hi + lo, ~16
// bits, relative error <= 2^-17, the default; or hi + mid + lo = x exactly) fed to bf16 tensor-core MMAs
// (m16n8k16: 16 weight rows x 8 activation rows). The weights
// stream through a per-warp cp.async pipeline (16-byte copies, several stages in flight); a block of 4, 8 or
// 16 warps covers 16 (or 32) weight rows and splits K among its warps (deterministic reduction in shared
// memory). Persistent variant (GemvConfig::persist): about SMs x resident blocks, each walking row tiles
// with one pipeline across them. Split-K: s blocks may share one row tile's K range; each writes fp32
// partials to a workspace and the last to arrive sums them in split order and applies the epilogue
// (bit-identical run to run). Options: an RMSNorm prologue (sum of squares gathered during the same pass, the
// scale applied at the end), several matrices with the same K in one launch, y += (fused residual add), and a
// SwiGLU variant over gate and up weights. K % 8 != 0 or unaligned pointers run a simple warp-per-row kernel
// with the same semantics.
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::cuda {

constexpr int64_t kGemvMaxRows = 8;  // the largest M the GEMV kernels take
constexpr int kGemvMaxMatrices = 4;  // matrices per launch_gemv call
constexpr int kGemvMaxUnits = 16;    // units per launch_gemv_moe_* call (shared slices + routed experts)

// One weight matrix of a launch: y [M, N] (row stride N) = or += x w^T (+ bias).
struct GemvMatrix {
  const uint16_t* w = nullptr;     // [N, K] bf16
  const uint16_t* bias = nullptr;  // [N] bf16 or null
  float* y = nullptr;              // [M, N]
  int64_t N = 0;
};

// Optional RMSNorm of x before the product: x_m / rms(x_m) * weight (weight [K] bf16), as launch_rms_norm.
struct GemvNorm {
  const uint16_t* weight = nullptr;  // null: no norm
  float eps = 0.0f;
};

// Kernel shape: the default (tiles = 0) picks one by the problem's shape (and the device's shared memory per
// block); gemv_configs lists the compiled ones that fit this device (what the tests and the benchmark run).
struct GemvConfig {
  int tiles = 0;         // 16-row MMA tiles per block (SwiGLU: 2, gate + up); 0: choose by shape
  int unroll = 2;        // 32-column chunks per pipeline stage and warp
  int stages = 4;        // cp.async pipeline stages
  int splits = 2;        // bf16 parts per activation: 1 = bf16 (relative error 2^-9, half the MMAs of 2),
                         // 2 = ~16 bits (2^-17), 3 = exact fp32 (per-launch shapes only); the auto choice
                         // (tiles 0) keeps 1 or 2
  bool generic = false;  // force the simple warp-per-row kernel (tests)
  int warps = 8;         // warps per block (4, 8, or 16 for the large SwiGLU launches)
  int ksplit = 1;        // blocks sharing one row tile's K range (clamped to what K allows, gemv_plan.h)
  int persist = 0;       // > 0: the persistent kernel (no split-K), at most this many blocks per SM (and its
                         // occupancy), each walking row tiles; same bits as persist 0 of the same shape
  bool cap_per_sm = false;  // persistent: shared memory padded so that no SM holds more than persist blocks
                            // (gemv_cap_padding), however the blocks land
};

// The MMA kernel shapes launch_gemv (swiglu false) or launch_gemv_swiglu (true) accept.
std::vector<GemvConfig> gemv_configs(bool swiglu);

// The kernel shape and split a launch with config `requested` runs (tiles == 0: the shape by the
// problem's shape, the split by the model of gemv_plan.h or DSINFER_GEMV_SPLITK; with
// the persistent kernel's shape and blocks per SM unless DSINFER_GEMV_PERSISTENT=0), ksplit the effective
// split. N holds the `count` matrices' rows (SwiGLU: count 1, the gate's rows). Needs a CUDA device.
GemvConfig resolve_gemv_config(int64_t M, int64_t K, const int64_t* N, int count, bool swiglu,
                               GemvConfig requested = {});

// How many blocks of the kernel a decode launch (M 1, the auto choice) of these matrices runs one SM can hold
// at once: its occupancy with the padding that caps it (GemvConfig::cap_per_sm), i.e. the most the block
// scheduler can stack on one SM however the blocks land. packed: the instance reading packed copies
// (gemv_packed.h; sm_90 only). Needs a CUDA device; 0 when the launch would not run a persistent MMA kernel.
int gemv_resident_blocks_per_sm(int64_t K, const int64_t* N, int count, bool swiglu, bool packed);

// For each of `count` matrices (<= kGemvMaxMatrices, same K): y_i = (or += with accumulate)
// norm(x) w_i^T + b_i. x [M, K] float32 device, 1 <= M <= kGemvMaxRows.
void launch_gemv(const float* x, int64_t M, int64_t K, const GemvMatrix* mats, int count, GemvNorm norm,
                 bool accumulate, GemvConfig config = {});

// out [M, N] = silu(g) * u with g = norm(x) gate^T + gate_bias, u = norm(x) up^T + up_bias (gate, up
// [N, K] bf16; biases [N] or null); limit > 0 first clamps g to (-inf, limit] and u to [-limit, limit]
// (swiglu_limit, as launch_silu_mul).
void launch_gemv_swiglu(const float* x, int64_t M, int64_t K, const uint16_t* gate, const uint16_t* gate_bias,
                        const uint16_t* up, const uint16_t* up_bias, float* out, int64_t N, GemvNorm norm,
                        float limit, GemvConfig config = {});

// One token's DeepSeekMoE experts (decode at T = 1) as two persistent launches over `count` units of `len`
// intermediate rows each, with no permutation and no combine: units [0, known) are slices of the shared
// experts (their gate/up rows and down columns [u len, (u + 1) len)), units [known, count) the routed experts
// ids[0 .. count - known) of the stacked matrices, whose outputs are scaled by their routing weights. The
// routed experts' weights are read after the launch's PDL wait, the shared ones' before it.
struct GemvMoeUnits {
  int count = 0;
  int known = 0;
  int64_t len = 0;
  const uint16_t* shared_gate = nullptr;  // [known len, H] bf16
  const uint16_t* shared_up = nullptr;    // [known len, H]
  const uint16_t* shared_down = nullptr;  // [H, known len]
  const uint16_t* gate = nullptr;         // expert e's [len, H] at gate + e * gate_stride
  const uint16_t* up = nullptr;
  const uint16_t* down = nullptr;  // expert e's [H, len] at down + e * down_stride
  int64_t gate_stride = 0, up_stride = 0, down_stride = 0;
  const int32_t* ids = nullptr;    // [count - known] routed experts (device)
  const float* weights = nullptr;  // [count - known] their routing weights (device)
  int experts = 0;                 // experts stacked; ids outside [0, experts) add nothing
  // Packed copies (gemv_packed.h's layout) of the same matrices, at the same strides, or null:
  // shared_*_packed of the whole [known len, H] / [H, known len] matrices, gate_packed / up_packed /
  // down_packed of expert 0's matrix inside the packed copy of its stack. Where every matrix a launch reads
  // has one and gemv_moe_units_packed_usable holds, the launch reads them by bulk copies (the same bits).
  const uint16_t* shared_gate_packed = nullptr;
  const uint16_t* shared_up_packed = nullptr;
  const uint16_t* shared_down_packed = nullptr;
  const uint16_t* gate_packed = nullptr;
  const uint16_t* up_packed = nullptr;
  const uint16_t* down_packed = nullptr;
};

// Whether the two launches take these units at hidden size H here (ids and weights aside): 1 <= count <=
// kGemvMaxUnits, len a multiple of 32 and >= 128, H a multiple of 8, 16-byte aligned weights and strides,
// the persistent GEMV on and its units instance compiled for the shapes the launches resolve to.
bool gemv_moe_units_supported(const GemvMoeUnits& u, int64_t H);

// Whether the gate/up (swiglu) or down launch of these units at hidden size H reads the packed copies: every
// matrix it reads has one (16-byte aligned), H % 32 == 0 (a packed row group then starts at its first row's
// row-major offset, so the strides are the row-major ones), down's stages never cross a unit (len a multiple
// of its 32 x unroll columns) nor its tiles an expert (H a multiple of its tile rows), the packed instance is
// compiled for the launch's shape, and gemv_set_units_packed has not turned the packed launches off.
bool gemv_moe_units_packed_usable(const GemvMoeUnits& u, int64_t H, bool swiglu);

// The packed units launches on (default) / off where the copies exist (tests compare both); and how many
// units launches have read packed copies since the process started.
bool gemv_units_packed();
void gemv_set_units_packed(bool on);
int64_t gemv_units_packed_launches();

// act [count len] = per unit silu(x gate^T) * (x up^T) (limit > 0 clamps as launch_gemv_swiglu), the routed
// units' times their weights. x [H] float32 device.
void launch_gemv_moe_gate_up(const float* x, int64_t H, const GemvMoeUnits& u, float* act, float limit);

// out [H] = (or += with accumulate) sum over the units of act_u down_u^T, one pass over K = count len.
void launch_gemv_moe_down(const float* act, int64_t H, const GemvMoeUnits& u, float* out, bool accumulate);

// Persistent GEMV launches with at most this many row tiles per SM (0: none) run one block per SM, padded so
// that no SM holds two (the block scheduler otherwise stacks them two to an SM on the SMs whose shared memory
// split fits them). DSINFER_GEMV_SPREAD=0/1/2 sets it at start (default 1: V2-Lite batch 1 -1.3%, H200).
int gemv_spread();
void gemv_set_spread(int tiles_per_sm);

// Whether the persistent GEMV computes two activation parts with one MMA per weight fragment up to 4 rows
// (part q of activation row m as B's column 2 m + q; gemv_device.cuh, mma_stage_columns) instead of one MMA
// per part: half the MMAs, the same bits. DSINFER_GEMV_PARTS_IN_COLUMNS=0/1 sets it at start (on by
// default: V2-Lite batch 1 -1.7%, H100, forty-seventh session; docs/benchmarks.md).
bool gemv_parts_in_columns();
void gemv_set_parts_in_columns(bool on);

// The L2 eviction priority of the weight reads of every GEMV and head GEMV launch: evict-first (weights are
// read once a step; weight_l2_policy.cuh) or L2's default. DSINFER_GEMV_L2_EVICT_FIRST=0/1 sets it at start
// (on by default); the same bits either way.
bool gemv_weights_evict_first();
void gemv_set_weights_evict_first(bool on);
// Paced pre-issue: before its PDL wait a persistent GEMV warp issues its first pipeline stages keeping at
// most this many in flight (stage s waits for stage s - n to land; 0: all at once), so that a launch whose
// blocks land beside a latency-bound kernel (attention, the MLA merge, MoE routing) streams its first weights
// without queueing that kernel's memory round trips behind them. DSINFER_GEMV_PREISSUE_INFLIGHT=0/1/2 sets it
// at start (1 by default: docs/benchmarks.md, thirty-fourth and thirty-fifth sessions),
// DSINFER_GEMV_PREISSUE_ROLES the launches it applies to (gemv_kernels.cu); the same bits either way.
int gemv_preissue_inflight();
void gemv_set_preissue_inflight(int n);  // 0..2

}  // namespace dsinfer::cuda
