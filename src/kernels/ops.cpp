#include "kernels/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/linear.h"
#include "kernels/linear_impl.h"

namespace nemo::kernels {

namespace {

float dot_ref(const float* a, const float* b, int64_t n) {
  const int64_t n16 = n - n % 16;
  float acc[16] = {};
  for (int64_t k = 0; k < n16; k += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = acc[l] + acc[l + 8];
  float t = 0.0f;
  for (int64_t k = n16; k < n; ++k) t = std::fma(a[k], b[k], t);
  return detail::hsum8_fixed(v) + t;
}

// R rows of the canonical dot at once (out[r] = a_r · b, rows a + r·as): per row two 8-lane
// accumulators over the 16-element blocks, their sum through hsum8_fixed, then the tail's fma
// chain; R > 1 only keeps more independent chains in flight (dot_rows).
template <int R>
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const float* a, int64_t as, const float* b,
                                                       int64_t n, float* out) {
  const int64_t n16 = n - n % 16;
  __m256 acc[R][2];
  for (auto& r : acc) r[0] = r[1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < n16; k += 16) {
    const __m256 b0 = _mm256_loadu_ps(b + k), b1 = _mm256_loadu_ps(b + k + 8);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * as + k), b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * as + k + 8), b1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(acc[r][0], acc[r][1]));
    float t = 0.0f;
    for (int64_t k = n16; k < n; ++k) t = std::fma(a[r * as + k], b[k], t);
    out[r] = detail::hsum8_fixed(v) + t;
  }
}

void decay_outer_add_ref(float* S, int64_t rows, int64_t n, float decay, const float* b,
                         const float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = S + r * n;
    for (int64_t k = 0; k < n; ++k) s[k] = s[k] * decay + b[k] * x[r];
  }
}

__attribute__((target("avx2"))) void decay_outer_add_avx2(float* S, int64_t rows, int64_t n,
                                                          float decay, const float* b,
                                                          const float* x) {
  const int64_t n8 = n - n % 8;
  const __m256 d = _mm256_set1_ps(decay);
  for (int64_t r = 0; r < rows; ++r) {
    float* s = S + r * n;
    const __m256 xv = _mm256_set1_ps(x[r]);
    for (int64_t k = 0; k < n8; k += 8)
      _mm256_storeu_ps(s + k, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + k), d),
                                            _mm256_mul_ps(_mm256_loadu_ps(b + k), xv)));
    for (int64_t k = n8; k < n; ++k) s[k] = s[k] * decay + b[k] * x[r];
  }
}

void axpy_rows_ref(const float* a, int64_t m, const float* X, int64_t xs, float* y, int64_t n) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a[j] * X[j * xs + i];
}

// V vectors of 16 (the last under `last`) held across the m rows.
template <int V>
__attribute__((target("avx512f"))) void axpy_rows_avx512(const float* a, int64_t m, const float* X,
                                                         int64_t xs, float* y, __mmask16 last) {
  __m512 acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v)
    acc[v] = _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xFFFF, y + 16 * v);
  for (int64_t j = 0; j < m; ++j) {
    const __m512 aj = _mm512_set1_ps(a[j]);
    const float* xj = X + j * xs;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[v] = _mm512_add_ps(
          acc[v],
          _mm512_mul_ps(aj, _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xFFFF, xj + 16 * v)));
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(y + 16 * v, v == V - 1 ? last : 0xFFFF, acc[v]);
}

// V vectors of 8; the caller runs the last n % 8 elements by the reference.
template <int V>
__attribute__((target("avx2"))) void axpy_rows_avx2(const float* a, int64_t m, const float* X,
                                                    int64_t xs, float* y) {
  __m256 acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) acc[v] = _mm256_loadu_ps(y + 8 * v);
  for (int64_t j = 0; j < m; ++j) {
    const __m256 aj = _mm256_set1_ps(a[j]);
    const float* xj = X + j * xs;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(aj, _mm256_loadu_ps(xj + 8 * v)));
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + 8 * v, acc[v]);
}

}  // namespace

void axpy_rows(const float* a, int64_t m, const float* X, int64_t x_stride, float* y, int64_t n) {
  int64_t i = 0;
  if (active_isa() >= Isa::Avx512) {
    for (; i + 128 <= n; i += 128) axpy_rows_avx512<8>(a, m, X + i, x_stride, y + i, 0xFFFF);
    if (i + 64 <= n) axpy_rows_avx512<4>(a, m, X + i, x_stride, y + i, 0xFFFF), i += 64;
    const int64_t r = n - i;  // < 64
    if (r > 0) {
      const auto last = __mmask16((1u << ((r - 1) % 16 + 1)) - 1);
      switch ((r + 15) / 16) {
        case 1:
          axpy_rows_avx512<1>(a, m, X + i, x_stride, y + i, last);
          break;
        case 2:
          axpy_rows_avx512<2>(a, m, X + i, x_stride, y + i, last);
          break;
        case 3:
          axpy_rows_avx512<3>(a, m, X + i, x_stride, y + i, last);
          break;
        default:
          axpy_rows_avx512<4>(a, m, X + i, x_stride, y + i, last);
      }
    }
    return;
  }
  if (active_isa() >= Isa::Avx2) {
    for (; i + 64 <= n; i += 64) axpy_rows_avx2<8>(a, m, X + i, x_stride, y + i);
    for (; i + 8 <= n; i += 8) axpy_rows_avx2<1>(a, m, X + i, x_stride, y + i);
  }
  axpy_rows_ref(a, m, X + i, x_stride, y + i, n - i);
}

