// fp32 matrix multiply for the CPU reference backend: C[M,N] = A[M,K] * B[N,K]^T (+ bias), B row-major
// as Hugging Face stores Linear weights. Register-blocked AVX2/FMA kernels, OpenMP over output tiles.
#pragma once
#include <cstdint>

namespace dsinfer::cpu {

// lda/ldb/ldc are row strides in elements. bias may be null ([N]). accumulate adds into C.
void gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
             float* C, int64_t ldc, const float* bias = nullptr, bool accumulate = false);

// Same, single-threaded (for use inside an outer parallel loop).
void gemm_nt_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                    float* C, int64_t ldc, const float* bias = nullptr, bool accumulate = false);

// Lets OpenMP use fewer threads when the machine is busy (dynamic adjustment), once per calling thread,
// unless OMP_DYNAMIC says otherwise: on a loaded machine a parallel region that waits for a descheduled
// thread costs far more than it saves. Every op with a parallel region calls this first (the setting is
// per thread, and forward passes run on the engine thread).
void openmp_thread_setup();

// Dot product of two contiguous vectors.
float dot(const float* a, const float* b, int64_t n);

}  // namespace dsinfer::cpu
