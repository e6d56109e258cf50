// Tensor-core flash attention over the paged bf16 cache for prefill chunks (FlashAttention-2 layout): one CTA
// of 4 warps per (query head, tile of up to 64 tokens of one sequence), each warp owns 16 query rows. Q is
// rounded to bf16 and kept in registers as mma A fragments; K/V tiles of 64 positions are gathered from the
// block table with 16-byte cp.async into double-buffered shared memory (rows padded by 16 bytes so the
// ldmatrix reads are free of bank conflicts); S = Q K^T and O += P V run on mma.sync.m16n8k16 (bf16 in,
// fp32 accumulate) with an online softmax in registers. Keys past a row's position are masked, so a chunk
// attends to its cached prefix plus itself causally. sm_80 instructions only (runs on sm_90 too).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

using attn::check_launch;
using attn::cp_async16;

constexpr int kBM = static_cast<int>(kFlashTileRows);  // query rows per CTA
constexpr int kBN = 64;                                // keys per tile
constexpr int kThreads = 128;
static_assert(kBM == kThreads / 32 * 16, "each warp owns 16 query rows");

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <int D>
constexpr int kLd = D + 8;  // shared-memory row stride in bf16 values

template <int D>
constexpr int smem_bytes() {
  return 2 * kBN * 8 + 4 * kBN * kLd<D> * 2;  // slots, K and V: two buffers each
}

