// The online softmax: a row's maximum, its running (m, l, acc), one tile's step.
// A part of the native kernel's one translation unit (attention.cpp includes every header once; internal linkage).

#pragma once

#include "exp.h"
#include "problem.h"

namespace {

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

}  // namespace
