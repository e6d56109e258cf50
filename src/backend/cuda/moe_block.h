// One token's DeepSeekMoE block as one launch (moe_block_kernels.cu; the plan in moe_block_plan.h): RMSNorm
// of the residual, router logits and top-k selection, the shared and routed experts' gate/up + SwiGLU and
// down, added to the residual, with the bits of norm_moe_route's kernel followed by the two units launches
// (launch_moe_norm_route, launch_gemv_moe_gate_up, launch_gemv_moe_down). Every block stays resident: it
// streams the shared experts' weights while a few blocks route, the shared experts' down while the routing
// is published, and the routed experts' weights once it is, across grid barriers instead of kernel
// boundaries (docs/persistent_decode.md, stage 1). CUDA-header free.
#pragma once
#include <cstdint>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/moe_kernels.h"

namespace dsinfer::cuda {

struct MoeBlockArgs {
  float* residual = nullptr;       // [H] h in, h + shared(x) + routed(x) out (x = rms_norm(h))
  const uint16_t* norm = nullptr;  // [H] bf16
  float eps = 0.0f;
  int64_t H = 0;
  const uint16_t* router = nullptr;  // [E, H] bf16
  const float* bias = nullptr;       // [E] f32 (noaux_tc's correction) or null
  int E = 0;
  GemvMoeUnits units;  // count, known, len, the shared and stacked experts' weights; ids and weights unused
  float limit = 0.0f;  // swiglu_limit
  bool weights_evict_first = true;  // the weight copies' L2 policy (gemv_weights_evict_first)
  // Outputs and scratch (device):
  int32_t* ids = nullptr;       // [top_k] the routing, as moe_route's
  float* weights = nullptr;     // [top_k]
  float* logits = nullptr;      // [E]
  float* act = nullptr;         // [count * len] the units' SwiGLU outputs
  int32_t* counters = nullptr;  // kMoeBlockCounters int32, zero before and after the launch
  uint64_t* stamps =
      nullptr;  // null, or [grid][kMoeBlockStampPoints]: each block's timeline (globaltimer ns)
};

// The points of a block's timeline (MoeBlockArgs::stamps; 0 where a block has no such point).
enum MoeBlockStamp {
  kMoeBlockStampStart = 0,       // the block runs
  kMoeBlockStampX = 1,           // x formed (after the PDL wait)
  kMoeBlockStampPublished = 2,   // the selecting block: ids and weights released
  kMoeBlockStampShared = 3,      // segment 0 done (the shared experts' gate/up tiles)
  kMoeBlockStampBarrierA = 4,    // past barrier A (blocks with a down tile)
  kMoeBlockStampDownShared = 5,  // segment 1 done
  kMoeBlockStampRouted = 6,      // the routing seen by the block
  kMoeBlockStampGateUp = 7,      // segment 2 done (every gate/up tile of the block)
  kMoeBlockStampBarrierC = 8,    // past barrier C (blocks with a down tile)
  kMoeBlockStampEnd = 9,         // the block leaves
  kMoeBlockStampPoints = 10,
};

inline constexpr int kMoeBlockCounters = 5;

// Whether the launch takes this block here: a device with the Hopper kernel path and room for the kernel's
// shared memory, one resident block per SM for every block of the grid, the plan's shapes
// (moe_block_plan_covers), the units launches' alignments and 16-warp shapes (gemv_moe_units_wide, whose
// sums it repeats), routing that launch_moe_norm_route takes. The grid barriers assume every block becomes
// resident, as on a GPU this process has to itself with the engine's one stream (as the phase probe); an MPS
// share of the SMs or a long kernel on another stream could leave blocks waiting at a barrier for ever.
bool moe_block_supported(const MoeBlockArgs& a, const MoeRouteParams& p);

// Runs the block (moe_block_supported must hold) on moe_block_grid() blocks.
void launch_moe_block(const MoeBlockArgs& a, const MoeRouteParams& p);

// Blocks of a launch (one per SM).
int moe_block_grid();

// launch_moe_block calls so far in this process (tests: whether a path ran the kernel).
int64_t moe_block_launches();

}  // namespace dsinfer::cuda
