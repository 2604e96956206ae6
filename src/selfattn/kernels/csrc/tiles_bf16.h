// The bfloat16 tiles on VDPBF16PS: Q·Kᵀ on K packed in groups, P·V on V packed in pairs of keys.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "tile_lanes.h"

#ifdef SELFATTN_HAS_AVX512_VARIANT
namespace {

// --- bfloat16 tiles on VDPBF16PS --------------------------------------------------------------------------
// MKL's gemm_bf16bf16f32 packs both operands on every call: on the attention's tiles (128 × 512 × 64, one
// core) it ran at ~90 GFLOP/s on an AVX512-BF16 EPYC, no faster than float32's sgemm (~96), against the
// ~220 its bfloat16 peak allows. Here K and V are packed once per forward call, in the pairs VDPBF16PS reads
// (`pack_groups`, `pack_pairs`), and Q·Kᵀ and P·V run on them in registers:
//   K  groups of 16 keys; per pair of dims p, one vector holding (k[j][2p], k[j][2p+1]) for the group's 16 keys
//   V  pairs of keys (2t, 2t + 1); per 16 dims, one vector holding (v[2t][d], v[2t+1][d]) for those 16 dims
// zeros past Lk, D and Dv. A query's pair (q[2p], q[2p+1]) — or a row of P's (p[2t], p[2t+1]) — is broadcast
// to the 16 lanes; each VDPBF16PS adds both products into float32 lanes, as the GEMM's float32 accumulation.

// acc[r][c] += the products of dims (2p, 2p + 1) of query row r and key group g0 + c: the query's pair broadcast from
// memory where both dims are in the row (a load, no shuffle on the vector ports), or the last dim alone (`whole`
// false: D odd).
template <int R, int NG>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void qk_pair(__m512 (&acc)[R][NG],
                                                                                const uint16_t* A, int64_t lda,
                                                                                const uint16_t* Kp, int64_t D2,
                                                                                int64_t g0, int64_t p, bool whole) {
  __m512bh kv[NG];
  for (int c = 0; c < NG; ++c) kv[c] = (__m512bh)_mm512_loadu_si512(Kp + ((g0 + c) * D2 + p) * 2 * LANES);
  for (int r = 0; r < R; ++r) {
    int32_t pair = A[r * lda + 2 * p];
    if (whole) std::memcpy(&pair, A + r * lda + 2 * p, sizeof pair);
    const __m512bh qp = (__m512bh)_mm512_set1_epi32(pair);
    for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qp, kv[c]);
  }
}

// S rows [0, R) × keys [k0, k1): S[r][j − k0] = alpha · q_r · k_j, for the key groups [g0, g0 + NG) (`Kp`: one
// (b, kv head)'s packed K, `D2` dim pairs); only the columns in [k0, k1) are written.
template <int R, int NG>
__attribute__((target("avx512f,avx512bf16"))) void qk_groups(const uint16_t* A, int64_t lda, int64_t D,
                                                             const uint16_t* Kp, int64_t D2, int64_t g0, int64_t k0,
                                                             int64_t k1, float alpha, float* S, int64_t lds) {
  __m512 acc[R][NG];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t p = 0; p < D / 2; ++p) qk_pair<R, NG>(acc, A, lda, Kp, D2, g0, p, true);
  if (D % 2) qk_pair<R, NG>(acc, A, lda, Kp, D2, g0, D / 2, false);
  store_scores<R, NG>(acc, g0, k0, k1, alpha, S, lds);
}

template <int R>
void qk_rows(const uint16_t* A, int64_t lda, int64_t D, const uint16_t* Kp, int64_t D2, int64_t k0, int64_t k1,
             float alpha, float* S, int64_t lds) {
  int64_t g = k0 / LANES;
  const int64_t g1 = (k1 + LANES - 1) / LANES;
  for (; g + 4 <= g1; g += 4) qk_groups<R, 4>(A, lda, D, Kp, D2, g, k0, k1, alpha, S, lds);
  for (; g < g1; ++g) qk_groups<R, 1>(A, lda, D, Kp, D2, g, k0, k1, alpha, S, lds);
}

