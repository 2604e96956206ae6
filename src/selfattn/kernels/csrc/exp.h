// The softmax's exp: x[i] = exp(x[i] - sub), written once for any vector width, and which width runs.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).
//
// x[i] = exp(x[i] - sub) for i in [0, n), exp(-inf) = 0; returns their sum. Float: a range reduction and a degree-7
// polynomial (relative error ~1e-7), `exp_sub_lanes` over the vector lanes of `Lanes` — 8 with AVX2, 16 with AVX512
// where cpuid has AVX512F — the scalar loop doing the tail and the CPUs without AVX2 (GCC does not vectorise it: the
// NaN test keeps it scalar); double: SLEEF's AVX2 exp (as PyTorch's SDPA uses), else std::exp.

#pragma once

#include "isa.h"

extern "C" {
#if defined(__AVX2__) && defined(__FMA__)
// SLEEF's four-lane double exp (1 ulp, exp(-inf) = 0, NaN stays NaN), which libtorch_cpu carries for its own
// vectorised exp. Weak: if absent, std::exp.
__m256d Sleef_expd4_u10avx2(__m256d) __attribute__((weak));
#endif
}

namespace {

constexpr float EXP_LOG2E = 1.4426950408889634f, EXP_LN2 = 0.6931471805599453f;
constexpr float EXP_C2 = EXP_LN2 * EXP_LN2 / 2, EXP_C3 = EXP_C2 * EXP_LN2 / 3, EXP_C4 = EXP_C3 * EXP_LN2 / 4,
                EXP_C5 = EXP_C4 * EXP_LN2 / 5, EXP_C6 = EXP_C5 * EXP_LN2 / 6, EXP_C7 = EXP_C6 * EXP_LN2 / 7;
constexpr float EXP_MAGIC = 12582912.0f;   // 1.5 · 2^23: adding it rounds to an integer
constexpr float EXP_FLOOR = -125.0f;       // below 2^-125 the result is taken as 0
constexpr int32_t EXP_MAGIC_BITS = 0x4B400000;   // EXP_MAGIC's bits: r's bits less these are the integer it holds

inline float exp_sub_scalar(float* x, int64_t n, float sub) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float y = (x[i] - sub) * EXP_LOG2E;
    const bool nan = y != y;            // a NaN score stays NaN (as in every backend): never weight 0
    const bool zero = y < EXP_FLOOR;    // also -inf
    y = (zero || nan) ? EXP_FLOOR : y;
    const float r = y + EXP_MAGIC;
    int32_t ni;
    std::memcpy(&ni, &r, 4);
    ni -= EXP_MAGIC_BITS;
    const float f = y - (r - EXP_MAGIC);    // [-0.5, 0.5]
    float p = 1.0f + f * (EXP_LN2 + f * (EXP_C2 + f * (EXP_C3 + f * (EXP_C4 + f * (EXP_C5 + f * (EXP_C6 + f * EXP_C7))))));
    int32_t bits;
    std::memcpy(&bits, &p, 4);
    bits += ni * (1 << 23);
    std::memcpy(&p, &bits, 4);
    x[i] = nan ? x[i] - sub : (zero ? 0.0f : p);
    sum += x[i];
  }
  return sum;
}

// -Wpsabi: the AVX512 instantiation, were it compiled on its own (it never is: `flatten` inlines it), would pass
// __m512 values between functions of two targets; GCC warns of that ABI change in a build without -mavx512f.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

// The exp over the lanes of `Lanes` (`Avx2Lanes`, `Avx512Lanes`): vectors F of WIDTH float32, their 32-bit integer
// twins I, lane masks M, and the few operations below. Each lane computes exactly what exp_sub_scalar computes; the
// lanes' sums are added as `Lanes::sum` says, then the tail's. Reached only through an entry compiled for the lanes'
// instructions with `flatten` (`exp_sub_avx2`, `exp_sub_avx512`), which inlines every operation into it: this body
// has no target of its own, so that one copy serves every width.
template <typename Lanes>
inline float exp_sub_lanes(float* x, int64_t n, float sub) {
  using F = typename Lanes::F;
  using I = typename Lanes::I;
  const F vsub = Lanes::set1(sub), log2e = Lanes::set1(EXP_LOG2E), floor = Lanes::set1(EXP_FLOOR);
  const F magic = Lanes::set1(EXP_MAGIC), one = Lanes::set1(1.0f), zero = Lanes::zero();
  const I bias = Lanes::set1_int(EXP_MAGIC_BITS);
  F acc = zero;
  int64_t i = 0;
  for (; i + Lanes::WIDTH <= n; i += Lanes::WIDTH) {
    const F d = Lanes::sub(Lanes::load(x + i), vsub);
    const F y = Lanes::mul(d, log2e);
    const auto nan = Lanes::unordered(y, y);
    const auto tiny = Lanes::less(y, floor);      // also -inf
    const F yc = Lanes::max(y, floor);            // a NaN lane becomes the floor (second operand)
    const F r = Lanes::add(yc, magic);
    const I ni = Lanes::sub_int(Lanes::bits(r), bias);
    const F f = Lanes::sub(yc, Lanes::sub(r, magic));
    F p = Lanes::fmadd(f, Lanes::set1(EXP_C7), Lanes::set1(EXP_C6));
    p = Lanes::fmadd(f, p, Lanes::set1(EXP_C5));
    p = Lanes::fmadd(f, p, Lanes::set1(EXP_C4));
    p = Lanes::fmadd(f, p, Lanes::set1(EXP_C3));
    p = Lanes::fmadd(f, p, Lanes::set1(EXP_C2));
    p = Lanes::fmadd(f, p, Lanes::set1(EXP_LN2));
    p = Lanes::fmadd(f, p, one);
    p = Lanes::times_two_to(p, ni);
    p = Lanes::select(tiny, zero, p);
    p = Lanes::select(nan, d, p);
    Lanes::store(x + i, p);
    acc = Lanes::add(acc, p);
  }
  return Lanes::sum(acc) + exp_sub_scalar(x + i, n - i, sub);
}

