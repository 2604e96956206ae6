// The float32 tiles on AVX512 FMAs: Q·Kᵀ on K packed in groups, P·V on V's rows where they are.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "tile_lanes.h"

#ifdef SELFATTN_HAS_AVX512_VARIANT
namespace {

// --- float32 tiles on AVX512 ------------------------------------------------------------------------------------
// MKL's sgemm packs both operands on every tile as well: its copy routines took 12% of a two-sided window's forward
// (L = 4096, window (1024, 1024), this AVX512 EPYC), its kernel 52%. Where cpuid has AVX512F the float32 kernel
// packs K once a call in groups of 16 keys per dim (`pack_groups_f32`: Kp[(g·D + d)·16 + j] = k[16g + j][d], zeros
// past Lk) and runs Q·Kᵀ in registers (`qk_f32`: a query's dim broadcast, one FMA per group of keys); P·V reads V's
// rows where they are (`pv_f32`: a row of P's value broadcast, V's row in vectors of 16 dims, the last masked), so
// only the keys [k0, k1) of a tile and the dims below Dv are read. The backward: dO·Vᵀ on V packed as K is, dV += Pᵀ dO
// and dK += s dSᵀ Q with pv_f32 reading P and dS transposed where they are, dQ += s dS K on K's rows.

// S rows [0, R) × keys [k0, k1): S[r][j − k0] = alpha · q_r · k_j, for the key groups [g0, g0 + NG) of the packed K
// (`Kp`: one (b, kv head)'s); only the columns in [k0, k1) are written.
template <int R, int NG>
__attribute__((target("avx512f"))) void qk_f32_groups(const float* A, int64_t lda, int64_t D, const float* Kp,
                                                      int64_t g0, int64_t k0, int64_t k1, float alpha, float* S,
                                                      int64_t lds) {
  __m512 acc[R][NG];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    __m512 kv[NG];
    for (int c = 0; c < NG; ++c) kv[c] = _mm512_loadu_ps(Kp + ((g0 + c) * D + d) * LANES);
    for (int r = 0; r < R; ++r) {
      const __m512 qd = _mm512_set1_ps(A[r * lda + d]);
      for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_fmadd_ps(qd, kv[c], acc[r][c]);
    }
  }
  store_scores<R, NG>(acc, g0, k0, k1, alpha, S, lds);
}

template <int R>
void qk_f32_rows(const float* A, int64_t lda, int64_t D, const float* Kp, int64_t k0, int64_t k1, float alpha,
                 float* S, int64_t lds) {
  int64_t g = k0 / LANES;
  const int64_t g1 = (k1 + LANES - 1) / LANES;
  for (; g + 4 <= g1; g += 4) qk_f32_groups<R, 4>(A, lda, D, Kp, g, k0, k1, alpha, S, lds);
  for (; g < g1; ++g) qk_f32_groups<R, 1>(A, lda, D, Kp, g, k0, k1, alpha, S, lds);
}

// S (M × (k1 − k0)) = alpha · A Kᵀ: M query rows (stride lda) against keys [k0, k1) of the packed K.
void qk_f32(int64_t M, const float* A, int64_t lda, int64_t D, const float* Kp, int64_t k0, int64_t k1, float alpha,
            float* S) {
  const int64_t lds = k1 - k0;
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) qk_f32_rows<4>(A + r * lda, lda, D, Kp, k0, k1, alpha, S + r * lds, lds);
  for (; r < M; ++r) qk_f32_rows<1>(A + r * lda, lda, D, Kp, k0, k1, alpha, S + r * lds, lds);
}

// 16 floats at x, or only those under `mask` (the others 0) where `masked`.
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const float* x, bool masked, __mmask16 mask) {
  return masked ? _mm512_maskz_loadu_ps(mask, x) : _mm512_loadu_ps(x);
}

// C rows [0, R) += alpha · P V over the n keys of the tile (P's value of row r, key j at P[r · rs + j · cs]; V's row j
// at V + j · ldv) and
// the dims of vectors [v0, v0 + NV) of 16; PART: the last of them holds the Dv % 16 dims past the others, read and
// written under a mask (the others' loads unmasked: masked ones in the loop made GCC keep the sums in memory).
template <int R, int NV, bool PART>
__attribute__((target("avx512f"))) void pv_f32_vectors(const float* P, int64_t rs, int64_t cs, int64_t n,
                                                       const float* V,
                                                       int64_t ldv, int64_t v0, int64_t Dv, float* C, int64_t ldc,
                                                       float alpha) {
  const __mmask16 last = PART ? static_cast<__mmask16>((1u << (Dv % LANES)) - 1) : 0xFFFF;
  __m512 acc[R][NV];
  for (int c = 0; c < NV; ++c)
    for (int r = 0; r < R; ++r)   // alpha 1: the sums go on from C's; else C + alpha · (the tile's sums)
      acc[r][c] =
          alpha == 1.0f ? load16(C + r * ldc + (v0 + c) * LANES, PART && c == NV - 1, last) : _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m512 vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = load16(V + j * ldv + (v0 + c) * LANES, PART && c == NV - 1, last);
    for (int r = 0; r < R; ++r) {
      const __m512 pj = _mm512_set1_ps(P[r * rs + j * cs]);
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(pj, vv[c], acc[r][c]);
    }
  }
  for (int c = 0; c < NV; ++c)
    for (int r = 0; r < R; ++r) {
      float* out = C + r * ldc + (v0 + c) * LANES;
      const __m512 sum = alpha == 1.0f ? acc[r][c]
                                       : _mm512_fmadd_ps(_mm512_set1_ps(alpha), acc[r][c],
                                                         load16(out, PART && c == NV - 1, last));
      if (PART && c == NV - 1) _mm512_mask_storeu_ps(out, last, sum);
      else _mm512_storeu_ps(out, sum);
    }
}

template <int R>
void pv_f32_rows(const float* P, int64_t rs, int64_t cs, int64_t n, const float* V, int64_t ldv, int64_t Dv,
                 float* C, int64_t ldc, float alpha) {
  const int64_t whole = Dv / LANES;
  int64_t v = 0;
  for (; v + 4 <= whole; v += 4) pv_f32_vectors<R, 4, false>(P, rs, cs, n, V, ldv, v, Dv, C, ldc, alpha);
  for (; v < whole; ++v) pv_f32_vectors<R, 1, false>(P, rs, cs, n, V, ldv, v, Dv, C, ldc, alpha);
  if (Dv % LANES) pv_f32_vectors<R, 1, true>(P, rs, cs, n, V, ldv, v, Dv, C, ldc, alpha);
}

// C (M × Dv, stride ldc) += alpha · P V: P's M rows over the n keys of a tile (row r's key j at P[r · rs + j · cs]:
// rs = n, cs = 1 for P as it is; rs = 1, cs = M' for the transpose of an M' × M tile), V's n rows from V (stride
// ldv) read in place.
void pv_f32(int64_t M, const float* P, int64_t rs, int64_t cs, int64_t n, const float* V, int64_t ldv, int64_t Dv,
            float* C, int64_t ldc, float alpha = 1.0f) {
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) pv_f32_rows<4>(P + r * rs, rs, cs, n, V, ldv, Dv, C + r * ldc, ldc, alpha);
  for (; r < M; ++r) pv_f32_rows<1>(P + r * rs, rs, cs, n, V, ldv, Dv, C + r * ldc, ldc, alpha);
}

}  // namespace
#endif  // SELFATTN_HAS_AVX512_VARIANT
