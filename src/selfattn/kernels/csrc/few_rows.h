// The kernel's own AVX2 loops for a GEMM of a few rows (a decoding step).
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "base.h"

namespace {

#if defined(__AVX2__) && defined(__FMA__)
// A few query rows (decoding: one new token, or a GQA group of them) make BLAS's GEMM a matrix-vector product
// that packs its operands for nothing: one query over 16,384 keys took 1.7× the time of reading K and V once (and
// MKL's bfloat16 GEMM, or packing K and V for the bfloat16 tiles, more still). These loops read each K and V row
// once per block of KEY_BLOCK keys, kept in L1 across the rows, float32 or bfloat16 (widened in registers: a
// bfloat16 is a float32's high half, so the products are exact and summed in float32, as the half GEMMs do).
constexpr int64_t FEW_ROWS = 8;    // native.py's FEW_ROWS: at most this many rows of A take the loops below
constexpr int64_t KEY_BLOCK = 64;  // keys per block: 16 KB of a 64-wide K or V

// Rows this far ahead of the one read are asked of memory (one prefetch per cache line of the row): a decoding
// step streams K and V from DRAM, and without it the loops waited on every load (one step over 16,384 keys,
// float32: 0.92× SDPA's time at 16 rows ahead, 0.86× at 32, 0.90× at 64, 1.00–1.05× without).
constexpr int64_t PREFETCH_ROWS = 32;
template <typename In>
inline void prefetch_row(const In* row, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t d = 0; d < n * static_cast<int64_t>(sizeof(In)); d += 64) _mm_prefetch(bytes + d, _MM_HINT_T0);
}

// Eight values from x as float32 lanes.
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const at::BFloat16* x) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// The sum of the eight lanes.
inline float lanes_sum(__m256 x) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// C (M×N) = alpha · A (M×K) · Bᵀ, B's N rows of K (the scores of M ≤ FEW_ROWS query rows against N keys):
// four keys at a time, their four sums reduced together.
template <typename In>
void few_rows_abt(int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda, const In* B, int64_t ldb,
                  float* C, int64_t ldc) {
  const int64_t K8 = K / 8 * 8;
  for (int64_t j0 = 0; j0 < N; j0 += KEY_BLOCK) {
    const int64_t j1 = std::min(N, j0 + KEY_BLOCK);
    for (int64_t i = 0; i < M; ++i) {
      const In* a = A + i * lda;
      float* c = C + i * ldc;
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        const In* b[4] = {B + j * ldb, B + (j + 1) * ldb, B + (j + 2) * ldb, B + (j + 3) * ldb};
        if (i == 0 && j + PREFETCH_ROWS + 4 <= N)
          for (int t = 0; t < 4; ++t) prefetch_row(B + (j + PREFETCH_ROWS + t) * ldb, K);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int64_t d = 0; d < K8; d += 8) {
          const __m256 x = load8(a + d);
          s0 = _mm256_fmadd_ps(x, load8(b[0] + d), s0);
          s1 = _mm256_fmadd_ps(x, load8(b[1] + d), s1);
          s2 = _mm256_fmadd_ps(x, load8(b[2] + d), s2);
          s3 = _mm256_fmadd_ps(x, load8(b[3] + d), s3);
        }
        // hadd twice: lanes 0–3 hold s0..s3's low halves, 4–7 their high halves
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
        float sums[4];
        _mm_storeu_ps(sums, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
        for (int t = 0; t < 4; ++t) {
          for (int64_t d = K8; d < K; ++d) sums[t] += static_cast<float>(a[d]) * static_cast<float>(b[t][d]);
          c[j + t] = alpha * sums[t];
        }
      }
      for (; j < j1; ++j) {
        const In* bj = B + j * ldb;
        __m256 s = _mm256_setzero_ps();
        for (int64_t d = 0; d < K8; d += 8) s = _mm256_fmadd_ps(load8(a + d), load8(bj + d), s);
        float sum = lanes_sum(s);
        for (int64_t d = K8; d < K; ++d) sum += static_cast<float>(a[d]) * static_cast<float>(bj[d]);
        c[j] = alpha * sum;
      }
    }
  }
}

// C (M×N) = alpha · A (M×K) · B (K×N) + beta · C, M ≤ FEW_ROWS (a few rows of P times V's K rows of N):
// 64 columns of a row in eight registers over a block of keys (V's rows read in order, one pass where Dv ≤ 64; with
// 32 columns, V's rows were read half by half and a decoding step took 1.2× as long), then 8, then one at a time.
template <typename In>
void few_rows_ab(int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda, const In* B, int64_t ldb,
                 float beta, float* C, int64_t ldc) {
  if (beta != 1.0f)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t n = 0; n < N; ++n) C[i * ldc + n] = beta == 0.0f ? 0.0f : beta * C[i * ldc + n];
  for (int64_t k0 = 0; k0 < K; k0 += KEY_BLOCK) {
    const int64_t k1 = std::min(K, k0 + KEY_BLOCK);
    for (int64_t i = 0; i < M; ++i) {
      const In* a = A + i * lda;
      float* c = C + i * ldc;
      int64_t n = 0;
      for (; n + 64 <= N; n += 64) {
        __m256 acc[8];
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_loadu_ps(c + n + 8 * t);
        for (int64_t k = k0; k < k1; ++k) {
          if (i == 0 && n == 0 && k + PREFETCH_ROWS < K) prefetch_row(B + (k + PREFETCH_ROWS) * ldb, N);
          const __m256 p = _mm256_set1_ps(alpha * static_cast<float>(a[k]));
          const In* bk = B + k * ldb + n;
          for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(p, load8(bk + 8 * t), acc[t]);
        }
        for (int t = 0; t < 8; ++t) _mm256_storeu_ps(c + n + 8 * t, acc[t]);
      }
      for (; n + 8 <= N; n += 8) {
        __m256 c0 = _mm256_loadu_ps(c + n);
        for (int64_t k = k0; k < k1; ++k) {
          if (i == 0 && n == 0 && k + PREFETCH_ROWS < K) prefetch_row(B + (k + PREFETCH_ROWS) * ldb, N);
          c0 = _mm256_fmadd_ps(_mm256_set1_ps(alpha * static_cast<float>(a[k])), load8(B + k * ldb + n), c0);
        }
        _mm256_storeu_ps(c + n, c0);
      }
      for (; n < N; ++n)
        for (int64_t k = k0; k < k1; ++k) c[n] += alpha * static_cast<float>(a[k]) * static_cast<float>(B[k * ldb + n]);
    }
  }
}
#endif

}  // namespace
