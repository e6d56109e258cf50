// Feeding one sampled token into a step plan's token ids on the device: shared by the feed kernel
// (sampling_kernels.cu) and the plan upload kernel that feeds as it copies (host_reads.cu).
#pragma once
#include <cstdint>

#include "backend/cuda/sampling_kernels.h"

namespace dsinfer::cuda {

// token_ids[t] = results[prev_rows[t]].token (0 when outside [0, vocab)) when prev_rows[t] is a row of the
// sampling call's R rows; token_ids[t] unchanged otherwise (a known token).
__device__ __forceinline__ void feed_sampled_token(int32_t* token_ids, const int32_t* prev_rows, int32_t t,
                                                   const SampleRowResult* results, int32_t R, int32_t vocab) {
  const int32_t r = prev_rows[t];
  if (r < 0 || r >= R) return;
  const int32_t token = results[r].token;
  token_ids[t] = token >= 0 && token < vocab ? token : 0;
}

}  // namespace dsinfer::cuda
