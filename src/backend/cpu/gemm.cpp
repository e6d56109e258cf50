// Blocked fp32 GEMM (A * B^T) with 4x4 register tiles of 8-wide FMA accumulators.
#include "backend/cpu/gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace dsinfer::cpu {

namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 shuf = _mm_movehdup_ps(lo);
  __m128 sums = _mm_add_ps(lo, shuf);
  shuf = _mm_movehl_ps(shuf, sums);
  sums = _mm_add_ss(sums, shuf);
  return _mm_cvtss_f32(sums);
}

// RM rows of A against RN rows of B over K; results into out[RM][RN].
template <int RM, int RN>
inline void tile(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float out[RM][RN]) {
  __m256 acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 b[RN];
    for (int j = 0; j < RN; ++j) b[j] = _mm256_loadu_ps(B + j * ldb + k);
    for (int i = 0; i < RM; ++i) {
      __m256 a = _mm256_loadu_ps(A + i * lda + k);
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RM; ++i) {
    for (int j = 0; j < RN; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t kk = k; kk < K; ++kk) s += A[i * lda + kk] * B[j * ldb + kk];
      out[i][j] = s;
    }
  }
}

template <int RM, int RN>
inline void store(float out[RM][RN], float* C, int64_t ldc, const float* bias, bool accumulate, int rows,
                  int cols) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      float v = out[i][j] + (bias ? bias[j] : 0.0f);
      C[i * ldc + j] = accumulate ? C[i * ldc + j] + v : v;
    }
  }
}

// Computes the output block rows [m0, m1) x cols [n0, n1).
void block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias, bool accumulate) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    int64_t m = m0;
    for (; m + 4 <= m1; m += 4) {
      float out[4][4];
      tile<4, 4>(K, A + m * lda, lda, B + n * ldb, ldb, out);
      store<4, 4>(out, C + m * ldc + n, ldc, bias ? bias + n : nullptr, accumulate, 4, 4);
    }
    for (; m < m1; ++m) {
      float out[1][4];
      tile<1, 4>(K, A + m * lda, lda, B + n * ldb, ldb, out);
      store<1, 4>(out, C + m * ldc + n, ldc, bias ? bias + n : nullptr, accumulate, 1, 4);
    }
  }
  for (; n < n1; ++n) {
    int64_t m = m0;
    for (; m + 4 <= m1; m += 4) {
      float out[4][1];
      tile<4, 1>(K, A + m * lda, lda, B + n * ldb, ldb, out);
      store<4, 1>(out, C + m * ldc + n, ldc, bias ? bias + n : nullptr, accumulate, 4, 1);
    }
    for (; m < m1; ++m) {
      float out[1][1];
      tile<1, 1>(K, A + m * lda, lda, B + n * ldb, ldb, out);
      store<1, 1>(out, C + m * ldc + n, ldc, bias ? bias + n : nullptr, accumulate, 1, 1);
    }
  }
}

// Outer-product kernel for larger M: B is packed per call into panels of 16 columns ([K][16], zero padded),
// and RM rows of A are broadcast against them: 2 * RM accumulators of 8 floats, 2 loads per 2 * RM FMAs.
constexpr int64_t kPanel = 16;

// K is summed in blocks of kKBlock with fresh accumulators per block, so that rounding error grows with the
// block length rather than with K (closer to the blocked sums of BLAS libraries).
constexpr int64_t kKBlock = 128;

template <int RM>
inline void panel_tile(int64_t K, const float* A, int64_t lda, const float* Bp, float* C, int64_t ldc,
                       const float* bias, bool accumulate, int64_t cols) {
  __m256 total[RM][2];
  for (int i = 0; i < RM; ++i) total[i][0] = total[i][1] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
    const int64_t k1 = std::min(K, k0 + kKBlock);
    __m256 acc[RM][2];
    for (int i = 0; i < RM; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; ++k) {
      const __m256 b0 = _mm256_loadu_ps(Bp + k * kPanel);
      const __m256 b1 = _mm256_loadu_ps(Bp + k * kPanel + 8);
      for (int i = 0; i < RM; ++i) {
        const __m256 a = _mm256_broadcast_ss(A + i * lda + k);
        acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
      }
    }
    for (int i = 0; i < RM; ++i) {
      total[i][0] = _mm256_add_ps(total[i][0], acc[i][0]);
      total[i][1] = _mm256_add_ps(total[i][1], acc[i][1]);
    }
  }
  alignas(32) float row[kPanel];
  for (int i = 0; i < RM; ++i) {
    _mm256_store_ps(row, total[i][0]);
    _mm256_store_ps(row + 8, total[i][1]);
    float* c = C + i * ldc;
    for (int64_t j = 0; j < cols; ++j) {
      const float v = row[j] + (bias ? bias[j] : 0.0f);
      c[j] = accumulate ? c[j] + v : v;
    }
  }
}