namespace {

// The elements [k0, n) past the last whole 16-element block: updated as decay_outer_add does,
// their products in one fma chain in k order (dot()'s tail).
float tail_update_dot(float* s, int64_t k0, int64_t n, float decay, const float* b, float x,
                      const float* c) {
  float t = 0.0f;
  for (int64_t k = k0; k < n; ++k) {
    s[k] = s[k] * decay + b[k] * x;
    t = std::fma(s[k], c[k], t);
  }
  return t;
}

// hsum8_fixed of v's 8 lanes without leaving the registers: ((v0 + v4) + (v2 + v6)) + ((v1 + v5)
// + (v3 + v7)), the same adds of the same operands.
__attribute__((target("avx2"))) inline float hsum8_fixed_ymm(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_movehdup_ps(q));
}

// A row's dot accumulated in 16 lanes (lane l: k = l mod 16 in k order, as dot()), finished as
// dot() finishes: its two halves, then hsum8_fixed (the tail's fma chain is the caller's).
__attribute__((target("avx512f,avx512dq"))) inline float finish16(__m512 acc) {
  return hsum8_fixed_ymm(_mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, acc, 0),
                                       _mm512_maskz_extractf32x8_ps(0xFF, acc, 1)));
}

// The kernels of decay_outer_add_dot_steps take one state row at a time (the state read in storage
// order: 4 rows side by side measured 1.3-1.5x slower where it comes from memory,
// docs/PERFORMANCE.md). Step t updates each 16-element block (a multiply, a multiply and an add,
// as decay_outer_add) and, while in registers, adds it into the row's dot with c_t.
//
// Row r of n = 16 * NB (no tail), read from `from` once, held in registers across the steps and
// written to s once: in a 1-head microbenchmark (64 x 128, in cache, Zen 5) 1.4-1.6x faster at 4-8
// steps than a sweep of the head per step. Into another buffer (a journaled round) by streaming
// stores: the new state is next read a whole forward later, and a store that misses would first
// read the line. (Each block through all the steps in turn, each step's dot in its own
// accumulator, measured 1.3x slower at 8 steps; two rows side by side no faster.)
template <int NB>
__attribute__((target("avx512f,avx512dq"))) void steps_row_avx512(const float* from, float* s,
                                                                  const DecaySteps& st, int64_t r) {
  __m512 sv[NB];
#pragma GCC unroll 8
  for (int i = 0; i < NB; ++i) sv[i] = _mm512_loadu_ps(from + 16 * i);
  for (int64_t t = 0; t < st.T; ++t) {
    const __m512 d = _mm512_set1_ps(st.decay[t]), xv = _mm512_set1_ps(st.x[t * st.xs + r]);
    const float* b = st.b + t * st.bs;
    const float* c = st.c + t * st.cs;
    __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) {
      sv[i] =
          _mm512_add_ps(_mm512_mul_ps(sv[i], d), _mm512_mul_ps(_mm512_loadu_ps(b + 16 * i), xv));
      acc = _mm512_fmadd_ps(sv[i], _mm512_loadu_ps(c + 16 * i), acc);
    }
    st.out[t * st.os + r] = finish16(acc) + 0.0f;  // + dot()'s empty tail
  }
  if (from != s && (reinterpret_cast<uintptr_t>(s) & 63) == 0) {
#pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) _mm512_stream_ps(s + 16 * i, sv[i]);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) _mm512_storeu_ps(s + 16 * i, sv[i]);
  }
}

