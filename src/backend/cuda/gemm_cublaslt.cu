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

#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/stream.h"
#include "core/error.h"

namespace dsinfer::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(err));
}

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

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(uint16_t bf16_bits) {
  return __uint_as_float(static_cast<uint32_t>(bf16_bits) << 16);
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
  for (int64_t k = 0; k < K; ++k) s += to_f32(xr[k]) * to_f32(wr[k]);
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
    return plans_.emplace(key, p).first->second;
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
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
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

}  // namespace dsinfer::cuda
