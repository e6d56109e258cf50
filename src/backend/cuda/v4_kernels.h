// Launchers of DeepSeek-V4's CUDA kernels on raw device pointers (CUDA-header free): the manifold-constrained
// hyper-connections and the hash-routed experts' weights (v4_hc_kernels.cu), the compressor's window pooling
// and closing step and the indexer's visible rows (v4_compress_kernels.cu), and the sliding-window +
// compressed shared-KV attention with sinks (v4_attention_kernels.cu). Semantics of CpuBackend's
// cpu_v4_hc.cpp, cpu_v4_moe.cpp and cpu_v4_attention.cpp; activations float32, the hyper-connection and
// compressor parameters float32, matrices bf16 bits.
#pragma once
#include <cstdint>

#include "backend/cuda/attention_kernels.h"

namespace dsinfer::cuda {

// out [T, n, H]: n copies of x [T, H].
void launch_hc_expand(const float* x, float* out, int64_t T, int64_t n, int64_t H);

// mixes [T, M] = (x [T, F] / rms(x)) @ fn^T for fn [M, F] f32 (unweighted RMSNorm over the F = n * H values
// of a token's streams, eps norm_eps).
void launch_hc_mixes(const float* x, const float* fn, float* mixes, int64_t T, int64_t F, int64_t M,
                     float norm_eps);

// Largest stream count (hc_mult) the finishing kernels take.
inline constexpr int64_t kMaxHyperStreams = 16;

// From mixes [T, (2 + n) * n]: pre = sigmoid(m * scale[0] + base) + eps, post [T, n] = 2 sigmoid(.. scale[1]
// ..), comb [T, n, n] = Sinkhorn(softmax rows(.. scale[2] ..) + eps, iters); out [T, H] = sum_j pre[j] x[j]
// for streams x [T, n, H]. base [(2 + n) n], scale [3] f32.
void launch_hc_pre_finish(const float* x, const float* mixes, const float* base, const float* scale,
                          float* out, float* post, float* comb, int64_t T, int64_t n, int64_t H,
                          int64_t iters, float hc_eps);

// launch_hc_pre_fused's operands. Without y: hc_pre of the streams x [T, n, H] (launch_hc_mixes, then
// launch_hc_pre_finish). With y: hc_post first (x the old streams, y [T, H], post [T, n], comb [T, n, n]; the
// new streams to `streams` [T, n, H]), then hc_pre of the new streams. fn [M, n H], base [M], scale [3] f32;
// out [T, H], post_out [T, n], comb_out [T, n, n]. No output may alias an input.
struct HcFusedArgs {
  const float* x = nullptr;
  const float* y = nullptr;
  const float* post = nullptr;
  const float* comb = nullptr;
  float* streams = nullptr;
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
  float* out = nullptr;
  float* post_out = nullptr;
  float* comb_out = nullptr;
  int H = 0;
  int64_t iters = 0;
  float hc_eps = 0.0f, norm_eps = 0.0f;
};

// Whether launch_hc_pre_fused takes this step: the Hopper path, 1 to 64 tokens, n = 4 streams (M = 24) of
// H <= 4096 values with H % 32 == 0, 16-byte aligned operands.
bool hc_pre_fused_supported(int64_t T, int64_t n, int64_t H, int64_t M, const HcFusedArgs& a);

// The hyper-connection pre-step (with y: after hc_post) in one launch of one thread block cluster per token
// (v4_hc_fused_kernels.cu); the outputs of the separate launches up to the mixes' float32 reduction order
// (the new streams: the same bits).
void launch_hc_pre_fused(const HcFusedArgs& a, int64_t T, int64_t n, int64_t H, int64_t M);

// The head's collapse: out [T, H] = sum_j (sigmoid(mixes[t, j] * scale[0] + base[j]) + eps) x[t, j] from
// mixes [T, n].
void launch_hc_head_finish(const float* x, const float* mixes, const float* base, const float* scale,
                           float* out, int64_t T, int64_t n, int64_t H, float hc_eps);

// out [T, n, H]: out[t, k] = post[t, k] y[t] + sum_j comb[t, j, k] x[t, j] (x [T, n, H], y [T, H]).
void launch_hc_post(const float* x, const float* y, const float* post, const float* comb, float* out,
                    int64_t T, int64_t n, int64_t H);

// DeepSeek-V4's attention inputs (v4_norm_rope_kernels.cu): q_out [T, H, D] = rope(rms_norm(q [T, H, D],
// q_norm)) per head, and rope(rms_norm(kv [T, D], kv_norm)) written to cache row slot_mapping[t] (width D);
// the rope on the last rope_dim dims, interleaved pairs, at positions[t] with inv_freq [rope_dim / 2]. The
// same bits as launch_rms_norm, launch_rope and launch_write_kv. q_out may be q.
void launch_norm_rope_write_kv(const float* q, const float* kv, const uint16_t* q_norm,
                               const uint16_t* kv_norm, float* q_out, const DeviceCacheView& cache,
                               const int64_t* slot_mapping, const int32_t* positions, const float* inv_freq,
                               int64_t T, int64_t H, int64_t D, int64_t rope_dim, float attention_scaling,
                               float eps);

// out [T, k] = table[ids[t], :] for ids [T] (device) and the I32 table [V, k]; an id outside [0, V) gives a
// row of zeros (the host checks the ids it knows; fed sampled tokens are within the vocabulary).
void launch_table_rows(const int32_t* table, const int32_t* ids, int32_t* out, int64_t T, int64_t k,
                       int64_t V);

// Scoring functions of launch_moe_weights_for (RoutingParams::scoring).
enum class HashScoring { kSoftmax, kSigmoid, kSqrtSoftplus };

// weights [T, k] for given expert ids [T, k] (device I32, each in [0, E)): the experts' scores over the
// router logits x [T, H] @ router [E, H] (bf16), normalised over the k chosen when `normalize`, times
// `scaling`. logits [T, E] f32 is scratch. E at most kMaxHashExperts.
inline constexpr int64_t kMaxHashExperts = 1024;
void launch_moe_weights_for(const float* x, const uint16_t* router, const int32_t* ids, float* logits,
                            float* weights, int64_t T, int64_t H, int64_t E, int64_t k, HashScoring scoring,
                            bool normalize, float scaling);

// The compressor's pooled rows (before norm and rope): row i is window rows[i] of sequence seqs[i], pooled
// from the cache layer `in` (rows [kv (c D) | gate (c D)], c = 2 with overlap) with ape [ratio, c D] f32:
// out[i, d] = sum_e softmax_e(gate_e[d] + ape_e[d]) kv_e[d] over its window's tokens (with overlap first the
// previous window's first halves). seqs, rows [R] device.
struct CompressRowsArgs {
  DeviceCacheView in;  // the compressor-input layer
  DevicePlanView plan;
  const int32_t* seqs = nullptr;
  const int32_t* rows = nullptr;
  const float* ape = nullptr;
  int64_t R = 0, D = 0, ratio = 0;
  bool overlap = false;
  float* out = nullptr;  // [R, D]
};
void launch_compress_rows(const CompressRowsArgs& a);

// Largest head dim launch_attention_v4 and launch_compress_close take.
inline constexpr int64_t kMaxV4HeadDim = 512;

// A compressor's closing rows in one launch: each row pooled as launch_compress_rows pools it, RMS-normalised
// with norm [D] (bf16 bits, eps), its trailing rope_dim values rotated as interleaved pairs at the window's
// first position (row * ratio; inv_freq [rope_dim / 2], cos and sin times rope_scaling), and written to cache
// layer `out` (rows of D values, the same element type as `in`) in the slot of position `row` of its
// sequence. The rows: seqs, rows [R] (device), or, with seqs null, the R tokens of a decode step (token i is
// sequence i), each of which closes row (pos + 1) / ratio - 1 when (pos + 1) % ratio == 0 and writes nothing
// otherwise. D a multiple of 4, at most kMaxV4HeadDim; rope_dim even.
struct CompressCloseArgs {
  DeviceCacheView in;   // the compressor-input layer, rows [kv (c D) | gate (c D)]
  DeviceCacheView out;  // the compressed layer, rows [D]
  DevicePlanView plan;
  const int32_t* seqs = nullptr;  // [R] or null (a decode step's tokens)
  const int32_t* rows = nullptr;  // [R]
  const float* ape = nullptr;     // [ratio, c D]
  const uint16_t* norm = nullptr;
  const float* inv_freq = nullptr;
  float rope_scaling = 1.0f, eps = 1e-6f;
  int64_t R = 0, D = 0, ratio = 0, rope_dim = 0;
  bool overlap = false;
};
void launch_compress_close(const CompressCloseArgs& a);

// visible[t] = (positions[t] + 1) / ratio - 1: the last compressed row token t may see (-1: none), the
// positions array the DSA indexer kernels take for compressed keys.
void launch_compressed_visible(const int32_t* positions, int32_t* visible, int64_t T, int64_t ratio);

// DeepSeek-V4 attention: q [T, H, D] attends to the raw rows of positions (pos - window, pos] (cache layer
// `window_rows`) and, when comp has data, to compressed rows j < (pos + 1) / ratio (all of them, or those in
// selected [T, K] when not null; -1 and rows not yet visible are skipped), with K = V and a per-head sink
// logit; out [T, H, D]. D a multiple of 4, at most kMaxV4HeadDim. With splits > 1 each (token, head)'s
// entries are cut into `splits` ranges run by their own blocks (flash-decoding), whose partial softmax states
// go to `partial` (attention_v4_partial_floats) and are merged into out by a second kernel.
struct AttentionV4Args {
  const float* q = nullptr;
  DeviceCacheView window_rows;
  DeviceCacheView comp;  // data null: no compressed rows
  DevicePlanView plan;
  const int32_t* selected = nullptr;
  int64_t K = 0;
  const float* sinks = nullptr;  // [H] f32
  int64_t T = 0, H = 0, D = 0, window = 0, ratio = 1;
  float scale = 1.0f;
  float* out = nullptr;
  int splits = 1;
  float* partial = nullptr;  // splits > 1: attention_v4_partial_floats(T, H, D, splits) floats
  // Not null: the output's last unrope_dim dims (interleaved pairs, even, at least 2) are rotated back to the
  // token's position before they are stored (launch_rope's inverse, the same bits); [unrope_dim / 2].
  const float* unrope_inv_freq = nullptr;
  int unrope_dim = 0;
  float unrope_scaling = 1.0f;
};
// Key-range splits for T tokens of H heads: enough blocks to cover the GPU twice at decode, 1 once the
// (token, head) blocks alone do; DSINFER_CUDA_V4_SPLITS=N (1 to 16) fixes N for every launch.
int attention_v4_splits(int64_t T, int64_t H);
int64_t attention_v4_partial_floats(int64_t T, int64_t H, int64_t D, int splits);
void launch_attention_v4(const AttentionV4Args& a);

}  // namespace dsinfer::cuda
