// The "native" CPU attention kernel: FlashAttention-2 with one parallel region per pass.
//
// Forward: tasks are (batch, kv head, query block); a task serves the G query heads of its kv
// head (GQA without copying K/V: one K/V block is read once for the whole group). Inside a task
// everything is single-threaded: S = Q Kᵀ and acc += P V are BLAS GEMMs on cache-sized tiles
// (sgemm_/dgemm_ of the BLAS PyTorch links, as PyTorch's own CPU flash kernel does; float32 on the kernel's own
// AVX512 tiles where cpuid has AVX512F and the caller asks, K packed once a call: `qk_f32`, `pv_f32`; a few query
// rows in its own AVX2 loops: `few_rows_abt`, `few_rows_ab`), and the
// online softmax (m, l, acc) runs row by row with an exp in vector lanes (float: our own polynomial, in 16
// AVX512 lanes where cpuid says the CPU has AVX512F — a function-level target, chosen at run time, so a build
// for AVX2 never executes it elsewhere — else 8 AVX2 lanes; double: SLEEF's, from libtorch_cpu, as SDPA uses;
// scalar without AVX2). A query of at most SPLIT_ROWS rows over more than block_k keys runs split-K
// (flash-decoding): one task per key chunk, the chunks' (m, l, acc) merged by their lse. Blocks the causal/window
// rule, the segments (packed sequences) or a mask_mod's block map hide are never read; inside a visited block each row only
// touches its visible columns. ALiBi is one more term per visible score, a sink one more term per row.
//
// Backward: tasks are (batch, kv head, key block): dK and dV of the block are owned by the task, which walks the
// query blocks that see it, each tile cut to the keys of the block its rows see (on a causal diagonal, not all of it);
// dQ is accumulated per worker (worker 0 writes into dq, the others into private buffers summed
// at the end, in worker order), so there are no races and no atomics. Under
// torch.use_deterministic_algorithms(True) the tasks are dealt to the workers in a fixed order, so dQ is
// bit for bit the same on every run with the same thread count. P is recomputed from the saved lse.
//
// Scheduling: one at::parallel_for over the workers; each worker takes tasks from a shared atomic
// counter (most expensive first), so a worker whose core is busy with another process simply
// takes fewer tasks instead of making the whole call wait for its static share.
//
// Half inputs (bfloat16, float16): q, k, v, dout stay in their dtype and every GEMM is MKL's
// gemm_bf16bf16f32 / gemm_f16f16f32 (half operands, float32 accumulation: AVX512-BF16 or AMX where the CPU
// has them); scores, the online softmax, lse, dq/dk/dv sums are float32, and P (forward) and dS (backward)
// are rounded to the input dtype for their GEMM (once per tile; with AVX512-BF16's conversion where cpuid has it),
// as FlashAttention does. Where cpuid has AVX512-BF16 the bfloat16 forward's Q·Kᵀ and P·V run on VDPBF16PS over
// K and V packed once a call instead (`qk_bf16`, `pv_bf16`; tiles=false: MKL's), and so do the backward's five
// products (Q·Kᵀ, dO·Vᵀ, dS·K; dSᵀ·Q and Pᵀ·dO on P and dS rounded straight into transposed pairs of query rows,
// `round_pairs_bf16`, with Q and dO packed over the queries). Which dtype arrives here is
// the Python side's choice (native.py: where the CPU has no half GEMM it converts to float32 instead).
//
// Layouts: q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv) with unit stride on the last
// dim; mask (B, Hq, Lq, Lk) through strides (0 where it broadcasts), bool or additive in the compute dtype T.
//
// The file is one translation unit laid out in headers by concern (FlashAttention's csrc is the model); this file
// only checks the tensors, resolves a call (`make_problem`), dispatches on the dtype and binds the operators:
//   base.h           ATen, the intrinsics, SELFATTN_HAS_AVX512_VARIANT, NEG_INF
//   isa.h            which instructions run the softmax and P's rounding, from cpuid (`softmax_isa`)
//   blas.h           the BLAS shims (sgemm_, dgemm_, MKL's half GEMMs, the loop GEMM) behind one `gemm`
//   few_rows.h       the AVX2 loops for a GEMM of a few query rows (decoding)
//   exp.h            the exp, one body over the vector lanes (AVX2's 8, AVX512's 16), and double's SLEEF exp
//   rounding.h       P and dS rounded to the GEMM's operand dtype
//   tile_lanes.h     what the AVX512 tiles share (LANES, the store of scores, a 16 × 16 transpose)
//   tiles_bf16.h     Q·Kᵀ and P·V on VDPBF16PS; tiles_f32.h: on AVX512 FMAs
//   pack_pool.h      the memory of packed operands, kept between calls; pack.h: the packers
//   tile_products.h  each product on the tiles where its operand is packed, else the caller's GEMM
//   problem.h        one call's arguments (`Problem`); score_rule.h: q·kᵀ → logit, and which keys a query sees
//   softmax.h        the online softmax (row maximum, running m, l, acc, one tile's step)
//   tasks.h          the workers and their shared task counter; heads in batches of packed memory
//   forward_pass.h   a query block's pass over its keys and its epilogue; split_k.h: flash-decoding;
//   forward.h        the forward's tasks; backward.h: the backward's

