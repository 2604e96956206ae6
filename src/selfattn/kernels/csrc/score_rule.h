// The score rule: what turns q·kᵀ into a logit, and which keys a query sees.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "blas.h"
#include "problem.h"
#include "tile_products.h"

namespace {

// The score rule on a tile S of q·kᵀ·alpha (rows [r0, r1) × keys [k0, k1) of head h): softcap, ALiBi, segments
// and masks; each row's visible columns [a, e) in `span`.
template <typename T, typename In>
void score_rule(const Problem<T, In>& P, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t k0, int64_t k1, T* S,
                T* tanh_out, std::vector<std::pair<int64_t, int64_t>>& span) {
  const int64_t n = k1 - k0;
  span.resize(r1 - r0);
  for (int64_t i = r0; i < r1; ++i) {
    T* s = S + (i - r0) * n;
    const int64_t a = std::min(k1, std::max(k0, P.key_lo(b, i))), e = std::min(k1, P.key_hi(b, i));  // a <= k1: a row
    // that sees none of the tile (a stacked pass's) gets the empty span [n, n)
    span[i - r0] = {a - k0, std::max(a, e) - k0};
    if (P.softcap > 0) {
      for (int64_t j = a; j < e; ++j) {
        const T t = std::tanh(s[j - k0]);
        if (tanh_out) tanh_out[(i - r0) * n + j - k0] = t;
        s[j - k0] = P.softcap * t;
      }
    }
    if (P.alibi && e > a) {   // after the softcap: its derivative is 1, the tanh above stays the softcap's
      // −slope·|p − j| in two branch-free runs (keys up to p, keys after it) whose int32 counters vectorise;
      // d0 ± t is the exact integer distance below 2^24 (SIZES bounds lengths far below that)
      const T slope = P.alibi[h];
      const int64_t p = i + P.shift(), mid = std::min(e, std::max(a, p + 1));
      T* before = s + (a - k0);
      const T d_before = static_cast<T>(p - a);
      for (int t = 0, m = static_cast<int>(mid - a); t < m; ++t) before[t] -= slope * (d_before - static_cast<T>(t));
      T* after = s + (mid - k0);
      const T d_after = static_cast<T>(mid - p);
      for (int t = 0, m = static_cast<int>(e - mid); t < m; ++t) after[t] -= slope * (d_after + static_cast<T>(t));
    }
    if (P.seg_ids) {   // a segment in several runs: its span holds other segments' keys too
      const int64_t* ids = P.seg_ids + b * P.Lq;
      for (int64_t j = a; j < e; ++j)
        if (ids[j] != ids[i]) s[j - k0] = T(NEG_INF);
    }
    if (P.add_mask) {
      const T* m = P.add_mask + b * P.msb + h * P.msh + i * P.msq;
      for (int64_t j = a; j < e; ++j) {   // −inf hides the key whatever its score (NaN included)
        const T add = m[j * P.msk];
        s[j - k0] = add == T(NEG_INF) ? add : s[j - k0] + add;
      }
    } else if (P.bool_mask) {
      const bool* m = P.bool_mask + b * P.msb + h * P.msh + i * P.msq;
      for (int64_t j = a; j < e; ++j)
        if (!m[j * P.msk]) s[j - k0] = T(NEG_INF);
    }
    if (P.blk_kinds && e > a) {   // a mask_mod's block map: a full block as it is, a partial one by its mask
      const int64_t row = P.blk_row(b, h, i / P.blk);
      const uint8_t* kinds = P.blk_kinds + row;
      const int32_t* index = P.blk_index + row;
      for (int64_t j0 = a; j0 < e;) {
        const int64_t kb = j0 / P.blk, j1 = std::min(e, (kb + 1) * P.blk);
        if (kinds[kb] == 0) {
          std::fill(s + (j0 - k0), s + (j1 - k0), T(NEG_INF));
        } else if (kinds[kb] == 1) {
          const bool* m = P.blk_partial + (int64_t(index[kb]) * P.blk + i % P.blk) * P.blk;   // the row's bools
          for (int64_t j = j0; j < j1; ++j)
            if (!m[j - kb * P.blk]) s[j - k0] = T(NEG_INF);
        }
        j0 = j1;
      }
    }
  }
}

template <typename T, typename In>
void scores(const Problem<T, In>& P, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t k0, int64_t k1, T* S,
            T* tanh_out, std::vector<std::pair<int64_t, int64_t>>& span) {
  const int64_t n = k1 - k0, hk = h / P.G;
  if (!dots_packed(P.qrow(b, h, r0), P.qsl, r1 - r0, P.D, P.kv_part(P.kpack, P.kpack_head, b * P.Hkv + hk), k0, k1,
                   P.gemm_alpha(), S))
    gemm<T, In>(false, true, r1 - r0, n, P.D, P.gemm_alpha(), P.qrow(b, h, r0), P.qsl, P.krow(b, hk, k0), P.ksl, T(0),
                S, n);
  score_rule(P, b, h, r0, r1, k0, k1, S, tanh_out, span);
}

// The keys [lo, hi) any query row of [q0, q1) sees (lo >= hi: none).
template <typename T, typename In>
std::pair<int64_t, int64_t> block_keys(const Problem<T, In>& P, int64_t b, int64_t q0, int64_t q1) {
  if (!P.spans()) return {0, P.Lk};
  int64_t lo = P.Lk, hi = 0;
  for (int64_t i = q0; i < q1; ++i) {
    const int64_t a = P.key_lo(b, i), e = P.key_hi(b, i);
    if (a < e) lo = std::min(lo, a), hi = std::max(hi, e);
  }
  return {lo, hi};
}

}  // namespace
