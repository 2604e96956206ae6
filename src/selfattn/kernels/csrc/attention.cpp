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
// rule or the segments (packed sequences) hide are never read; inside a visited block each row only
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

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

extern "C" {
// The Fortran BLAS of the library PyTorch links (MKL on x86). Weak: if absent, a loop GEMM is used.
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*,
            const double*, const int*, const double*, double*, const int*) __attribute__((weak));
// MKL's per-thread thread count (Fortran interface: by pointer): 1 inside a worker, or MKL starts its
// own threads in every worker (torch.set_num_threads sets MKL's count too) and the cores are oversubscribed.
int mkl_set_num_threads_local_(const int*) __attribute__((weak));
#if defined(__AVX2__) && defined(__FMA__)
// SLEEF's four-lane double exp (1 ulp, exp(-inf) = 0, NaN stays NaN), which libtorch_cpu carries for its own
// vectorised exp. Weak: if absent, std::exp.
__m256d Sleef_expd4_u10avx2(__m256d) __attribute__((weak));
#endif
// MKL's half GEMMs (CBLAS, row major here): half operands, float32 accumulation and result.
void cblas_gemm_bf16bf16f32(int layout, int transa, int transb, int m, int n, int k, float alpha, const uint16_t* a,
                            int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) __attribute__((weak));
void cblas_gemm_f16f16f32(int layout, int transa, int transb, int m, int n, int k, float alpha, const uint16_t* a,
                          int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) __attribute__((weak));
}

namespace {

constexpr double NEG_INF = -std::numeric_limits<double>::infinity();

// Row-major C (M×N) = alpha · op(A) (M×K) · op(B) (K×N) + beta · C, operands In, sums in T.
template <typename T, typename In>
void loop_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const In* A, int64_t lda, const In* B,
               int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        T a = static_cast<T>(ta ? A[k * lda + i] : A[i * lda + k]);
        T b = static_cast<T>(tb ? B[j * ldb + k] : B[k * ldb + j]);
        sum += a * b;
      }
      C[i * ldc + j] = alpha * sum + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
    }
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// A few query rows (decoding: one new token, or a GQA group of them) make BLAS's GEMM a matrix-vector product
// that packs its operands for nothing: one query over 16,384 keys took 1.7× the time of reading K and V once (and
// MKL's bfloat16 GEMM, or packing K and V for the bfloat16 tiles, more still). These loops read each K and V row
// once per block of KEY_BLOCK keys, kept in L1 across the rows, float32 or bfloat16 (widened in registers: a
// bfloat16 is a float32's high half, so the products are exact and summed in float32, as the half GEMMs do).
constexpr int64_t FEW_ROWS = 8;    // native.py's FEW_ROWS: at most this many rows of A take the loops below
constexpr int64_t KEY_BLOCK = 64;  // keys per block: 16 KB of a 64-wide K or V

// Rows this far ahead of the one read are asked of memory (one prefetch per cache line of the row): a decoding
// step streams K and V from DRAM, and without it the loops waited on every load (one step over 16,384 keys,
// float32: 0.92× SDPA's time at 16 rows ahead, 0.86× at 32, 0.90× at 64, 1.00–1.05× without).
constexpr int64_t PREFETCH_ROWS = 32;
template <typename In>
inline void prefetch_row(const In* row, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t d = 0; d < n * static_cast<int64_t>(sizeof(In)); d += 64) _mm_prefetch(bytes + d, _MM_HINT_T0);
}

// Eight values from x as float32 lanes.
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const at::BFloat16* x) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// The sum of the eight lanes.
inline float lanes_sum(__m256 x) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// C (M×N) = alpha · A (M×K) · Bᵀ, B's N rows of K (the scores of M ≤ FEW_ROWS query rows against N keys):
// four keys at a time, their four sums reduced together.
template <typename In>
void few_rows_abt(int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda, const In* B, int64_t ldb,
                  float* C, int64_t ldc) {
  const int64_t K8 = K / 8 * 8;
  for (int64_t j0 = 0; j0 < N; j0 += KEY_BLOCK) {
    const int64_t j1 = std::min(N, j0 + KEY_BLOCK);
    for (int64_t i = 0; i < M; ++i) {
      const In* a = A + i * lda;
      float* c = C + i * ldc;
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        const In* b[4] = {B + j * ldb, B + (j + 1) * ldb, B + (j + 2) * ldb, B + (j + 3) * ldb};
        if (i == 0 && j + PREFETCH_ROWS + 4 <= N)
          for (int t = 0; t < 4; ++t) prefetch_row(B + (j + PREFETCH_ROWS + t) * ldb, K);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int64_t d = 0; d < K8; d += 8) {
          const __m256 x = load8(a + d);
          s0 = _mm256_fmadd_ps(x, load8(b[0] + d), s0);
          s1 = _mm256_fmadd_ps(x, load8(b[1] + d), s1);
          s2 = _mm256_fmadd_ps(x, load8(b[2] + d), s2);
          s3 = _mm256_fmadd_ps(x, load8(b[3] + d), s3);
        }
        // hadd twice: lanes 0–3 hold s0..s3's low halves, 4–7 their high halves
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
        float sums[4];
        _mm_storeu_ps(sums, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
        for (int t = 0; t < 4; ++t) {
          for (int64_t d = K8; d < K; ++d) sums[t] += static_cast<float>(a[d]) * static_cast<float>(b[t][d]);
          c[j + t] = alpha * sums[t];
        }
      }
      for (; j < j1; ++j) {
        const In* bj = B + j * ldb;
        __m256 s = _mm256_setzero_ps();
        for (int64_t d = 0; d < K8; d += 8) s = _mm256_fmadd_ps(load8(a + d), load8(bj + d), s);
        float sum = lanes_sum(s);
        for (int64_t d = K8; d < K; ++d) sum += static_cast<float>(a[d]) * static_cast<float>(bj[d]);
        c[j] = alpha * sum;
      }
    }
  }
}

// C (M×N) = alpha · A (M×K) · B (K×N) + beta · C, M ≤ FEW_ROWS (a few rows of P times V's K rows of N):
// 64 columns of a row in eight registers over a block of keys (V's rows read in order, one pass where Dv ≤ 64; with
// 32 columns, V's rows were read half by half and a decoding step took 1.2× as long), then 8, then one at a time.
template <typename In>
void few_rows_ab(int64_t M, int64_t N, int64_t K, float alpha, const In* A, int64_t lda, const In* B, int64_t ldb,
                 float beta, float* C, int64_t ldc) {
  if (beta != 1.0f)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t n = 0; n < N; ++n) C[i * ldc + n] = beta == 0.0f ? 0.0f : beta * C[i * ldc + n];
  for (int64_t k0 = 0; k0 < K; k0 += KEY_BLOCK) {
    const int64_t k1 = std::min(K, k0 + KEY_BLOCK);
    for (int64_t i = 0; i < M; ++i) {
      const In* a = A + i * lda;
      float* c = C + i * ldc;
      int64_t n = 0;
      for (; n + 64 <= N; n += 64) {
        __m256 acc[8];
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_loadu_ps(c + n + 8 * t);
        for (int64_t k = k0; k < k1; ++k) {
          if (i == 0 && n == 0 && k + PREFETCH_ROWS < K) prefetch_row(B + (k + PREFETCH_ROWS) * ldb, N);
          const __m256 p = _mm256_set1_ps(alpha * static_cast<float>(a[k]));
          const In* bk = B + k * ldb + n;
          for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(p, load8(bk + 8 * t), acc[t]);
        }
        for (int t = 0; t < 8; ++t) _mm256_storeu_ps(c + n + 8 * t, acc[t]);
      }
      for (; n + 8 <= N; n += 8) {
        __m256 c0 = _mm256_loadu_ps(c + n);
        for (int64_t k = k0; k < k1; ++k) {
          if (i == 0 && n == 0 && k + PREFETCH_ROWS < K) prefetch_row(B + (k + PREFETCH_ROWS) * ldb, N);
          c0 = _mm256_fmadd_ps(_mm256_set1_ps(alpha * static_cast<float>(a[k])), load8(B + k * ldb + n), c0);
        }
        _mm256_storeu_ps(c + n, c0);
      }
      for (; n < N; ++n)
        for (int64_t k = k0; k < k1; ++k) c[n] += alpha * static_cast<float>(a[k]) * static_cast<float>(B[k * ldb + n]);
    }
  }
}
#endif