// S (M × (k1 − k0)) = alpha · A Kᵀ: M query rows of bfloat16 (stride lda) against keys [k0, k1) of the packed K.
void qk_bf16(int64_t M, const at::BFloat16* Aq, int64_t lda, int64_t D, const uint16_t* Kp, int64_t k0, int64_t k1,
             float alpha, float* S) {
  const auto* A = reinterpret_cast<const uint16_t*>(Aq);
  const int64_t D2 = (D + 1) / 2, lds = k1 - k0;
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) qk_rows<4>(A + r * lda, lda, D, Kp, D2, k0, k1, alpha, S + r * lds, lds);
  for (; r < M; ++r) qk_rows<1>(A + r * lda, lda, D, Kp, D2, k0, k1, alpha, S + r * lds, lds);
}

// Where pv_bf16 finds P's bfloat16 value of row r and key j (of keys [k0, k1)): at
// r · row_step + (j − first) / 2 · pair_step + (j − first) % 2 − skew, `first` even, so that the keys of a pair
// (2t, 2t + 1) sit side by side and VDPBF16PS reads them as one 32-bit broadcast.
struct PairLayout {
  int64_t row_step, pair_step, first, skew;
  int64_t at(int64_t r, int64_t j) const {
    return r * row_step + ((j - first) >> 1) * pair_step + ((j - first) & 1) - skew;
  }
  // P as the forward makes it: row r's keys in one run, k1 − k0 apart
  static PairLayout rows(int64_t k0, int64_t k1) { return {k1 - k0, 2, k0 & ~int64_t(1), k0 & 1}; }
  // a transposed operand of M rows as `round_pairs_bf16` writes it: for each pair of keys, the M rows' pairs
  static PairLayout pairs(int64_t M, int64_t k0) { return {2, 2 * M, k0 & ~int64_t(1), 0}; }
};

// C rows [0, R) += P · V over the pairs of keys [a, e) (a even, e − a even; row r's pair (a + 2u, a + 2u + 1) at
// Pa + r · row_step + u · pair_step) and the dims of vectors [v0, v0 + NV) of 16 (`Vp`: one (b, kv head)'s packed
// V, Dv16 dims a pair of keys); C's stride ldc, Dv its dims (the last vector masked where Dv is not a multiple of 16).
template <int R, int NV>
__attribute__((target("avx512f,avx512bf16"))) void pv_vectors(const uint16_t* Pa, int64_t row_step, int64_t pair_step,
                                                              int64_t a, int64_t e, const uint16_t* Vp, int64_t Dv16,
                                                              int64_t v0, float* C, int64_t ldc, int64_t Dv,
                                                              float alpha) {
  __m512 acc[R][NV];
  __mmask16 mask[NV];
  for (int c = 0; c < NV; ++c) {
    const int64_t d0 = (v0 + c) * LANES, left = std::min<int64_t>(LANES, Dv - d0);
    mask[c] = static_cast<__mmask16>((1u << left) - 1);
    for (int r = 0; r < R; ++r)   // alpha 1: the sums go on from C's; else C + alpha · (the tile's sums)
      acc[r][c] = alpha == 1.0f ? _mm512_maskz_loadu_ps(mask[c], C + r * ldc + d0) : _mm512_setzero_ps();
  }
  const uint16_t* pt = Pa;
  for (int64_t t = a / 2; t < e / 2; ++t, pt += pair_step) {
    __m512bh vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(Vp + (t * Dv16 + (v0 + c) * LANES) * 2);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, pt + r * row_step, sizeof pair);   // (p[2t], p[2t + 1]), both in the tile
      const __m512bh pp = (__m512bh)_mm512_set1_epi32(pair);
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pp, vv[c]);
    }
  }
  for (int c = 0; c < NV; ++c)
    for (int r = 0; r < R; ++r) {
      float* out = C + r * ldc + (v0 + c) * LANES;
      const __m512 sum = alpha == 1.0f ? acc[r][c]
                                       : _mm512_fmadd_ps(_mm512_set1_ps(alpha), acc[r][c], _mm512_maskz_loadu_ps(mask[c], out));
      _mm512_mask_storeu_ps(out, mask[c], sum);
    }
}

