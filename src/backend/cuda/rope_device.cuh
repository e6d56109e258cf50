// The rotary-embedding arithmetic shared by the rope kernels (rope_kernels.cu) and the kernels that fuse a
// rope (decode_attention_warp.cu; V4's v4_norm_rope_kernels.cu and v4_attention_kernels.cu), written with
// explicit round-to-nearest operations so that no FMA contraction makes them differ by a bit.
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
// rotates back), every product and sum rounded on its own (no FMA contraction, whatever the compiler sees
// around it), so rope_kernel, the fused V4 norm + rope + cache write (v4_norm_rope_kernels.cu) and the V4
// attention's inverse rope (v4_attention_kernels.cu) give the same bits.
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, float inv_freq, float pos, float scaling,
                                            float sign) {
  const float freq = __fmul_rn(inv_freq, pos);
  const float c = __fmul_rn(cosf(freq), scaling);
  const float s = __fmul_rn(__fmul_rn(sign, sinf(freq)), scaling);
  const float a = x0, b = x1;
  x0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  x1 = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

}  // namespace dsinfer::cuda::rope_math
