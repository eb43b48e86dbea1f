// Internal: the canonical reduction and the row/output drivers shared by the packed formats
// (NVFP4, FP8_E4M3, AFFINE4, AFFINE8). Each format supplies a decoder; see docs/FORMATS.md.
//
// Canonical order for one (row r, output o), identical for every ISA, tile and thread split:
//   w'[k] = the format's exact f32 "kernel weight" (decoder.at(k)); the per-tensor factor is
//           left out of it and applied once at the end as `post`.
//   acc[0..15] = +0; for k in steps of 16 (k < K16 = K - K%16): acc[l] = fma(w'[k+l], x[k+l], acc[l])
//   v[l] = acc[l] + acc[l+8] (l < 8); s = hsum8_fixed(v)
//   t = +0; for k in [K16, K): t = fma(w'[k], x[k], t)
//   y = (s + t) * post
// This is the dense kernels' order applied to w', so y == dense(w') * post bitwise.
//
// Decoder interface (D):
//   void init(const PackedWeight&); void row(int64_t o);
//   float at(int64_t k) const;   // scalar w'[k] (reference and tails)
//   float post() const;
//   AVX2 decoders add: void decode16(int64_t k, __m256& lo, __m256& hi)  // w'[k..k+15]
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/linear_impl.h"

namespace nemo::kernels::detail::packed {

template <class D>
void range_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
               int64_t y_stride, int64_t o_begin, int64_t o_end) {
  const int64_t K = w.cols, K16 = K - K % 16;
  std::vector<float> wr(size_t(std::max<int64_t>(K, 1)));
  D d;
  d.init(w);
  for (int64_t o = o_begin; o < o_end; ++o) {
    d.row(o);
    for (int64_t k = 0; k < K; ++k) wr[k] = d.at(k);
    const float post = d.post();
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * x_stride;
      float acc[16] = {};
      for (int64_t k = 0; k < K16; k += 16)
        for (int l = 0; l < 16; ++l) acc[l] = std::fma(wr[k + l], xr[k + l], acc[l]);
      float v[8];
      for (int l = 0; l < 8; ++l) v[l] = acc[l] + acc[l + 8];
      float t = 0.0f;
      for (int64_t k = K16; k < K; ++k) t = std::fma(wr[k], xr[k], t);
      y[r * y_stride + o] = (hsum8_fixed(v) + t) * post;
    }
  }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// R rows x O outputs, decoding each weight once for the R rows. Used for small batches, where the
// kernel must stream weights at memory speed; O = 2 gives two independent FMA chains per row.
template <class D, int R, int O>
inline void tile_fused(const PackedWeight& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t o) {
  const int64_t K = w.cols, K16 = K - K % 16;
  D d[O];
  __m256 a0[O][R], a1[O][R];
#pragma GCC unroll 2
  for (int j = 0; j < O; ++j) {
    d[j].init(w);
    d[j].row(o + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a0[j][r] = a1[j][r] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K16; k += 16) {
#pragma GCC unroll 2
    for (int j = 0; j < O; ++j) {
      __m256 w0, w1;
      d[j].decode16(k, w0, w1);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * xs + k;
        a0[j][r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), a0[j][r]);
        a1[j][r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), a1[j][r]);
      }
    }
  }
  for (int j = 0; j < O; ++j)
    for (int r = 0; r < R; ++r) {
      alignas(32) float v[8];
      _mm256_store_ps(v, _mm256_add_ps(a0[j][r], a1[j][r]));
      const float* xr = x + r * xs;
      float t = 0.0f;
      for (int64_t k = K16; k < K; ++k) t = std::fma(d[j].at(k), xr[k], t);
      y[r * ys + o + j] = (hsum8_fixed(v) + t) * d[j].post();
    }
}

template <class D, int R>
inline void rows_fused(const PackedWeight& w, const float* x, int64_t xs, float* y, int64_t ys,
                       int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  for (; o + 2 <= o_end; o += 2) tile_fused<D, R, 2>(w, x, xs, y, ys, o);
  if (o < o_end) tile_fused<D, R, 1>(w, x, xs, y, ys, o);
}

// R rows x 1 output over an already decoded f32 weight row (the large-batch path).
template <int R>
inline void tile_f32(const float* wr, int64_t K, float post, const float* x, int64_t xs, float* y,
                     int64_t ys) {
  const int64_t K16 = K - K % 16;
  __m256 a0[R], a1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16) {
    const __m256 w0 = _mm256_loadu_ps(wr + k), w1 = _mm256_loadu_ps(wr + k + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * xs + k;
      a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), a0[r]);
      a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), a1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(a0[r], a1[r]));
    const float* xr = x + r * xs;
    float t = 0.0f;
    for (int64_t k = K16; k < K; ++k) t = std::fma(wr[k], xr[k], t);
    y[r * ys] = (hsum8_fixed(v) + t) * post;
  }
}

// Rows at which decoding a block of outputs once into an L2-resident f32 buffer beats
// re-decoding per row tile.
inline constexpr int64_t kScratchRows = 4;

template <class D>
void range_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t xs, float* y, int64_t ys,
                int64_t o_begin, int64_t o_end) {
  if (n_rows <= 0 || o_begin >= o_end) return;
  if (n_rows < kScratchRows) {
    switch (n_rows) {
      case 1: return rows_fused<D, 1>(w, x, xs, y, ys, o_begin, o_end);
      case 2: return rows_fused<D, 2>(w, x, xs, y, ys, o_begin, o_end);
      default: return rows_fused<D, 3>(w, x, xs, y, ys, o_begin, o_end);
    }
  }
  const int64_t K = w.cols, K16 = K - K % 16;
  // Output block: ~192 KB of decoded f32 weights, reused by every row tile while in L2.
  const int64_t ob = std::clamp<int64_t>((192 * 1024) / (4 * std::max<int64_t>(K, 1)), 1, 256);
  std::vector<float> buf(static_cast<size_t>(ob * K));
  float post[256];
  D d;
  d.init(w);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += ob) {
    const int64_t o1 = std::min(o_end, o0 + ob);
    for (int64_t o = o0; o < o1; ++o) {
      float* wr = buf.data() + (o - o0) * K;
      d.row(o);
      for (int64_t k = 0; k < K16; k += 16) {
        __m256 w0, w1;
        d.decode16(k, w0, w1);
        _mm256_storeu_ps(wr + k, w0);
        _mm256_storeu_ps(wr + k + 8, w1);
      }
      for (int64_t k = K16; k < K; ++k) wr[k] = d.at(k);
      post[o - o0] = d.post();
    }
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4)
      for (int64_t o = o0; o < o1; ++o)
        tile_f32<4>(buf.data() + (o - o0) * K, K, post[o - o0], x + r * xs, xs, y + r * ys + o, ys);
    for (; r < n_rows; ++r)
      for (int64_t o = o0; o < o1; ++o)
        tile_f32<1>(buf.data() + (o - o0) * K, K, post[o - o0], x + r * xs, xs, y + r * ys + o, ys);
  }
}

#pragma GCC pop_options

}  // namespace nemo::kernels::detail::packed