template <int R>
void pv_rows(const uint16_t* Pa, int64_t row_step, int64_t pair_step, int64_t a, int64_t e, const uint16_t* Vp,
             int64_t Dv16, float* C, int64_t ldc, int64_t Dv, float alpha) {
  const int64_t nv = Dv16 / LANES;
  int64_t v = 0;
  for (; v + 4 <= nv; v += 4) pv_vectors<R, 4>(Pa, row_step, pair_step, a, e, Vp, Dv16, v, C, ldc, Dv, alpha);
  for (; v < nv; ++v) pv_vectors<R, 1>(Pa, row_step, pair_step, a, e, Vp, Dv16, v, C, ldc, Dv, alpha);
}

inline float bf16_value(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// C (M × Dv, stride ldc) += alpha · P V: P's M rows of bfloat16 over keys [k0, k1), where `layout` says, V packed. A
// key whose pair partner is outside the tile (an odd k0, an odd k1) is added on its own, so that no key outside
// [k0, k1) is multiplied, not even by 0 (an infinite value there would give NaN).
void pv_bf16(int64_t M, const at::BFloat16* Pq, const PairLayout& layout, int64_t k0, int64_t k1, const uint16_t* Vp,
             int64_t Dv, float* C, int64_t ldc, float alpha = 1.0f) {
  const auto* Pb = reinterpret_cast<const uint16_t*>(Pq);
  const int64_t Dv16 = (Dv + LANES - 1) / LANES * LANES;
  int64_t a = k0, e = k1;
  auto alone = [&](int64_t j) {   // key j's products, one at a time, as VDPBF16PS forms them: in float32
    const uint16_t* vj = Vp + (j / 2) * Dv16 * 2 + j % 2;
    for (int64_t r = 0; r < M; ++r) {
      const float p = alpha * bf16_value(Pb[layout.at(r, j)]);
      for (int64_t d = 0; d < Dv; ++d) C[r * ldc + d] += p * bf16_value(vj[2 * d]);
    }
  };
  if (a < e && a % 2) alone(a++);
  if (a < e && (e - a) % 2) alone(--e);
  if (a >= e) return;
  const uint16_t* Pa = Pb + layout.at(0, a);
  int64_t r = 0;
  for (; r + 4 <= M; r += 4)
    pv_rows<4>(Pa + r * layout.row_step, layout.row_step, layout.pair_step, a, e, Vp, Dv16, C + r * ldc, ldc, Dv,
               alpha);
  for (; r < M; ++r)
    pv_rows<1>(Pa + r * layout.row_step, layout.row_step, layout.pair_step, a, e, Vp, Dv16, C + r * ldc, ldc, Dv,
               alpha);
}

// Rows [i0, i1) of x (float32, n values a row, ldx apart) rounded to bfloat16 (as c10::BFloat16 rounds: to nearest
// even) and written transposed in pairs of rows, as pv_bf16 reads `PairLayout::pairs(n, i0)`: for the rows
// (e0 + 2t, e0 + 2t + 1), e0 = i0 rounded down to even, out[(t · n + j) · 2 + s] = x[e0 + 2t + s][j], 0 for a row
// outside [i0, i1). The backward's Pᵀ and dSᵀ, each a single pass over the tile instead of a rounding and a
// transpose.
__attribute__((target("avx512f,avx512bf16"))) void round_pairs_bf16(const float* x, int64_t ldx, int64_t i0, int64_t i1,
                                                                    int64_t n, uint16_t* out) {
  const int64_t e0 = i0 & ~int64_t(1);
  for (int64_t r = e0; r < i1; r += 2) {
    const float* lo = r >= i0 ? x + (r - i0) * ldx : nullptr;
    const float* hi = r + 1 < i1 ? x + (r + 1 - i0) * ldx : nullptr;
    uint16_t* o = out + (r - e0) / 2 * n * 2;
    for (int64_t j = 0; j < n; j += LANES) {
      const __mmask16 keep = static_cast<__mmask16>(n - j >= LANES ? 0xFFFF : (1u << (n - j)) - 1);
      const __m512 zero = _mm512_setzero_ps();
      const __m512 x0 = lo ? _mm512_maskz_loadu_ps(keep, lo + j) : zero;
      const __m512 x1 = hi ? _mm512_maskz_loadu_ps(keep, hi + j) : zero;
      const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x0));
      const __m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x1));
      _mm512_mask_storeu_epi32(o + j * 2, keep, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }
}

}  // namespace
#endif  // SELFATTN_HAS_AVX512_VARIANT
