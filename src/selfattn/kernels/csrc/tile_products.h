// Each product on the kernel's tiles where the call packed its operand for them; false: the caller's GEMM.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "rounding.h"
#include "tiles_bf16.h"
#include "tiles_f32.h"

namespace {

// S (M × (k1 − k0)) = alpha · A Bᵀ on `packed`, B's rows [k0, k1) packed as qk_bf16 reads them (Q·Kᵀ, dO·Vᵀ), where
// it is not null (bfloat16 on AVX512-BF16); false: the caller runs its GEMM.
template <typename T, typename In, typename E>
bool dots_packed(const In* A, int64_t lda, int64_t M, int64_t D, const E* packed, int64_t k0, int64_t k1, T alpha,
                 T* S) {
#ifdef SELFATTN_HAS_AVX512_VARIANT
  if constexpr (std::is_same_v<In, at::BFloat16>) {
    if (packed) {
      qk_bf16(M, A, lda, D, packed, k0, k1, alpha, S);
      return true;
    }
  } else if constexpr (std::is_same_v<In, float> && std::is_same_v<E, float>) {
    if (packed) {
      qk_f32(M, A, lda, D, packed, k0, k1, alpha, S);
      return true;
    }
  }
#endif
  (void)A, (void)lda, (void)M, (void)D, (void)packed, (void)k0, (void)k1, (void)alpha, (void)S;
  return false;
}

// C (M × N, stride ldc) += alpha · p B over B's rows [k0, k1) (p's M rows, k1 − k0 apart) on the kernel's tiles:
// bfloat16's B packed as pv_bf16 reads it (`packed`: P·V, dS·K), float32's read where it is (`rows`, B's row k0,
// stride ldr: P·V); false where neither is given: the caller runs its GEMM.
template <typename T, typename In>
bool sums_on_tiles(const In* p, int64_t M, const uint16_t* packed, const In* rows, int64_t ldr, int64_t k0, int64_t k1,
                   int64_t N, T* C, int64_t ldc, T alpha) {
#ifdef SELFATTN_HAS_AVX512_VARIANT
  if constexpr (std::is_same_v<In, at::BFloat16>) {
    if (packed) {
      pv_bf16(M, p, PairLayout::rows(k0, k1), k0, k1, packed, N, C, ldc, alpha);
      return true;
    }
  } else if constexpr (std::is_same_v<In, float> && std::is_same_v<T, float>) {
    if (rows) {
      pv_f32(M, p, k1 - k0, 1, k1 - k0, rows, ldr, N, C, ldc, alpha);
      return true;
    }
  }
#endif
  (void)p, (void)M, (void)packed, (void)rows, (void)ldr, (void)k0, (void)k1, (void)N, (void)C, (void)ldc, (void)alpha;
  return false;
}

// C (M × N, stride ldc) += alpha · xᵀ B, x's rows [k0, k1) of M floats (P or dS of a backward tile: dV += Pᵀ dO,
// dK += s dSᵀ Q) on the kernel's tiles: for bfloat16, x rounded into `scratch` ((k1 − k0 + 2) · M values) transposed
// in pairs of rows (`round_pairs_bf16`) and B's rows [k0, k1) packed as pv_bf16 reads them (`packed`); for float32,
// x read transposed where it is and B's row k0 on from `rows` (stride ldr) in place; false where neither is given:
// the caller runs its GEMM.
template <typename T, typename In>
bool transposed_sums_on_tiles(const T* x, int64_t M, In* scratch, const uint16_t* packed, const In* rows, int64_t ldr,
                              int64_t k0, int64_t k1, int64_t N, T* C, int64_t ldc, T alpha) {
#ifdef SELFATTN_HAS_AVX512_VARIANT
  if constexpr (std::is_same_v<In, at::BFloat16>) {
    if (packed) {
      round_pairs_bf16(x, M, k0, k1, M, reinterpret_cast<uint16_t*>(scratch));
      pv_bf16(M, scratch, PairLayout::pairs(M, k0), k0, k1, packed, N, C, ldc, alpha);
      return true;
    }
  } else if constexpr (std::is_same_v<In, float> && std::is_same_v<T, float>) {
    if (rows) {
      pv_f32(M, x, 1, M, k1 - k0, rows, ldr, N, C, ldc, alpha);
      return true;
    }
  }
#endif
  (void)x, (void)M, (void)scratch, (void)packed, (void)rows, (void)ldr, (void)k0, (void)k1, (void)N, (void)C, (void)ldc,
      (void)alpha;
  return false;
}

}  // namespace
