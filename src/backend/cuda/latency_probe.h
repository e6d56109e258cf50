// A probe of what one dependent memory round trip costs while the rest of the GPU streams weights: the
// latency-bound steps of a decode layer (attention over the latent cache, the merge, routing) are chains of
// such round trips, and a persistent schedule would run them beside the weight stream
// (docs/persistent_decode.md). One launch: block 0's thread 0 follows a pointer chain (each load's address is
// the value of the one before, through L2 only), once to warm it and once timed in SM cycles; blocks 1 ..
// stream_blocks meanwhile stream a buffer with streaming (evict-first) loads until the chase is done.
// CUDA-header free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsinfer::cuda {

// A chain over `lines` 128-byte lines: one cycle through every line in a shuffled order (Sattolo's
// algorithm, fixed seed), element 32 l of the result holding the element index of the line after l; the other
// elements are zero. Host memory, to copy to the device.
std::vector<uint32_t> make_hop_chain(int64_t lines, uint64_t seed);

// Where `hops` hops from element 0 of `chain` end (the host's answer to check the probe's by).
uint32_t follow_hop_chain(const std::vector<uint32_t>& chain, int64_t hops);

struct HopTiming {
  int64_t cycles = 0;  // SM cycles of the timed hops
  int64_t ns = 0;      // the same on the global timer (nanoseconds; its resolution may be coarse)
  uint32_t last = 0;   // the element the timed hops ended on
};

// The most blocks the probe may launch (every block must be resident, since the streamers wait for the
// chase).
int hop_probe_max_blocks();

// Runs the probe on stream() and waits for it: `hops` timed hops along the device chain (after as many
// untimed), beside `stream_blocks` blocks streaming float4s [0, n4) of src round and round (n4 > 0 when
// stream_blocks > 0). `scratch` is device memory of hop_probe_scratch_bytes(stream_blocks). Refuses more
// blocks than hop_probe_max_blocks.
size_t hop_probe_scratch_bytes(int stream_blocks);
HopTiming run_hop_probe(const uint32_t* chain, int64_t hops, int stream_blocks, const void* src, int64_t n4,
                        void* scratch);

}  // namespace dsinfer::cuda