template <typename T, typename In>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const In* A, int64_t lda, const In* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  if constexpr (!std::is_same_v<T, In>) {   // half operands, float32 C: MKL's CBLAS half GEMM, row major
    static_assert(std::is_same_v<T, float>, "half GEMMs accumulate in float32");
#if defined(__AVX2__) && defined(__FMA__)
    if constexpr (std::is_same_v<In, at::BFloat16>) {
      if (!ta && M <= FEW_ROWS && (!tb || beta == 0.0f))   // a few query rows: no packing (few_rows_abt / _ab)
        return tb ? few_rows_abt(M, N, K, alpha, A, lda, B, ldb, C, ldc)
                  : few_rows_ab(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
#endif
    const auto gemm_half = std::is_same_v<In, at::BFloat16> ? cblas_gemm_bf16bf16f32 : cblas_gemm_f16f16f32;
    if (gemm_half) {
      constexpr int ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112;
      return gemm_half(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, static_cast<int>(M),
                       static_cast<int>(N), static_cast<int>(K), alpha, reinterpret_cast<const uint16_t*>(A),
                       static_cast<int>(lda), reinterpret_cast<const uint16_t*>(B), static_cast<int>(ldb), beta, C,
                       static_cast<int>(ldc));
    }
    return loop_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
  // column-major BLAS computes Cᵀ = op(B)ᵀ op(A)ᵀ
  const char opa = tb ? 'T' : 'N', opb = ta ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  if constexpr (std::is_same_v<T, float>) {
#if defined(__AVX2__) && defined(__FMA__)
    if (!ta && M <= FEW_ROWS && (!tb || beta == 0.0f))   // a few query rows: no packing (few_rows_abt / _ab)
      return tb ? few_rows_abt(M, N, K, alpha, A, lda, B, ldb, C, ldc)
                : few_rows_ab(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
    if (sgemm_) return sgemm_(&opa, &opb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  } else {
    if (dgemm_) return dgemm_(&opa, &opb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  }
  loop_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

// x[i] = exp(x[i] - sub) for i in [0, n), exp(-inf) = 0; returns their sum. Float: a range reduction
// and a degree-7 polynomial (relative error ~1e-7), eight lanes at a time with AVX2 (the scalar loop
// does the tail and the CPUs without AVX2; GCC does not vectorise it: the NaN test keeps it scalar);
// double: SLEEF's AVX2 exp (as PyTorch's SDPA uses), else std::exp.
constexpr float EXP_LOG2E = 1.4426950408889634f, EXP_LN2 = 0.6931471805599453f;
constexpr float EXP_C2 = EXP_LN2 * EXP_LN2 / 2, EXP_C3 = EXP_C2 * EXP_LN2 / 3, EXP_C4 = EXP_C3 * EXP_LN2 / 4,
                EXP_C5 = EXP_C4 * EXP_LN2 / 5, EXP_C6 = EXP_C5 * EXP_LN2 / 6, EXP_C7 = EXP_C6 * EXP_LN2 / 7;
constexpr float EXP_MAGIC = 12582912.0f;   // 1.5 · 2^23: adding it rounds to an integer
constexpr float EXP_FLOOR = -125.0f;       // below 2^-125 the result is taken as 0

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
    ni -= 0x4B400000;
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

inline float exp_sub_avx2(float* x, int64_t n, float sub) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 vsub = _mm256_set1_ps(sub), log2e = _mm256_set1_ps(EXP_LOG2E), floor = _mm256_set1_ps(EXP_FLOOR);
  const __m256 magic = _mm256_set1_ps(EXP_MAGIC), one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi32(0x4B400000);
  __m256 acc = zero;
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vsub);
    const __m256 y = _mm256_mul_ps(d, log2e);
    const __m256 nan = _mm256_cmp_ps(y, y, _CMP_UNORD_Q);
    const __m256 tiny = _mm256_cmp_ps(y, floor, _CMP_LT_OQ);   // also -inf
    const __m256 yc = _mm256_max_ps(y, floor);                 // a NaN lane becomes the floor (second operand)
    const __m256 r = _mm256_add_ps(yc, magic);
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(r), bias);
    const __m256 f = _mm256_sub_ps(yc, _mm256_sub_ps(r, magic));
    __m256 p = _mm256_fmadd_ps(f, _mm256_set1_ps(EXP_C7), _mm256_set1_ps(EXP_C6));
    p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(EXP_C5));
    p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(EXP_C4));
    p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(EXP_C3));
    p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(EXP_C2));
    p = _mm256_fmadd_ps(f, p, _mm256_set1_ps(EXP_LN2));
    p = _mm256_fmadd_ps(f, p, one);
    p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(ni, 23)));
    p = _mm256_blendv_ps(p, zero, tiny);
    p = _mm256_blendv_ps(p, d, nan);
    _mm256_storeu_ps(x + i, p);
    acc = _mm256_add_ps(acc, p);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float lane : lanes) sum += lane;
#endif
  return sum + exp_sub_scalar(x + i, n - i, sub);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SELFATTN_HAS_AVX512_VARIANT 1
// The same exp in 16 AVX512 lanes, compiled for that target whatever the build's flags (function-level target):
// it runs only where the CPU has AVX512F (`softmax_isa`, chosen on cpuid at run time), never elsewhere.
__attribute__((target("avx512f"))) float exp_sub_avx512(float* x, int64_t n, float sub) {
  const __m512 vsub = _mm512_set1_ps(sub), log2e = _mm512_set1_ps(EXP_LOG2E), floor = _mm512_set1_ps(EXP_FLOOR);
  const __m512 magic = _mm512_set1_ps(EXP_MAGIC), one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512i bias = _mm512_set1_epi32(0x4B400000);
  __m512 acc = zero;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vsub);
    const __m512 y = _mm512_mul_ps(d, log2e);
    const __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
    const __mmask16 tiny = _mm512_cmp_ps_mask(y, floor, _CMP_LT_OQ);   // also -inf
    const __m512 yc = _mm512_max_ps(y, floor);                         // a NaN lane becomes the floor
    const __m512 r = _mm512_add_ps(yc, magic);
    const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(r), bias);
    const __m512 f = _mm512_sub_ps(yc, _mm512_sub_ps(r, magic));
    __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(EXP_C7), _mm512_set1_ps(EXP_C6));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(EXP_C5));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(EXP_C4));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(EXP_C3));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(EXP_C2));
    p = _mm512_fmadd_ps(f, p, _mm512_set1_ps(EXP_LN2));
    p = _mm512_fmadd_ps(f, p, one);
    p = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(ni, 23)));
    p = _mm512_mask_mov_ps(p, tiny, zero);
    p = _mm512_mask_mov_ps(p, nan, d);
    _mm512_storeu_ps(x + i, p);
    acc = _mm512_add_ps(acc, p);
  }
  return _mm512_reduce_add_ps(acc) + exp_sub_scalar(x + i, n - i, sub);
}

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

// --- bfloat16 tiles on VDPBF16PS --------------------------------------------------------------------------
// MKL's gemm_bf16bf16f32 packs both operands on every call: on the attention's tiles (128 × 512 × 64, one
// core) it ran at ~90 GFLOP/s on an AVX512-BF16 EPYC, no faster than float32's sgemm (~96), against the
// ~220 its bfloat16 peak allows. Here K and V are packed once per forward call, in the pairs VDPBF16PS reads
// (`pack_groups`, `pack_pairs`), and Q·Kᵀ and P·V run on them in registers:
//   K  groups of 16 keys; per pair of dims p, one vector holding (k[j][2p], k[j][2p+1]) for the group's 16 keys
//   V  pairs of keys (2t, 2t + 1); per 16 dims, one vector holding (v[2t][d], v[2t+1][d]) for those 16 dims
// zeros past Lk, D and Dv. A query's pair (q[2p], q[2p+1]) — or a row of P's (p[2t], p[2t+1]) — is broadcast
// to the 16 lanes; each VDPBF16PS adds both products into float32 lanes, as the GEMM's float32 accumulation.
constexpr int64_t LANES = 16;   // float32 lanes of an AVX512 vector: keys per packed K group, dims per packed V vector

