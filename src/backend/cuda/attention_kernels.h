// Launchers of the paged-KV-cache CUDA kernels (cache writes, fused rope + cache write, causal GQA: split-KV
// decode, tensor-core flash prefill, a simple fallback) on raw device pointers (CUDA-header free). The cache
// holds rows of `width` values (float32 or bf16 bits), one row per slot, [K (Hkv * D) | V (Hkv * Dv)] for
// GQA; semantics of CpuBackend::write_kv / rope / attention_gqa (cpu_attention.cpp, cpu_rope.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::cuda {

// Largest head_dim / v_head_dim the attention launchers take.
inline constexpr int64_t kMaxAttentionHeadDim = 256;

// A device KV-cache layer: `data` points at float32 rows (bf16 false) or bf16 bit rows (bf16 true).
struct DeviceCacheView {
  void* data = nullptr;
  int64_t width = 0;  // values per row
  bool bf16 = false;
};

// Row slot_mapping[t] of `cache` gets [a[t] (wa values) | b[t] (wb values)] for t < T; b may be null (wb 0).
void launch_write_kv(const DeviceCacheView& cache, const int64_t* slot_mapping, const float* a, int64_t wa,
                     const float* b, int64_t wb, int64_t T);

// The paged BatchPlan arrays a kernel reads, all on the device.
struct DevicePlanView {
  const int32_t* positions = nullptr;           // [T] position of each token in its sequence
  const int32_t* token_seq = nullptr;           // [T] sequence of each token
  const int32_t* block_table = nullptr;         // block ids of every sequence, concatenated
  const int32_t* block_table_indptr = nullptr;  // [S + 1] offsets into block_table
  int64_t block_size = 0;
};

// The shape of one GQA call: q [T, Hq, D] attends to slot rows [K (Hkv * D) | V (Hkv * Dv)]; head h reads
// kv head h / (Hq / Hkv); out [T, Hq * Dv]; query token t sees cache positions [0, positions[t]] of its
// sequence.
struct GqaShape {
  int64_t Hq = 0, Hkv = 0, D = 0, Dv = 0;
  float scale = 1.0f;
};

// The simple kernel (any D, Dv <= kMaxAttentionHeadDim): one block per (token, head), fp32 math.
void launch_attention_gqa(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                          float* out, int64_t T, const GqaShape& shape);

// Split-KV decode kernel: one CTA per (query, kv head, context split) handles all Hq / Hkv query heads of the
// group, so each cached K/V row is read once per group; the splits are merged either by a second kernel or,
// when `arrivals` is given, by the last split CTA of each (query, head group) to finish (fused combine; the
// same merge in the same order, so the same bits). Queries are
// tokens[i] for i < num_queries (tokens null: token i). The launch configuration depends only on
// num_queries, the shape, and `max_context` (an upper bound of positions[t] + 1 over the queries; the
// lengths themselves are read on the device), so a captured CUDA graph replays it for any lengths up to
// max_context. `partials` must hold decode_partial_floats(...) floats (unused when that is 0). `arrivals`
// (null: separate combine kernel) must hold decode_arrival_slots(...) zeros; the kernel leaves them zero.
// D, Dv multiples of 8 and the group's tiles within the shared memory (decode_supported).
inline constexpr int kMaxDecodeSplits = 64;
bool decode_supported(const GqaShape& shape, bool bf16_cache);
int64_t decode_splits(int64_t num_queries, const GqaShape& shape, int64_t max_context);
int64_t decode_partial_floats(int64_t num_queries, const GqaShape& shape, int64_t max_context);
int64_t decode_arrival_slots(int64_t num_queries, const GqaShape& shape, int64_t max_context);
struct DecodeRopeArgs;
// With `arrivals`, 2..8 splits, a warp-kernel shape and the Hopper path, the splits of each (query, head
// group) run as one thread block cluster and merge through distributed shared memory instead of the last
// arrival (the same merge, the same bits; `arrivals` are then not touched). DSINFER_CUDA_DECODE_CLUSTER (read
// once; "1" default, "0" off); decode_cluster_merge() is that switch (the launch also needs the Hopper path).
// The setter is for tests and benchmarks (between steps, never while CUDA graphs of the model are captured).
bool decode_cluster_merge();
void decode_set_cluster_merge(bool on);
void launch_attention_decode(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                             const int32_t* tokens, int64_t num_queries, float* out, const GqaShape& shape,
                             int64_t max_context, float* partials, int32_t* arrivals = nullptr,
                             const DecodeRopeArgs* rope = nullptr);

// launch_rope_write_kv fused into a pure decode step's attention (launch_attention_decode's `rope`): query i
// is token i (tokens null), the only new token of its sequence, at position positions[i]. Each CTA rotates
// its q heads in registers (q itself is not written) and, where its split holds that position, builds the
// token's K (k rotated) and V row as launch_rope_write_kv would store it, uses it, and writes it to cache row
// slot_mapping[i] (k is not written either). The same bits as launch_rope_write_kv, then the attention. The
// cache rows of earlier positions are loaded before the kernel waits for the one before it (PDL), so their
// latency overlaps the projection that makes q, k and v. Shapes: decode_rope_supported.
struct DecodeRopeArgs {
  const float* k = nullptr;               // [T, Hkv, D] keys, not rotated
  const float* v = nullptr;               // [T, Hkv * Dv]
  const int64_t* slot_mapping = nullptr;  // [T] cache row of each token
  const float* inv_freq = nullptr;        // [rope_dim / 2]
  int64_t rope_dim = 0;                   // dims [0, rope_dim) rotate
  float attention_scaling = 1.0f;
  bool interleaved = false;
};
// The warp kernel's shapes (bf16 cache, D == Dv in {64, 128, 256}) with rope_dim even and <= D, and for the
// half layout rope_dim / 2 a multiple of 8 (a lane's 8 dims and their partners lie in one half).
bool decode_rope_supported(const GqaShape& shape, bool bf16_cache, int64_t rope_dim, bool interleaved);

// The process-wide arrival counters of the fused combine: a zeroed device buffer of at least `slots` int32
// (grown outside CUDA graph capture only; growing invalidates captured graphs). Null when slots is 0, or
// when a capture would need a larger buffer (the caller then runs the separate combine kernel).
int32_t* decode_arrivals(int64_t slots);

// Tensor-core flash attention (mma.sync bf16, fp32 accumulate, online softmax) for query chunks: tile i
// covers tokens [tiles[4i + 1], tiles[4i + 1] + tiles[4i + 2]) (at most kFlashTileRows, one sequence
// tiles[4i]) whose positions are below tiles[4i + 3] (the keys the tile reads). bf16 cache, D == Dv in
// {64, 128} (flash_supported).
inline constexpr int64_t kFlashTileRows = 64;
bool flash_supported(const GqaShape& shape, bool bf16_cache);
void launch_attention_flash(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                            const int32_t* tiles, int64_t num_tiles, float* out, const GqaShape& shape);

// The next power of two >= max(n, 256): the max_context bucket decode launches use, so that decode steps of
// similar lengths share one launch configuration (and one captured graph).
int64_t attention_max_context_bucket(int64_t n);

}  // namespace dsinfer::cuda
