// The BLAS shims: the GEMMs of the library PyTorch links, and the loop where it has none.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "few_rows.h"

extern "C" {
// The Fortran BLAS of the library PyTorch links (MKL on x86). Weak: if absent, a loop GEMM is used.
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*,
            const double*, const int*, const double*, double*, const int*) __attribute__((weak));
// MKL's per-thread thread count (Fortran interface: by pointer): 1 inside a worker, or MKL starts its
// own threads in every worker (torch.set_num_threads sets MKL's count too) and the cores are oversubscribed.
int mkl_set_num_threads_local_(const int*) __attribute__((weak));
// MKL's half GEMMs (CBLAS, row major here): half operands, float32 accumulation and result.
void cblas_gemm_bf16bf16f32(int layout, int transa, int transb, int m, int n, int k, float alpha, const uint16_t* a,
                            int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) __attribute__((weak));
void cblas_gemm_f16f16f32(int layout, int transa, int transb, int m, int n, int k, float alpha, const uint16_t* a,
                          int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) __attribute__((weak));
}

namespace {

// Row-major C (M×N) = alpha · op(A) (M×K) · op(B) (K×N) + beta · C, operands In, sums in T.
template <typename T, typename In>
void loop_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const In* A, int64_t lda, const In* B,
               int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        T a = static_cast<T>(ta ? A[k * lda + i] : A[i * lda + k]);
        T b = static_cast<T>(tb ? B[j * ldb + k] : B[k * ldb + j]);
        sum += a * b;
      }
      C[i * ldc + j] = alpha * sum + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
    }
  }
}

template <typename T, typename In>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const In* A, int64_t lda, const In* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  if constexpr (!std::is_same_v<T, In>) {   // half operands, float32 C: MKL's CBLAS half GEMM, row major
    static_assert(std::is_same_v<T, float>, "half GEMMs accumulate in float32");
#if defined(__AVX2__) && defined(__FMA__)
    if constexpr (std::is_same_v<In, at::BFloat16>) {
      if (!ta && M <= FEW_ROWS && (!tb || beta == 0.0f))   // a few query rows: no packing (few_rows_abt / _ab)
        return tb ? few_rows_abt(M, N, K, alpha, A, lda, B, ldb, C, ldc)
                  : few_rows_ab(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
#endif
    const auto gemm_half = std::is_same_v<In, at::BFloat16> ? cblas_gemm_bf16bf16f32 : cblas_gemm_f16f16f32;
    if (gemm_half) {
      constexpr int ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112;
      return gemm_half(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, static_cast<int>(M),
                       static_cast<int>(N), static_cast<int>(K), alpha, reinterpret_cast<const uint16_t*>(A),
                       static_cast<int>(lda), reinterpret_cast<const uint16_t*>(B), static_cast<int>(ldb), beta, C,
                       static_cast<int>(ldc));
    }
    return loop_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
  // column-major BLAS computes Cᵀ = op(B)ᵀ op(A)ᵀ
  const char opa = tb ? 'T' : 'N', opb = ta ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  if constexpr (std::is_same_v<T, float>) {
#if defined(__AVX2__) && defined(__FMA__)
    if (!ta && M <= FEW_ROWS && (!tb || beta == 0.0f))   // a few query rows: no packing (few_rows_abt / _ab)
      return tb ? few_rows_abt(M, N, K, alpha, A, lda, B, ldb, C, ldc)
                : few_rows_ab(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
    if (sgemm_) return sgemm_(&opa, &opb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  } else {
    if (dgemm_) return dgemm_(&opa, &opb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  }
  loop_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

}  // namespace