// S[r][j − k0] = alpha · acc[r][c]'s lane j − 16 (g0 + c), for the keys j of the groups [g0, g0 + NG) that lie in
// [k0, k1): the columns of keys outside the tile are never written.
template <int R, int NG>
__attribute__((target("avx512f"), always_inline)) inline void store_scores(const __m512 (&acc)[R][NG], int64_t g0,
                                                                          int64_t k0, int64_t k1, float alpha,
                                                                          float* S, int64_t lds) {
  const __m512 a = _mm512_set1_ps(alpha);
  for (int c = 0; c < NG; ++c) {
    const int64_t j0 = (g0 + c) * LANES, lo = std::max(j0, k0), hi = std::min(j0 + LANES, k1);
    if (lo >= hi) continue;
    const __mmask16 run = static_cast<__mmask16>((1u << (hi - lo)) - 1);
    const __mmask16 keep = static_cast<__mmask16>(run << (lo - j0));
    for (int r = 0; r < R; ++r) {   // the kept lanes moved down to the tile's first column, lo − k0
      const __m512 v = _mm512_mul_ps(acc[r][c], a);
      if (keep == 0xFFFF) _mm512_storeu_ps(S + r * lds + (lo - k0), v);
      else _mm512_mask_storeu_ps(S + r * lds + (lo - k0), run, _mm512_maskz_compress_ps(keep, v));
    }
  }
}

// acc[r][c] += the products of dims (2p, 2p + 1) of query row r and key group g0 + c: the query's pair broadcast from
// memory where both dims are in the row (a load, no shuffle on the vector ports), or the last dim alone (`whole`
// false: D odd).
template <int R, int NG>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void qk_pair(__m512 (&acc)[R][NG],
                                                                                const uint16_t* A, int64_t lda,
                                                                                const uint16_t* Kp, int64_t D2,
                                                                                int64_t g0, int64_t p, bool whole) {
  __m512bh kv[NG];
  for (int c = 0; c < NG; ++c) kv[c] = (__m512bh)_mm512_loadu_si512(Kp + ((g0 + c) * D2 + p) * 2 * LANES);
  for (int r = 0; r < R; ++r) {
    int32_t pair = A[r * lda + 2 * p];
    if (whole) std::memcpy(&pair, A + r * lda + 2 * p, sizeof pair);
    const __m512bh qp = (__m512bh)_mm512_set1_epi32(pair);
    for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qp, kv[c]);
  }
}

// S rows [0, R) × keys [k0, k1): S[r][j − k0] = alpha · q_r · k_j, for the key groups [g0, g0 + NG) (`Kp`: one
// (b, kv head)'s packed K, `D2` dim pairs); only the columns in [k0, k1) are written.
template <int R, int NG>
__attribute__((target("avx512f,avx512bf16"))) void qk_groups(const uint16_t* A, int64_t lda, int64_t D,
                                                             const uint16_t* Kp, int64_t D2, int64_t g0, int64_t k0,
                                                             int64_t k1, float alpha, float* S, int64_t lds) {
  __m512 acc[R][NG];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t p = 0; p < D / 2; ++p) qk_pair<R, NG>(acc, A, lda, Kp, D2, g0, p, true);
  if (D % 2) qk_pair<R, NG>(acc, A, lda, Kp, D2, g0, D / 2, false);
  store_scores<R, NG>(acc, g0, k0, k1, alpha, S, lds);
}

template <int R>
void qk_rows(const uint16_t* A, int64_t lda, int64_t D, const uint16_t* Kp, int64_t D2, int64_t k0, int64_t k1,
             float alpha, float* S, int64_t lds) {
  int64_t g = k0 / LANES;
  const int64_t g1 = (k1 + LANES - 1) / LANES;
  for (; g + 4 <= g1; g += 4) qk_groups<R, 4>(A, lda, D, Kp, D2, g, k0, k1, alpha, S, lds);
  for (; g < g1; ++g) qk_groups<R, 1>(A, lda, D, Kp, D2, g, k0, k1, alpha, S, lds);
}

// S (M × (k1 − k0)) = alpha · A Kᵀ: M query rows of bfloat16 (stride lda) against keys [k0, k1) of the packed K.
void qk_bf16(int64_t M, const at::BFloat16* Aq, int64_t lda, int64_t D, const uint16_t* Kp, int64_t k0, int64_t k1,
             float alpha, float* S) {
  const auto* A = reinterpret_cast<const uint16_t*>(Aq);
  const int64_t D2 = (D + 1) / 2, lds = k1 - k0;
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) qk_rows<4>(A + r * lda, lda, D, Kp, D2, k0, k1, alpha, S + r * lds, lds);
  for (; r < M; ++r) qk_rows<1>(A + r * lda, lda, D, Kp, D2, k0, k1, alpha, S + r * lds, lds);
}

// Where pv_bf16 finds P's bfloat16 value of row r and key j (of keys [k0, k1)): at
// r · row_step + (j − first) / 2 · pair_step + (j − first) % 2 − skew, `first` even, so that the keys of a pair
// (2t, 2t + 1) sit side by side and VDPBF16PS reads them as one 32-bit broadcast.
struct PairLayout {
  int64_t row_step, pair_step, first, skew;
  int64_t at(int64_t r, int64_t j) const {
    return r * row_step + ((j - first) >> 1) * pair_step + ((j - first) & 1) - skew;
  }
  // P as the forward makes it: row r's keys in one run, k1 − k0 apart
  static PairLayout rows(int64_t k0, int64_t k1) { return {k1 - k0, 2, k0 & ~int64_t(1), k0 & 1}; }
  // a transposed operand of M rows as `round_pairs_bf16` writes it: for each pair of keys, the M rows' pairs
  static PairLayout pairs(int64_t M, int64_t k0) { return {2, 2 * M, k0 & ~int64_t(1), 0}; }
};

// C rows [0, R) += P · V over the pairs of keys [a, e) (a even, e − a even; row r's pair (a + 2u, a + 2u + 1) at
// Pa + r · row_step + u · pair_step) and the dims of vectors [v0, v0 + NV) of 16 (`Vp`: one (b, kv head)'s packed
// V, Dv16 dims a pair of keys); C's stride ldc, Dv its dims (the last vector masked where Dv is not a multiple of 16).
template <int R, int NV>
__attribute__((target("avx512f,avx512bf16"))) void pv_vectors(const uint16_t* Pa, int64_t row_step, int64_t pair_step,
                                                              int64_t a, int64_t e, const uint16_t* Vp, int64_t Dv16,
                                                              int64_t v0, float* C, int64_t ldc, int64_t Dv,
                                                              float alpha) {
  __m512 acc[R][NV];
  __mmask16 mask[NV];
  for (int c = 0; c < NV; ++c) {
    const int64_t d0 = (v0 + c) * LANES, left = std::min<int64_t>(LANES, Dv - d0);
    mask[c] = static_cast<__mmask16>((1u << left) - 1);
    for (int r = 0; r < R; ++r)   // alpha 1: the sums go on from C's; else C + alpha · (the tile's sums)
      acc[r][c] = alpha == 1.0f ? _mm512_maskz_loadu_ps(mask[c], C + r * ldc + d0) : _mm512_setzero_ps();
  }
  const uint16_t* pt = Pa;
  for (int64_t t = a / 2; t < e / 2; ++t, pt += pair_step) {
    __m512bh vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(Vp + (t * Dv16 + (v0 + c) * LANES) * 2);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, pt + r * row_step, sizeof pair);   // (p[2t], p[2t + 1]), both in the tile
      const __m512bh pp = (__m512bh)_mm512_set1_epi32(pair);
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pp, vv[c]);
    }
  }
  for (int c = 0; c < NV; ++c)
    for (int r = 0; r < R; ++r) {
      float* out = C + r * ldc + (v0 + c) * LANES;
      const __m512 sum = alpha == 1.0f ? acc[r][c]
                                       : _mm512_fmadd_ps(_mm512_set1_ps(alpha), acc[r][c], _mm512_maskz_loadu_ps(mask[c], out));
      _mm512_mask_storeu_ps(out, mask[c], sum);
    }
}

