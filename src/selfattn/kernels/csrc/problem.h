// One call's arguments, resolved once: shapes, strides, the score rule's fields, the packed operands.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "base.h"

namespace {

// Everything one call needs, resolved once. T: the compute dtype (scores, softmax, sums); In: q, k, v's
// (T itself, or a half type whose GEMMs accumulate in T = float).
template <typename T, typename In = T>
struct Problem {
  int64_t B, Hq, Hkv, G, Lq, Lk, D, Dv;
  const In *q, *k, *v;
  int64_t qsb, qsh, qsl, ksb, ksh, ksl, vsb, vsh, vsl;
  int64_t left, right;   // key j visible to query position p when p − left <= j <= p + right; −1: unbounded
  T scale, softcap; // softcap 0: none
  const T* add_mask = nullptr;
  const bool* bool_mask = nullptr;
  int64_t msb = 0, msh = 0, msq = 0, msk = 0;
  const T* sinks = nullptr;     // (Hq,) sink logits joining each row's denominator
  const T* alibi = nullptr;     // (Hq,) slopes: s −= slope · |p − j|
  const int64_t* seg_lo = nullptr;   // (B, L): first key of query i's segment (Lq = Lk)
  const int64_t* seg_hi = nullptr;   // (B, L): one past its last key
  const int64_t* seg_ids = nullptr;  // (B, L) ids, only when a segment is not one contiguous run
  // A mask_mod's block map (`masks.BlockMask`): kinds (Bm, Hm, nq, nk) 0 empty / 1 partial / 2 full per block of
  // blk × blk positions, index (the same shape) a partial block's row of `blk_partial` (P, blk, blk) bools; Bm, Hm
  // are 1 where the map is the same for every batch item / head (stride 0)
  const uint8_t* blk_kinds = nullptr;
  const int32_t* blk_index = nullptr;
  const bool* blk_partial = nullptr;
  int64_t blk = 0, blk_nq = 0, blk_nk = 0, blk_sb = 0, blk_sh = 0;
  int64_t block_q, block_k;
  // K packed for the tiles (bfloat16: VDPBF16PS's pairs, `pack_groups`; float32: `pack_groups_f32`), or null; V
  // packed for VDPBF16PS (`pack_pairs`), or null; in_place: the float32 tiles' P·V (and the backward's dV, dK, dQ)
  // read V's (dO's, Q's, K's) rows where they are (`pv_f32`)
  using Pack = std::conditional_t<std::is_same_v<In, float>, float, uint16_t>;
  const Pack* kpack = nullptr;
  const uint16_t* vpack = nullptr;
  int64_t kpack_head = 0, vpack_head = 0;
  bool in_place = false;
  // The (batch · kv head)s b·Hkv + hk this pass serves: all of them, or a batch whose packed operands fit
  // PACK_BATCH_BYTES (the packed operands above hold those heads only, in order).
  int64_t bh0 = 0, bh1 = 0;
  const Pack* vgroups = nullptr;       // the backward's V packed as K is, for dP = dO Vᵀ (`qk_bf16`, `qk_f32`), or null
  const uint16_t* kpairs = nullptr;    // and K packed as V is, for dQ += s dS K (`pv_bf16`), or null
  const uint16_t* qpairs = nullptr;    // Q and dO (per query head) packed as V is, over the queries, for
  const uint16_t* dopairs = nullptr;   // dK += s dSᵀ Q and dV += Pᵀ dO (`pv_bf16` on the transposes), or null
  int64_t vgroups_head = 0, kpairs_head = 0, qpairs_head = 0, dopairs_head = 0;

