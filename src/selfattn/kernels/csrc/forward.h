// The forward: tasks over (batch, kv head, query block), or split-K for a short query.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "split_k.h"

namespace {

// Forward: out (In) and lse (T). Tasks are (batch, kv head, query block), each keeping its rows' running (m, l)
// and output sums (acc, T) in its worker's buffers and writing out once, in the epilogue; a short query over
// more than block_k keys is split along the keys instead (forward_split).
template <typename T, typename In>
void forward_impl(const Problem<T, In>& P, In* out, T* lse) {
  if (P.Lq <= std::min(P.block_q, SPLIT_ROWS) && P.Lk > P.block_k) return forward_split(P, P.block_k, out, lse);
  const int64_t n_qb = (P.Lq + P.block_q - 1) / P.block_q, BH = P.bh1 - P.bh0;
  const int64_t workers = std::max<int64_t>(1, at::get_num_threads());
  std::vector<ForwardScratch<T, In>> scratch(workers);
  std::vector<std::vector<T>> states(workers);
  run_tasks(BH * n_qb, [&](int64_t w, int64_t t) {
    const int64_t qb = n_qb - 1 - t / BH, bh = P.bh0 + t % BH, b = bh / P.Hkv, hk = bh % P.Hkv;  // costliest first
    const int64_t q0 = qb * P.block_q, q1 = std::min(P.Lq, q0 + P.block_q), nq = q1 - q0;
    std::vector<T>& buf = states[w];
    buf.resize(P.G * P.block_q * (2 + P.Dv));
    T* m = buf.data();
    RowState<T> st{m, m + P.G * nq, m + 2 * P.G * nq, nq};   // (m, l, acc) of the block's nq rows, packed
    st.reset(P.G, P.Dv);
    const auto [lo, hi] = block_keys(P, b, q0, q1);
    // a short query block (one decoding step) takes proportionally wider key blocks: same tile size, fewer GEMMs
    const int64_t width = P.block_k * std::max<int64_t>(1, P.block_q / nq);
    softmax_pass(P, b, hk, q0, q1, lo, hi, width, st, scratch[w]);
    finish_rows(P, b, hk, q0, q1, st, out, lse);
  });
}

}  // namespace