template <int R>
void pv_rows(const uint16_t* Pa, int64_t row_step, int64_t pair_step, int64_t a, int64_t e, const uint16_t* Vp,
             int64_t Dv16, float* C, int64_t ldc, int64_t Dv, float alpha) {
  const int64_t nv = Dv16 / LANES;
  int64_t v = 0;
  for (; v + 4 <= nv; v += 4) pv_vectors<R, 4>(Pa, row_step, pair_step, a, e, Vp, Dv16, v, C, ldc, Dv, alpha);
  for (; v < nv; ++v) pv_vectors<R, 1>(Pa, row_step, pair_step, a, e, Vp, Dv16, v, C, ldc, Dv, alpha);
}

inline float bf16_value(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// C (M × Dv, stride ldc) += alpha · P V: P's M rows of bfloat16 over keys [k0, k1), where `layout` says, V packed. A
// key whose pair partner is outside the tile (an odd k0, an odd k1) is added on its own, so that no key outside
// [k0, k1) is multiplied, not even by 0 (an infinite value there would give NaN).
void pv_bf16(int64_t M, const at::BFloat16* Pq, const PairLayout& layout, int64_t k0, int64_t k1, const uint16_t* Vp,
             int64_t Dv, float* C, int64_t ldc, float alpha = 1.0f) {
  const auto* Pb = reinterpret_cast<const uint16_t*>(Pq);
  const int64_t Dv16 = (Dv + LANES - 1) / LANES * LANES;
  int64_t a = k0, e = k1;
  auto alone = [&](int64_t j) {   // key j's products, one at a time, as VDPBF16PS forms them: in float32
    const uint16_t* vj = Vp + (j / 2) * Dv16 * 2 + j % 2;
    for (int64_t r = 0; r < M; ++r) {
      const float p = alpha * bf16_value(Pb[layout.at(r, j)]);
      for (int64_t d = 0; d < Dv; ++d) C[r * ldc + d] += p * bf16_value(vj[2 * d]);
    }
  };
  if (a < e && a % 2) alone(a++);
  if (a < e && (e - a) % 2) alone(--e);
  if (a >= e) return;
  const uint16_t* Pa = Pb + layout.at(0, a);
  int64_t r = 0;
  for (; r + 4 <= M; r += 4)
    pv_rows<4>(Pa + r * layout.row_step, layout.row_step, layout.pair_step, a, e, Vp, Dv16, C + r * ldc, ldc, Dv,
               alpha);
  for (; r < M; ++r)
    pv_rows<1>(Pa + r * layout.row_step, layout.row_step, layout.pair_step, a, e, Vp, Dv16, C + r * ldc, ldc, Dv,
               alpha);
}

// Rows [i0, i1) of x (float32, n values a row, ldx apart) rounded to bfloat16 (as c10::BFloat16 rounds: to nearest
// even) and written transposed in pairs of rows, as pv_bf16 reads `PairLayout::pairs(n, i0)`: for the rows
// (e0 + 2t, e0 + 2t + 1), e0 = i0 rounded down to even, out[(t · n + j) · 2 + s] = x[e0 + 2t + s][j], 0 for a row
// outside [i0, i1). The backward's Pᵀ and dSᵀ, each a single pass over the tile instead of a rounding and a
// transpose.
__attribute__((target("avx512f,avx512bf16"))) void round_pairs_bf16(const float* x, int64_t ldx, int64_t i0, int64_t i1,
                                                                    int64_t n, uint16_t* out) {
  const int64_t e0 = i0 & ~int64_t(1);
  for (int64_t r = e0; r < i1; r += 2) {
    const float* lo = r >= i0 ? x + (r - i0) * ldx : nullptr;
    const float* hi = r + 1 < i1 ? x + (r + 1 - i0) * ldx : nullptr;
    uint16_t* o = out + (r - e0) / 2 * n * 2;
    for (int64_t j = 0; j < n; j += LANES) {
      const __mmask16 keep = static_cast<__mmask16>(n - j >= LANES ? 0xFFFF : (1u << (n - j)) - 1);
      const __m512 zero = _mm512_setzero_ps();
      const __m512 x0 = lo ? _mm512_maskz_loadu_ps(keep, lo + j) : zero;
      const __m512 x1 = hi ? _mm512_maskz_loadu_ps(keep, hi + j) : zero;
      const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x0));
      const __m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x1));
      _mm512_mask_storeu_epi32(o + j * 2, keep, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }
}

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

// r[i][j] ↔ r[j][i] for 16 vectors of 16 32-bit values: pairs, then pairs of pairs within each 128-bit lane, then
// the lanes.
__attribute__((target("avx512f"))) inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// A group of n ≤ 16 rows (D dims) as qk_bf16 reads it: for each pair of dims, the rows' pairs in one vector (16 rows
// × 16 pairs loaded as 32-bit values and transposed in registers); zeros past n and past D.
__attribute__((target("avx512f"))) void pack_group(const uint16_t* const* rows, int64_t n, int64_t D, uint16_t* out) {
  const int64_t D2 = (D + 1) / 2, whole = D / 2;   // pairs; pairs whose both dims are in the row
  for (int64_t p0 = 0; p0 < D2; p0 += LANES) {
    const int64_t m = std::max<int64_t>(0, std::min(LANES, whole - p0));
    const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);   // masked loads read nothing past the row
    __m512i x[LANES];
    for (int64_t r = 0; r < LANES; ++r)
      x[r] = r < n ? _mm512_maskz_loadu_epi32(keep, rows[r] + 2 * p0) : _mm512_setzero_si512();
    transpose16(x);
    for (int64_t c = 0; c < std::min(LANES, D2 - p0); ++c) _mm512_storeu_si512(out + (p0 + c) * 2 * LANES, x[c]);
  }
  if (D % 2)   // the last dim alone: its pair partner would be past the row (past the tensor, for its last row)
    for (int64_t r = 0; r < n; ++r) out[whole * 2 * LANES + 2 * r] = rows[r][D - 1];
}

// Rows r0 and r1 (null: none, zeros) of D dims as pv_bf16 reads a pair: (r0[d], r1[d]) side by side, D16 dims (zeros
// past D).
__attribute__((target("avx512f"))) void pack_pair(const uint16_t* r0, const uint16_t* r1, int64_t D, int64_t D16,
                                                  uint16_t* out) {
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES) {
    const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + d)));
    const __m512i b = r1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + d)))
                         : _mm512_setzero_si512();
    _mm512_storeu_si512(out + 2 * d, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; d < D16; ++d) {
    out[2 * d] = d < D ? r0[d] : 0;
    out[2 * d + 1] = d < D && r1 ? r1[d] : 0;
  }
}

// Values a head takes packed as qk_bf16 reads K, as pv_bf16 reads V, as qk_f32 reads K (L rows of D dims).
inline int64_t groups_size(int64_t L, int64_t D) { return (L + LANES - 1) / LANES * ((D + 1) / 2) * LANES * 2; }
inline int64_t pairs_size(int64_t L, int64_t D) { return (L + 1) / 2 * ((D + LANES - 1) / LANES * LANES) * 2; }
inline int64_t groups_f32_size(int64_t L, int64_t D) { return (L + LANES - 1) / LANES * D * LANES; }

// The L rows of the heads [bh0, bh1) of the B·H (rows(b, h, j): row j of head h of batch b), in groups of 16 rows,
// each packed by pack(its rows, n ≤ 16 of them, D, out) into `per_group` values of E: (heads, groups, per_group).
template <typename E, typename Rows, typename PackGroup>
Packed<E> pack_in_groups(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, int64_t per_group,
                         const Rows& rows, const PackGroup& pack) {
  const int64_t groups = (L + LANES - 1) / LANES;
  Packed<E> out((bh1 - bh0) * groups * per_group, groups * per_group);
  at::parallel_for(0, (bh1 - bh0) * groups, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = bh0 + t / groups, j0 = t % groups * LANES, n = std::min(LANES, L - j0);
      const E* group[LANES];
      for (int64_t r = 0; r < n; ++r) group[r] = reinterpret_cast<const E*>(rows(bh / H, bh % H, j0 + r));
      pack(group, n, D, out.get() + t * per_group);
    }
  });
  return out;
}

// As qk_bf16 reads K, for the heads [bh0, bh1): (heads, groups of 16 rows, D2 pairs of dims, 16, 2).
template <typename Rows>
Packed<uint16_t> pack_groups(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, const Rows& rows) {
  return pack_in_groups<uint16_t>(bh0, bh1, H, L, D, groups_size(LANES, D), rows, pack_group);
}