#include "backward.h"
#include "forward.h"
#include "isa.h"
#include "pack.h"

#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace {

int64_t row_stride(const at::Tensor& t) { return t.size(2) <= 1 ? std::max<int64_t>(t.size(3), 1) : t.stride(2); }

template <typename T, typename In>
Problem<T, In> make_problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& mask, int64_t left, int64_t right, double scale,
                        double softcap, const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& alibi,
                        const std::optional<at::Tensor>& seg_span, const std::optional<at::Tensor>& seg_ids,
                        const std::optional<at::Tensor>& blk_kinds, const std::optional<at::Tensor>& blk_index,
                        const std::optional<at::Tensor>& blk_partial, int64_t block_q, int64_t block_k) {
  Problem<T, In> P;
  P.B = q.size(0); P.Hq = q.size(1); P.Lq = q.size(2); P.D = q.size(3);
  P.Hkv = k.size(1); P.Lk = k.size(2); P.Dv = v.size(3); P.G = P.Hq / P.Hkv;
  P.q = q.data_ptr<In>(); P.k = k.data_ptr<In>(); P.v = v.data_ptr<In>();
  P.qsb = q.stride(0); P.qsh = q.stride(1); P.qsl = row_stride(q);
  P.ksb = k.stride(0); P.ksh = k.stride(1); P.ksl = row_stride(k);
  P.vsb = v.stride(0); P.vsh = v.stride(1); P.vsl = row_stride(v);
  P.left = left; P.right = right; P.scale = static_cast<T>(scale); P.softcap = static_cast<T>(softcap);
  P.block_q = block_q; P.block_k = block_k;
  if (mask.has_value()) {
    const at::Tensor& m = *mask;
    TORCH_CHECK(m.dim() == 4 && m.size(0) == P.B && m.size(1) == P.Hq && m.size(2) == P.Lq && m.size(3) == P.Lk,
                "mask must be expanded to (B, Hq, Lq, Lk)");
    TORCH_CHECK(m.scalar_type() == at::kBool || m.scalar_type() == c10::CppTypeToScalarType<T>::value,
                "an additive mask must be in the compute dtype (float32 for half inputs)");
    if (m.scalar_type() == at::kBool) P.bool_mask = m.data_ptr<bool>();
    else P.add_mask = m.data_ptr<T>();
    P.msb = m.stride(0); P.msh = m.stride(1); P.msq = m.stride(2); P.msk = m.stride(3);
  }
  if (sinks.has_value()) {
    TORCH_CHECK(sinks->is_contiguous() && sinks->numel() == P.Hq &&
                    sinks->scalar_type() == c10::CppTypeToScalarType<T>::value,
                "sinks must be a contiguous (Hq,) tensor of the compute dtype (float32 for half inputs)");
    P.sinks = sinks->data_ptr<T>();
  }
  if (alibi.has_value()) {
    TORCH_CHECK(alibi->is_contiguous() && alibi->numel() == P.Hq &&
                    alibi->scalar_type() == c10::CppTypeToScalarType<T>::value,
                "alibi must be a contiguous (Hq,) tensor of the compute dtype (float32 for half inputs)");
    P.alibi = alibi->data_ptr<T>();
  }
  if (seg_span.has_value()) {
    TORCH_CHECK(P.Lq == P.Lk && seg_span->is_contiguous() && seg_span->scalar_type() == at::kLong &&
                    seg_span->numel() == 2 * P.B * P.Lq, "segments: a contiguous int64 (2, B, L) span, Lq = Lk");
    P.seg_lo = seg_span->data_ptr<int64_t>();
    P.seg_hi = P.seg_lo + P.B * P.Lq;
  }
  if (seg_ids.has_value()) {
    TORCH_CHECK(seg_span.has_value() && seg_ids->is_contiguous() && seg_ids->scalar_type() == at::kLong &&
                    seg_ids->numel() == P.B * P.Lq, "segments: contiguous int64 (B, L) ids with their span");
    P.seg_ids = seg_ids->data_ptr<int64_t>();
  }
  if (blk_kinds.has_value()) {
    TORCH_CHECK(blk_index.has_value() && blk_partial.has_value(), "block map: kinds, index and partial together");
    const at::Tensor &kinds = *blk_kinds, &index = *blk_index, &partial = *blk_partial;
    TORCH_CHECK(kinds.dim() == 4 && kinds.is_contiguous() && kinds.scalar_type() == at::kByte &&
                    index.sizes() == kinds.sizes() && index.is_contiguous() && index.scalar_type() == at::kInt &&
                    partial.dim() == 3 && partial.is_contiguous() && partial.scalar_type() == at::kBool &&
                    partial.size(1) == partial.size(2) && partial.size(1) > 0,
                "block map: contiguous uint8 kinds and int32 index (Bm, Hm, nq, nk), bool partial (P, n, n)");
    const int64_t n = partial.size(1);
    TORCH_CHECK((kinds.size(0) == 1 || kinds.size(0) == P.B) && (kinds.size(1) == 1 || kinds.size(1) == P.Hq) &&
                    kinds.size(2) == (P.Lq + n - 1) / n && kinds.size(3) == (P.Lk + n - 1) / n,
                "block map: its (Bm, Hm, nq, nk) does not fit (B, Hq, Lq, Lk)");
    P.blk_kinds = kinds.data_ptr<uint8_t>();
    P.blk_index = index.data_ptr<int32_t>();
    P.blk_partial = partial.data_ptr<bool>();
    P.blk = n, P.blk_nq = kinds.size(2), P.blk_nk = kinds.size(3);
    P.blk_sh = kinds.size(1) > 1 ? P.blk_nq * P.blk_nk : 0;
    P.blk_sb = kinds.size(0) > 1 ? kinds.size(1) * P.blk_nq * P.blk_nk : 0;
  }
  return P;
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t block_q, int64_t block_k) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->device().is_cpu() && t->dim() == 4, "native attention: 4-D CPU tensors expected");
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "native attention: q, k, v must share a dtype");
    TORCH_CHECK(t->size(3) <= 1 || t->stride(3) == 1, "native attention: the last dim must have stride 1");
  }
  const at::ScalarType st = q.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kBFloat16 || st == at::kHalf,
              "native attention: float32, float64, bfloat16 or float16 only");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "native attention: Hq % Hkv != 0");
  TORCH_CHECK(block_q > 0 && block_k > 0, "native attention: block sizes must be positive");
}

