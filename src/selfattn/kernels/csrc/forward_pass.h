// The forward's passes: one query block over its keys (per head, or a GQA group stacked), and its epilogue.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "rounding.h"
#include "score_rule.h"
#include "softmax.h"

namespace {

// One worker's forward scratch: the score tile, P rounded to the GEMM's dtype, each row's visible span.
template <typename T, typename In>
struct ForwardScratch {
  std::vector<T> tile;
  std::vector<In> rounded;
  std::vector<In> stacked_q;   // the G heads' query rows, one under the other (`stacked_pass`)
  std::vector<std::pair<int64_t, int64_t>> spans;
};

// GQA with a short query (a decoding step: G heads × a few rows share each K/V tile): the G heads' rows stacked
// into one (G·rows × D) operand, so that each key tile is one GEMM of G·rows rows for Q·Kᵀ and one for P·V
// instead of G matrix-vector products, each rereading the tile. Used by softmax_pass when G·rows <= STACK_ROWS
// (else the heads go one by one); the tile is `width / G` keys wide, the same bytes as one head's. A row that sees
// none of a tile's keys gets an empty span (P = 0 there, as for the rows of a per-head tile outside its own
// visible columns); a tile no row sees is skipped. The arithmetic of each row is the per-head pass's.
constexpr int64_t STACK_ROWS = 64;

template <typename T, typename In>
bool stacked_pass(const Problem<T, In>& P, int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t lo, int64_t hi,
                  int64_t width, RowState<T>& st, ForwardScratch<T, In>& ws) {
  const int64_t nq = q1 - q0, rows = P.G * nq;
  if (P.G == 1 || rows > STACK_ROWS || st.rows != nq) return false;
  width = std::max<int64_t>(64, width / P.G);
  ws.stacked_q.resize(rows * P.D);
  for (int64_t g = 0; g < P.G; ++g)
    for (int64_t i = q0; i < q1; ++i)
      std::copy(P.qrow(b, hk * P.G + g, i), P.qrow(b, hk * P.G + g, i) + P.D,
                ws.stacked_q.data() + (g * nq + i - q0) * P.D);
  const int64_t tile = rows * std::min(width, std::max<int64_t>(hi - lo, 0));
  if (static_cast<int64_t>(ws.tile.size()) < tile) ws.tile.resize(tile);
  if (!std::is_same_v<T, In> && static_cast<int64_t>(ws.rounded.size()) < tile) ws.rounded.resize(tile);
  T* S = ws.tile.data();
  for (int64_t k0 = lo, k1; (k0 = P.skip_hidden(b, hk, q0, q1, k0, hi)) < hi; k0 = k1) {   // blocks a map hides: never read
    k1 = P.tile_end(b, hk, q0, q1, k0, hi, width);
    const int64_t n = k1 - k0;
    if (std::max(q0, P.query_lo(b, k0, k1)) >= std::min(q1, P.query_hi(b, k0, k1))) continue;   // no row sees it
    if (!dots_packed(ws.stacked_q.data(), P.D, rows, P.D, P.kv_part(P.kpack, P.kpack_head, b * P.Hkv + hk), k0, k1,
                     P.gemm_alpha(), S))
      gemm<T, In>(false, true, rows, n, P.D, P.gemm_alpha(), ws.stacked_q.data(), P.D, P.krow(b, hk, k0), P.ksl, T(0),
                  S, n);
    for (int64_t g = 0; g < P.G; ++g) {
      T* Sg = S + g * nq * n;
      score_rule(P, b, hk * P.G + g, q0, q1, k0, k1, Sg, static_cast<T*>(nullptr), ws.spans);
      online_rows(P, g, q0, q0, q1, n, Sg, ws.spans, st);
    }
    const In* p = as_operand<In>(S, ws.rounded.data(), rows * n);   // P in the GEMM's dtype
    const uint16_t* vpack = P.kv_part(P.vpack, P.vpack_head, b * P.Hkv + hk);
    if (!sums_on_tiles(p, rows, vpack, P.in_place ? P.vrow(b, hk, k0) : nullptr, P.vsl, k0, k1, P.Dv, st.acc, P.Dv,
                       T(1)))
      gemm<T, In>(false, false, rows, P.Dv, n, T(1), p, n, P.vrow(b, hk, k0), P.vsl, T(1), st.acc, P.Dv);
  }
  return true;
}

// The online softmax of query rows [q0, q1) of kv head hk's G heads over keys [lo, hi), in tiles of `width`
// keys: st's (m, l, acc) (row i at i − q0) updated in place.
template <typename T, typename In>
void softmax_pass(const Problem<T, In>& P, int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t lo, int64_t hi,
                  int64_t width, RowState<T>& st, ForwardScratch<T, In>& ws) {
  if (stacked_pass(P, b, hk, q0, q1, lo, hi, width, st, ws)) return;
  const int64_t tile = (q1 - q0) * std::min(width, std::max<int64_t>(hi - lo, 0));
  if (static_cast<int64_t>(ws.tile.size()) < tile) ws.tile.resize(tile);
  if (!std::is_same_v<T, In> && static_cast<int64_t>(ws.rounded.size()) < tile) ws.rounded.resize(tile);
  T* S = ws.tile.data();
  for (int64_t k0 = lo, k1; (k0 = P.skip_hidden(b, hk, q0, q1, k0, hi)) < hi; k0 = k1) {   // blocks a map hides: never read
    k1 = P.tile_end(b, hk, q0, q1, k0, hi, width);
    const int64_t n = k1 - k0;
    const int64_t r0 = std::max(q0, P.query_lo(b, k0, k1)), r1 = std::min(q1, P.query_hi(b, k0, k1));
    if (r1 <= r0) continue;
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t h = hk * P.G + g;
      scores(P, b, h, r0, r1, k0, k1, S, static_cast<T*>(nullptr), ws.spans);
      T* o = st.acc + g * st.rows * P.Dv;   // row i at (i − q0) · Dv
      online_rows(P, g, q0, r0, r1, n, S, ws.spans, st);
      const In* p = as_operand<In>(S, ws.rounded.data(), (r1 - r0) * n);   // P in the GEMM's dtype
      const uint16_t* vpack = P.kv_part(P.vpack, P.vpack_head, b * P.Hkv + hk);
      T* oi = o + (r0 - q0) * P.Dv;
      const In* vrows = P.in_place ? P.vrow(b, hk, k0) : nullptr;
      if (!sums_on_tiles(p, r1 - r0, vpack, vrows, P.vsl, k0, k1, P.Dv, oi, P.Dv, T(1)))
        gemm<T, In>(false, false, r1 - r0, P.Dv, n, T(1), p, n, P.vrow(b, hk, k0), P.vsl, T(1), o + (r0 - q0) * P.Dv,
                    P.Dv);
    }
  }
}