// As pv_bf16 reads V, for the heads [bh0, bh1): (heads, pairs of rows, D16 dims, 2).
template <typename Rows>
Packed<uint16_t> pack_pairs(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, const Rows& rows) {
  const int64_t pairs = (L + 1) / 2, D16 = (D + LANES - 1) / LANES * LANES, size = pairs_size(L, D);
  Packed<uint16_t> out((bh1 - bh0) * size, size);
  at::parallel_for(0, (bh1 - bh0) * pairs, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = bh0 + t / pairs, j = t % pairs * 2;
      const auto* r0 = reinterpret_cast<const uint16_t*>(rows(bh / H, bh % H, j));
      const auto* r1 = j + 1 < L ? reinterpret_cast<const uint16_t*>(rows(bh / H, bh % H, j + 1)) : nullptr;
      pack_pair(r0, r1, D, D16, out.get() + t * D16 * 2);
    }
  });
  return out;
}

// --- float32 tiles on AVX512 ------------------------------------------------------------------------------------
// MKL's sgemm packs both operands on every tile as well: its copy routines took 12% of a two-sided window's forward
// (L = 4096, window (1024, 1024), this AVX512 EPYC), its kernel 52%. Where cpuid has AVX512F the float32 kernel
// packs K once a call in groups of 16 keys per dim (`pack_groups_f32`: Kp[(g·D + d)·16 + j] = k[16g + j][d], zeros
// past Lk) and runs Q·Kᵀ in registers (`qk_f32`: a query's dim broadcast, one FMA per group of keys); P·V reads V's
// rows where they are (`pv_f32`: a row of P's value broadcast, V's row in vectors of 16 dims, the last masked), so
// only the keys [k0, k1) of a tile and the dims below Dv are read. The backward: dO·Vᵀ on V packed as K is, dV += Pᵀ dO
// and dK += s dSᵀ Q with pv_f32 reading P and dS transposed where they are, dQ += s dS K on K's rows.

// A group of n ≤ 16 rows (D dims) as qk_f32 reads it: for each dim, the 16 rows' values in one vector (16 × 16
// blocks transposed in registers); zeros past n.
__attribute__((target("avx512f"))) void pack_group_f32(const float* const* rows, int64_t n, int64_t D, float* out) {
  for (int64_t d0 = 0; d0 < D; d0 += LANES) {
    const int64_t m = std::min(LANES, D - d0);
    const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);   // masked loads read nothing past the row
    __m512i x[LANES];
    for (int64_t r = 0; r < LANES; ++r)
      x[r] = r < n ? _mm512_castps_si512(_mm512_maskz_loadu_ps(keep, rows[r] + d0)) : _mm512_setzero_si512();
    transpose16(x);
    for (int64_t c = 0; c < m; ++c) _mm512_storeu_si512(out + (d0 + c) * LANES, x[c]);
  }
}

// As qk_f32 reads K, for the heads [bh0, bh1): (heads, groups of 16 rows, D, 16).
template <typename Rows>
Packed<float> pack_groups_f32(int64_t bh0, int64_t bh1, int64_t H, int64_t L, int64_t D, const Rows& rows) {
  return pack_in_groups<float>(bh0, bh1, H, L, D, groups_f32_size(LANES, D), rows, pack_group_f32);
}

// S rows [0, R) × keys [k0, k1): S[r][j − k0] = alpha · q_r · k_j, for the key groups [g0, g0 + NG) of the packed K
// (`Kp`: one (b, kv head)'s); only the columns in [k0, k1) are written.
template <int R, int NG>
__attribute__((target("avx512f"))) void qk_f32_groups(const float* A, int64_t lda, int64_t D, const float* Kp,
                                                      int64_t g0, int64_t k0, int64_t k1, float alpha, float* S,
                                                      int64_t lds) {
  __m512 acc[R][NG];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    __m512 kv[NG];
    for (int c = 0; c < NG; ++c) kv[c] = _mm512_loadu_ps(Kp + ((g0 + c) * D + d) * LANES);
    for (int r = 0; r < R; ++r) {
      const __m512 qd = _mm512_set1_ps(A[r * lda + d]);
      for (int c = 0; c < NG; ++c) acc[r][c] = _mm512_fmadd_ps(qd, kv[c], acc[r][c]);
    }
  }
  store_scores<R, NG>(acc, g0, k0, k1, alpha, S, lds);
}

template <int R>
void qk_f32_rows(const float* A, int64_t lda, int64_t D, const float* Kp, int64_t k0, int64_t k1, float alpha,
                 float* S, int64_t lds) {
  int64_t g = k0 / LANES;
  const int64_t g1 = (k1 + LANES - 1) / LANES;
  for (; g + 4 <= g1; g += 4) qk_f32_groups<R, 4>(A, lda, D, Kp, g, k0, k1, alpha, S, lds);
  for (; g < g1; ++g) qk_f32_groups<R, 1>(A, lda, D, Kp, g, k0, k1, alpha, S, lds);
}

// S (M × (k1 − k0)) = alpha · A Kᵀ: M query rows (stride lda) against keys [k0, k1) of the packed K.
void qk_f32(int64_t M, const float* A, int64_t lda, int64_t D, const float* Kp, int64_t k0, int64_t k1, float alpha,
            float* S) {
  const int64_t lds = k1 - k0;
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) qk_f32_rows<4>(A + r * lda, lda, D, Kp, k0, k1, alpha, S + r * lds, lds);
  for (; r < M; ++r) qk_f32_rows<1>(A + r * lda, lda, D, Kp, k0, k1, alpha, S + r * lds, lds);
}

// 16 floats at x, or only those under `mask` (the others 0) where `masked`.
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const float* x, bool masked, __mmask16 mask) {
  return masked ? _mm512_maskz_loadu_ps(mask, x) : _mm512_loadu_ps(x);
}

// C rows [0, R) += alpha · P V over the n keys of the tile (P's value of row r, key j at P[r · rs + j · cs]; V's row j
// at V + j · ldv) and
// the dims of vectors [v0, v0 + NV) of 16; PART: the last of them holds the Dv % 16 dims past the others, read and
// written under a mask (the others' loads unmasked: masked ones in the loop made GCC keep the sums in memory).
template <int R, int NV, bool PART>
__attribute__((target("avx512f"))) void pv_f32_vectors(const float* P, int64_t rs, int64_t cs, int64_t n,
                                                       const float* V,
                                                       int64_t ldv, int64_t v0, int64_t Dv, float* C, int64_t ldc,
                                                       float alpha) {
  const __mmask16 last = PART ? static_cast<__mmask16>((1u << (Dv % LANES)) - 1) : 0xFFFF;
  __m512 acc[R][NV];
  for (int c = 0; c < NV; ++c)
    for (int r = 0; r < R; ++r)   // alpha 1: the sums go on from C's; else C + alpha · (the tile's sums)
      acc[r][c] =
          alpha == 1.0f ? load16(C + r * ldc + (v0 + c) * LANES, PART && c == NV - 1, last) : _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m512 vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = load16(V + j * ldv + (v0 + c) * LANES, PART && c == NV - 1, last);
    for (int r = 0; r < R; ++r) {
      const __m512 pj = _mm512_set1_ps(P[r * rs + j * cs]);
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(pj, vv[c], acc[r][c]);
    }
  }
  for (int c = 0; c < NV; ++c)
    for (int r = 0; r < R; ++r) {
      float* out = C + r * ldc + (v0 + c) * LANES;
      const __m512 sum = alpha == 1.0f ? acc[r][c]
                                       : _mm512_fmadd_ps(_mm512_set1_ps(alpha), acc[r][c],
                                                         load16(out, PART && c == NV - 1, last));
      if (PART && c == NV - 1) _mm512_mask_storeu_ps(out, last, sum);
      else _mm512_storeu_ps(out, sum);
    }
}

template <int R>
void pv_f32_rows(const float* P, int64_t rs, int64_t cs, int64_t n, const float* V, int64_t ldv, int64_t Dv,
                 float* C, int64_t ldc, float alpha) {
  const int64_t whole = Dv / LANES;
  int64_t v = 0;
  for (; v + 4 <= whole; v += 4) pv_f32_vectors<R, 4, false>(P, rs, cs, n, V, ldv, v, Dv, C, ldc, alpha);
  for (; v < whole; ++v) pv_f32_vectors<R, 1, false>(P, rs, cs, n, V, ldv, v, Dv, C, ldc, alpha);
  if (Dv % LANES) pv_f32_vectors<R, 1, true>(P, rs, cs, n, V, ldv, v, Dv, C, ldc, alpha);
}

