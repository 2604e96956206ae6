// Which instructions the softmax and P's rounding run in: the one rule, applied to this CPU's cpuid once.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "base.h"

namespace {

// Which instructions the float softmax and P's rounding run in, for a CPU with these features: the one rule,
// which `softmax_isa()` applies to this CPU's cpuid (and the tests to faked features).
struct SoftmaxIsa {
  bool avx512;       // exp in 16 AVX512 lanes
  bool avx512_bf16;  // P rounded to bfloat16 with AVX512-BF16
};

SoftmaxIsa softmax_isa_for(bool avx512f, bool avx512bf16) {
#ifdef SELFATTN_HAS_AVX512_VARIANT
  return {avx512f, avx512f && avx512bf16};
#else
  (void)avx512f, (void)avx512bf16;
  return {false, false};
#endif
}

const SoftmaxIsa& softmax_isa() {   // this CPU's, asked once
  static const SoftmaxIsa isa = [] {
#ifdef SELFATTN_HAS_AVX512_VARIANT
    __builtin_cpu_init();
    return softmax_isa_for(__builtin_cpu_supports("avx512f"), __builtin_cpu_supports("avx512bf16"));
#else
    return softmax_isa_for(false, false);
#endif
  }();
  return isa;
}

std::string describe(const SoftmaxIsa& isa) {
#if defined(__AVX2__) && defined(__FMA__)
  std::string text = isa.avx512 ? "AVX512 (16 float32 lanes)" : "AVX2 (8 float32 lanes)";
#else
  std::string text = isa.avx512 ? "AVX512 (16 float32 lanes)" : "scalar code (no AVX2)";
#endif
  return isa.avx512_bf16 ? text + ", P rounded to bfloat16 with AVX512-BF16" : text;
}

}  // namespace