  bool limited() const { return left >= 0 || right >= 0; }
  int64_t shift() const { return Lk - Lq; }
  // keys [lo, hi) that query i of batch b may see, from the causal/window rule and its segment's span
  int64_t key_lo(int64_t b, int64_t i) const {
    int64_t lo = left >= 0 ? std::max<int64_t>(0, i + shift() - left) : 0;
    return seg_lo ? std::max(lo, seg_lo[b * Lq + i]) : lo;
  }
  int64_t key_hi(int64_t b, int64_t i) const {
    int64_t hi = right >= 0 ? std::min<int64_t>(Lk, std::max<int64_t>(0, i + shift() + right + 1)) : Lk;
    return seg_hi ? std::min(hi, seg_hi[b * Lq + i]) : hi;
  }
  // queries [lo, hi) that see any key of [k0, k1) (segments are symmetric: Lq = Lk, the same spans)
  int64_t query_lo(int64_t b, int64_t k0, int64_t k1) const {
    int64_t lo = right >= 0 ? std::max<int64_t>(0, k0 - right - shift()) : 0;
    if (seg_lo) {
      int64_t s = Lq;
      for (int64_t j = k0; j < k1; ++j) s = std::min(s, seg_lo[b * Lq + j]);
      lo = std::max(lo, s);
    }
    return lo;
  }
  int64_t query_hi(int64_t b, int64_t k0, int64_t k1) const {
    int64_t hi = left >= 0 ? std::min<int64_t>(Lq, std::max<int64_t>(0, k1 - 1 - shift() + left + 1)) : Lq;
    if (seg_hi) {
      int64_t s = 0;
      for (int64_t j = k0; j < k1; ++j) s = std::max(s, seg_hi[b * Lq + j]);
      hi = std::min(hi, s);
    }
    return hi;
  }
  bool spans() const { return limited() || seg_lo; }
  // the block map's row of query block qb for head h of batch b (kinds; `blk_index` at the same offset)
  int64_t blk_row(int64_t b, int64_t h, int64_t qb) const { return b * blk_sb + h * blk_sh + qb * blk_nk; }
  // whether the block map hides key block kb from every query of [q0, q1), for each of kv head hk's G heads
  bool blk_empty(int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t kb) const {
    const int64_t heads = blk_sh ? G : 1;
    for (int64_t g = 0; g < heads; ++g)
      for (int64_t qb = q0 / blk; qb <= (q1 - 1) / blk; ++qb)
        if (blk_kinds[blk_row(b, hk * G + g, qb) + kb] != 0) return false;
    return true;
  }
  // the first key of [k0, hi) in a block the map leaves visible to some query of [q0, q1) (hi: none); k0 without
  // a map
  int64_t skip_hidden(int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t k0, int64_t hi) const {
    if (!blk_kinds || q1 <= q0) return k0;
    while (k0 < hi && blk_empty(b, hk, q0, q1, k0 / blk)) k0 = (k0 / blk + 1) * blk;
    return std::min(k0, hi);
  }
  // the end of the tile starting at k0: width keys, or hi, or the first block after k0 the map hides from all of
  // [q0, q1)
  int64_t tile_end(int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t k0, int64_t hi, int64_t width) const {
    const int64_t k1 = std::min(hi, k0 + width);
    if (!blk_kinds) return k1;
    for (int64_t j = (k0 / blk + 1) * blk; j < k1; j += blk)
      if (blk_empty(b, hk, q0, q1, j / blk)) return j;
    return k1;
  }
  T gemm_alpha() const { return softcap > 0 ? scale / softcap : scale; }
  // kv head bh's part of an operand packed for this pass's heads (`per_head` values a head), or null
  template <typename E>
  const E* kv_part(const E* packed, int64_t per_head, int64_t bh) const {
    return packed ? packed + (bh - bh0) * per_head : nullptr;
  }
  // query head bhq's (b·Hq + h) part of an operand packed per query head for this pass's kv heads, or null
  template <typename E>
  const E* q_part(const E* packed, int64_t per_head, int64_t bhq) const {
    return packed ? packed + (bhq - bh0 * G) * per_head : nullptr;
  }
  const In* qrow(int64_t b, int64_t h, int64_t i) const { return q + b * qsb + h * qsh + i * qsl; }
  const In* krow(int64_t b, int64_t h, int64_t j) const { return k + b * ksb + h * ksh + j * ksl; }
  const In* vrow(int64_t b, int64_t h, int64_t j) const { return v + b * vsb + h * vsh + j * vsl; }
};

}  // namespace