// C (M × Dv, stride ldc) += alpha · P V: P's M rows over the n keys of a tile (row r's key j at P[r · rs + j · cs]:
// rs = n, cs = 1 for P as it is; rs = 1, cs = M' for the transpose of an M' × M tile), V's n rows from V (stride
// ldv) read in place.
void pv_f32(int64_t M, const float* P, int64_t rs, int64_t cs, int64_t n, const float* V, int64_t ldv, int64_t Dv,
            float* C, int64_t ldc, float alpha = 1.0f) {
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) pv_f32_rows<4>(P + r * rs, rs, cs, n, V, ldv, Dv, C + r * ldc, ldc, alpha);
  for (; r < M; ++r) pv_f32_rows<1>(P + r * rs, rs, cs, n, V, ldv, Dv, C + r * ldc, ldc, alpha);
}
#endif

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

inline float exp_sub(float* x, int64_t n, float sub) {
#ifdef SELFATTN_HAS_AVX512_VARIANT
  if (softmax_isa().avx512) return exp_sub_avx512(x, n, sub);
#endif
  return exp_sub_avx2(x, n, sub);
}

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

template <typename T>
inline T row_max(const T* x, int64_t n) {   // NaN if any score is NaN: such a row is NaN, never 0
  T mx = T(NEG_INF);
  int nan = 0;
#pragma omp simd reduction(max : mx) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    mx = x[i] > mx ? x[i] : mx;
    nan |= x[i] != x[i];
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : mx;
}

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

// One tile of scores S (rows [r0, r1) of queries × keys [k0, k1)) for head h, softcapped and masked:
// columns a row may not see are left as they are, and [a, b) per row is returned in `span`.
template <typename T, typename In>
void score_rule(const Problem<T, In>& P, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t k0, int64_t k1, T* S,
                T* tanh_out, std::vector<std::pair<int64_t, int64_t>>& span);

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

template <typename T, typename In>
void scores(const Problem<T, In>& P, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t k0, int64_t k1, T* S,
            T* tanh_out, std::vector<std::pair<int64_t, int64_t>>& span) {
  const int64_t n = k1 - k0, hk = h / P.G;
  if (!dots_packed(P.qrow(b, h, r0), P.qsl, r1 - r0, P.D, P.kv_part(P.kpack, P.kpack_head, b * P.Hkv + hk), k0, k1,
                   P.gemm_alpha(), S))
    gemm<T, In>(false, true, r1 - r0, n, P.D, P.gemm_alpha(), P.qrow(b, h, r0), P.qsl, P.krow(b, hk, k0), P.ksl, T(0),
                S, n);
  score_rule(P, b, h, r0, r1, k0, k1, S, tanh_out, span);
}

// The score rule on a tile S of q·kᵀ·alpha (rows [r0, r1) × keys [k0, k1) of head h): softcap, ALiBi, segments
// and masks; each row's visible columns [a, e) in `span`.
template <typename T, typename In>
void score_rule(const Problem<T, In>& P, int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t k0, int64_t k1, T* S,
                T* tanh_out, std::vector<std::pair<int64_t, int64_t>>& span) {
  const int64_t n = k1 - k0;
  span.resize(r1 - r0);
  for (int64_t i = r0; i < r1; ++i) {
    T* s = S + (i - r0) * n;
    const int64_t a = std::min(k1, std::max(k0, P.key_lo(b, i))), e = std::min(k1, P.key_hi(b, i));  // a <= k1: a row
    // that sees none of the tile (a stacked pass's) gets the empty span [n, n)
    span[i - r0] = {a - k0, std::max(a, e) - k0};
    if (P.softcap > 0) {
      for (int64_t j = a; j < e; ++j) {
        const T t = std::tanh(s[j - k0]);
        if (tanh_out) tanh_out[(i - r0) * n + j - k0] = t;
        s[j - k0] = P.softcap * t;
      }
    }
    if (P.alibi && e > a) {   // after the softcap: its derivative is 1, the tanh above stays the softcap's
      // −slope·|p − j| in two branch-free runs (keys up to p, keys after it) whose int32 counters vectorise;
      // d0 ± t is the exact integer distance below 2^24 (SIZES bounds lengths far below that)
      const T slope = P.alibi[h];
      const int64_t p = i + P.shift(), mid = std::min(e, std::max(a, p + 1));
      T* before = s + (a - k0);
      const T d_before = static_cast<T>(p - a);
      for (int t = 0, m = static_cast<int>(mid - a); t < m; ++t) before[t] -= slope * (d_before - static_cast<T>(t));
      T* after = s + (mid - k0);
      const T d_after = static_cast<T>(mid - p);
      for (int t = 0, m = static_cast<int>(e - mid); t < m; ++t) after[t] -= slope * (d_after + static_cast<T>(t));
    }
    if (P.seg_ids) {   // a segment in several runs: its span holds other segments' keys too
      const int64_t* ids = P.seg_ids + b * P.Lq;
      for (int64_t j = a; j < e; ++j)
        if (ids[j] != ids[i]) s[j - k0] = T(NEG_INF);
    }
    if (P.add_mask) {
      const T* m = P.add_mask + b * P.msb + h * P.msh + i * P.msq;
      for (int64_t j = a; j < e; ++j) {   // −inf hides the key whatever its score (NaN included)
        const T add = m[j * P.msk];
        s[j - k0] = add == T(NEG_INF) ? add : s[j - k0] + add;
      }
    } else if (P.bool_mask) {
      const bool* m = P.bool_mask + b * P.msb + h * P.msh + i * P.msq;
      for (int64_t j = a; j < e; ++j)
        if (!m[j * P.msk]) s[j - k0] = T(NEG_INF);
    }
  }
}

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

// One worker's forward scratch: the score tile, P rounded to the GEMM's dtype, each row's visible span.
template <typename T, typename In>
struct ForwardScratch {
  std::vector<T> tile;
  std::vector<In> rounded;
  std::vector<In> stacked_q;   // the G heads' query rows, one under the other (`stacked_pass`)
  std::vector<std::pair<int64_t, int64_t>> spans;
};

// Running state of `rows` query rows for the G heads of a kv head: m (G·rows), l (G·rows), acc (G·rows·Dv).
template <typename T>
struct RowState {
  T *m, *l, *acc;
  int64_t rows;
  void reset(int64_t G, int64_t Dv) {
    std::fill(m, m + G * rows, T(NEG_INF));
    std::fill(l, l + G * rows, T(0));
    std::fill(acc, acc + G * rows * Dv, T(0));
  }
};

// The keys [lo, hi) any query row of [q0, q1) sees (lo >= hi: none).
template <typename T, typename In>
std::pair<int64_t, int64_t> block_keys(const Problem<T, In>& P, int64_t b, int64_t q0, int64_t q1) {
  if (!P.spans()) return {0, P.Lk};
  int64_t lo = P.Lk, hi = 0;
  for (int64_t i = q0; i < q1; ++i) {
    const int64_t a = P.key_lo(b, i), e = P.key_hi(b, i);
    if (a < e) lo = std::min(lo, a), hi = std::max(hi, e);
  }
  return {lo, hi};
}

// One tile's online-softmax step for head g's rows [r0, r1) (S: their scores, n keys wide; spans: each row's
// visible columns): S becomes P = exp(s − m_new) (0 outside the span), and st's m, l and acc (rescaled) are
// brought to m_new. acc += P·V is the caller's.
template <typename T, typename In>
void online_rows(const Problem<T, In>& P, int64_t g, int64_t q0, int64_t r0, int64_t r1, int64_t n, T* S,
                 const std::vector<std::pair<int64_t, int64_t>>& spans, RowState<T>& st) {
  T* o = st.acc + g * st.rows * P.Dv;   // row i at (i − q0) · Dv
  for (int64_t i = r0; i < r1; ++i) {
    T* s = S + (i - r0) * n;
    const auto [a, e] = spans[i - r0];
    const T mx = row_max(s + a, e - a);
    T& mi = st.m[g * st.rows + i - q0];
    T& li = st.l[g * st.rows + i - q0];
    const T m_new = mx != mx ? mx : std::max(mi, mx);   // a NaN score makes the row NaN, never 0
    std::fill(s, s + a, T(0));
    std::fill(s + e, s + n, T(0));
    if (m_new == T(NEG_INF)) {   // nothing visible so far: p = 0
      std::fill(s + a, s + e, T(0));
      continue;
    }
    const T sum = exp_sub(s + a, e - a, m_new);
    if (mi != m_new) {
      const T alpha = mi == T(NEG_INF) ? T(0) : std::exp(mi - m_new);
      T* oi = o + (i - q0) * P.Dv;
      for (int64_t d = 0; d < P.Dv; ++d) oi[d] *= alpha;
      li *= alpha;
    }
    li += sum;
    mi = m_new;
  }
}

