// Split-K (flash-decoding): a short query's keys cut into chunks, one task each, merged by their lse.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "forward_pass.h"
#include "tasks.h"

namespace {

// Folds `part` into `into` (the same rows): both scaled to their common maximum, as two key tiles of one pass
// would be. A part row that saw nothing (m = −inf) adds nothing; a NaN in either makes the row NaN.
template <typename T>
void merge_rows(RowState<T>& into, const RowState<T>& part, int64_t G, int64_t Dv) {
  for (int64_t r = 0; r < G * into.rows; ++r) {
    const T mp = part.m[r], mi = into.m[r];
    if (mp == T(NEG_INF)) continue;
    const T m_new = (mp != mp || mi != mi) ? std::numeric_limits<T>::quiet_NaN() : std::max(mi, mp);
    const T a = mi == T(NEG_INF) ? T(0) : std::exp(mi - m_new), c = std::exp(mp - m_new);
    T* oi = into.acc + r * Dv;
    const T* op = part.acc + r * Dv;
    for (int64_t d = 0; d < Dv; ++d) oi[d] = oi[d] * a + op[d] * c;
    into.l[r] = into.l[r] * a + part.l[r] * c;
    into.m[r] = m_new;
  }
}

// Split-K (flash-decoding): a query of at most SPLIT_ROWS rows in one block, over many keys. The tasks are
// (batch, kv head, key chunk of `width`): each runs the online softmax over its chunk into its own (m, l, acc),
// and the worker finishing a head's last chunk merges them in key order (so the result does not depend on the
// thread count) and writes out and lse. Without it such a query has only B·Hkv tasks, fewer than the workers
// under GQA.
constexpr int64_t SPLIT_ROWS = 8;   // native.py's SPLIT_ROWS

template <typename T, typename In>
void forward_split(const Problem<T, In>& P, int64_t width, In* out, T* lse) {
  const int64_t BH = P.bh1 - P.bh0, n_chunks = (P.Lk + width - 1) / width, rows = P.Lq;
  const int64_t size = P.G * rows * (2 + P.Dv);
  std::vector<T> parts(BH * n_chunks * size);   // (bh, chunk): m, l, acc
  auto state = [&](int64_t bh, int64_t c) {
    T* m = parts.data() + (bh * n_chunks + c) * size;
    return RowState<T>{m, m + P.G * rows, m + 2 * P.G * rows, rows};
  };
  const int64_t workers = std::max<int64_t>(1, at::get_num_threads());
  std::vector<ForwardScratch<T, In>> scratch(workers);
  // chunks done per (batch, kv head): the worker that finishes a head's last chunk merges them (one parallel
  // region, not two: on busy cores every join can wait a whole time slice for a preempted worker)
  std::unique_ptr<std::atomic<int64_t>[]> done(new std::atomic<int64_t>[BH]);
  for (int64_t bh = 0; bh < BH; ++bh) done[bh].store(0, std::memory_order_relaxed);
  run_tasks(BH * n_chunks, [&](int64_t w, int64_t t) {
    const int64_t bh = t / n_chunks, c = t % n_chunks, b = (P.bh0 + bh) / P.Hkv, hk = (P.bh0 + bh) % P.Hkv;
    RowState<T> st = state(bh, c);
    st.reset(P.G, P.Dv);
    const auto [lo, hi] = block_keys(P, b, 0, P.Lq);
    const int64_t k0 = std::max(lo, c * width), k1 = std::min(hi, (c + 1) * width);
    if (k0 < k1) softmax_pass(P, b, hk, int64_t(0), P.Lq, k0, k1, width, st, scratch[w]);
    if (done[bh].fetch_add(1, std::memory_order_acq_rel) + 1 < n_chunks) return;   // others' chunks are visible now
    RowState<T> first = state(bh, 0);
    for (int64_t part = 1; part < n_chunks; ++part) merge_rows(first, state(bh, part), P.G, P.Dv);  // in key order
    finish_rows(P, b, hk, int64_t(0), P.Lq, first, out, lse);
  });
}

}  // namespace