// tiles[4 i ..]: sequence, first token, rows, keys read (max position + 1).
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_kernel(const float* q, const __nv_bfloat16* cache, int64_t width, DevicePlanView plan,
                 const int32_t* tiles, int num_tiles, float* out, int Hq, int Hkv, float scale_log2) {
  constexpr int LD = kLd<D>;
  constexpr int KSTEPS = D / 16;  // k-steps of S = Q K^T
  constexpr int NS = kBN / 8;     // n-tiles of S
  constexpr int NO = D / 8;       // n-tiles of O
  constexpr int CH = D / 8;       // 16-byte chunks per K or V row
  extern __shared__ __align__(16) unsigned char smem[];
  int64_t* slot_s = reinterpret_cast<int64_t*>(smem);                       // [2][kBN]
  __nv_bfloat16* k_s = reinterpret_cast<__nv_bfloat16*>(slot_s + 2 * kBN);  // [2][kBN][LD]
  __nv_bfloat16* v_s = k_s + 2 * kBN * LD;                                  // [2][kBN][LD]

  const int h = blockIdx.x;
  const int tile = num_tiles - 1 - static_cast<int>(blockIdx.y);  // longest tiles first
  const int seq = tiles[4 * tile], t0 = tiles[4 * tile + 1], rows = tiles[4 * tile + 2];
  const int kv_len = tiles[4 * tile + 3];
  const int kvh = h / (Hq / Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, gc = lane % 4;
  const int r0 = warp * 16 + gr, r1 = r0 + 8;
  const bool valid0 = r0 < rows, valid1 = r1 < rows;
  // Padding rows attend to every key of the tile: finite values that are never stored.
  const int pos0 = valid0 ? plan.positions[t0 + r0] : kv_len - 1;
  const int pos1 = valid1 ? plan.positions[t0 + r1] : kv_len - 1;

  const int64_t kcol = static_cast<int64_t>(kvh) * D, vcol = static_cast<int64_t>(Hkv) * D + kvh * D;
  const int32_t* blocks = plan.block_table + plan.block_table_indptr[seq];
  const int64_t bs = plan.block_size;
  // Slots of keys [n0, n0 + kBN) into slot_s[buf] (-1 past kv_len); read after the next barrier.
  auto find_slots = [&](int buf, int n0) {
    for (int r = threadIdx.x; r < kBN; r += kThreads) {
      const int p = n0 + r;
      slot_s[buf * kBN + r] = p < kv_len ? static_cast<int64_t>(blocks[p / bs]) * bs + p % bs : -1;
    }
  };
  auto load_tile = [&](int buf) {
    __nv_bfloat16* kd = k_s + buf * kBN * LD;
    __nv_bfloat16* vd = v_s + buf * kBN * LD;
#pragma unroll
    for (int idx = threadIdx.x; idx < kBN * CH; idx += kThreads) {
      const int r = idx / CH, c = idx % CH;
      const int64_t slot = slot_s[buf * kBN + r];
      const __nv_bfloat16* row = slot >= 0 ? cache + slot * width : cache;
      cp_async16(kd + r * LD + c * 8, slot >= 0 ? row + kcol + c * 8 : cache, slot >= 0 ? 16 : 0);
      cp_async16(vd + r * LD + c * 8, slot >= 0 ? row + vcol + c * 8 : cache, slot >= 0 ? 16 : 0);
    }
    attn::cp_async_commit();
  };

  const int n_tiles = (kv_len + kBN - 1) / kBN;
  find_slots(0, 0);
  __syncthreads();
  load_tile(0);

  // Q as A fragments: a0 (row gr, cols 2gc..), a1 (row gr + 8), a2 (row gr, cols 8 + 2gc..), a3 (row gr + 8).
  uint32_t qf[KSTEPS][4];
  {
    const float* q0 = q + (static_cast<int64_t>(t0 + r0) * Hq + h) * D;
    const float* q1 = q + (static_cast<int64_t>(t0 + r1) * Hq + h) * D;
    const float2 zero = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const int c = kk * 16 + 2 * gc;
      const float2 x0 = valid0 ? *reinterpret_cast<const float2*>(q0 + c) : zero;
      const float2 x1 = valid1 ? *reinterpret_cast<const float2*>(q1 + c) : zero;
      const float2 x2 = valid0 ? *reinterpret_cast<const float2*>(q0 + c + 8) : zero;
      const float2 x3 = valid1 ? *reinterpret_cast<const float2*>(q1 + c + 8) : zero;
      qf[kk][0] = pack_bf16(x0.x, x0.y);
      qf[kk][1] = pack_bf16(x1.x, x1.y);
      qf[kk][2] = pack_bf16(x2.x, x2.y);
      qf[kk][3] = pack_bf16(x3.x, x3.y);
    }
  }

  float o[NO][4];
#pragma unroll
  for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) find_slots((j + 1) & 1, (j + 1) * kBN);
    __syncthreads();  // every warp is done with tile j - 1, whose buffer tile j + 1 now fills
    if (j + 1 < n_tiles) {
      load_tile((j + 1) & 1);
      attn::cp_async_wait<1>();
    } else {
      attn::cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* kb = k_s + (j & 1) * kBN * LD;
    const __nv_bfloat16* vb = v_s + (j & 1) * kBN * LD;
    const int n0 = j * kBN;

    float s[NS][4];
#pragma unroll
    for (int n = 0; n < NS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk += 2) {
#pragma unroll
      for (int n = 0; n < NS; ++n) {
        uint32_t b[4];  // keys 8n + (lane % 8); dims 16kk + 8 (lane / 8)
        ldmatrix_x4(b, kb + (n * 8 + (lane % 8)) * LD + kk * 16 + (lane / 8) * 8);
        mma_bf16(s[n], qf[kk], b[0], b[1]);
        mma_bf16(s[n], qf[kk + 1], b[2], b[3]);
      }
    }

    // Scale, causal mask, online softmax (rows r0 and r1; each quad of lanes shares a row).
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
      const int key = n0 + n * 8 + 2 * gc;
      s[n][0] = key <= pos0 ? s[n][0] * scale_log2 : -INFINITY;
      s[n][1] = key + 1 <= pos0 ? s[n][1] * scale_log2 : -INFINITY;
      s[n][2] = key <= pos1 ? s[n][2] * scale_log2 : -INFINITY;
      s[n][3] = key + 1 <= pos1 ? s[n][3] * scale_log2 : -INFINITY;
      mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
      mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    // Key 0 is in tile 0 and visible to every row, so the running max is finite from then on.
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float c0 = exp2f(m0 - mn0), c1 = exp2f(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
      s[n][0] = exp2f(s[n][0] - mn0);
      s[n][1] = exp2f(s[n][1] - mn0);
      s[n][2] = exp2f(s[n][2] - mn1);
      s[n][3] = exp2f(s[n][3] - mn1);
      sum0 += s[n][0] + s[n][1];
      sum1 += s[n][2] + s[n][3];
    }
    l0 = l0 * c0 + sum0;  // per-lane partial sums; the quad adds them up at the end
    l1 = l1 * c1 + sum1;
#pragma unroll
    for (int n = 0; n < NO; ++n) {
      o[n][0] *= c0;
      o[n][1] *= c0;
      o[n][2] *= c1;
      o[n][3] *= c1;
    }

    // O += P V: the S accumulators of key tiles 2kk and 2kk + 1 are the A fragment of k-step kk.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < NO; n += 2) {
        uint32_t b[4];  // keys 16kk + (lane % 8) + 8 ((lane / 8) % 2); dims 8n + 8 (lane / 16)
        ldmatrix_x4_trans(b,
                          vb + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + n * 8 + (lane / 16) * 8);
        mma_bf16(o[n], a, b[0], b[1]);
        mma_bf16(o[n + 1], a, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  float* out0 = out + (static_cast<int64_t>(t0 + r0) * Hq + h) * D;
  float* out1 = out + (static_cast<int64_t>(t0 + r1) * Hq + h) * D;
#pragma unroll
  for (int n = 0; n < NO; ++n) {
    const int c = n * 8 + 2 * gc;
    if (valid0) *reinterpret_cast<float2*>(out0 + c) = make_float2(o[n][0] * inv0, o[n][1] * inv0);
    if (valid1) *reinterpret_cast<float2*>(out1 + c) = make_float2(o[n][2] * inv1, o[n][3] * inv1);
  }
}

template <int D>
void launch_flash_typed(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                        const int32_t* tiles, int64_t num_tiles, float* out, const GqaShape& shape) {
  constexpr int bytes = smem_bytes<D>();
  static bool opted_in = false;
  if (!opted_in && bytes > (48 << 10)) {
    const cudaError_t err =
        cudaFuncSetAttribute(flash_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess)
      fail("attention flash: cannot use ", bytes, " bytes of shared memory: ", cudaGetErrorString(err));
    opted_in = true;
  }
  const dim3 grid(static_cast<unsigned>(shape.Hq), static_cast<unsigned>(num_tiles));
  flash_kernel<D><<<grid, kThreads, bytes, stream()>>>(
      q, static_cast<const __nv_bfloat16*>(cache.data), cache.width, plan, tiles, static_cast<int>(num_tiles),
      out, static_cast<int>(shape.Hq), static_cast<int>(shape.Hkv), shape.scale * 1.4426950408889634f);
  check_launch("attention_flash");
}

}  // namespace

bool flash_supported(const GqaShape& shape, bool bf16_cache) {
  return bf16_cache && shape.Hkv > 0 && shape.Hq % shape.Hkv == 0 && shape.Hq <= 65535 &&
         shape.D == shape.Dv && (shape.D == 64 || shape.D == 128);
}

void launch_attention_flash(const float* q, const DeviceCacheView& cache, const DevicePlanView& plan,
                            const int32_t* tiles, int64_t num_tiles, float* out, const GqaShape& shape) {
  DSI_CHECK(flash_supported(shape, cache.bf16), "attention flash: unsupported shape (D ", shape.D, ", Dv ",
            shape.Dv, ", ", cache.bf16 ? "bf16" : "float32", " cache)");
  DSI_CHECK(num_tiles <= 65535, "attention flash: ", num_tiles, " query tiles (at most 65535)");
  if (num_tiles == 0) return;
  if (shape.D == 64) {
    launch_flash_typed<64>(q, cache, plan, tiles, num_tiles, out, shape);
  } else {
    launch_flash_typed<128>(q, cache, plan, tiles, num_tiles, out, shape);
  }
}

}  // namespace dsinfer::cuda