// Any n, the row in L1 across the steps, two 8-lane halves per block (dot_rows_avx2's
// accumulators; lanes l and l + 8 of the 16 are the halves' lane l, so the bits are the same).
__attribute__((target("avx2,fma"))) void steps_row_avx2(const float* from, float* s, int64_t n,
                                                        const DecaySteps& st, int64_t r) {
  const int64_t n16 = n - n % 16;
  if (from != s) std::memcpy(s, from, size_t(n) * sizeof(float));
  for (int64_t t = 0; t < st.T; ++t) {
    const __m256 d = _mm256_set1_ps(st.decay[t]), xv = _mm256_set1_ps(st.x[t * st.xs + r]);
    const float* b = st.b + t * st.bs;
    const float* c = st.c + t * st.cs;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t k = 0; k < n16; k += 16)
      for (int h = 0; h < 2; ++h) {
        const int64_t i = k + 8 * h;
        const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i), d),
                                       _mm256_mul_ps(_mm256_loadu_ps(b + i), xv));
        _mm256_storeu_ps(s + i, v);
        acc[h] = _mm256_fmadd_ps(v, _mm256_loadu_ps(c + i), acc[h]);
      }
    st.out[t * st.os + r] = hsum8_fixed_ymm(_mm256_add_ps(acc[0], acc[1])) +
                            tail_update_dot(s, n16, n, st.decay[t], b, st.x[t * st.xs + r], c);
  }
}

// Rows this far ahead are prefetched (52-layer states, 23 x 2 MB, from memory as in decode; 2
// threads; tools/bench/probe_scan.cpp): with the first form of these kernels (a sweep of the state
// per step) 12-25 % faster than with none; with the rows held in registers, with and without
// measured within the noise, and 8 or 32 ahead as 16.
constexpr int64_t kStepsAheadRows = 16;

}  // namespace

void decay_outer_add_dot_steps(const float* from, float* S, int64_t rows, int64_t n,
                               const DecaySteps& st) {
  const Isa isa = active_isa();
  if (isa < Isa::Avx2) {
    if (from != S) std::memcpy(S, from, size_t(rows * n) * sizeof(float));
    for (int64_t t = 0; t < st.T; ++t) {
      decay_outer_add_ref(S, rows, n, st.decay[t], st.b + t * st.bs, st.x + t * st.xs);
      for (int64_t r = 0; r < rows; ++r)
        st.out[t * st.os + r] = dot_ref(S + r * n, st.c + t * st.cs, n);
    }
    return;
  }
  const auto each_row = [&](auto&& row) {
    for (int64_t r = 0; r < rows; ++r) {
      // As integers: past the last row the addresses are the next head's (a prefetch never
      // faults), and no pointer leaves its array.
      const uintptr_t f =
          reinterpret_cast<uintptr_t>(from) + uintptr_t((r + kStepsAheadRows) * n) * sizeof(float);
      for (uintptr_t l = 0; l < uintptr_t(n) * sizeof(float); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(f + l), _MM_HINT_T0);
      row(from + r * n, S + r * n, r);
    }
  };
  if (isa >= Isa::Avx512 && (n == 64 || n == 128)) {  // Nano's and Lightning's state rows
    if (n == 64)
      each_row([&](const float* f, float* s, int64_t r) { steps_row_avx512<4>(f, s, st, r); });
    else
      each_row([&](const float* f, float* s, int64_t r) { steps_row_avx512<8>(f, s, st, r); });
    if (from != S) _mm_sfence();  // the streaming stores, before another thread reads them
    return;
  }
  each_row([&](const float* f, float* s, int64_t r) { steps_row_avx2(f, s, n, st, r); });
}

void decay_outer_add(float* S, int64_t rows, int64_t n, float decay, const float* b,
                     const float* x) {
  if (active_isa() >= Isa::Avx2)
    decay_outer_add_avx2(S, rows, n, decay, b, x);
  else
    decay_outer_add_ref(S, rows, n, decay, b, x);
}

float dot(const float* a, const float* b, int64_t n) {
  if (active_isa() < Isa::Avx2) return dot_ref(a, b, n);
  float out;
  dot_rows_avx2<1>(a, 0, b, n, &out);
  return out;
}

void dot_rows(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n,
              float* out) {
  int64_t r = 0;
  if (active_isa() >= Isa::Avx2)
    for (; r + 4 <= rows; r += 4) dot_rows_avx2<4>(a + r * a_stride, a_stride, b, n, out + r);
  for (; r < rows; ++r) out[r] = dot(a + r * a_stride, b, n);
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  const float ss = dot(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

void relu2_inplace(float* x, int64_t n) {
  using v4 = float __attribute__((vector_size(16)));
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v4 v;
    std::memcpy(&v, x + i, sizeof v);
    v = v < 0.0f ? v4{} : v;  // a lane-wise select: NaN and -0 pass, as in relu2
    v *= v;
    std::memcpy(x + i, &v, sizeof v);
  }
  for (; i < n; ++i) x[i] = relu2(x[i]);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];
}

int64_t first_non_finite(const float* x, int64_t n) {
  constexpr int64_t kBlock = 1024;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    uint32_t any = 0;
    for (int64_t i = b; i < e; ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, sizeof u);
      any |= uint32_t((u & 0x7F800000u) == 0x7F800000u);  // exponent all ones: NaN or Inf
    }
    if (any)
      for (int64_t i = b; i < e; ++i)
        if (!std::isfinite(x[i])) return i;
  }
  return -1;
}

}  // namespace nemo::kernels
