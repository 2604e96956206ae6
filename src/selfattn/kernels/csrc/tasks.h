// Scheduling: tasks dealt to the workers from a shared counter, heads in batches of packed memory.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "blas.h"

namespace {

// Runs task(worker, t) for t in [0, n_tasks) on at most at::get_num_threads() workers, each taking
// the next task from a shared counter; `fixed`: worker w takes tasks w, w + workers, … in order instead,
// so what each worker sums, and in which order, does not depend on timing (deterministic mode).
template <typename F>
void run_tasks(int64_t n_tasks, const F& task, bool fixed = false) {
  if (n_tasks <= 0) return;
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n_tasks));
  std::atomic<int64_t> next{0};
  at::parallel_for(0, workers, 1, [&](int64_t w0, int64_t w1) {
    const int one = 1;
    const int mkl_before = mkl_set_num_threads_local_ ? mkl_set_num_threads_local_(&one) : 0;
    for (int64_t w = w0; w < w1; ++w) {
      if (fixed) {
        for (int64_t t = w; t < n_tasks; t += workers) task(w, t);
      } else {
        for (int64_t t = next.fetch_add(1); t < n_tasks; t = next.fetch_add(1)) task(w, t);
      }
    }
    if (mkl_set_num_threads_local_) mkl_set_num_threads_local_(&mkl_before);
  });
}

// Runs f(bh0, bh1) over batches [bh0, bh1) of the BH (batch · kv head)s whose packed operands (head_bytes a head;
// 0: nothing packed, one batch) take at most PACK_BATCH_BYTES together — at least one head a batch, the batches as
// even as they can be — so that the tiles add at most that much memory to a call (or one head's operands, where
// they are larger), whatever B·H·L: a causal float32 forward at L = 32,768 packed 64 MiB of K at once, where the
// kernel without tiles adds under 2 MiB. Each batch is one more parallel region; a head's tasks stay in one.
constexpr int64_t PACK_BATCH_BYTES = int64_t(16) << 20;

template <typename F>
void in_head_batches(int64_t BH, int64_t head_bytes, const F& f) {
  const int64_t per_batch = head_bytes > 0 ? std::max<int64_t>(1, PACK_BATCH_BYTES / head_bytes) : BH;
  if (BH <= 0 || per_batch <= 0) return;
  const int64_t batches = (BH + per_batch - 1) / per_batch, size = (BH + batches - 1) / batches;
  for (int64_t bh0 = 0; bh0 < BH; bh0 += size) f(bh0, std::min(BH, bh0 + size));
}

}  // namespace
