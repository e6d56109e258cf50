// The rotary-embedding arithmetic shared by the rope + cache-write kernel (rope_kernels.cu) and the decode
// attention kernel that fuses it (decode_attention_warp.cu), written with explicit round-to-nearest
// operations so that no FMA contraction makes the two differ by a bit.
#pragma once

#include <cuda_runtime.h>

namespace dsinfer::cuda::rope_math {

// cos and sin of inv_freq * pos, each times the table's attention scaling (precise cosf / sinf).
__device__ __forceinline__ void cos_sin(float inv_freq, float pos, float scaling, float& c, float& s) {
  const float freq = __fmul_rn(inv_freq, pos);
  c = __fmul_rn(cosf(freq), scaling);
  s = __fmul_rn(sinf(freq), scaling);
}

// The rotated value of a pair's element x given its partner p: x c + p s_signed, where s_signed is -s for the
// pair's first element (x0 c - x1 s) and s for its second (x1 c + x0 s).
__device__ __forceinline__ float rotate(float x, float p, float c, float s_signed) {
  return __fadd_rn(__fmul_rn(x, c), __fmul_rn(p, s_signed));
}

// rope_kernel's rotation of the pair (x0, x1) at angle inv_freq * pos (cos and sin times scaling; sign -1
// rotates back), as plain expressions: every kernel that inlines it contracts them alike, so rope_kernel and
// the fused V4 norm + rope + cache write (v4_norm_rope_kernels.cu) give the same bits.
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, float inv_freq, float pos, float scaling,
                                            float sign) {
  const float freq = inv_freq * pos;
  const float c = cosf(freq) * scaling;
  const float s = sign * sinf(freq) * scaling;
  const float a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = b * c + a * s;
}

}  // namespace dsinfer::cuda::rope_math
