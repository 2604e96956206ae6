// The backward: tasks over (batch, kv head, key block), P recomputed from the saved lse.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "rounding.h"
#include "score_rule.h"
#include "softmax.h"
#include "tasks.h"

namespace {

// Backward: dout (In), lse and delta (T); dq, dk, dv are T (the caller converts them to In).
template <typename T, typename In>
void backward_impl(const Problem<T, In>& P, const In* dout, int64_t dsb, int64_t dsh, int64_t dsl, const T* lse,
                   const T* delta, T* dq, T* dk, T* dv, std::vector<at::Tensor>& dq_extra) {
  const int64_t n_kb = (P.Lk + P.block_k - 1) / P.block_k, BH = P.bh1 - P.bh0;
  const int64_t workers = std::max<int64_t>(1, at::get_num_threads());
  std::vector<std::vector<T>> bufs(workers);
  std::vector<std::vector<In>> rounded(workers), flipped(workers);   // P or dS in the GEMM's dtype; transposed (tiles)
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(workers);
  std::vector<T*> dq_of(workers, nullptr);
  dq_of[0] = dq;
  const int64_t bq = P.block_q, bk = P.block_k;
  run_tasks(BH * n_kb, [&](int64_t w, int64_t t) {
    const int64_t kb = t / BH, bh = P.bh0 + t % BH, b = bh / P.Hkv, hk = bh % P.Hkv;
    if (!dq_of[w]) dq_of[w] = dq_extra[w].template data_ptr<T>();   // zeroed by the caller
    T* dqw = dq_of[w];
    std::vector<T>& buf = bufs[w];
    buf.resize(3 * bq * bk);
    if (!std::is_same_v<T, In>) rounded[w].resize(bq * bk);
    if (P.dopairs) flipped[w].resize((bq + 2) * bk);
    T *S = buf.data(), *dP = S + bq * bk, *Th = dP + bq * bk;
    const int64_t k0 = kb * bk, k1 = std::min(P.Lk, k0 + bk);
    const int64_t lo = P.query_lo(b, k0, k1), hi = P.query_hi(b, k0, k1);
    for (int64_t q0 = lo; q0 < hi; q0 += bq) {
      const int64_t q1 = std::min(hi, q0 + bq), nq = q1 - q0;
      // the block's keys any of these rows sees: a causal diagonal's first query block sees bq of the bk keys,
      // and a tile over all of them computed 4× the visible scores there (a quarter of the backward's products
      // at L = 2048)
      const auto [seen_lo, seen_hi] = block_keys(P, b, q0, q1);
      int64_t ka = std::max(k0, seen_lo), kz = std::min(k1, seen_hi);
      if (P.blk_kinds && ka < kz) {   // a mask_mod's block map: the blocks it hides at either end are not computed
        ka = P.skip_hidden(b, hk, q0, q1, ka, kz);
        while (kz > ka && P.blk_empty(b, hk, q0, q1, (kz - 1) / P.blk)) kz = (kz - 1) / P.blk * P.blk;
        kz = std::max(kz, ka);
      }
      const int64_t n = kz - ka;
      if (n <= 0) continue;
      T* dkb = dk + ((b * P.Hkv + hk) * P.Lk + ka) * P.D;
      T* dvb = dv + ((b * P.Hkv + hk) * P.Lk + ka) * P.Dv;
      for (int64_t g = 0; g < P.G; ++g) {
        const int64_t h = hk * P.G + g;
        scores(P, b, h, q0, q1, ka, kz, S, P.softcap > 0 ? Th : static_cast<T*>(nullptr), spans[w]);
        const T* lrow = lse + (b * P.Hq + h) * P.Lq;
        for (int64_t i = q0; i < q1; ++i) {   // P = exp(S − lse): the forward's probabilities
          T* s = S + (i - q0) * n;
          const auto [a, e] = spans[w][i - q0];
          std::fill(s, s + a, T(0));
          std::fill(s + e, s + n, T(0));
          if (lrow[i] == T(NEG_INF)) std::fill(s + a, s + e, T(0));
          else exp_sub(s + a, e - a, lrow[i]);
        }
        const In* dor = dout + b * dsb + h * dsh + q0 * dsl;
        const int64_t bhq = b * P.Hq + h;   // the query head's packed Q and dO
        if (!transposed_sums_on_tiles(S, n, flipped[w].data(), P.q_part(P.dopairs, P.dopairs_head, bhq),
                                      P.in_place ? dor : nullptr, dsl, q0, q1, P.Dv, dvb, P.Dv, T(1)))
          gemm<T, In>(true, false, n, P.Dv, nq, T(1), as_operand<In>(S, rounded[w].data(), nq * n), n, dor, dsl, T(1),
                      dvb, P.Dv);   // dV += Pᵀ dO
        if (!dots_packed(dor, dsl, nq, P.Dv, P.kv_part(P.vgroups, P.vgroups_head, bh), ka, kz, T(1), dP))
          gemm<T, In>(false, true, nq, n, P.Dv, T(1), dor, dsl, P.vrow(b, hk, ka), P.vsl, T(0), dP, n);  // dP = dO Vᵀ
        const T* drow = delta + (b * P.Hq + h) * P.Lq;
        for (int64_t i = q0; i < q1; ++i) {   // dS = P ∘ (dP − Δ) (∘ (1 − tanh²) under a softcap)
          T* ds = dP + (i - q0) * n;
          const T* pi = S + (i - q0) * n;
          const T di = drow[i];
          const auto [a, e] = spans[w][i - q0];
          std::fill(ds, ds + a, T(0));
          std::fill(ds + e, ds + n, T(0));
          for (int64_t j = a; j < e; ++j) ds[j] = pi[j] * (ds[j] - di);
          if (P.softcap > 0) {
            const T* th = Th + (i - q0) * n;
            for (int64_t j = a; j < e; ++j) ds[j] *= T(1) - th[j] * th[j];
          }
        }
        const In* dsr = as_operand<In>(dP, rounded[w].data(), nq * n);   // dS in the GEMM's dtype (P is spent)
        if (!transposed_sums_on_tiles(dP, n, flipped[w].data(), P.q_part(P.qpairs, P.qpairs_head, bhq),
                                      P.in_place ? P.qrow(b, h, q0) : nullptr, P.qsl, q0, q1, P.D, dkb, P.D, P.scale))
          gemm<T, In>(true, false, n, P.D, nq, P.scale, dsr, n, P.qrow(b, h, q0), P.qsl, T(1), dkb, P.D);  // dK += s dSᵀ Q
        T* dqb = dqw + ((b * P.Hq + h) * P.Lq + q0) * P.D;
        if (!sums_on_tiles(dsr, nq, P.kv_part(P.kpairs, P.kpairs_head, bh), P.in_place ? P.krow(b, hk, ka) : nullptr,
                           P.ksl, ka, kz, P.D, dqb, P.D, P.scale))
          gemm<T, In>(false, false, nq, P.D, n, P.scale, dsr, n, P.krow(b, hk, ka), P.ksl, T(1), dqb, P.D);  // dQ += s dS K
      }
    }
  }, at::globalContext().deterministicAlgorithms());
}

}  // namespace