// Columns [n0, n0 + cols) for all M rows through one packed panel.
void panel_columns(int64_t M, int64_t n0, int64_t cols, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float* C, int64_t ldc, const float* bias, bool accumulate,
                   float* Bp) {
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < kPanel; ++j) Bp[k * kPanel + j] = j < cols ? B[(n0 + j) * ldb + k] : 0.0f;
  }
  const float* bb = bias ? bias + n0 : nullptr;
  int64_t m = 0;
  for (; m + 6 <= M; m += 6)
    panel_tile<6>(K, A + m * lda, lda, Bp, C + m * ldc + n0, ldc, bb, accumulate, cols);
  for (; m < M; ++m) panel_tile<1>(K, A + m * lda, lda, Bp, C + m * ldc + n0, ldc, bb, accumulate, cols);
}

// M at or above this uses the packed outer-product path.
constexpr int64_t kPackedMinM = 8;

constexpr int64_t kBlockM = 64;
constexpr int64_t kBlockN = 64;

}  // namespace

void openmp_thread_setup() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  if (std::getenv("OMP_DYNAMIC") == nullptr) omp_set_dynamic(1);
}

float dot(const float* a, const float* b, int64_t n) {
  float out[1][1];
  tile<1, 1>(n, a, n, b, n, out);
  return out[0][0];
}

void gemm_nt_serial(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                    float* C, int64_t ldc, const float* bias, bool accumulate) {
  if (M >= kPackedMinM) {
    std::vector<float> Bp(static_cast<size_t>(K * kPanel));
    for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
      panel_columns(M, n0, std::min(kPanel, N - n0), K, A, lda, B, ldb, C, ldc, bias, accumulate, Bp.data());
    }
    return;
  }
  for (int64_t n0 = 0; n0 < N; n0 += kBlockN) {
    for (int64_t m0 = 0; m0 < M; m0 += kBlockM) {
      block(m0, std::min(M, m0 + kBlockM), n0, std::min(N, n0 + kBlockN), K, A, lda, B, ldb, C, ldc, bias,
            accumulate);
    }
  }
}

void gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
             float* C, int64_t ldc, const float* bias, bool accumulate) {
  if (M == 0 || N == 0) return;
  openmp_thread_setup();
  const int64_t blocks_m = (M + kBlockM - 1) / kBlockM;
  // Narrow column blocks when M is small so that both cores get work on GEMV-like shapes.
  const int64_t block_n = M <= 16 ? 16 : kBlockN;
  const int64_t blocks_n = (N + block_n - 1) / block_n;
  const int64_t total = blocks_m * blocks_n;
  const double work = static_cast<double>(M) * N * K;
  if (work < (1 << 18) || omp_in_parallel() || omp_get_max_threads() == 1) {
    gemm_nt_serial(M, N, K, A, lda, B, ldb, C, ldc, bias, accumulate);
    return;
  }
  if (M >= kPackedMinM) {
    const int64_t panels = (N + kPanel - 1) / kPanel;
#pragma omp parallel
    {
      std::vector<float> Bp(static_cast<size_t>(K * kPanel));
#pragma omp for schedule(static)
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t n0 = p * kPanel;
        panel_columns(M, n0, std::min(kPanel, N - n0), K, A, lda, B, ldb, C, ldc, bias, accumulate,
                      Bp.data());
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < total; ++t) {
    int64_t bn = t / blocks_m;
    int64_t bm = t % blocks_m;
    int64_t m0 = bm * kBlockM, n0 = bn * block_n;
    block(m0, std::min(M, m0 + kBlockM), n0, std::min(N, n0 + block_n), K, A, lda, B, ldb, C, ldc, bias,
          accumulate);
  }
}

}  // namespace dsinfer::cpu
