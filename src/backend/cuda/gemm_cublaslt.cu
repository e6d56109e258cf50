// cuBLASLt GEMMs for Linear layers: column-major view y^T [N, M] = (w [N, K] row-major, transposed) x^T.
// Process-wide state (handle, 32 MiB workspace, bf16 scratch, per-shape plans) lives here; every call runs
// on stream(). The fused residual add is the GEMM's beta = 1 with C = D = y.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in ", what, ": status ", static_cast<int>(st));
}

// hi[i] = bf16(x[i]); lo[i] = bf16(x[i] - hi[i]) when lo is given.
__global__ void split_bf16_kernel(const float* x, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  hi[i] = h;
  if (lo) lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
}

__global__ void add_bias_kernel(float* y, const uint16_t* bias, int64_t M, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < M * N) y[i] += __uint_as_float(static_cast<uint32_t>(bias[i % N]) << 16);
}

// An x operand's value: float32 as is, bf16 bits widened. (Not an overload of bf16_bits_to_float: one
// declared here would hide kernel_common.cuh's from unqualified calls in this namespace, so the weights'
// bits would convert as integers.)
__device__ __forceinline__ float operand_value(float v) {
  return v;
}
__device__ __forceinline__ float operand_value(uint16_t bits) {
  return bf16_bits_to_float(bits);
}
// One output per thread: y[m, n] (=|+=) sum_k x[m, k] w[n, k] in fp32 (x float32 or bf16 bits).
template <typename X>
__global__ void linear_reference_kernel(const X* x, const uint16_t* w, float* y, int64_t M, int64_t N,
                                        int64_t K, bool accumulate) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  const int64_t m = i / N, n = i % N;
  const X* xr = x + m * K;
  const uint16_t* wr = w + n * K;
  float s = 0.0f;
  for (int64_t k = 0; k < K; ++k) s += operand_value(xr[k]) * bf16_bits_to_float(wr[k]);
  y[i] = accumulate ? y[i] + s : s;
}

unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// A matmul descriptor, its layouts and the chosen algorithm for one (M, N, K).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
};

class GemmContext {
 public:
  static GemmContext& get() {
    static GemmContext* ctx = new GemmContext();  // never destroyed: CUDA may be torn down before statics
    return *ctx;
  }

  const Plan& plan(int64_t M, int64_t N, int64_t K) {
    auto key = std::make_tuple(M, N, K);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan p;
    check_lt(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
    // Column-major: w is [K, N] (ld K) used transposed, x^T is [K, M] (ld K), y^T is [N, M] (ld N).
    check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K), "layout A");
    check_lt(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K), "layout B");
    check_lt(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, N, M, N), "layout C");
    choose_algo(p);
    return plans_.emplace(key, p).first->second;
  }

  // The per-head GEMM of head_linear_bf16 for exactly T tokens: y_h^T [B, T] = op(w_h) x_h^T over H heads
  // (one strided-batched matmul). Its algorithm is the one chosen for next_pow2(T) tokens when cuBLASLt
  // accepts it for T (so every T of a bucket sums a row alike), else the heuristic's for T.
  const Plan& head_plan(int64_t T, int64_t H, int64_t A, int64_t B, bool transpose_w) {
    auto key = std::make_tuple(T, H, A, B, transpose_w);
    auto it = head_plans_.find(key);
    if (it != head_plans_.end()) return it->second;
    Plan p;
    check_lt(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "head matmul descriptor");
    const cublasOperation_t ta = transpose_w ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
    // Column-major: w_h is [A, B] (ld A) used transposed, or with transpose_w [B, A] (ld B) as is; x_h^T is
    // [A, T] (ld H * A, heads A apart); y_h^T is [B, T] (ld H * B, heads B apart).
    if (transpose_w)
      check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, B, A, B), "head layout A");
    else
      check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, A, B, A), "head layout A");
    check_lt(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, A, T, H * A), "head layout B");
    check_lt(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, B, T, H * B), "head layout C");
    const int32_t batch = static_cast<int32_t>(H);
    const int64_t strides[3] = {A * B, A, B};
    cublasLtMatrixLayout_t layouts[3] = {p.a, p.b, p.c};
    for (int i = 0; i < 3; ++i) {
      check_lt(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                sizeof(batch)),
               "head batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &strides[i], sizeof(strides[i])),
               "head batch stride");
    }
    const int64_t bucket = next_pow2(T);
    if (bucket != T) {
      const Plan& b = head_plan(bucket, H, A, B, transpose_w);
      cublasLtMatmulHeuristicResult_t check{};
      if (b.has_algo &&
          cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &b.algo, &check) ==
              CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= kWorkspaceBytes) {
        p.algo = b.algo;
        p.has_algo = true;
      }
    }
    if (!p.has_algo) choose_algo(p);
    return head_plans_.emplace(key, p).first->second;
  }

  // Bytes of one scratch half for n bf16 values (256-byte aligned, as the heuristic assumes).
  static size_t half_bytes(int64_t n) {
    return (static_cast<size_t>(n) * sizeof(__nv_bfloat16) + 255) / 256 * 256;
  }
  // bf16 scratch for two halves (hi and lo) of n values each. Grows only (gemm_reserve sizes it up
  // front: growing frees the old buffer, which synchronizes the device and cannot be graph-captured).
  __nv_bfloat16* scratch(int64_t n) {
    const size_t bytes = 2 * half_bytes(n);
    if (bytes > scratch_bytes_) {
      DSI_CHECK(!capturing(), "the GEMM scratch buffer cannot grow during a CUDA graph capture");
      if (scratch_) cudaFree(scratch_);  // synchronizes: no kernel still reads the old buffer
      invalidate_graphs();
      scratch_ = nullptr;
      check_cuda(cudaMalloc(&scratch_, bytes), "GEMM scratch allocation");
      scratch_bytes_ = bytes;
    }
    return static_cast<__nv_bfloat16*>(scratch_);
  }

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  std::mutex& mutex() { return mutex_; }

 private:
  GemmContext() {
    check_lt(cublasLtCreate(&handle_), "cublasLtCreate");
    check_cuda(cudaMalloc(&workspace_, kWorkspaceBytes), "cuBLASLt workspace allocation");
  }
  // The heuristic's first algorithm for p's descriptor and layouts (has_algo false when there is none).
  void choose_algo(Plan& p) {
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const size_t ws = kWorkspaceBytes;
    check_lt(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
        "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
      p.algo = result.algo;
      p.has_algo = true;
    }
  }

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, Plan> head_plans_;
  std::mutex mutex_;
};

