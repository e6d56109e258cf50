// GEMV kernels for M <= 8 (see gemv_kernels.h). The MMA kernel maps y^T = w x^T onto
// mma.m16n8k16 (A = 16 weight rows, B = x^T with the 8 activation rows as columns). The k order inside a
// 32-column chunk is permuted so that every lane loads 8 consecutive weights (one uint4) of row g and of
// row g + 8 and the 8 matching activations (two float4): lane (g, t) takes columns [8t, 8t + 8) of the
// chunk, the first MMA of the chunk gets columns 8t + {0..3}, the second 8t + {4..7}.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

// A launch's matrices as the kernels see them: block b belongs to the last matrix whose first block
// (`first_block`) is <= b.
struct MatDesc {
  const uint16_t* w;
  const uint16_t* bias;
  float* y;
  int64_t N;
  int64_t first_block;
};

struct Params {
  MatDesc mats[kGemvMaxMatrices];  // SwiGLU: [0] gate (y = out), [1] up
  int count;                       // matrices that own blocks (SwiGLU: 1)
  const float* x;                  // [M, K]
  int M;
  int64_t K;
  const uint16_t* norm;  // [K] or null
  float eps;
  bool accumulate;
  float limit;
};

__device__ __forceinline__ float bf16_to_f32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// 8 weights, streamed: not kept in L1, 256-byte L2 prefetch.
__device__ __forceinline__ uint4 load_stream(const uint16_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// (a, b) -> bf16 parts hi, mid, lo with a = hi.x + mid.x + lo.x exactly (same for b); low half = a.
__device__ __forceinline__ void split3(float a, float b, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  float2 hf = __bfloat1622float2(h);
  a -= hf.x;
  b -= hf.y;
  __nv_bfloat162 m = __floats2bfloat162_rn(a, b);
  float2 mf = __bfloat1622float2(m);
  __nv_bfloat162 l = __floats2bfloat162_rn(a - mf.x, b - mf.y);
  hi = *reinterpret_cast<uint32_t*>(&h);
  mid = *reinterpret_cast<uint32_t*>(&m);
  lo = *reinterpret_cast<uint32_t*>(&l);
}

// c [16 x 8] += a [16 x 16] b [16 x 8] (bf16 in, fp32 accumulate).
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The matrix block b works on and the block's index within it.
__device__ __forceinline__ MatDesc block_matrix(const Params& p, int64_t b, int64_t& local) {
  MatDesc d = p.mats[0];
#pragma unroll
  for (int i = 1; i < kGemvMaxMatrices; ++i)
    if (i < p.count && b >= p.mats[i].first_block) d = p.mats[i];
  local = b - d.first_block;
  return d;
}

// Writes one output value: v is the dot product (up: the up projection's, SwiGLU only) before the norm
// scale `inv`.
template <bool SWIGLU>
__device__ __forceinline__ void store_output(const Params& p, const MatDesc& d, int m, int64_t n, float v,
                                             float up, float inv) {
  float r = v * inv;
  if (d.bias) r += bf16_to_f32(d.bias[n]);
  if (SWIGLU) {
    float u = up * inv;
    if (p.mats[1].bias) u += bf16_to_f32(p.mats[1].bias[n]);
    if (p.limit > 0.0f) {
      r = fminf(r, p.limit);
      u = fminf(fmaxf(u, -p.limit), p.limit);
    }
    r = r / (1.0f + expf(-r)) * u;
  }
  float* dst = d.y + static_cast<int64_t>(m) * d.N + n;
  *dst = p.accumulate ? *dst + r : r;
}

// Block = kWarps warps over 16 * TILES weight rows (SwiGLU: 16 gate rows and the same 16 up rows); warp w
// takes the 32 * U-column slices w, w + kWarps, ... of K. Needs K % 8 == 0 and 16-byte aligned pointers.
template <int TILES, int U, bool SWIGLU>
__global__ void __launch_bounds__(kThreads, (TILES * U >= 8) ? 1 : 2) gemv_mma_kernel(const Params p) {
  int64_t local = 0;
  const MatDesc d = block_matrix(p, blockIdx.x, local);
  const int64_t row0 = local * (SWIGLU ? 16 : 16 * TILES);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t K = p.K;

  // Rows g and g + 8 of every tile (out-of-range rows read as zeros).
  const uint16_t* wrow[TILES][2];
  bool wok[TILES][2];
#pragma unroll
  for (int j = 0; j < TILES; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * h;
      const uint16_t* base = SWIGLU ? p.mats[j].w : d.w;
      wok[j][h] = n < d.N;
      wrow[j][h] = base + (wok[j][h] ? n : 0) * K;
    }
  }
  const bool xok = g < p.M;
  const float* xrow = p.x + (xok ? g : 0) * K;
  const bool has_norm = p.norm != nullptr;

  float acc[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float sumsq = 0.0f;  // of x[g, this lane's columns]

  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  for (int64_t kb = static_cast<int64_t>(warp) * 32 * U; kb < K;
       kb += static_cast<int64_t>(kWarps) * 32 * U) {
    uint4 wv[U][TILES][2];
    float4 xv[U][2];
    uint4 nv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = kb + 32 * u + 8 * t;
      const bool kin = k0 < K;
#pragma unroll
      for (int j = 0; j < TILES; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][j][h] = (kin && wok[j][h]) ? load_stream(wrow[j][h] + k0) : zero4;
      const bool xin = kin && xok;
      xv[u][0] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0)) : make_float4(0, 0, 0, 0);
      xv[u][1] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0 + 4)) : make_float4(0, 0, 0, 0);
      nv[u] = (kin && has_norm) ? __ldg(reinterpret_cast<const uint4*>(p.norm + k0)) : zero4;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float xs[8] = {xv[u][0].x, xv[u][0].y, xv[u][0].z, xv[u][0].w,
                     xv[u][1].x, xv[u][1].y, xv[u][1].z, xv[u][1].w};
      if (has_norm) {
        const uint32_t nw[4] = {nv[u].x, nv[u].y, nv[u].z, nv[u].w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          sumsq += xs[i] * xs[i];
          const uint32_t bits = (i % 2 == 0) ? (nw[i / 2] << 16) : (nw[i / 2] & 0xffff0000u);
          xs[i] *= __uint_as_float(bits);
        }
      }
      uint32_t bh[4], bm[4], bl[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) split3(xs[2 * i], xs[2 * i + 1], bh[i], bm[i], bl[i]);
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const uint4 a = wv[u][j][0], b = wv[u][j][1];  // rows g, g + 8
        mma(acc[j], a.x, b.x, a.y, b.y, bl[0], bl[1]);
        mma(acc[j], a.x, b.x, a.y, b.y, bm[0], bm[1]);
        mma(acc[j], a.x, b.x, a.y, b.y, bh[0], bh[1]);
        mma(acc[j], a.z, b.z, a.w, b.w, bl[2], bl[3]);
        mma(acc[j], a.z, b.z, a.w, b.w, bm[2], bm[3]);
        mma(acc[j], a.z, b.z, a.w, b.w, bh[2], bh[3]);
      }
    }
  }

  // Sum the warps' partial tiles (and sums of squares) in a fixed order.
  __shared__ float red[kWarps][TILES * 4][32];
  __shared__ float ssq[kWarps][32];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][j * 4 + i][lane] = acc[j][i];
  ssq[warp][lane] = sumsq;
  __syncthreads();
  if (warp != 0) return;
  float v[TILES][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w) s += red[w][j * 4 + i][lane];
      v[j][i] = s;
    }
  // Lane (g, t) holds outputs (row g, m = 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) of each tile.
  float inv[2] = {1.0f, 1.0f};
  if (has_norm) {
    for (int q = 0; q < 2; ++q) {
      const int m = 2 * t + q;
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w)
        for (int tt = 0; tt < 4; ++tt) s += ssq[w][m * 4 + tt];
      inv[q] = rsqrtf(s / static_cast<float>(K) + p.eps);
    }
  }
