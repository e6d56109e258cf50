// Launcher of the scoring kernel: the rows of a sampling call that score a known token (SamplingRow's
// forced_token without penalties: prompt logprobs) in a kernel of their own, one 256-thread block per row and
// several blocks per SM, instead of the sampling kernel's 512-thread block and its split row max. Per row:
// one pass for the max, the NaN / +inf check and the sum of exp(x - max); when alternatives are asked for, a
// pass counting a ladder of cuts below the max and one compacting the values above the tightest cut that
// holds enough of them into shared memory, sorted there by (value desc, id asc): the host's order. A row
// with more candidates above that cut than shared memory holds (near-flat logits) selects its alternatives
// one by one (a pass each). Results as the sampling kernel gives them (SampleRowResult).
#pragma once
#include <cstdint>

#include "backend/cuda/sampling_kernels.h"

namespace dsinfer::cuda {

// Scores rows rows[0..n) of logits [*, V]: results[r] (and host_results[r] when not null: page-locked memory)
// get token params[r].forced_token (in [0, V): the caller checks), its log-softmax and the top
// params[r].logprobs alternatives, or the row's error. `rows` and `params` may be page-locked host memory.
void launch_score_rows(const float* logits, int64_t V, const int32_t* rows, int64_t n,
                       const SampleRowParams* params, SampleRowResult* results,
                       SampleRowResult* host_results);

}  // namespace dsinfer::cuda
