// DeepSeek-V4's compressor kernels (v4_kernels.h) over the paged cache (float32 or bf16 rows): the window
// pooling alone (one thread per output value, an online softmax over the window's tokens), the closing step
// in one launch (pooling, RMSNorm, rope and the compressed-row write; a decode step's closing rows found from
// the device positions), and the indexer's visible compressed rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/v4_kernels.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using attn::from_float;
using attn::slot_of;
using attn::to_float;

constexpr int kPoolThreads = 128;
constexpr int kCloseThreads = 128;
constexpr int kCloseVec = 4;  // values of a row a thread of the closing kernel owns (two rope pairs)
static_assert(kCloseThreads * kCloseVec >= kMaxV4HeadDim, "a closing block holds a whole row");
constexpr int64_t kMaxGridY = 65535;

// One value's online softmax over a window's entries: (mx, sum, acc) of sum_e exp(logit_e) kv_e.
struct PoolState {
  float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
  __device__ __forceinline__ void add(float logit, float kv) {
    if (logit > mx) {
      const float corr = expf(mx - logit);  // 0 on the first entry
      sum *= corr;
      acc *= corr;
      mx = logit;
    }
    const float p = expf(logit - mx);
    sum += p;
    acc = fmaf(p, kv, acc);
  }
};

// The window walk of compressed row j of sequence s: visit(pos, k, half) for entry k of each window token,
// half 0 for the previous window's first halves (overlap), c - 1 for the row's own window.
template <typename Visit>
__device__ __forceinline__ void walk_window(int64_t j, int64_t ratio, bool overlap, Visit&& visit) {
  const int64_t c = overlap ? 2 : 1;
  if (overlap && j > 0) {
    for (int64_t k = 0; k < ratio; ++k) visit((j - 1) * ratio + k, k, 0);
  }
  for (int64_t k = 0; k < ratio; ++k) visit(j * ratio + k, k, c - 1);
}

template <typename E>
__global__ void __launch_bounds__(kPoolThreads) compress_rows_kernel(CompressRowsArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x, d = static_cast<int64_t>(blockIdx.y) * kPoolThreads + threadIdx.x;
  if (d >= a.D) return;
  const int64_t c = a.overlap ? 2 : 1, D = a.D, W = a.in.width;
  const E* rows = static_cast<const E*>(a.in.data);
  const int32_t s = a.seqs[i];
  PoolState st;
  walk_window(a.rows[i], a.ratio, a.overlap, [&](int64_t pos, int64_t k, int64_t half) {
    const E* row = rows + slot_of(a.plan, s, pos) * W;
    st.add(to_float(row[c * D + half * D + d]) + a.ape[k * c * D + half * D + d],
           to_float(row[half * D + d]));
  });
  a.out[i * D + d] = st.acc / st.sum;
}

// Block i: one closing row (host-listed, or token i's of a decode step), thread x its values [4x, 4x + 4).
// Pooling as compress_rows_kernel (the same values), then the row's RMSNorm, rope and write.
template <typename E>
__global__ void __launch_bounds__(kCloseThreads) compress_close_kernel(CompressCloseArgs a) {
  __shared__ float partial[kCloseThreads / 32];
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x;
  int32_t s;
  int64_t j;
  if (a.seqs) {
    s = a.seqs[i];
    j = a.rows[i];
  } else {  // a decode step: token i is sequence i's only token
    const int64_t end = int64_t{a.plan.positions[i]} + 1;
    if (end % a.ratio != 0) return;  // the whole block: no row closes with this token
    s = static_cast<int32_t>(i);
    j = end / a.ratio - 1;
  }
  const int64_t c = a.overlap ? 2 : 1, D = a.D, W = a.in.width, d0 = int64_t{threadIdx.x} * kCloseVec;
  const bool owner = d0 < D;  // D is a multiple of kCloseVec
  const E* rows = static_cast<const E*>(a.in.data);
  float v[kCloseVec] = {};
  if (owner) {
    PoolState st[kCloseVec];
    walk_window(j, a.ratio, a.overlap, [&](int64_t pos, int64_t k, int64_t half) {
      const E* row = rows + slot_of(a.plan, s, pos) * W;
      const float* ape = a.ape + k * c * D + half * D;
#pragma unroll
      for (int e = 0; e < kCloseVec; ++e) {
        const int64_t d = d0 + e;
        st[e].add(to_float(row[c * D + half * D + d]) + ape[d], to_float(row[half * D + d]));
      }
    });
#pragma unroll
    for (int e = 0; e < kCloseVec; ++e) v[e] = st[e].acc / st[e].sum;
  }
  // RMSNorm over the row's D values.
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < kCloseVec; ++e) ss += v[e] * v[e];
  for (int offset = 16; offset > 0; offset /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kCloseThreads / 32; ++w) total += partial[w];
  if (!owner) return;
  const float inv = rsqrtf(total / static_cast<float>(D) + a.eps);