void add_bias(float* y, const uint16_t* bias, int64_t M, int64_t N) {
  if (!bias) return;
  add_bias_kernel<<<blocks_for(M * N, 256), 256, 0, stream()>>>(y, bias, M, N);
  check_cuda(cudaGetLastError(), "bias kernel launch");
}

template <typename X>
void reference(const X* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M, int64_t N, int64_t K,
               bool accumulate) {
  linear_reference_kernel<X><<<blocks_for(M * N, 128), 128, 0, stream()>>>(x, w, y, M, N, K, accumulate);
  check_cuda(cudaGetLastError(), "reference GEMM kernel launch");
  add_bias(y, bias, M, N);
}

bool aligned256(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 256 == 0;
}

// y (=|+=) x w^T for bf16 x through the shape's cuBLASLt plan; false when there is no usable algorithm
// (the caller runs the reference kernel). The caller holds the context lock.
bool matmul(GemmContext& ctx, const Plan& p, const __nv_bfloat16* x, const uint16_t* w, float* y,
            bool accumulate) {
  // The heuristic's algorithms assume 256-byte aligned operands (fresh allocations are).
  if (!p.has_algo || !aligned256(w) || !aligned256(x) || !aligned256(y)) return false;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  check_lt(cublasLtMatmul(ctx.handle(), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                          ctx.workspace(), kWorkspaceBytes, stream()),
           "matmul");
  return true;
}

}  // namespace

void linear_bf16_reference(const float* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M,
                           int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  reference(x, w, bias, y, M, N, K, false);
}

void gemm_reserve(int64_t max_M, int64_t max_K) {
  GemmContext& ctx = GemmContext::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  ctx.scratch(max_M * max_K);
}

void gemm_bf16(const uint16_t* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M, int64_t N,
               int64_t K, bool accumulate) {
  if (M == 0 || N == 0) return;
  GemmContext& ctx = GemmContext::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  if (K == 0 ||
      !matmul(ctx, ctx.plan(M, N, K), reinterpret_cast<const __nv_bfloat16*>(x), w, y, accumulate)) {
    reference(x, w, bias, y, M, N, K, accumulate);
    return;
  }
  add_bias(y, bias, M, N);
}

void linear_bf16(const float* x, const uint16_t* w, const uint16_t* bias, float* y, int64_t M, int64_t N,
                 int64_t K, bool split, bool accumulate) {
  if (M == 0 || N == 0) return;
  GemmContext& ctx = GemmContext::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  const Plan& p = ctx.plan(M, N, K);
  if (!p.has_algo || K == 0 || !aligned256(w) || !aligned256(y)) {
    reference(x, w, bias, y, M, N, K, accumulate);
    return;
  }
  __nv_bfloat16* hi = ctx.scratch(M * K);
  __nv_bfloat16* lo =
      split ? reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(hi) + GemmContext::half_bytes(M * K))
            : nullptr;
  split_bf16_kernel<<<blocks_for(M * K, 256), 256, 0, stream()>>>(x, hi, lo, M * K);
  check_cuda(cudaGetLastError(), "bf16 conversion kernel launch");
  matmul(ctx, p, hi, w, y, accumulate);
  if (split) matmul(ctx, p, lo, w, y, true);
  add_bias(y, bias, M, N);
}

bool head_linear_bf16(const float* x, const uint16_t* w, float* y, int64_t T, int64_t H, int64_t A, int64_t B,
                      bool transpose_w) {
  if (T == 0 || H == 0 || B == 0) return true;
  if (A == 0 || !aligned256(w) || !aligned256(y) || (A * 2) % 16 != 0 || (B * 4) % 16 != 0) return false;
  GemmContext& ctx = GemmContext::get();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  const Plan& p = ctx.head_plan(T, H, A, B, transpose_w);
  if (!p.has_algo) return false;
  __nv_bfloat16* xb = ctx.scratch(T * H * A);  // [T, H, A] x rounded to bf16
  split_bf16_kernel<<<blocks_for(T * H * A, 256), 256, 0, stream()>>>(x, xb, nullptr, T * H * A);
  check_cuda(cudaGetLastError(), "bf16 conversion kernel launch");
  const float alpha = 1.0f, beta = 0.0f;
  check_lt(cublasLtMatmul(ctx.handle(), p.op, &alpha, w, p.a, xb, p.b, &beta, y, p.c, y, p.c, &p.algo,
                          ctx.workspace(), kWorkspaceBytes, stream()),
           "head matmul");
  return true;
}

}  // namespace dsinfer::cuda
