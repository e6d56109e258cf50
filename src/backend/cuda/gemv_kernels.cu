// GEMV kernels for M <= 8 (see gemv_kernels.h). The MMA kernel maps y^T = w x^T onto
// mma.m16n8k16 (A = 16 weight rows, B = x^T with the 8 activation rows as columns). The k order inside a
// 32-column chunk is permuted so that every lane loads 8 consecutive weights (one uint4) of row g and of
// row g + 8 and the 8 matching activations (two float4): lane (g, t) takes columns [8t, 8t + 8) of the
// chunk, the first MMA of the chunk gets columns 8t + {0..3}, the second 8t + {4..7}.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
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

// 16 bytes global -> shared without registers, L2 only (weights are read once); bytes = 0 writes zeros.
__device__ __forceinline__ void copy_async16(uint4* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// (a, b) -> SPLITS bf16 pairs (low half = a) that add up to (a, b): with 3 parts exactly (24 bits), with
// 2 parts to ~16 bits (relative error <= 2^-17).
template <int SPLITS>
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t (&parts)[SPLITS]) {
#pragma unroll
  for (int l = 0; l < SPLITS; ++l) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    parts[l] = *reinterpret_cast<uint32_t*>(&h);
    if (l + 1 < SPLITS) {
      const float2 hf = __bfloat1622float2(h);
      a -= hf.x;
      b -= hf.y;
    }
  }
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

// Shared memory of the MMA kernel's weight pipeline: per warp S stages of U chunks x TILES tiles x rows
// (g, g + 8) x 32 lanes x 16 bytes.
constexpr int pipeline_bytes(int tiles, int unroll, int stages) {
  return kWarps * stages * unroll * tiles * 2 * 32 * 16;
}

// Block = kWarps warps over 16 * TILES weight rows (SwiGLU: 16 gate rows and the same 16 up rows); warp w
// takes the 32 * U-column slices w, w + kWarps, ... of K. The weights stream through an S-stage cp.async
// pipeline per lane (each lane reads back only what it copied, so no barrier is needed); activations and
// the norm weight come through L1. Needs K % 8 == 0 and 16-byte aligned pointers.
template <int TILES, int U, int S, int SPLITS, bool SWIGLU>
__global__ void __launch_bounds__(kThreads, 2) gemv_mma_kernel(const Params p) {
  extern __shared__ uint4 pipe[];  // [kWarps][S][U][TILES][2][32]
  int64_t local = 0;
  const MatDesc d = block_matrix(p, blockIdx.x, local);
  const int64_t row0 = local * (SWIGLU ? 16 : 16 * TILES);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t K = p.K;
  uint4* mine = pipe + static_cast<int64_t>(warp) * S * U * TILES * 2 * 32 + lane;
  auto slot = [&](int s, int u, int j, int h) { return mine + (((s * U + u) * TILES + j) * 2 + h) * 32; };

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

  // Iteration i of this warp covers columns [kb(i), kb(i) + 32 U).
  const int64_t first = static_cast<int64_t>(warp) * 32 * U, step = static_cast<int64_t>(kWarps) * 32 * U;
  const int64_t iters = first < K ? (K - first + step - 1) / step : 0;
  auto issue = [&](int64_t i) {
    const int s = static_cast<int>(i % S);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = first + i * step + 32 * u + 8 * t;
      const bool kin = k0 < K;
#pragma unroll
      for (int j = 0; j < TILES; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          copy_async16(slot(s, u, j, h), wrow[j][h] + (kin ? k0 : 0), kin && wok[j][h]);
    }
  };
  pdl_trigger();
  // The weights do not depend on earlier kernels: the first stages are in flight before the wait for the
  // kernel that wrote x (programmatic dependent launch; a no-op without it).
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < iters) issue(s);
    copy_async_commit();
  }
  pdl_wait();

  // One accumulator per tile and activation part: independent MMA chains.
  float acc[TILES][SPLITS][4];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int l = 0; l < SPLITS; ++l) acc[j][l][0] = acc[j][l][1] = acc[j][l][2] = acc[j][l][3] = 0.0f;
  float sumsq = 0.0f;  // of x[g, this lane's columns]
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  for (int64_t i = 0; i < iters; ++i) {
    if (i + S - 1 < iters) issue(i + S - 1);
    copy_async_commit();
    // Activations and norm weights of this iteration (L1 hits mostly) while the weights land.
    float4 xv[U][2];
    uint4 nv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = first + i * step + 32 * u + 8 * t;
      const bool xin = k0 < K && xok;
      xv[u][0] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0)) : make_float4(0, 0, 0, 0);
      xv[u][1] = xin ? __ldg(reinterpret_cast<const float4*>(xrow + k0 + 4)) : make_float4(0, 0, 0, 0);
      nv[u] = (k0 < K && has_norm) ? __ldg(reinterpret_cast<const uint4*>(p.norm + k0)) : zero4;
    }
    copy_async_wait<S - 1>();
    const int s = static_cast<int>(i % S);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float xs[8] = {xv[u][0].x, xv[u][0].y, xv[u][0].z, xv[u][0].w,
                     xv[u][1].x, xv[u][1].y, xv[u][1].z, xv[u][1].w};
      if (has_norm) {
        const uint32_t nw[4] = {nv[u].x, nv[u].y, nv[u].z, nv[u].w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          sumsq += xs[e] * xs[e];
          const uint32_t bits = (e % 2 == 0) ? (nw[e / 2] << 16) : (nw[e / 2] & 0xffff0000u);
          xs[e] *= __uint_as_float(bits);
        }
      }
      uint32_t bp[4][SPLITS];  // pair e = (xs[2e], xs[2e + 1]), part l