// f(T{}, In{}) for q's dtype: (float, float), (double, double), (float, BFloat16), (float, Half).
template <typename F>
void dispatch(at::ScalarType st, const F& f) {
  switch (st) {
    case at::kFloat: return f(float{}, float{});
    case at::kDouble: return f(double{}, double{});
    case at::kBFloat16: return f(float{}, at::BFloat16{});
    case at::kHalf: return f(float{}, at::Half{});
    default: TORCH_CHECK(false, "native attention: unsupported dtype ", st);
  }
}

at::ScalarType compute_dtype(at::ScalarType st) { return st == at::kDouble ? at::kDouble : at::kFloat; }

std::tuple<at::Tensor, at::Tensor> attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::optional<at::Tensor>& mask, int64_t left,
                                                     int64_t right, double scale, double softcap,
                                                     const std::optional<at::Tensor>& sinks,
                                                     const std::optional<at::Tensor>& alibi,
                                                     const std::optional<at::Tensor>& seg_span,
                                                     const std::optional<at::Tensor>& seg_ids,
                                                     const std::optional<at::Tensor>& blk_kinds,
                                                     const std::optional<at::Tensor>& blk_index,
                                                     const std::optional<at::Tensor>& blk_partial, int64_t block_q,
                                                     int64_t block_k, bool tiles) {
  check_inputs(q, k, v, block_q, block_k);
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(compute_dtype(q.scalar_type())));
  dispatch(q.scalar_type(), [&](auto t, auto in) {
    using T = decltype(t);
    using In = decltype(in);
    auto P = make_problem<T, In>(q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids,
                                 blk_kinds, blk_index, blk_partial, block_q, block_k);
    // K (and bfloat16's V) packed for the tiles (`qk_bf16` / `pv_bf16`, `qk_f32`), read by every query block of a
    // head: a batch of heads at a time (`in_head_batches`)
    bool bf16 = false, f32 = false;
#ifdef SELFATTN_HAS_AVX512_VARIANT
    bf16 = std::is_same_v<In, at::BFloat16> && tiles && softmax_isa().avx512_bf16 && P.Lk > 0 && P.D > 0;
    f32 = std::is_same_v<In, float> && tiles && softmax_isa().avx512 && P.Lk > 0 && P.D > 0;
#else
    (void)tiles;
#endif
    const int64_t head_bytes = bf16 ? (groups_size(P.Lk, P.D) + pairs_size(P.Lk, P.Dv)) * 2
                                    : (f32 ? groups_f32_size(P.Lk, P.D) * 4 : 0);
    in_head_batches(P.B * P.Hkv, head_bytes, [&](int64_t bh0, int64_t bh1) {
      P.bh0 = bh0, P.bh1 = bh1;
#ifdef SELFATTN_HAS_AVX512_VARIANT
      auto krow = [&](int64_t b, int64_t hk, int64_t j) { return P.krow(b, hk, j); };
      Packed<uint16_t> keys, values;
      Packed<float> keys32;
      if constexpr (std::is_same_v<In, at::BFloat16>) {
        if (bf16) {
          auto vrow = [&](int64_t b, int64_t hk, int64_t j) { return P.vrow(b, hk, j); };
          keys = pack_groups(bh0, bh1, P.Hkv, P.Lk, P.D, krow);
          values = pack_pairs(bh0, bh1, P.Hkv, P.Lk, P.Dv, vrow);
          P.kpack = keys.get(), P.kpack_head = keys.per_head;
          P.vpack = values.get(), P.vpack_head = values.per_head;
        }
      } else if constexpr (std::is_same_v<In, float>) {
        if (f32) {
          keys32 = pack_groups_f32(bh0, bh1, P.Hkv, P.Lk, P.D, krow);
          P.kpack = keys32.get(), P.kpack_head = keys32.per_head;
          P.in_place = true;
        }
      }
#endif
      forward_impl<T, In>(P, out.data_ptr<In>(), lse.data_ptr<T>());
    });
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lse,
    const at::Tensor& delta, const std::optional<at::Tensor>& mask, int64_t left, int64_t right, double scale,
    double softcap, const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& alibi,
    const std::optional<at::Tensor>& seg_span, const std::optional<at::Tensor>& seg_ids,
    const std::optional<at::Tensor>& blk_kinds, const std::optional<at::Tensor>& blk_index,
    const std::optional<at::Tensor>& blk_partial, int64_t block_q, int64_t block_k, bool tiles) {
  check_inputs(q, k, v, block_q, block_k);
  TORCH_CHECK(dout.size(3) <= 1 || dout.stride(3) == 1, "native attention: dout's last dim must have stride 1");
  TORCH_CHECK(lse.is_contiguous() && delta.is_contiguous(), "native attention: lse and delta must be contiguous");
  TORCH_CHECK(dout.scalar_type() == q.scalar_type(), "native attention: dout must have q's dtype");
  const at::TensorOptions acc = q.options().dtype(compute_dtype(q.scalar_type()));
  TORCH_CHECK(lse.scalar_type() == acc.dtype() && delta.scalar_type() == acc.dtype(),
              "native attention: lse and delta must be in the compute dtype (float32 for half inputs)");
  at::Tensor dq = at::zeros(q.sizes(), acc);
  at::Tensor dk = at::zeros(k.sizes(), acc);
  at::Tensor dv = at::zeros(v.sizes(), acc);
  const int64_t workers = std::max<int64_t>(1, at::get_num_threads());
  std::vector<at::Tensor> dq_extra(workers);
  const int64_t n_tasks = q.size(0) * k.size(1) * ((k.size(2) + block_k - 1) / block_k);
  for (int64_t w = 1; w < std::min(workers, n_tasks); ++w) dq_extra[w] = at::zeros(q.sizes(), acc);
  dispatch(q.scalar_type(), [&](auto t, auto in) {
    using T = decltype(t);
    using In = decltype(in);
    auto P = make_problem<T, In>(q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids,
                                 blk_kinds, blk_index, blk_partial, block_q, block_k);
    // every product of the backward on VDPBF16PS: K, V (as K is) and K (as V is) per kv head, Q and dO per query
    // head (over the queries) packed for a batch of kv heads at a time (`in_head_batches`)
    // (float32: K and V packed as K is, per kv head; dO, Q and K read where they are)
    bool bf16 = false, f32 = false;
#ifdef SELFATTN_HAS_AVX512_VARIANT
    const bool sized = P.Lk > 0 && P.D > 0 && P.Dv > 0;
    bf16 = std::is_same_v<In, at::BFloat16> && tiles && softmax_isa().avx512_bf16 && sized;
    f32 = std::is_same_v<In, float> && tiles && softmax_isa().avx512 && sized;
#else
    (void)tiles;
#endif
    const int64_t head_bytes =
        bf16 ? (groups_size(P.Lk, P.D) + groups_size(P.Lk, P.Dv) + pairs_size(P.Lk, P.D) +
                P.G * (pairs_size(P.Lq, P.D) + pairs_size(P.Lq, P.Dv))) * 2
             : (f32 ? (groups_f32_size(P.Lk, P.D) + groups_f32_size(P.Lk, P.Dv)) * 4 : 0);
    in_head_batches(P.B * P.Hkv, head_bytes, [&](int64_t bh0, int64_t bh1) {
      P.bh0 = bh0, P.bh1 = bh1;
#ifdef SELFATTN_HAS_AVX512_VARIANT
      Packed<uint16_t> keys, v_groups, k_pairs, queries, grads;
      Packed<float> keys32, v_groups32;
      if constexpr (std::is_same_v<In, float>) {
        if (f32) {
          auto krow = [&](int64_t b, int64_t hk, int64_t j) { return P.krow(b, hk, j); };
          auto vrow = [&](int64_t b, int64_t hk, int64_t j) { return P.vrow(b, hk, j); };
          keys32 = pack_groups_f32(bh0, bh1, P.Hkv, P.Lk, P.D, krow);
          v_groups32 = pack_groups_f32(bh0, bh1, P.Hkv, P.Lk, P.Dv, vrow);
          P.kpack = keys32.get(), P.kpack_head = keys32.per_head;
          P.vgroups = v_groups32.get(), P.vgroups_head = v_groups32.per_head;
          P.in_place = true;
        }
      }
      if constexpr (std::is_same_v<In, at::BFloat16>) {
        if (bf16) {
          auto krow = [&](int64_t b, int64_t hk, int64_t j) { return P.krow(b, hk, j); };
          auto vrow = [&](int64_t b, int64_t hk, int64_t j) { return P.vrow(b, hk, j); };
          keys = pack_groups(bh0, bh1, P.Hkv, P.Lk, P.D, krow);
          v_groups = pack_groups(bh0, bh1, P.Hkv, P.Lk, P.Dv, vrow);   // V as K is, K as V is
          k_pairs = pack_pairs(bh0, bh1, P.Hkv, P.Lk, P.D, krow);
          P.kpack = keys.get(), P.kpack_head = keys.per_head;
          P.vgroups = v_groups.get(), P.vgroups_head = v_groups.per_head;
          P.kpairs = k_pairs.get(), P.kpairs_head = k_pairs.per_head;
          const In* dO = dout.data_ptr<In>();   // Q and dO of the batch's query heads, packed over the queries
          auto qrow = [&](int64_t b, int64_t h, int64_t i) { return P.qrow(b, h, i); };
          auto dorow = [&](int64_t b, int64_t h, int64_t i) {
            return dO + b * dout.stride(0) + h * dout.stride(1) + i * row_stride(dout);
          };
          queries = pack_pairs(bh0 * P.G, bh1 * P.G, P.Hq, P.Lq, P.D, qrow);
          grads = pack_pairs(bh0 * P.G, bh1 * P.G, P.Hq, P.Lq, P.Dv, dorow);
          P.qpairs = queries.get(), P.qpairs_head = queries.per_head;
          P.dopairs = grads.get(), P.dopairs_head = grads.per_head;
        }
      }
#endif
      backward_impl<T, In>(P, dout.data_ptr<In>(), dout.stride(0), dout.stride(1), row_stride(dout),
                           lse.data_ptr<T>(), delta.data_ptr<T>(), dq.data_ptr<T>(), dk.data_ptr<T>(),
                           dv.data_ptr<T>(), dq_extra);
    });
  });
  for (const at::Tensor& extra : dq_extra)
    if (extra.defined()) dq.add_(extra);
  const at::ScalarType st = q.scalar_type();
  return {dq.to(st), dk.to(st), dv.to(st)};
}

}  // namespace

