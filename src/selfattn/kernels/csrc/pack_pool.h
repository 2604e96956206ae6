// The memory of packed operands, kept between calls.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "base.h"

namespace {

// Memory for packed operands, kept between calls: a fresh allocation of megabytes is page-faulted and zeroed by the
// OS on first touch, and a bfloat16 forward + backward at L = 2048 packs 10 MB a call (causal forward L = 4096 at
// 8 MB) — on this EPYC as long as the packing itself. Buffers come back here when a call is done and are handed
// to the next call that fits in one; the pool keeps at most POOL_BYTES (shared by every thread, under a lock:
// concurrent calls take different buffers): two batches of heads' operands (`PACK_BATCH_BYTES`), so two calls at
// once keep theirs, and a head larger than a batch allocates and frees its own.
constexpr size_t POOL_BYTES = size_t(32) << 20;

class PackPool {
 public:
  static PackPool& get() {
    static PackPool pool;
    return pool;
  }
  // A buffer of at least n bytes (its capacity in `have`): the smallest kept one that fits, else a new one.
  std::unique_ptr<std::byte[]> take(size_t n, size_t& have) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_t best = kept_.size();
      for (size_t i = 0; i < kept_.size(); ++i)
        if (kept_[i].second >= n && (best == kept_.size() || kept_[i].second < kept_[best].second)) best = i;
      if (best < kept_.size()) {
        auto found = std::move(kept_[best]);
        kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
        bytes_ -= found.second;
        have = found.second;
        return std::move(found.first);
      }
    }
    have = n;
    return std::unique_ptr<std::byte[]>(new std::byte[n]);
  }
  void give(std::unique_ptr<std::byte[]> data, size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes_ + n > POOL_BYTES) return;   // freed here, as it goes out of scope
    bytes_ += n;
    kept_.emplace_back(std::move(data), n);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::unique_ptr<std::byte[]>, size_t>> kept_;
  size_t bytes_ = 0;
};

// One operand of every (batch, head) packed for the tiles (layouts above and below), `per_head` values of E a head,
// in a buffer of the pool (given back when it goes); the packers write every value (zeros where no row or dim is).
template <typename E>
struct Packed {
  std::unique_ptr<std::byte[]> data;
  size_t capacity = 0;
  int64_t per_head = 0;
  Packed() = default;
  Packed(int64_t n, int64_t per_head_) : per_head(per_head_) {
    data = PackPool::get().take(static_cast<size_t>(n) * sizeof(E), capacity);
  }
  Packed(Packed&&) = default;
  Packed& operator=(Packed&&) = default;
  ~Packed() {
    if (data) PackPool::get().give(std::move(data), capacity);
  }
  E* get() const { return reinterpret_cast<E*>(data.get()); }
};

}  // namespace
