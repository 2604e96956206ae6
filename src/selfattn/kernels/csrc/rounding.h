// P (or dS) rounded to the GEMM's operand dtype: with AVX512-BF16 where cpuid has it, else as c10 rounds.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "isa.h"

namespace {

#ifdef SELFATTN_HAS_AVX512_VARIANT
// P (float32) rounded to bfloat16 two vectors at a time with AVX512-BF16 (round to nearest even, as
// c10::BFloat16), run only where the CPU has it; the tail as c10 does it.
__attribute__((target("avx512f,avx512bf16"))) void round_bf16_avx512(const float* x, at::BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh two = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(reinterpret_cast<void*>(out + i), (__m512i)two);
  }
  for (; i < n; ++i) out[i] = static_cast<at::BFloat16>(x[i]);
}
#endif

// x (n values of T) as the GEMM operand type In: x itself when they are the same, else rounded into buf
template <typename In, typename T>
const In* as_operand(const T* x, In* buf, int64_t n) {
  if constexpr (std::is_same_v<T, In>) {
    return x;
  } else {
#ifdef SELFATTN_HAS_AVX512_VARIANT
    if constexpr (std::is_same_v<T, float> && std::is_same_v<In, at::BFloat16>) {
      if (softmax_isa().avx512_bf16) {
        round_bf16_avx512(x, buf, n);
        return buf;
      }
    }
#endif
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<In>(x[i]);
    return buf;
  }
}

}  // namespace
