// The packers: K, V, Q, dO rewritten once a call in the layouts the tiles read.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "pack_pool.h"
#include "tile_lanes.h"

#ifdef SELFATTN_HAS_AVX512_VARIANT
namespace {

// A group of n ≤ 16 rows (D dims) as qk_bf16 reads it: for each pair of dims, the rows' pairs in one vector (16 rows
// × 16 pairs loaded as 32-bit values and transposed in registers); zeros past n and past D.
__attribute__((target("avx512f"))) void pack_group(const uint16_t* const* rows, int64_t n, int64_t D, uint16_t* out) {
  const int64_t D2 = (D + 1) / 2, whole = D / 2;   // pairs; pairs whose both dims are in the row
  for (int64_t p0 = 0; p0 < D2; p0 += LANES) {
    const int64_t m = std::max<int64_t>(0, std::min(LANES, whole - p0));
    const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);   // masked loads read nothing past the row
    __m512i x[LANES];
    for (int64_t r = 0; r < LANES; ++r)
      x[r] = r < n ? _mm512_maskz_loadu_epi32(keep, rows[r] + 2 * p0) : _mm512_setzero_si512();
    transpose16(x);
    for (int64_t c = 0; c < std::min(LANES, D2 - p0); ++c) _mm512_storeu_si512(out + (p0 + c) * 2 * LANES, x[c]);
  }
  if (D % 2)   // the last dim alone: its pair partner would be past the row (past the tensor, for its last row)
    for (int64_t r = 0; r < n; ++r) out[whole * 2 * LANES + 2 * r] = rows[r][D - 1];
}

// Rows r0 and r1 (null: none, zeros) of D dims as pv_bf16 reads a pair: (r0[d], r1[d]) side by side, D16 dims (zeros
// past D).
__attribute__((target("avx512f"))) void pack_pair(const uint16_t* r0, const uint16_t* r1, int64_t D, int64_t D16,
                                                  uint16_t* out) {
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES) {
    const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + d)));
    const __m512i b = r1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + d)))
                         : _mm512_setzero_si512();
    _mm512_storeu_si512(out + 2 * d, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; d < D16; ++d) {
    out[2 * d] = d < D ? r0[d] : 0;
    out[2 * d + 1] = d < D && r1 ? r1[d] : 0;
  }
}

// Values a head takes packed as qk_bf16 reads K, as pv_bf16 reads V, as qk_f32 reads K (L rows of D dims).
inline int64_t groups_size(int64_t L, int64_t D) { return (L + LANES - 1) / LANES * ((D + 1) / 2) * LANES * 2; }
inline int64_t pairs_size(int64_t L, int64_t D) { return (L + 1) / 2 * ((D + LANES - 1) / LANES * LANES) * 2; }
inline int64_t groups_f32_size(int64_t L, int64_t D) { return (L + LANES - 1) / LANES * D * LANES; }

// The L rows of the heads [bh0, bh1) of the B·H (rows(b, h, j): row j of head h of batch b), in groups of 16 rows,
// each packed by pack(its rows, n ≤ 16 of them, D, out) into `per_group` values of E: (heads, groups, per_group).
template <typename E, typename Rows, typename PackGroup>
Packed<E> pack_in_groups(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, int64_t per_group,
                         const Rows& rows, const PackGroup& pack) {
  const int64_t groups = (L + LANES - 1) / LANES;
  Packed<E> out((bh1 - bh0) * groups * per_group, groups * per_group);
  at::parallel_for(0, (bh1 - bh0) * groups, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = bh0 + t / groups, j0 = t % groups * LANES, n = std::min(LANES, L - j0);
      const E* group[LANES];
      for (int64_t r = 0; r < n; ++r) group[r] = reinterpret_cast<const E*>(rows(bh / H, bh % H, j0 + r));
      pack(group, n, D, out.get() + t * per_group);
    }
  });
  return out;
}

// As qk_bf16 reads K, for the heads [bh0, bh1): (heads, groups of 16 rows, D2 pairs of dims, 16, 2).
template <typename Rows>
Packed<uint16_t> pack_groups(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, const Rows& rows) {
  return pack_in_groups<uint16_t>(bh0, bh1, H, L, D, groups_size(LANES, D), rows, pack_group);
}

// As pv_bf16 reads V, for the heads [bh0, bh1): (heads, pairs of rows, D16 dims, 2).
template <typename Rows>
Packed<uint16_t> pack_pairs(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, const Rows& rows) {
  const int64_t pairs = (L + 1) / 2, D16 = (D + LANES - 1) / LANES * LANES, size = pairs_size(L, D);
  Packed<uint16_t> out((bh1 - bh0) * size, size);
  at::parallel_for(0, (bh1 - bh0) * pairs, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = bh0 + t / pairs, j = t % pairs * 2;
      const auto* r0 = reinterpret_cast<const uint16_t*>(rows(bh / H, bh % H, j));
      const auto* r1 = j + 1 < L ? reinterpret_cast<const uint16_t*>(rows(bh / H, bh % H, j + 1)) : nullptr;
      pack_pair(r0, r1, D, D16, out.get() + t * D16 * 2);
    }
  });
  return out;
}

// A group of n ≤ 16 rows (D dims) as qk_f32 reads it: for each dim, the 16 rows' values in one vector (16 × 16
// blocks transposed in registers); zeros past n.
__attribute__((target("avx512f"))) void pack_group_f32(const float* const* rows, int64_t n, int64_t D, float* out) {
  for (int64_t d0 = 0; d0 < D; d0 += LANES) {
    const int64_t m = std::min(LANES, D - d0);
    const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);   // masked loads read nothing past the row
    __m512i x[LANES];
    for (int64_t r = 0; r < LANES; ++r)
      x[r] = r < n ? _mm512_castps_si512(_mm512_maskz_loadu_ps(keep, rows[r] + d0)) : _mm512_setzero_si512();
    transpose16(x);
    for (int64_t c = 0; c < m; ++c) _mm512_storeu_si512(out + (d0 + c) * LANES, x[c]);
  }
}

// As qk_f32 reads K, for the heads [bh0, bh1): (heads, groups of 16 rows, D, 16).
template <typename Rows>
Packed<float> pack_groups_f32(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, const Rows& rows) {
  return pack_in_groups<float>(bh0, bh1, H, L, D, groups_f32_size(LANES, D), rows, pack_group_f32);
}

}  // namespace
#endif  // SELFATTN_HAS_AVX512_VARIANT