// GQA with a short query (a decoding step: G heads × a few rows share each K/V tile): the G heads' rows stacked
// into one (G·rows × D) operand, so that each key tile is one GEMM of G·rows rows for Q·Kᵀ and one for P·V
// instead of G matrix-vector products, each rereading the tile. Used by softmax_pass when G·rows <= STACK_ROWS
// (else the heads go one by one); the tile is `width / G` keys wide, the same bytes as one head's. A row that sees
// none of a tile's keys gets an empty span (P = 0 there, as for the rows of a per-head tile outside its own
// visible columns); a tile no row sees is skipped. The arithmetic of each row is the per-head pass's.
constexpr int64_t STACK_ROWS = 64;

template <typename T, typename In>
bool stacked_pass(const Problem<T, In>& P, int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t lo, int64_t hi,
                  int64_t width, RowState<T>& st, ForwardScratch<T, In>& ws) {
  const int64_t nq = q1 - q0, rows = P.G * nq;
  if (P.G == 1 || rows > STACK_ROWS || st.rows != nq) return false;
  width = std::max<int64_t>(64, width / P.G);
  ws.stacked_q.resize(rows * P.D);
  for (int64_t g = 0; g < P.G; ++g)
    for (int64_t i = q0; i < q1; ++i)
      std::copy(P.qrow(b, hk * P.G + g, i), P.qrow(b, hk * P.G + g, i) + P.D,
                ws.stacked_q.data() + (g * nq + i - q0) * P.D);
  const int64_t tile = rows * std::min(width, std::max<int64_t>(hi - lo, 0));
  if (static_cast<int64_t>(ws.tile.size()) < tile) ws.tile.resize(tile);
  if (!std::is_same_v<T, In> && static_cast<int64_t>(ws.rounded.size()) < tile) ws.rounded.resize(tile);
  T* S = ws.tile.data();
  for (int64_t k0 = lo; k0 < hi; k0 += width) {
    const int64_t k1 = std::min(hi, k0 + width), n = k1 - k0;
    if (std::max(q0, P.query_lo(b, k0, k1)) >= std::min(q1, P.query_hi(b, k0, k1))) continue;   // no row sees it
    if (!dots_packed(ws.stacked_q.data(), P.D, rows, P.D, P.kv_part(P.kpack, P.kpack_head, b * P.Hkv + hk), k0, k1,
                     P.gemm_alpha(), S))
      gemm<T, In>(false, true, rows, n, P.D, P.gemm_alpha(), ws.stacked_q.data(), P.D, P.krow(b, hk, k0), P.ksl, T(0),
                  S, n);
    for (int64_t g = 0; g < P.G; ++g) {
      T* Sg = S + g * nq * n;
      score_rule(P, b, hk * P.G + g, q0, q1, k0, k1, Sg, static_cast<T*>(nullptr), ws.spans);
      online_rows(P, g, q0, q0, q1, n, Sg, ws.spans, st);
    }
    const In* p = as_operand<In>(S, ws.rounded.data(), rows * n);   // P in the GEMM's dtype
    const uint16_t* vpack = P.kv_part(P.vpack, P.vpack_head, b * P.Hkv + hk);
    if (!sums_on_tiles(p, rows, vpack, P.in_place ? P.vrow(b, hk, k0) : nullptr, P.vsl, k0, k1, P.Dv, st.acc, P.Dv,
                       T(1)))
      gemm<T, In>(false, false, rows, P.Dv, n, T(1), p, n, P.vrow(b, hk, k0), P.vsl, T(1), st.acc, P.Dv);
  }
  return true;
}

// The online softmax of query rows [q0, q1) of kv head hk's G heads over keys [lo, hi), in tiles of `width`
// keys: st's (m, l, acc) (row i at i − q0) updated in place.
template <typename T, typename In>
void softmax_pass(const Problem<T, In>& P, int64_t b, int64_t hk, int64_t q0, int64_t q1, int64_t lo, int64_t hi,
                  int64_t width, RowState<T>& st, ForwardScratch<T, In>& ws) {
  if (stacked_pass(P, b, hk, q0, q1, lo, hi, width, st, ws)) return;
  const int64_t tile = (q1 - q0) * std::min(width, std::max<int64_t>(hi - lo, 0));
  if (static_cast<int64_t>(ws.tile.size()) < tile) ws.tile.resize(tile);
  if (!std::is_same_v<T, In> && static_cast<int64_t>(ws.rounded.size()) < tile) ws.rounded.resize(tile);
  T* S = ws.tile.data();
  for (int64_t k0 = lo; k0 < hi; k0 += width) {
    const int64_t k1 = std::min(hi, k0 + width), n = k1 - k0;
    const int64_t r0 = std::max(q0, P.query_lo(b, k0, k1)), r1 = std::min(q1, P.query_hi(b, k0, k1));
    if (r1 <= r0) continue;
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t h = hk * P.G + g;
      scores(P, b, h, r0, r1, k0, k1, S, static_cast<T*>(nullptr), ws.spans);
      T* o = st.acc + g * st.rows * P.Dv;   // row i at (i − q0) · Dv
      online_rows(P, g, q0, r0, r1, n, S, ws.spans, st);
      const In* p = as_operand<In>(S, ws.rounded.data(), (r1 - r0) * n);   // P in the GEMM's dtype
      const uint16_t* vpack = P.kv_part(P.vpack, P.vpack_head, b * P.Hkv + hk);
      T* oi = o + (r0 - q0) * P.Dv;
      const In* vrows = P.in_place ? P.vrow(b, hk, k0) : nullptr;
      if (!sums_on_tiles(p, r1 - r0, vpack, vrows, P.vsl, k0, k1, P.Dv, oi, P.Dv, T(1)))
        gemm<T, In>(false, false, r1 - r0, P.Dv, n, T(1), p, n, P.vrow(b, hk, k0), P.vsl, T(1), o + (r0 - q0) * P.Dv,
                    P.Dv);
    }
  }
}

// Epilogue of rows [q0, q1): out = acc / l (0 for a row that saw nothing), lse = m + log l (−inf there); a sink
// joins l as one more logit whose value is 0: l += exp(sink − m) under the row's maximum max(m, sink).
template <typename T, typename In>
void finish_rows(const Problem<T, In>& P, int64_t b, int64_t hk, int64_t q0, int64_t q1, const RowState<T>& st,
                 In* out, T* lse) {
  for (int64_t g = 0; g < P.G; ++g) {
    const int64_t h = hk * P.G + g;
    for (int64_t i = q0; i < q1; ++i) {
      T li = st.l[g * st.rows + i - q0];
      T mi = st.m[g * st.rows + i - q0];
      const T* ai = st.acc + (g * st.rows + i - q0) * P.Dv;
      In* oi = out + ((b * P.Hq + h) * P.Lq + i) * P.Dv;
      T* lsei = lse + (b * P.Hq + h) * P.Lq + i;
      T alpha = T(1);
      if (P.sinks && mi == mi) {
        const T sink = P.sinks[h], m_new = std::max(mi, sink);
        alpha = li > 0 ? std::exp(mi - m_new) : T(0);
        li = li * alpha + std::exp(sink - m_new);
        mi = m_new;
      }
      if (li > 0 || li != li) {   // a NaN row stays NaN (as in every backend), not "saw nothing"
        const T inv = alpha / li;
        for (int64_t d = 0; d < P.Dv; ++d) oi[d] = static_cast<In>(ai[d] * inv);
        *lsei = mi + std::log(li);
      } else {
        std::fill(oi, oi + P.Dv, In(0));
        *lsei = T(NEG_INF);
      }
    }
  }
}

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