#pragma unroll
  for (int j = 0; j < (SWIGLU ? 1 : TILES); ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * t + (i & 1);
      const int64_t n = row0 + (SWIGLU ? 0 : 16 * j) + g + 8 * (i >> 1);
      if (m < p.M && n < d.N)
        store_output<SWIGLU>(p, d, m, n, v[j][i], SWIGLU ? v[TILES - 1][i] : 0.0f, inv[i & 1]);
    }
}

// Any K and alignment: one warp per output row, lanes stride over K, fp32 FMAs.
template <bool SWIGLU>
__global__ void __launch_bounds__(kThreads) gemv_generic_kernel(const Params p) {
  int64_t local = 0;
  const MatDesc d = block_matrix(p, blockIdx.x, local);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = local * kWarps + warp, K = p.K;
  if (n >= d.N) return;
  const uint16_t* w0 = d.w + n * K;
  const uint16_t* w1 = SWIGLU ? p.mats[1].w + n * K : nullptr;
  float acc[2][kGemvMaxRows] = {};
  float ss[kGemvMaxRows] = {};
  for (int64_t k = lane; k < K; k += 32) {
    const float a = bf16_to_f32(w0[k]);
    const float b = SWIGLU ? bf16_to_f32(w1[k]) : 0.0f;
    const float nw = p.norm ? bf16_to_f32(p.norm[k]) : 1.0f;
#pragma unroll
    for (int m = 0; m < kGemvMaxRows; ++m) {
      if (m < p.M) {
        const float xv = p.x[m * K + k];
        ss[m] += xv * xv;
        acc[0][m] += xv * nw * a;
        if (SWIGLU) acc[1][m] += xv * nw * b;
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kGemvMaxRows; ++m)
    for (int off = 16; off > 0; off /= 2) {
      acc[0][m] += __shfl_xor_sync(0xffffffffu, acc[0][m], off);
      acc[1][m] += __shfl_xor_sync(0xffffffffu, acc[1][m], off);
      ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], off);
    }
  if (lane != 0) return;
  for (int m = 0; m < p.M; ++m) {
    const float inv = p.norm ? rsqrtf(ss[m] / static_cast<float>(K) + p.eps) : 1.0f;
    store_output<SWIGLU>(p, d, m, n, acc[0][m], acc[1][m], inv);
  }
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("CUDA kernel ", what, " failed to launch: ", cudaGetErrorString(err));
}

