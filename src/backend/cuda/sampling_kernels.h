// Launcher of the batched sampling kernel (penalties, greedy, temperature, top-k, top-p, min-p, a seeded
// draw and logprobs) on raw device pointers; CUDA-header free. One thread block per row of logits.
//
// Semantics follow HostSampler (src/backend/host_sampling.h): weights w = exp((penalised logit - max) / T)
// ordered by (w desc, id asc); top-k keeps the first k, top-p the shortest prefix of those whose mass reaches
// top_p of theirs, min-p the tokens with w >= min_p. The kept set is found without sorting: a ladder of fixed
// cuts (one pass) bounds it, the candidates above the cut are compacted (when at most the candidate capacity,
// else the passes run over the whole row), and a 16-way search over the (w, id) key finds each boundary
// exactly. Masses are summed in double in a different order than the host, so a top-p boundary can differ
// from the host only when the mass of a prefix equals the target to ~1e-12, and expf may differ from
// std::exp by an ulp: kept sets then differ only at such (near) float ties. The draw is the host's: one
// uniform u, and the kept token where the cumulative weight passes u * (kept weight); the walk goes in
// token-id order (the host walks its candidate order) and u comes from Philox4x32-10 keyed by the seed and
// counted by the draw index, so a seeded request is reproducible on the GPU but does not repeat the host's
// mt19937_64 stream.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::cuda {

constexpr int kSampleMaxTopLogprobs = 20;

// One row's parameters (POD, uploaded as an array). Penalty lists are ranges of flat device arrays.
struct SampleRowParams {
  float temperature;
  float top_p;
  float min_p;
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  int32_t top_k;
  int32_t logprobs;  // top logprobs wanted (0: none)
  uint64_t seed;
  uint64_t draw_index;
  int32_t seen_begin, seen_end;  // [begin, end) of `seen`: repetition penalty
  int32_t gen_begin, gen_end;    // [begin, end) of `gen_ids` / `gen_counts`: presence / frequency
  int32_t work_row;              // row of `work` holding the penalised logits; -1: no penalties
  // [begin, end) of `bias_ids` / `bias_values`: logit_bias, after the penalties.
  int32_t bias_begin, bias_end;
  int32_t mask_begin;    // first word of the row's allowed-token bitmask in `masks`; -1: no mask
  int32_t forced_token;  // >= 0: the row's result without a draw (its logprobs reported there); -1: drawn
};

enum SampleError : int32_t {
  kSampleOk = 0,
  kSampleBadLogit = 1,   // a NaN or +inf logit
  kSampleAllMasked = 2,  // every logit is -inf
};

struct SampleRowResult {
  int32_t token;  // -1 on error
  int32_t error;  // SampleError
  float logprob;  // log-softmax of the raw logits at token (when logprobs > 0)
  int32_t num_top;
  int32_t top_ids[kSampleMaxTopLogprobs];  // best first, lowest id first on ties
  float top_logprobs[kSampleMaxTopLogprobs];
};

// Candidates kept per row in the compacted workspace (cand_ids / cand_values hold rows * this entries).
int64_t sample_candidate_capacity(int64_t vocab);

// Scratch of a row max split over `parts` blocks per row (rows without penalties: their max is the latency
// of one block streaming the whole row otherwise; 18 us for Llama's 128256 logits on the H200): part_keys and
// part_bad [R, parts]; counters [R], zero before the first launch (each launch leaves them zero). parts <= 1
// or a null pointer: one block per row.
struct SampleRowWork {
  uint64_t* part_keys = nullptr;
  int32_t* part_bad = nullptr;
  uint32_t* counters = nullptr;
  int parts = 1;
};

// The blocks per row launch_sample_rows splits a row of `vocab` logits over (1 for small vocabularies).
int sample_row_parts(int64_t vocab);

// Samples rows [R] (R <= 65535) of logits [R, V] (not modified). work [rows with penalties, V] is scratch for
// the penalised logits; cand_ids / cand_values [R, sample_candidate_capacity(V)] are scratch; results [R].
// The same results whatever parts.parts is. A row with a mask (SampleRowParams::mask_begin >= 0) samples only
// the tokens whose bit is set in masks[mask_begin, + (V + 31) / 32). params, seen, gen_ids, gen_counts,
// bias_ids, bias_values and masks may be page-locked host memory (read over the bus); host_results [R], when
// not null, is page-locked host memory that also receives the results (the host may read it once the stream
// has passed the kernel).
// With `rows` (may be page-locked host memory) the launch samples only rows rows[0..R) of logits, params and
// results (cand_ids / cand_values then hold R rows, the i-th for rows[i]; the split-row scratch is indexed
// by the logits row, so it spans every row of the call). params_copy, when not null (device memory, [R]),
// receives each row's parameters as read, so that a later call with the same parameters can pass it as
// `params` (device memory: no bus round trip); it must not be `params` itself.
// The kernel lets the next programmatic launch on the stream start at its own start (that one's reads of
// page-locked memory then overlap it).
void launch_sample_rows(const float* logits, int64_t R, int64_t V, const SampleRowParams* params,
                        const int32_t* seen, const int32_t* gen_ids, const int32_t* gen_counts,
                        const int32_t* bias_ids, const float* bias_values, const uint32_t* masks, float* work,
                        int32_t* cand_ids, float* cand_values, const SampleRowWork& parts,
                        SampleRowResult* results, SampleRowResult* host_results,
                        const int32_t* rows = nullptr, SampleRowParams* params_copy = nullptr);

// Async scheduling: token_ids[t] = results[prev_rows[t]].token for every t < T with 0 <= prev_rows[t] < R
// (the tokens of the previous sampling call fed into the next forward pass without a host round trip); a
// failed row's token (-1) or one outside [0, vocab) becomes 0 (that row's result is dropped by the engine).
// A plain launch: it runs after everything queued before it.
void launch_feed_sampled_tokens(int32_t* token_ids, const int32_t* prev_rows, int32_t T,
                                const SampleRowResult* results, int32_t R, int32_t vocab);

}  // namespace dsinfer::cuda
