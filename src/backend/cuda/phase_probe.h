// A probe of the premise of a persistent decode schedule (one launch running a layer's steps as phases
// separated by grid-wide barriers, docs/persistent_decode.md): what a phase boundary costs when the
// boundary is a barrier inside one launch instead of a kernel handoff (handoff_probe.h), and whether a block
// can keep its weight stream going across the boundary. One launch of `blocks` co-resident blocks runs
// `phases` phases: in phase i block b waits at the barrier for every block's phase i - 1, reads the value
// block (b + 1) % blocks wrote in phase i - 1, adds one and the sum of its share of phase i's slice of src
// (zeros leave the value alone) and stores it, so every value of the last phase is `phases` when each
// barrier held. CUDA-header free.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

enum class PhaseStream {
  kAfterBarrier,  // the slice is loaded after the barrier (the handoff probe's loop: 4 loads a thread in
                  // flight)
  kRing,          // a ring of shared-memory stages filled by cp.async keeps loading the following phases'
                  // slices while the block waits at a barrier: only the use of a stage waits for it
};

// Ring stages the probe is compiled for (16 KiB each: 256 threads x 4 x 16 bytes).
constexpr int kPhaseRingStageBytes = 16 * 1024;
bool phase_ring_stages_supported(int stages);  // 4, 8 or 12

// Blocks of the probe's kernel that can be resident at once on the current device (the most `blocks` may
// be; the barrier needs every block resident). `ring_stages` is ignored for kAfterBarrier.
int phase_chain_max_blocks(PhaseStream mode, int ring_stages);

// Zeroes vals [phases * blocks] and the barrier counter on stream(), then launches the chain. src holds
// phases x float4_per_phase float4s; a phase's slice is split into `blocks` contiguous shares. With hops > 0
// every phase starts with a latency-bound part, as attention or routing would: thread 0 of each block
// follows `hops` dependent loads along `chain` (a device copy of make_hop_chain's, latency_probe.h) before
// the block uses its slice; the ring keeps loading meanwhile, the after-barrier loop does not. Refuses
// (dsinfer::Error, nothing launched) more blocks than phase_chain_max_blocks or an unsupported ring.
void launch_phase_chain(PhaseStream mode, int ring_stages, int phases, int blocks, float* vals,
                        unsigned* counter, const void* src, int64_t float4_per_phase,
                        const uint32_t* chain = nullptr, int hops = 0);

}  // namespace dsinfer::cuda