template <bool SWIGLU>
void launch_mma(const Params& p, unsigned blocks, GemvConfig c) {
  cudaStream_t s = stream();
  if (SWIGLU) {
    if (c.unroll == 2)
      gemv_mma_kernel<2, 2, SWIGLU><<<blocks, kThreads, 0, s>>>(p);
    else
      gemv_mma_kernel<2, 4, SWIGLU><<<blocks, kThreads, 0, s>>>(p);
  } else if (c.tiles == 1) {
    if (c.unroll == 2)
      gemv_mma_kernel<1, 2, SWIGLU><<<blocks, kThreads, 0, s>>>(p);
    else
      gemv_mma_kernel<1, 4, SWIGLU><<<blocks, kThreads, 0, s>>>(p);
  } else {
    if (c.unroll == 2)
      gemv_mma_kernel<2, 2, SWIGLU><<<blocks, kThreads, 0, s>>>(p);
    else
      gemv_mma_kernel<2, 4, SWIGLU><<<blocks, kThreads, 0, s>>>(p);
  }
}

// Assigns blocks to matrices and launches the MMA kernel when K and every pointer allow 16-byte loads,
// the generic kernel otherwise.
template <bool SWIGLU>
void launch(Params& p, GemvConfig c, const char* what) {
  if (p.M == 0) return;
  DSI_CHECK(p.M >= 1 && p.M <= kGemvMaxRows, what, ": M = ", p.M, " rows, the GEMV takes 1..", kGemvMaxRows);
  DSI_CHECK(c.tiles == 1 || c.tiles == 2, what, ": tiles must be 1 or 2");
  DSI_CHECK(c.unroll == 2 || c.unroll == 4, what, ": unroll must be 2 or 4");
  const int mats = p.count;  // SwiGLU: 1 (up shares gate's blocks)
  bool fast = !c.generic && p.K % 8 == 0 && aligned16(p.x) && aligned16(p.norm);
  for (int i = 0; i < (SWIGLU ? 2 : p.count); ++i) fast = fast && aligned16(p.mats[i].w);
  const int64_t rows_per_block = fast ? (SWIGLU ? 16 : 16 * c.tiles) : kWarps;
  int64_t blocks = 0;
  for (int i = 0; i < mats; ++i) {
    p.mats[i].first_block = blocks;
    blocks += (p.mats[i].N + rows_per_block - 1) / rows_per_block;
  }
  if (blocks == 0 || p.K == 0) {
    // No products: y = bias (or unchanged) is not worth a kernel path of its own; K == 0 has no caller.
    DSI_CHECK(p.K > 0 || blocks == 0, what, ": K must be positive");
    return;
  }
  DSI_CHECK(blocks < (int64_t{1} << 31), what, ": too many rows");
  if (fast) {
    launch_mma<SWIGLU>(p, static_cast<unsigned>(blocks), c);
  } else {
    gemv_generic_kernel<SWIGLU><<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(p);
  }
  check_launch(what);
}

}  // namespace

void launch_gemv(const float* x, int64_t M, int64_t K, const GemvMatrix* mats, int count, GemvNorm norm,
                 bool accumulate, GemvConfig config) {
  DSI_CHECK(count >= 1 && count <= kGemvMaxMatrices, "gemv: ", count, " matrices, at most ",
            kGemvMaxMatrices);
  Params p{};
  for (int i = 0; i < count; ++i) p.mats[i] = {mats[i].w, mats[i].bias, mats[i].y, mats[i].N, 0};
  p.count = count;
  p.x = x;
  p.M = static_cast<int>(M);
  p.K = K;
  p.norm = norm.weight;
  p.eps = norm.eps;
  p.accumulate = accumulate;
  launch<false>(p, config, "gemv");
}

void launch_gemv_swiglu(const float* x, int64_t M, int64_t K, const uint16_t* gate, const uint16_t* gate_bias,
                        const uint16_t* up, const uint16_t* up_bias, float* out, int64_t N, GemvNorm norm,
                        float limit, GemvConfig config) {
  Params p{};
  p.mats[0] = {gate, gate_bias, out, N, 0};
  p.mats[1] = {up, up_bias, out, N, 0};
  p.count = 1;  // blocks belong to gate; the kernel reads up from mats[1]
  p.x = x;
  p.M = static_cast<int>(M);
  p.K = K;
  p.norm = norm.weight;
  p.eps = norm.eps;
  p.limit = limit;
  launch<true>(p, config, "gemv_swiglu");
}

}  // namespace dsinfer::cuda
