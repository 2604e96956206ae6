// What the AVX512 tiles share: their lane count, the store of a tile's scores, a 16 × 16 transpose.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "base.h"

#ifdef SELFATTN_HAS_AVX512_VARIANT
namespace {

constexpr int64_t LANES = 16;   // float32 lanes of an AVX512 vector: keys per packed K group, dims per packed V vector

// S[r][j − k0] = alpha · acc[r][c]'s lane j − 16 (g0 + c), for the keys j of the groups [g0, g0 + NG) that lie in
// [k0, k1): the columns of keys outside the tile are never written.
template <int R, int NG>
__attribute__((target("avx512f"), always_inline)) inline void store_scores(const __m512 (&acc)[R][NG], int64_t g0,
                                                                          int64_t k0, int64_t k1, float alpha,
                                                                          float* S, int64_t lds) {
  const __m512 a = _mm512_set1_ps(alpha);
  for (int c = 0; c < NG; ++c) {
    const int64_t j0 = (g0 + c) * LANES, lo = std::max(j0, k0), hi = std::min(j0 + LANES, k1);
    if (lo >= hi) continue;
    const __mmask16 run = static_cast<__mmask16>((1u << (hi - lo)) - 1);
    const __mmask16 keep = static_cast<__mmask16>(run << (lo - j0));
    for (int r = 0; r < R; ++r) {   // the kept lanes moved down to the tile's first column, lo − k0
      const __m512 v = _mm512_mul_ps(acc[r][c], a);
      if (keep == 0xFFFF) _mm512_storeu_ps(S + r * lds + (lo - k0), v);
      else _mm512_mask_storeu_ps(S + r * lds + (lo - k0), run, _mm512_maskz_compress_ps(keep, v));
    }
  }
}

// r[i][j] ↔ r[j][i] for 16 vectors of 16 32-bit values: pairs, then pairs of pairs within each 128-bit lane, then
// the lanes.
__attribute__((target("avx512f"))) inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

}  // namespace
#endif  // SELFATTN_HAS_AVX512_VARIANT
