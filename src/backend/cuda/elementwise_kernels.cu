// Elementwise CUDA kernels: embedding gather, RMSNorm and LayerNorm (one block per row, warp-shuffle
// reductions), SiLU-mul, add, row gather.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

// One row of H values per block; each thread moves up to kRowVectors pieces of 8 (bf16 in, float out) per
// round, all loaded before any is stored, so a thread has its loads in flight together (a row is one DRAM
// round trip per round, not one per element). Needs H % 8 == 0 and 16-byte aligned table and out (vec8);
// else one element per thread and round.
constexpr int kRowThreads = 256;
constexpr int kRowVectors = 4;

__global__ void embed_kernel(const uint16_t* __restrict__ table, const int32_t* ids, float* __restrict__ out,
                             int64_t H, int64_t V, bool vec8) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int32_t id = min(max(ids[t], 0), static_cast<int32_t>(V - 1));
  const uint16_t* src = table + id * H;  // [H] bf16
  float* dst = out + t * H;              // [H]
  if (!vec8) {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] = bf16_bits_to_float(src[i]);
    return;
  }
  move_pieces<kRowThreads, kRowVectors>(
      H / 8, [&](int64_t c) { return reinterpret_cast<const uint4*>(src)[c]; },
      [&](int64_t c, const uint4& v) {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        float4* d = reinterpret_cast<float4*>(dst + 8 * c);
        d[0] = make_float4(__uint_as_float(w[0] << 16), __uint_as_float(w[0] & 0xffff0000u),
                           __uint_as_float(w[1] << 16), __uint_as_float(w[1] & 0xffff0000u));
        d[1] = make_float4(__uint_as_float(w[2] << 16), __uint_as_float(w[2] & 0xffff0000u),
                           __uint_as_float(w[3] << 16), __uint_as_float(w[3] & 0xffff0000u));
      });
}

__global__ void rms_norm_kernel(const float* x, const uint16_t* w, float* out, int64_t H, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* row = x + t * H;
  const float inv = block_inv_rms(row, H, eps);
  // Loads of four elements before their stores (x and out may alias only element for element).
  const int64_t step = blockDim.x;
  int64_t i = threadIdx.x;
  for (; i + 3 * step < H; i += 4 * step) {
    float v[4], g[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = row[i + k * step];
      g[k] = bf16_bits_to_float(w[i + k * step]);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) out[t * H + i + k * step] = g[k] * (v[k] * inv);
  }
  for (; i < H; i += step) out[t * H + i] = bf16_bits_to_float(w[i]) * (row[i] * inv);
}

// torch.nn.LayerNorm: the mean, then the biased variance of the centred values (two reductions, as the CPU
// reference computes them), then the affine weight and optional bias.
__global__ void layer_norm_kernel(const float* x, const uint16_t* w, const uint16_t* b, float* out, int64_t H,
                                  float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const float* row = x + t * H;  // [H]
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) sum += row[i];
  const float mean = block_sum(sum) / static_cast<float>(H);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) ss += (row[i] - mean) * (row[i] - mean);
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(H) + eps);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    out[t * H + i] = (row[i] - mean) * inv * bf16_bits_to_float(w[i]) + (b ? bf16_bits_to_float(b[i]) : 0.0f);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n, float limit) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void add_kernel(float* a, const float* b, int64_t n) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}

// Row rows[r] of x into row r of out; vec4 (H % 4 == 0, 16-byte aligned x and out): pieces of 4 floats,
// kRowVectors per thread and round loaded before any is stored.
__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* rows, float* __restrict__ out,
                                   int64_t H, bool vec4) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[r]) * H;  // [H]
  float* dst = out + r * H;                                  // [H]
  if (!vec4) {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] = src[i];
    return;
  }
  move_pieces<kRowThreads, kRowVectors>(
      H / 4, [&](int64_t c) { return reinterpret_cast<const float4*>(src)[c]; },
      [&](int64_t c, const float4& v) { reinterpret_cast<float4*>(dst)[c] = v; });
}

}  // namespace

void launch_embed(const uint16_t* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t V) {
  if (T == 0) return;
  // The caller checked the ids on the host; the kernel still clamps (no host sync here).
  const bool vec8 = H % 8 == 0 && aligned16(table) && aligned16(out);
  launch_pdl(embed_kernel, static_cast<unsigned>(T), kRowThreads, 0, table, ids, out, H, V, vec8);
  check_launch("embed");
}

void launch_rms_norm(const float* x, const uint16_t* w, float* out, int64_t T, int64_t H, float eps) {
  if (T == 0) return;
  launch_pdl(rms_norm_kernel, static_cast<unsigned>(T), 256, 0, x, w, out, H, eps);
  check_launch("rms_norm");
}

void launch_layer_norm(const float* x, const uint16_t* w, const uint16_t* b, float* out, int64_t T, int64_t H,
                       float eps) {
  if (T == 0) return;
  launch_pdl(layer_norm_kernel, static_cast<unsigned>(T), H >= 256 ? 256 : 128, 0, x, w, b, out, H, eps);
  check_launch("layer_norm");
}

void launch_silu_mul(const float* gate, const float* up, float* out, int64_t n, float limit) {
  if (n == 0) return;
  const int threads = 256;
  launch_pdl(silu_mul_kernel, static_cast<unsigned>((n + threads - 1) / threads), threads, 0, gate, up, out,
             n, limit);
  check_launch("silu_mul");
}

void launch_add_inplace(float* a, const float* b, int64_t n) {
  if (n == 0) return;
  const int threads = 256;
  launch_pdl(add_kernel, static_cast<unsigned>((n + threads - 1) / threads), threads, 0, a, b, n);
  check_launch("add_inplace");
}

void launch_gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H) {
  if (R == 0 || H == 0) return;
  const bool vec4 = H % 4 == 0 && aligned16(x) && aligned16(out);
  launch_pdl(gather_rows_kernel, static_cast<unsigned>(R), kRowThreads, 0, x, rows, out, H, vec4);
  check_launch("gather_rows");
}

}  // namespace dsinfer::cuda