#if defined(__AVX2__) && defined(__FMA__)
// 8 AVX2 lanes; a mask is a vector of all-ones / all-zeros lanes.
struct Avx2Lanes {
  static constexpr int64_t WIDTH = 8;
  using F = __m256;
  using I = __m256i;
  static F set1(float v) { return _mm256_set1_ps(v); }
  static I set1_int(int32_t v) { return _mm256_set1_epi32(v); }
  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* x, F v) { _mm256_storeu_ps(x, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F unordered(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
  static F less(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static F select(F mask, F yes, F no) { return _mm256_blendv_ps(no, yes, mask); }
  static I bits(F v) { return _mm256_castps_si256(v); }
  static I sub_int(I a, I b) { return _mm256_sub_epi32(a, b); }
  // p · 2^e: e added to p's exponent bits
  static F times_two_to(F p, I e) {
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(e, 23)));
  }
  static float sum(F acc) {   // lane by lane, in order
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float s = 0.0f;
    for (float lane : lanes) s += lane;
    return s;
  }
};
#endif

#ifdef SELFATTN_HAS_AVX512_VARIANT
// 16 AVX512 lanes; a mask is a __mmask16. Compiled for AVX512F whatever the build's flags; run only where cpuid has
// it (`softmax_isa`).
struct Avx512Lanes {
  static constexpr int64_t WIDTH = 16;
  using F = __m512;
  using I = __m512i;
  __attribute__((target("avx512f"))) static F set1(float v) { return _mm512_set1_ps(v); }
  __attribute__((target("avx512f"))) static I set1_int(int32_t v) { return _mm512_set1_epi32(v); }
  __attribute__((target("avx512f"))) static F zero() { return _mm512_setzero_ps(); }
  __attribute__((target("avx512f"))) static F load(const float* x) { return _mm512_loadu_ps(x); }
  __attribute__((target("avx512f"))) static void store(float* x, F v) { _mm512_storeu_ps(x, v); }
  __attribute__((target("avx512f"))) static F add(F a, F b) { return _mm512_add_ps(a, b); }
  __attribute__((target("avx512f"))) static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  __attribute__((target("avx512f"))) static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  __attribute__((target("avx512f"))) static F max(F a, F b) { return _mm512_max_ps(a, b); }
  __attribute__((target("avx512f"))) static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  __attribute__((target("avx512f"))) static __mmask16 unordered(F a, F b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
  }
  __attribute__((target("avx512f"))) static __mmask16 less(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  __attribute__((target("avx512f"))) static F select(__mmask16 mask, F yes, F no) {
    return _mm512_mask_mov_ps(no, mask, yes);
  }
  __attribute__((target("avx512f"))) static I bits(F v) { return _mm512_castps_si512(v); }
  __attribute__((target("avx512f"))) static I sub_int(I a, I b) { return _mm512_sub_epi32(a, b); }
  __attribute__((target("avx512f"))) static F times_two_to(F p, I e) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(e, 23)));
  }
  __attribute__((target("avx512f"))) static float sum(F acc) { return _mm512_reduce_add_ps(acc); }
};
#endif

#pragma GCC diagnostic pop

// The exp in 8 AVX2 lanes (the scalar loop alone without AVX2).
__attribute__((flatten)) inline float exp_sub_avx2(float* x, int64_t n, float sub) {
#if defined(__AVX2__) && defined(__FMA__)
  return exp_sub_lanes<Avx2Lanes>(x, n, sub);
#else
  return exp_sub_scalar(x, n, sub);
#endif
}

#ifdef SELFATTN_HAS_AVX512_VARIANT
// The exp in 16 AVX512 lanes: runs only where the CPU has AVX512F (`softmax_isa`).
__attribute__((target("avx512f"), flatten)) float exp_sub_avx512(float* x, int64_t n, float sub) {
  return exp_sub_lanes<Avx512Lanes>(x, n, sub);
}
#endif

inline float exp_sub(float* x, int64_t n, float sub) {
#ifdef SELFATTN_HAS_AVX512_VARIANT
  if (softmax_isa().avx512) return exp_sub_avx512(x, n, sub);
#endif
  return exp_sub_avx2(x, n, sub);
}

inline double exp_sub(double* x, int64_t n, double sub) {
  int64_t i = 0;
  double sum = 0.0;
#if defined(__AVX2__) && defined(__FMA__)
  if (Sleef_expd4_u10avx2) {
    const __m256d vsub = _mm256_set1_pd(sub);
    __m256d acc = _mm256_setzero_pd();
    for (; i + 4 <= n; i += 4) {
      const __m256d p = Sleef_expd4_u10avx2(_mm256_sub_pd(_mm256_loadu_pd(x + i), vsub));
      _mm256_storeu_pd(x + i, p);
      acc = _mm256_add_pd(acc, p);
    }
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, acc);
    for (double lane : lanes) sum += lane;
  }
#endif
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - sub));
  return sum;
}

}  // namespace