#pragma unroll
      for (int e = 0; e < 4; ++e) split_bf16<SPLITS>(xs[2 * e], xs[2 * e + 1], bp[e]);
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const uint4 a = *slot(s, u, j, 0), b = *slot(s, u, j, 1);  // rows g, g + 8
#pragma unroll
        for (int l = 0; l < SPLITS; ++l) {
          mma(acc[j][l], a.x, b.x, a.y, b.y, bp[0][l], bp[1][l]);
          mma(acc[j][l], a.z, b.z, a.w, b.w, bp[2][l], bp[3][l]);
        }
      }
    }
  }
  copy_async_wait<0>();

  // Sum the warps' partial tiles (and sums of squares) in a fixed order.
  __shared__ float red[kWarps][TILES * 4][32];
  __shared__ float ssq[kWarps][32];
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float sum = acc[j][SPLITS - 1][i];  // smallest part first
#pragma unroll
      for (int l = SPLITS - 2; l >= 0; --l) sum += acc[j][l][i];
      red[warp][j * 4 + i][lane] = sum;
    }
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

template <int TILES, int U, int S, int SPLITS, bool SWIGLU>
void launch_mma_kernel(const Params& p, unsigned blocks) {
  constexpr int bytes = pipeline_bytes(TILES, U, S);
  static const bool configured = [] {
    // More than the default 48 KiB of dynamic shared memory must be asked for (once per kernel).
    return cudaFuncSetAttribute(gemv_mma_kernel<TILES, U, S, SPLITS, SWIGLU>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess;
  }();
  if (!configured) fail("gemv: cannot configure ", bytes, " bytes of shared memory");
  launch_pdl(gemv_mma_kernel<TILES, U, S, SPLITS, SWIGLU>, blocks, kThreads, bytes, p);
}

// The kernel shapes that are compiled (see gemv_configs).
template <bool SWIGLU>
void launch_mma(const Params& p, unsigned blocks, GemvConfig c) {
  const int key = c.splits * 1000 + (SWIGLU ? 2 : c.tiles) * 100 + c.unroll * 10 + c.stages;
  if (SWIGLU) {
    switch (key) {
      case 3214:
        return launch_mma_kernel<2, 1, 4, 3, true>(p, blocks);
      case 3223:
        return launch_mma_kernel<2, 2, 3, 3, true>(p, blocks);
      case 2214:
        return launch_mma_kernel<2, 1, 4, 2, true>(p, blocks);
      case 2223:
        return launch_mma_kernel<2, 2, 3, 2, true>(p, blocks);
    }
  } else {
    switch (key) {
      case 3124:
        return launch_mma_kernel<1, 2, 4, 3, false>(p, blocks);
      case 3143:
        return launch_mma_kernel<1, 4, 3, 3, false>(p, blocks);
      case 3214:
        return launch_mma_kernel<2, 1, 4, 3, false>(p, blocks);
      case 3223:
        return launch_mma_kernel<2, 2, 3, 3, false>(p, blocks);
      case 2124:
        return launch_mma_kernel<1, 2, 4, 2, false>(p, blocks);
      case 2143:
        return launch_mma_kernel<1, 4, 3, 2, false>(p, blocks);
      case 2214:
        return launch_mma_kernel<2, 1, 4, 2, false>(p, blocks);
      case 2223:
        return launch_mma_kernel<2, 2, 3, 2, false>(p, blocks);
    }
  }
  fail("gemv: no kernel for tiles ", c.tiles, ", unroll ", c.unroll, ", stages ", c.stages, ", splits ",
       c.splits);
}

// The kernel shape for a launch, from bench/cuda_linear_bench on the H200 (2026-11-30; Llama-3.1-8B shapes,
// M = 1 and 8): two activation parts (the third costs 2-10% and buys bits below the 2^-17 relative error
// of two), long rows (K >= 8192: down) 16 rows per block with 4 chunks per stage; otherwise 32 rows per
// block once that still gives every SM more than one block (qkv: 6144 rows, lm_head), else 16 (o: 4096).
GemvConfig choose_config(const Params& p, bool swiglu) {
  if (swiglu) return {2, 2, 3, 2, false};
  int64_t rows = 0;
  for (int i = 0; i < p.count; ++i) rows += p.mats[i].N;
  if (p.K >= 8192) return {1, 4, 3, 2, false};
  if (rows >= 32 * 264) return {2, 1, 4, 2, false};  // >= 2 blocks of 32 rows per SM (132 SMs)
  if (rows >= 32 * 160) return {2, 2, 3, 2, false};
  return {1, 2, 4, 2, false};
}

// Assigns blocks to matrices and launches the MMA kernel when K and every pointer allow 16-byte loads,
// the generic kernel otherwise.
template <bool SWIGLU>
void launch(Params& p, GemvConfig c, const char* what) {
  if (p.M == 0) return;
  if (c.tiles == 0 && !c.generic) c = choose_config(p, SWIGLU);
  DSI_CHECK(p.M >= 1 && p.M <= kGemvMaxRows, what, ": M = ", p.M, " rows, the GEMV takes 1..", kGemvMaxRows);
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

std::vector<GemvConfig> gemv_configs(bool swiglu) {
  std::vector<GemvConfig> out;
  for (int splits : {3, 2}) {
    if (swiglu) {
      out.push_back({2, 1, 4, splits, false});
      out.push_back({2, 2, 3, splits, false});
    } else {
      for (GemvConfig c :
           {GemvConfig{1, 2, 4}, GemvConfig{1, 4, 3}, GemvConfig{2, 1, 4}, GemvConfig{2, 2, 3}}) {
        c.splits = splits;
        out.push_back(c);
      }
    }
  }
  return out;
}

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