// Epilogue of rows [q0, q1): out = acc / l (0 for a row that saw nothing), lse = m + log l (−inf there); a sink
// joins l as one more logit whose value is 0: l += exp(sink − m) under the row's maximum max(m, sink).
template <typename T, typename In>
void finish_rows(const Problem<T, In>& P, int64_t b, int64_t hk, int64_t q0, int64_t q1, const RowState<T>& st,
                 In* out, T* lse) {
  for (int64_t g = 0; g < P.G; ++g) {
    const int64_t h = hk * P.G + g;
    for (int64_t i = q0; i < q1; ++i) {
      T li = st.l[g * st.rows + i - q0];
      T mi = st.m[g * st.rows + i - q0];
      const T* ai = st.acc + (g * st.rows + i - q0) * P.Dv;
      In* oi = out + ((b * P.Hq + h) * P.Lq + i) * P.Dv;
      T* lsei = lse + (b * P.Hq + h) * P.Lq + i;
      T alpha = T(1);
      if (P.sinks && mi == mi) {
        const T sink = P.sinks[h], m_new = std::max(mi, sink);
        alpha = li > 0 ? std::exp(mi - m_new) : T(0);
        li = li * alpha + std::exp(sink - m_new);
        mi = m_new;
      }
      if (li > 0 || li != li) {   // a NaN row stays NaN (as in every backend), not "saw nothing"
        const T inv = alpha / li;
        for (int64_t d = 0; d < P.Dv; ++d) oi[d] = static_cast<In>(ai[d] * inv);
        *lsei = mi + std::log(li);
      } else {
        std::fill(oi, oi + P.Dv, In(0));
        *lsei = T(NEG_INF);
      }
    }
  }
}

}  // namespace