#pragma unroll
  for (int e = 0; e < kCloseVec; ++e) v[e] = __uint_as_float(uint32_t{a.norm[d0 + e]} << 16) * (v[e] * inv);
  // Rope of the trailing rope_dim values at the window's first position (pairs (2m, 2m + 1) past the offset;
  // the offset is even, so a pair never straddles two threads).
  const int64_t offset = D - a.rope_dim;
  const float start = static_cast<float>(j * a.ratio);
#pragma unroll
  for (int e = 0; e < kCloseVec; e += 2) {
    const int64_t d = d0 + e;
    if (d < offset) continue;
    const float freq = a.inv_freq[(d - offset) / 2] * start;
    const float cs = cosf(freq) * a.rope_scaling, sn = sinf(freq) * a.rope_scaling;
    const float x0 = v[e], x1 = v[e + 1];
    v[e] = x0 * cs - x1 * sn;
    v[e + 1] = x1 * cs + x0 * sn;
  }
  E* out = static_cast<E*>(a.out.data) + slot_of(a.plan, s, j) * a.out.width;
#pragma unroll
  for (int e = 0; e < kCloseVec; ++e) out[d0 + e] = from_float<E>(v[e]);
}

__global__ void compressed_visible_kernel(const int32_t* positions, int32_t* visible, int64_t T,
                                          int64_t ratio) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < T) visible[t] = static_cast<int32_t>((static_cast<int64_t>(positions[t]) + 1) / ratio - 1);
}

}  // namespace

void launch_compress_rows(const CompressRowsArgs& a) {
  if (a.R == 0 || a.D == 0) return;
  const dim3 grid(static_cast<unsigned>(a.R), static_cast<unsigned>((a.D + kPoolThreads - 1) / kPoolThreads));
  DSI_CHECK(grid.y <= kMaxGridY && a.R <= int64_t{2147483647}, "compress_rows: ", a.R, " rows of ", a.D);
  if (a.in.bf16) {
    launch_pdl(compress_rows_kernel<__nv_bfloat16>, grid, kPoolThreads, 0, a);
  } else {
    launch_pdl(compress_rows_kernel<float>, grid, kPoolThreads, 0, a);
  }
  check_launch("compress_rows");
}

void launch_compress_close(const CompressCloseArgs& a) {
  if (a.R == 0) return;
  DSI_CHECK(a.D > 0 && a.D % kCloseVec == 0 && a.D <= kMaxV4HeadDim, "compress_close: rows of ", a.D,
            " values (a multiple of ", kCloseVec, ", at most ", kMaxV4HeadDim, ")");
  DSI_CHECK(a.rope_dim >= 0 && a.rope_dim <= a.D && a.rope_dim % 2 == 0 && a.D % 2 == 0,
            "compress_close: ", a.rope_dim, " rope dims of ", a.D);
  DSI_CHECK(a.ratio > 0 && a.in.bf16 == a.out.bf16 && a.out.width == a.D && a.R <= int64_t{2147483647},
            "compress_close: bad arguments");
  if (a.in.bf16) {
    launch_pdl(compress_close_kernel<__nv_bfloat16>, static_cast<unsigned>(a.R), kCloseThreads, 0, a);
  } else {
    launch_pdl(compress_close_kernel<float>, static_cast<unsigned>(a.R), kCloseThreads, 0, a);
  }
  check_launch("compress_close");
}

void launch_compressed_visible(const int32_t* positions, int32_t* visible, int64_t T, int64_t ratio) {
  if (T == 0) return;
  DSI_CHECK(ratio > 0, "compressed_visible: ratio must be positive");
  const int threads = 256;
  launch_pdl(compressed_visible_kernel, static_cast<unsigned>((T + threads - 1) / threads), threads, 0,
             positions, visible, T, ratio);
  check_launch("compressed_visible");
}

}  // namespace dsinfer::cuda