// Backward: dout (In), lse and delta (T); dq, dk, dv are T (the caller converts them to In).
template <typename T, typename In>
void backward_impl(const Problem<T, In>& P, const In* dout, int64_t dsb, int64_t dsh, int64_t dsl, const T* lse,
                   const T* delta, T* dq, T* dk, T* dv, std::vector<at::Tensor>& dq_extra) {
  const int64_t n_kb = (P.Lk + P.block_k - 1) / P.block_k, BH = P.bh1 - P.bh0;
  const int64_t workers = std::max<int64_t>(1, at::get_num_threads());
  std::vector<std::vector<T>> bufs(workers);
  std::vector<std::vector<In>> rounded(workers), flipped(workers);   // P or dS in the GEMM's dtype; transposed (tiles)
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(workers);
  std::vector<T*> dq_of(workers, nullptr);
  dq_of[0] = dq;
  const int64_t bq = P.block_q, bk = P.block_k;
  run_tasks(BH * n_kb, [&](int64_t w, int64_t t) {
    const int64_t kb = t / BH, bh = P.bh0 + t % BH, b = bh / P.Hkv, hk = bh % P.Hkv;
    if (!dq_of[w]) dq_of[w] = dq_extra[w].template data_ptr<T>();   // zeroed by the caller
    T* dqw = dq_of[w];
    std::vector<T>& buf = bufs[w];
    buf.resize(3 * bq * bk);
    if (!std::is_same_v<T, In>) rounded[w].resize(bq * bk);
    if (P.dopairs) flipped[w].resize((bq + 2) * bk);
    T *S = buf.data(), *dP = S + bq * bk, *Th = dP + bq * bk;
    const int64_t k0 = kb * bk, k1 = std::min(P.Lk, k0 + bk);
    const int64_t lo = P.query_lo(b, k0, k1), hi = P.query_hi(b, k0, k1);
    for (int64_t q0 = lo; q0 < hi; q0 += bq) {
      const int64_t q1 = std::min(hi, q0 + bq), nq = q1 - q0;
      // the block's keys any of these rows sees: a causal diagonal's first query block sees bq of the bk keys,
      // and a tile over all of them computed 4× the visible scores there (a quarter of the backward's products
      // at L = 2048)
      const auto [seen_lo, seen_hi] = block_keys(P, b, q0, q1);
      const int64_t ka = std::max(k0, seen_lo), kz = std::min(k1, seen_hi), n = kz - ka;
      if (n <= 0) continue;
      T* dkb = dk + ((b * P.Hkv + hk) * P.Lk + ka) * P.D;
      T* dvb = dv + ((b * P.Hkv + hk) * P.Lk + ka) * P.Dv;
      for (int64_t g = 0; g < P.G; ++g) {
        const int64_t h = hk * P.G + g;
        scores(P, b, h, q0, q1, ka, kz, S, P.softcap > 0 ? Th : static_cast<T*>(nullptr), spans[w]);
        const T* lrow = lse + (b * P.Hq + h) * P.Lq;
        for (int64_t i = q0; i < q1; ++i) {   // P = exp(S − lse): the forward's probabilities
          T* s = S + (i - q0) * n;
          const auto [a, e] = spans[w][i - q0];
          std::fill(s, s + a, T(0));
          std::fill(s + e, s + n, T(0));
          if (lrow[i] == T(NEG_INF)) std::fill(s + a, s + e, T(0));
          else exp_sub(s + a, e - a, lrow[i]);
        }
        const In* dor = dout + b * dsb + h * dsh + q0 * dsl;
        const int64_t bhq = b * P.Hq + h;   // the query head's packed Q and dO
        if (!transposed_sums_on_tiles(S, n, flipped[w].data(), P.q_part(P.dopairs, P.dopairs_head, bhq),
                                      P.in_place ? dor : nullptr, dsl, q0, q1, P.Dv, dvb, P.Dv, T(1)))
          gemm<T, In>(true, false, n, P.Dv, nq, T(1), as_operand<In>(S, rounded[w].data(), nq * n), n, dor, dsl, T(1),
                      dvb, P.Dv);   // dV += Pᵀ dO
        if (!dots_packed(dor, dsl, nq, P.Dv, P.kv_part(P.vgroups, P.vgroups_head, bh), ka, kz, T(1), dP))
          gemm<T, In>(false, true, nq, n, P.Dv, T(1), dor, dsl, P.vrow(b, hk, ka), P.vsl, T(0), dP, n);  // dP = dO Vᵀ
        const T* drow = delta + (b * P.Hq + h) * P.Lq;
        for (int64_t i = q0; i < q1; ++i) {   // dS = P ∘ (dP − Δ) (∘ (1 − tanh²) under a softcap)
          T* ds = dP + (i - q0) * n;
          const T* pi = S + (i - q0) * n;
          const T di = drow[i];
          const auto [a, e] = spans[w][i - q0];
          std::fill(ds, ds + a, T(0));
          std::fill(ds + e, ds + n, T(0));
          for (int64_t j = a; j < e; ++j) ds[j] = pi[j] * (ds[j] - di);
          if (P.softcap > 0) {
            const T* th = Th + (i - q0) * n;
            for (int64_t j = a; j < e; ++j) ds[j] *= T(1) - th[j] * th[j];
          }
        }
        const In* dsr = as_operand<In>(dP, rounded[w].data(), nq * n);   // dS in the GEMM's dtype (P is spent)
        if (!transposed_sums_on_tiles(dP, n, flipped[w].data(), P.q_part(P.qpairs, P.qpairs_head, bhq),
                                      P.in_place ? P.qrow(b, h, q0) : nullptr, P.qsl, q0, q1, P.D, dkb, P.D, P.scale))
          gemm<T, In>(true, false, n, P.D, nq, P.scale, dsr, n, P.qrow(b, h, q0), P.qsl, T(1), dkb, P.D);  // dK += s dSᵀ Q
        T* dqb = dqw + ((b * P.Hq + h) * P.Lq + q0) * P.D;
        if (!sums_on_tiles(dsr, nq, P.kv_part(P.kpairs, P.kpairs_head, bh), P.in_place ? P.krow(b, hk, ka) : nullptr,
                           P.ksl, ka, kz, P.D, dqb, P.D, P.scale))
          gemm<T, In>(false, false, nq, P.D, n, P.scale, dsr, n, P.krow(b, hk, ka), P.ksl, T(1), dqb, P.D);  // dQ += s dS K
      }
    }
  }, at::globalContext().deterministicAlgorithms());
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

int64_t row_stride(const at::Tensor& t) { return t.size(2) <= 1 ? std::max<int64_t>(t.size(3), 1) : t.stride(2); }

template <typename T, typename In>
Problem<T, In> make_problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& mask, int64_t left, int64_t right, double scale,
                        double softcap, const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& alibi,
                        const std::optional<at::Tensor>& seg_span, const std::optional<at::Tensor>& seg_ids,
                        int64_t block_q, int64_t block_k) {
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
                                                     const std::optional<at::Tensor>& seg_ids, int64_t block_q,
                                                     int64_t block_k, bool tiles) {
  check_inputs(q, k, v, block_q, block_k);
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(compute_dtype(q.scalar_type())));
  dispatch(q.scalar_type(), [&](auto t, auto in) {
    using T = decltype(t);
    using In = decltype(in);
    auto P = make_problem<T, In>(q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q,
                                 block_k);
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
    const std::optional<at::Tensor>& seg_span, const std::optional<at::Tensor>& seg_ids, int64_t block_q,
    int64_t block_k, bool tiles) {
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
    auto P = make_problem<T, In>(q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q,
                                 block_k);
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
        "Tensor? sinks, Tensor? alibi, Tensor? seg_span, Tensor? seg_ids, int block_q, int block_k, bool tiles) "
        "-> (Tensor, Tensor)",
        &attention_forward);
  m.def("backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor lse, Tensor delta, Tensor? mask, int left, "
        "int right, float scale, float softcap, Tensor? sinks, Tensor? alibi, Tensor? seg_span, Tensor? seg_ids, "
        "int block_q, int block_k, bool tiles) -> (Tensor, Tensor, Tensor)",
        &attention_backward);
}