// The softmax's instructions in words: on this CPU, and (for the tests of the rule) on one with the given features.
std::string softmax_path() { return describe(softmax_isa()); }
std::string softmax_path_for(bool avx512f, bool avx512bf16) { return describe(softmax_isa_for(avx512f, avx512bf16)); }

TORCH_LIBRARY(selfattn_native, m) {
  m.def("softmax_path() -> str", &softmax_path);
  m.def("softmax_path_for(bool avx512f, bool avx512bf16) -> str", &softmax_path_for);
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor? mask, int left, int right, float scale, float softcap, "
        "Tensor? sinks, Tensor? alibi, Tensor? seg_span, Tensor? seg_ids, Tensor? blk_kinds, Tensor? blk_index, "
        "Tensor? blk_partial, int block_q, int block_k, bool tiles) -> (Tensor, Tensor)",
        &attention_forward);
  m.def("backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor lse, Tensor delta, Tensor? mask, int left, "
        "int right, float scale, float softcap, Tensor? sinks, Tensor? alibi, Tensor? seg_span, Tensor? seg_ids, "
        "Tensor? blk_kinds, Tensor? blk_index, Tensor? blk_partial, int block_q, int block_k, bool tiles) "
        "-> (Tensor, Tensor, Tensor)",
        &attention_backward);
}
