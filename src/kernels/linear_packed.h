// Internal: the canonical reduction and the row/output drivers shared by the packed formats
// (NVFP4, FP8_E4M3, AFFINE4, AFFINE8). Each format supplies a decoder; see docs/FORMATS.md.
//
// Canonical order for one (row r, output o), identical for every ISA, tile and thread split:
//   w'[k] = the format's exact f32 "kernel weight" (decoder.at(k)); the per-tensor factor is
//           left out of it and applied once at the end as `post`.
//   acc[0..15] = +0; for k in steps of 16 (k < K16 = K - K%16): acc[l] = fma(w'[k+l], x[k+l],
//   acc[l]) v[l] = acc[l] + acc[l+8] (l < 8); s = hsum8_fixed(v) t = +0; for k in [K16, K): t =
//   fma(w'[k], x[k], t) y = (s + t) * post
// This is the dense kernels' order applied to w', so y == dense(w') * post bitwise.
//
// Decoder interface (D):
//   void init(const PackedWeight&); void row(int64_t o);
//   float at(int64_t k) const;   // scalar w'[k] (reference and tails)
//   float post() const;
//   AVX2 decoders add: void decode16(int64_t k, __m256& lo, __m256& hi)  // w'[k..k+15]
//                      void prefetch(int64_t k, int64_t rows_ahead) const  // called every 64 k
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/memory.h"
#include "kernels/linear_impl.h"

namespace nemo::kernels::detail::packed {

// The kernels' scratch comes from alloc_aligned64 (base/memory.h), so their 512-bit loads of it
// never split a cache line: new[] and std::vector give 16-byte alignment, and split zmm loads ran
// 1.3-1.6x slower on an Intel Xeon (docs/PERFORMANCE.md).

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

// One row, two outputs: two independent decoders and four FMA chains hide the FMA latency while
// the kernel streams weights (four outputs measured slower: 16 ymm registers run out). Plain
// locals (no arrays) so nothing is spilled. Rows are short streams (e.g. 1344 bytes), so the rows
// four ahead are prefetched explicitly.
template <class D>
inline void row1_x2(const PackedWeight& w, const float* x, float* y, int64_t o) {
  const int64_t K = w.cols, K16 = K - K % 16;
  D d0, d1;
  d0.init(w), d1.init(w);
  d0.row(o), d1.row(o + 1);
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
  for (int64_t k = 0; k < K16; k += 16) {
    if ((k & 63) == 0) d0.prefetch(k, 4), d1.prefetch(k, 4);
    const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
    __m256 w0, w1;
    d0.decode16(k, w0, w1);
    a00 = _mm256_fmadd_ps(w0, x0, a00);
    a01 = _mm256_fmadd_ps(w1, x1, a01);
    d1.decode16(k, w0, w1);
    a10 = _mm256_fmadd_ps(w0, x0, a10);
    a11 = _mm256_fmadd_ps(w1, x1, a11);
  }
  const auto fin = [&](const D& d, __m256 a0, __m256 a1) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(a0, a1));
    float t = 0.0f;
    for (int64_t k = K16; k < K; ++k) t = std::fma(d.at(k), x[k], t);
    return (hsum8_fixed(v) + t) * d.post();
  };
  y[o] = fin(d0, a00, a01);
  y[o + 1] = fin(d1, a10, a11);
}

template <class D>
inline void row1_x1(const PackedWeight& w, const float* x, float* y, int64_t o) {
  const int64_t K = w.cols, K16 = K - K % 16;
  D d;
  d.init(w);
  d.row(o);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (int64_t k = 0; k < K16; k += 16) {
    __m256 w0, w1;
    d.decode16(k, w0, w1);
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k), a0);
    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k + 8), a1);
  }
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(a0, a1));
  float t = 0.0f;
  for (int64_t k = K16; k < K; ++k) t = std::fma(d.at(k), x[k], t);
  y[o] = (hsum8_fixed(v) + t) * d.post();
}

template <class D>
inline void rows_fused(const PackedWeight& w, const float* x, float* y, int64_t o_begin,
                       int64_t o_end) {
  int64_t o = o_begin;
  for (; o + 2 <= o_end; o += 2) row1_x2<D>(w, x, y, o);
  for (; o < o_end; ++o) row1_x1<D>(w, x, y, o);
}

// Four rows x one output over an already decoded f32 weight row (the batched path).
inline void tile_f32_r4(const float* wr, int64_t K, float post, const float* x, int64_t xs,
                        float* y, int64_t ys) {
  const int64_t K16 = K - K % 16;
  const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
         a30 = a00, a31 = a00;
  for (int64_t k = 0; k < K16; k += 16) {
    const __m256 w0 = _mm256_loadu_ps(wr + k), w1 = _mm256_loadu_ps(wr + k + 8);
    a00 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + k), a00);
    a01 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + k + 8), a01);
    a10 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + k), a10);
    a11 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + k + 8), a11);
    a20 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x2 + k), a20);
    a21 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x2 + k + 8), a21);
    a30 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x3 + k), a30);
    a31 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x3 + k + 8), a31);
  }
  const auto fin = [&](const float* xr, __m256 a0, __m256 a1) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(a0, a1));
    float t = 0.0f;
    for (int64_t k = K16; k < K; ++k) t = std::fma(wr[k], xr[k], t);
    return (hsum8_fixed(v) + t) * post;
  };
  y[0] = fin(x0, a00, a01);
  y[ys] = fin(x1, a10, a11);
  y[2 * ys] = fin(x2, a20, a21);
  y[3 * ys] = fin(x3, a30, a31);
}

inline void tile_f32_r2(const float* wr, int64_t K, float post, const float* x, int64_t xs,
                        float* y, int64_t ys) {
  const int64_t K16 = K - K % 16;
  const float *x0 = x, *x1 = x + xs;
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
  for (int64_t k = 0; k < K16; k += 16) {
    const __m256 w0 = _mm256_loadu_ps(wr + k), w1 = _mm256_loadu_ps(wr + k + 8);
    a00 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + k), a00);
    a01 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + k + 8), a01);
    a10 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + k), a10);
    a11 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + k + 8), a11);
  }
  const auto fin = [&](const float* xr, __m256 a0, __m256 a1) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(a0, a1));
    float t = 0.0f;
    for (int64_t k = K16; k < K; ++k) t = std::fma(wr[k], xr[k], t);
    return (hsum8_fixed(v) + t) * post;
  };
  y[0] = fin(x0, a00, a01);
  y[ys] = fin(x1, a10, a11);
}

inline void tile_f32_r1(const float* wr, int64_t K, float post, const float* x, float* y) {
  const int64_t K16 = K - K % 16;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (int64_t k = 0; k < K16; k += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k), _mm256_loadu_ps(x + k), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 8), _mm256_loadu_ps(x + k + 8), a1);
  }
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(a0, a1));
  float t = 0.0f;
  for (int64_t k = K16; k < K; ++k) t = std::fma(wr[k], x[k], t);
  *y = (hsum8_fixed(v) + t) * post;
}

// One row: decode and multiply in registers. Several rows: decode a block of outputs once into
// an L2-resident f32 buffer, then run every row tile over it (same lanes, same order).
template <class D>
void range_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t xs, float* y,
                int64_t ys, int64_t o_begin, int64_t o_end) {
  if (n_rows <= 0 || o_begin >= o_end) return;
  if (n_rows == 1) return rows_fused<D>(w, x, y, o_begin, o_end);
  const int64_t K = w.cols, K16 = K - K % 16;
  // Output block: ~192 KB of decoded f32 weights, reused by every row tile while in L2.
  const int64_t ob = std::min(
      o_end - o_begin, std::clamp<int64_t>((192 * 1024) / (4 * std::max<int64_t>(K, 1)), 1, 256));
  const auto buf = alloc_aligned64<float>(size_t(ob * K));  // fully written before read
  float post[256];
  D d;
  d.init(w);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += ob) {
    const int64_t o1 = std::min(o_end, o0 + ob);
    for (int64_t o = o0; o < o1; ++o) {
      float* wr = buf.get() + (o - o0) * K;
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
        tile_f32_r4(buf.get() + (o - o0) * K, K, post[o - o0], x + r * xs, xs, y + r * ys + o, ys);
    for (; r + 2 <= n_rows; r += 2)
      for (int64_t o = o0; o < o1; ++o)
        tile_f32_r2(buf.get() + (o - o0) * K, K, post[o - o0], x + r * xs, xs, y + r * ys + o, ys);
    for (; r < n_rows; ++r)
      for (int64_t o = o0; o < o1; ++o)
        tile_f32_r1(buf.get() + (o - o0) * K, K, post[o - o0], x + r * xs, y + r * ys + o);
  }
}

#pragma GCC pop_options

// ---- Row tiles and output blocks (shared by every ISA's kernels; no intrinsics) ----
// Calls f.template operator()<C>() with C = min(Max, n), n >= 1: a tile dimension as a constant.
template <int Max, int C = 1, class F>
inline void with_count(int64_t n, F&& f) {
  if constexpr (C == Max)
    f.template operator()<C>();
  else if (n <= C)
    f.template operator()<C>();
  else
    with_count<Max, C + 1>(n, f);
}

// A row tile's size as a constant, R = min(Max, rows). Max is 4 (AVX2), 7 or 8 (AVX-512 f32:
// kMaxRowsZ, kMaxRowsZIntel) or 8 (NVFP4 and FP8 with bf16 activations).
template <int Max = 4, class F>
inline void with_row_tile(int64_t rows, F&& f) {
  static_assert(Max == 4 || Max == 7 || Max == 8);
  with_count<Max>(rows, f);
}

// n rows (n >= 1) as the fewest groups of at most `most` rows, sizes as even as possible (the
// first n % groups one row longer): fn(first_row, rows) for each in order.
template <class F>
inline void even_row_groups(int64_t n, int64_t most, F&& fn) {
  const int64_t groups = (n + most - 1) / most, base = n / groups, longer = n % groups;
  for (int64_t g = 0, r = 0; g < groups; ++g) {
    const int64_t len = base + (g < longer ? 1 : 0);
    fn(r, len);
    r += len;
  }
}

// The scalar references' x~ under Arith::Bf16: n_rows rows of K (stride K), each element
// round_activation_bf16 of x's.
inline std::vector<float> rounded_rows_bf16(const float* x, int64_t n_rows, int64_t x_stride,
                                            int64_t K) {
  std::vector<float> xr(size_t(std::max<int64_t>(1, n_rows * K)));
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t k = 0; k < K; ++k)
      xr[size_t(r * K + k)] = round_activation_bf16(x[r * x_stride + k]);
  return xr;
}

// The scalar reference of Arith::Bf16, every format's (its file states its word order and why its
// steps are exact): D decodes output row o as range_ref's decoders do, x~ = rounded_rows_bf16, and
// lane l (0..15) of each 32-weight chunk k0 < K32 = K - K % 32 takes element k0 + Element(2l + 1),
// then k0 + Element(2l), each as acc[l] = Step(w', x~, acc[l]) (VDPBF16PS: the odd product first,
// each sum rounded once); then v[l] = acc[l] + acc[l + 8], t = an fma chain over [K32, K) in k
// order, and y = (hsum8_fixed(v) + t) * D::post().
constexpr int k_order_element(int i) {
  return i;
}
inline float fma_step(float w, float x, float acc) {
  return std::fma(w, x, acc);
}
template <class D, int (*Element)(int), float (*Step)(float, float, float) = fma_step>
void range_bf16_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                    float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  const int64_t K = w.cols, K32 = K - K % 32;
  const std::vector<float> xr = rounded_rows_bf16(x, n_rows, x_stride, K);
  std::vector<float> wr(size_t(std::max<int64_t>(1, K)));
  D d;
  d.init(w);
  for (int64_t o = o_begin; o < o_end; ++o) {
    d.row(o);
    for (int64_t k = 0; k < K; ++k) wr[size_t(k)] = d.at(k);
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xk = xr.data() + r * K;
      float acc[16] = {};
      for (int64_t k0 = 0; k0 < K32; k0 += 32)
        for (int l = 0; l < 16; ++l)
          for (const int64_t k : {k0 + Element(2 * l + 1), k0 + Element(2 * l)})
            acc[l] = Step(wr[size_t(k)], xk[k], acc[l]);
      float v[8];
      for (int l = 0; l < 8; ++l) v[l] = acc[l] + acc[l + 8];
      float t = 0.0f;
      for (int64_t k = K32; k < K; ++k) t = std::fma(wr[size_t(k)], xk[k], t);
      y[r * y_stride + o] = (hsum8_fixed(v) + t) * d.post();
    }
  }
}

// Arith::Bf16 on AVX2 (no VDPBF16PS): x~ of one row laid out so that an 8-lane f32 vector takes
// the pairs (T::pair_even(p) + T::kPairApart, T::pair_even(p)) of 16 consecutive elements as two
// FMAs: each chunk of 32 at k0 as [x~(k0 + odd(p)) for p < 8, x~(k0 + even(p)) for p < 8, the
// same for k0 + 16]; the tail [K32, K) as x~ in k order after the chunks.
template <class T>
inline void lay_row_bf16_pairs(const float* x, int64_t K, float* out) {
  const int64_t K32 = K - K % 32;
  for (int64_t k0 = 0; k0 < K32; k0 += 32)
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 8; ++p) {
        const int64_t even = k0 + 16 * h + T::pair_even(p);
        out[k0 + 16 * h + p] = round_activation_bf16(x[even + T::kPairApart]);
        out[k0 + 16 * h + 8 + p] = round_activation_bf16(x[even]);
      }
  for (int64_t k = K32; k < K; ++k) out[k] = round_activation_bf16(x[k]);
}

// A tile's O output rows are contiguous in memory, and so are the next tile's: while a tile runs,
// it prefetches the next tile's bytes as one sequential run, N lines per step (prefetch_lines),
// rather than the same lines row by row. On Zen 4 one core read the row-by-row pattern (8 rows of
// 1344 bytes, a line of each per step) at 10-12 GB/s and the sequential one at 21-25
// (tools/bench/probe_streams.cpp modes 1 and 2); docs/PERFORMANCE.md has the kernels' gains.
//
// prefetch_lines: lines [step * N, step * N + N) of the region at p (64 bytes each) into L1 (into
// L2 with L2 = true). The instruction is written as volatile asm: GCC 12 deletes calls of helpers
// whose body is only _mm_prefetch (it takes them for functions without side effects), and loops
// made only of them. The address goes in a register, not as a memory operand: with "m"(*p) (a
// char, which may alias anything) GCC stored every accumulator of a tile to the stack before each
// prefetch, 16 stores a step in a 4 x 4 tile (4- and 8-row passes 1.5x and 1.8x slower).
// tests/kernels/check_tile_code.py checks both in the object code.
// prefetch_line_at<I, L2>: line I after base. The N lines of prefetch_lines share one base
// register, each at its own displacement (one instruction a line: with an address register per
// line GCC spent three more computing each).
template <int I, bool L2>
inline void prefetch_line_at(const char* base) {
  if constexpr (L2)
    asm volatile("prefetcht1 %c1(%0)" : : "r"(base), "i"(64 * I));
  else
    asm volatile("prefetcht0 %c1(%0)" : : "r"(base), "i"(64 * I));
}
template <int N, bool L2 = false>
inline void prefetch_lines(const void* p, int64_t step) {
  const char* base = static_cast<const char*>(p) + step * N * 64;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (prefetch_line_at<I, L2>(base), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// Outputs per block when several row groups sweep the same weights: ~64 KB of packed
// weights, so the block stays in L2 while every group passes over it.
inline int64_t swept_block_outputs(const PackedWeight& w) {
  const int64_t row_bytes = std::max<int64_t>(1, w.bytes() / std::max<int64_t>(1, w.rows));
  return std::clamp<int64_t>((64 * 1024) / row_bytes, 4, 1024) & ~int64_t(3);
}

// ---- AVX-512: weights decoded once per 16 k, in registers, for every row of a tile ----
// One zmm accumulator holds acc[0..15] of one (row, output) pair, so the canonical order above is
// the natural one: v = low half + high half, then hsum8_fixed. A tile of R rows x O outputs
// decodes O 16-weight vectors per k step and issues R*O FMAs with them: the decode cost (the
// compute-bound part of the packed formats) is paid once per tile instead of once per row, and
// the weights are read from memory once per output block however many rows share the pass.
//
// AVX-512 decoders add: __m512 decode16z(int64_t k) const   // w'[k..k+15]
//                       optional template <int O, bool L2> prefetch_next_tile(int64_t step)
//                           const  // on row o of a tile of O > 1 outputs: step's share (k = 64
//                           step) of the next O rows, into L1 in tiles of up to kNextTileRows
//                           rows, into L2 in tiles of up to kNextTileL2Rows (if set), in place
//                           of prefetch(k, O) on each row
//                       static constexpr int64_t kWideRows  // rows from which range_wide_z runs
//
// Every tile is out of line ([[gnu::noinline]]) and every loop over its register arrays carries
// #pragma GCC unroll. Without the pragma GCC 12 kept tile_bf16_y's accumulator arrays on the stack
// as well as in registers and stored them every step (8 stores at 1 row, 16 at 2, from d434c22 to
// the unroll fix: Zen 4 lm_head bf16 1.3x and 1.4x slower, 8-layer decode 1.14x at one thread);
// the early unrolling lets it keep them in registers only. Out of line, each instantiation is a
// function that tests/kernels/check_tile_code.py reads (tile_bf16_y, inlined into range_bf16_z,
// escaped it).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2")

// (r, o) finish from the 16 lanes and the tail sum t: v = low half + high half, hsum8_fixed,
// + t, * post (the canonical sequence).
inline float finish_lanes(__m512 acc, float t, float post) {
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, acc, 0),
                                   _mm512_maskz_extractf32x8_ps(0xFF, acc, 1)));
  return (hsum8_fixed(v) + t) * post;
}

// finish_lanes for 16 (r, o) at once, y[p] = finish_lanes(a[p], t[p], post[p]): the same adds of
// the same operands in the same order, lanes transposed as they go. Each step's comment says
// what lane block b (4 lanes) or lane l of its vectors holds; vp = the 8 sums of a[p]'s halves.
inline void finish_lanes16(const __m512 (&a)[16], const float* t, const float* post, float* y) {
  // c[q]: lanes 0-7 = v(2q), 8-15 = v(2q + 1).
  __m512 c[8];
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q)
    c[q] = _mm512_add_ps(
        _mm512_maskz_shuffle_f32x4(0xFFFF, a[2 * q], a[2 * q + 1], 0x44),   // low halves
        _mm512_maskz_shuffle_f32x4(0xFFFF, a[2 * q], a[2 * q + 1], 0xEE));  // high halves
  // e[p], block b = output 4p + b: (v0 + v4, v1 + v5, v2 + v6, v3 + v7).
  __m512 e[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)
    e[p] = _mm512_add_ps(
        _mm512_maskz_shuffle_f32x4(0xFFFF, c[2 * p], c[2 * p + 1], 0x88),   // blocks 0, 2
        _mm512_maskz_shuffle_f32x4(0xFFFF, c[2 * p], c[2 * p + 1], 0xDD));  // blocks 1, 3
  // g[u], block b: (A, B) of output 8u + b, then of 8u + 4 + b; A = (v0 + v4) + (v2 + v6),
  // B = (v1 + v5) + (v3 + v7).
  __m512 g[2];
#pragma GCC unroll 2
  for (int u = 0; u < 2; ++u)
    g[u] =
        _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, e[2 * u], e[2 * u + 1], 0x44),   // lanes 0, 1
                      _mm512_maskz_shuffle_ps(0xFFFF, e[2 * u], e[2 * u + 1], 0xEE));  // lanes 2, 3
  // s, lane 4b + i = A + B of output 4i + b.
  const __m512 s = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, g[0], g[1], 0x88),   // A
                                 _mm512_maskz_shuffle_ps(0xFFFF, g[0], g[1], 0xDD));  // B
  const __m512i to_output = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 sum = _mm512_maskz_permutexvar_ps(0xFFFF, to_output, s);
  _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_add_ps(sum, _mm512_loadu_ps(t)), _mm512_loadu_ps(post)));
}

// A decoder whose tiles hold each block's 16 weights in a permuted lane order (D::decode16z_lanes,
// lane i = element D::kLaneElement[i] of the block) runs them over activations laid out the
// same way (lay_row_lanes) and returns each accumulator to canonical lanes before its finish:
// lanes are independent sums, so only their order changes, not the bits.
template <class D>
concept PermutedLanes = requires(const D& d) {
  d.decode16z_lanes(int64_t{0});
};

// The tail [K16, K) of row xr against the decoder's output, in k order from +0.
template <class D>
inline float tail_z(const D& d, const float* xr, int64_t K16, int64_t K) {
  float t = 0.0f;
  for (int64_t k = K16; k < K; ++k) t = std::fma(d.at(k), xr[k], t);
  return t;
}

// An accumulator in canonical lanes (a PermutedLanes decoder's returned to element order).
template <class D>
inline __m512 canonical_z(__m512 acc) {
  if constexpr (PermutedLanes<D>) {
    // Canonical lane l = the permuted lane that holds element l.
    alignas(64) static constexpr std::array<int32_t, 16> from = [] {
      std::array<int32_t, 16> a{};
      for (int i = 0; i < 16; ++i) a[size_t(D::kLaneElement[size_t(i)])] = i;
      return a;
    }();
    acc = _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_load_si512(from.data()), acc);
  }
  return acc;
}

// Slots for a tile's R x O (row, output) pairs in finish_pairs's t and post: whole sixteens, a tile
// of 4-15 pairs padded to one sixteen (the padding zeros), else the pairs.
template <int P>
constexpr int kPairSlots = P < 16 && P >= 4 ? 16 : P;

// The end of a tile: y(r, o + j) = finish_lanes(lanes(r, j), t[p], post[p]) for every pair p = r *
// O + j, sixteen at a time through finish_lanes16 (the same adds of the same operands in the same
// order as finish_lanes), a tile of 4-15 pairs as one sixteen padded with zeros (t and post hold
// kPairSlots<R * O> entries, the padding's zero), the rest of a larger tile one at a time. One at a
// time, the finishes of an 8 x 3 FP8 tile_z tile took ~8 % of its time L2-resident (4 x 4: ~6 %);
// padded, 1 x 4 NVFP4 0.92x the time L2-resident (0.93-0.99x streamed), 2-3 rows 0.98-0.99x, but
// the rest of 5- and 7-row tiles 1.01x slower (Xeon, docs/PERFORMANCE.md, 2026-12-07).
template <int R, int O, class Lanes>
[[gnu::always_inline]] inline void finish_pairs(Lanes&& lanes, const float* t, const float* post,
                                                float* y, int64_t ys, int64_t o) {
  constexpr int P = R * O, S = kPairSlots<P>, P16 = S - S % 16;
  alignas(64) float out[16];
#pragma GCC unroll 2
  for (int p0 = 0; p0 < P16; p0 += 16) {
    __m512 a[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      a[i] = p0 + i < P ? lanes((p0 + i) / O, (p0 + i) % O) : _mm512_setzero_ps();
    finish_lanes16(a, t + p0, post + p0, out);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      if (p0 + i < P) y[(p0 + i) / O * ys + o + (p0 + i) % O] = out[i];
  }
#pragma GCC unroll 16
  for (int p = P16; p < P; ++p)
    y[p / O * ys + o + p % O] = finish_lanes(lanes(p / O, p % O), t[p], post[p]);
}

// The end of an R x O tile_z tile: y(r, o + j) = finish_lanes(acc[r][j] in canonical lanes, the
// tail of row r against output o + j, d[j].post()), through finish_pairs.
template <class D, int R, int O>
[[gnu::always_inline]] inline void finish_tile_z(const D (&d)[O], const __m512 (&acc)[R][O],
                                                 const float* x, int64_t xs, int64_t K16, int64_t K,
                                                 float* y, int64_t ys, int64_t o) {
  constexpr int P = R * O;
  alignas(64) float t[kPairSlots<P>] = {}, post[kPairSlots<P>] = {};
#pragma GCC unroll 32
  for (int p = 0; p < P; ++p)
    t[p] = tail_z(d[p % O], x + (p / O) * xs, K16, K), post[p] = d[p % O].post();
  finish_pairs<R, O>([&](int r, int j) { return canonical_z<D>(acc[r][j]); }, t, post, y, ys, o);
}

// Row x [0, K) laid out for a PermutedLanes decoder: each block of 16 in lane order, the tail
// [K16, K) as it is.
template <class D>
inline void lay_row_lanes(const float* x, int64_t K, float* out) {
  const __m512i idx = _mm512_loadu_si512(D::kLaneElement.data());
  const int64_t K16 = K - K % 16;
  for (int64_t k = 0; k < K16; k += 16)
    _mm512_storeu_ps(out + k, _mm512_maskz_permutexvar_ps(0xFFFF, idx, _mm512_loadu_ps(x + k)));
  for (int64_t k = K16; k < K; ++k) out[k] = x[k];
}

template <class D>
inline __m512 decode_z(const D& d, int64_t k) {
  if constexpr (PermutedLanes<D>)
    return d.decode16z_lanes(k);
  else
    return d.decode16z(k);
}

// Where tile_z's tiles of R rows prefetch the next tile as one sequential run: 1 into L1 (up to
// D::kNextTileRows rows), 2 into L2 (up to D::kNextTileL2Rows, where the rows' activations fill
// L1), 0 nowhere (row by row: prefetch(k, O)). Each decoder says what it measured.
template <class D, int R>
constexpr int next_tile_level() {
  if constexpr (requires { requires R <= D::kNextTileRows; })
    return 1;
  else if constexpr (requires { requires R <= D::kNextTileL2Rows; })
    return 2;
  else
    return 0;
}

// R rows x O outputs [o, o+O). Accumulators are a fixed-size array indexed by compile-time
// constants after unrolling, so they live in registers (R*O <= 28 of the 32 zmm; check_tile_code.py
// names the few tiles that keep some on the stack). ScaleBytes: a scale-word decoder's table rows
// by each block's scale byte (D::decode16z_lanes_byte) instead of from the step's scale words.
template <class D, int R, int O, bool ScaleBytes = false>
[[gnu::noinline]] void tile_z(const PackedWeight& w, const float* x, int64_t xs, float* y,
                              int64_t ys, int64_t o) {
  const int64_t K = w.cols, K16 = K - K % 16;
  D d[O];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) d[j].init(w), d[j].row(o + j);
  __m512 acc[R][O];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) acc[r][j] = _mm512_setzero_ps();
  const auto prefetch = [&](int64_t k) [[gnu::always_inline]] {
    constexpr int next = O > 1 ? next_tile_level<D, R>() : 0;
    if constexpr (next > 0)
      d[0].template prefetch_next_tile<O, next == 2>(k / 64);
    else
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j) d[j].prefetch(k, O);
  };
  const auto block = [&](int64_t k, const __m512(&wv)[O]) [[gnu::always_inline]] {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 xv = _mm512_loadu_ps(x + r * xs + k);
      // In a 3-output tile GCC folds this load into each of the row's FMAs (3 loads where 1
      // does: 8 x 3 NVFP4 1.2x slower L2-resident); an empty asm keeps it in a register.
      if constexpr (O == 3) asm("" : "+v"(xv));
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
    }
  };
  int64_t k = 0;
  if constexpr (PermutedLanes<D> && requires { d[0].scale_word(k); }) {
    // Steps of 8 blocks: one load of each output's 8 scale bytes (D::scale_word) and the table
    // rows from it (D::decode16z_lanes(k, sw, b)); the loop's own instructions once per step.
    for (; k + 128 <= K16; k += 128) {
      prefetch(k);
      prefetch(k + 64);
      uint64_t sw[O] = {};
      if constexpr (!ScaleBytes) {
#pragma GCC unroll 16
        for (int j = 0; j < O; ++j) sw[j] = d[j].scale_word(k);
      }
#pragma GCC unroll 8
      for (int b = 0; b < 8; ++b) {
        __m512 wv[O];
#pragma GCC unroll 16
        for (int j = 0; j < O; ++j)
          if constexpr (ScaleBytes)
            wv[j] = d[j].decode16z_lanes_byte(k, b);
          else
            wv[j] = d[j].decode16z_lanes(k, sw[j], b);
        block(k + 16 * b, wv);
      }
    }
  }
  for (; k < K16; k += 16) {
    if ((k & 63) == 0) prefetch(k);
    __m512 wv[O];
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) wv[j] = decode_z(d[j], k);
    block(k, wv);
  }
  finish_tile_z<D, R, O>(d, acc, x, xs, K16, K, y, ys, o);
}

// Tiles of up to kMaxRowsZ = 7 rows x 4 outputs: up to 28 accumulators, each decoded vector feeds
// R FMAs and each loaded activation 4. Against the 4-row groups used before (Zen 4, 1 thread,
// L2-resident, docs/PERFORMANCE.md, 2026-12-05): FP8 5 / 6 / 7 rows 1.41 / 1.29 / 1.21x faster,
// NVFP4 1.21 / 1.10 / 1.06x, bf16 1.18 / 1.09 / 1.02x; 8 rows in one tile (32 accumulators) ran
// as fast (FP8, bf16) or slower (NVFP4 1.07x) than two of 4, and 2 outputs at 6-8 rows slower.
// On an Intel Xeon (Emerald Rapids VM, 2 threads, streamed, 2026-12-06; the dispatch's Intel
// kernels take kMaxRowsZIntel) the 8 x 4 tile, a few accumulators on the stack, beat 4 + 4:
// FP8 10304 x 2688 0.74x the time, NVFP4 32768 x 2688 0.88x (0.89x in the table's lane order), bf16
// 4096 x 2688 0.84x (tools/bench/probe_ab, medians of 40-60 alternating pairs). A kernel may
// give other widths by rows (its TileShape: Intel's NVFP4, linear_nvfp4.cpp).
constexpr int kMaxRowsZ = 7;
constexpr int kMaxRowsZIntel = 8;
// The tiles at R rows: TileShape::outputs(R) outputs wide, and tile_z's ScaleBytes at
// TileShape::scale_bytes(R); this default, 4 outputs and the scale words at every R.
struct FourOutputs {
  static constexpr int outputs(int) { return 4; }
  static constexpr bool scale_bytes(int) { return false; }
};
// [o_begin, o_end) as tiles of O outputs, the rest as tiles of 4 (when O > 4) and of 1.
template <class D, int R, int O, bool ScaleBytes = false>
inline void rows_z(const PackedWeight& w, const float* x, int64_t xs, float* y, int64_t ys,
                   int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  for (; o + O <= o_end; o += O) tile_z<D, R, O, ScaleBytes>(w, x, xs, y, ys, o);
  if constexpr (O > 4)
    for (; o + 4 <= o_end; o += 4) tile_z<D, R, 4, ScaleBytes>(w, x, xs, y, ys, o);
  for (; o < o_end; ++o) tile_z<D, R, 1, ScaleBytes>(w, x, xs, y, ys, o);
}

// Wide passes (>= kWideRows rows, prefill): GEMM blocking. Rows go in blocks whose activations
// (wide_blocking().row_bytes) stay in L2; within a block, the weights are decoded to f32 once per
// block of kWideOut outputs and reused by every row, so the loop is FMA-bound rather than
// decode-bound. k runs in chunks (wide_blocking().k_chunk): one chunk of the block's weights and
// of a row group's activations stay in L1 while every tile passes over them, each copied
// chunk-major (contiguous per chunk) so that a tile's loads walk a few consecutive lines;
// accumulators are parked in memory between chunks. Tiles are kWideTileR rows x kWideTileO
// outputs. Each (row, output) still accumulates k = 0, 16, 32, ... into its own 16 lanes in
// order, then finishes as tile_z does (finish_tile_z): the canonical order, bit for bit.
// 6 x 4 tiles at k chunks of 384 measured best of 4 x 4, 4 x 6, 6 x 4 at 256, 384, 512 on the
// Xeon (docs/PERFORMANCE.md).
constexpr int kWideTileR = 6, kWideTileO = 4;
constexpr int64_t kWideOut = 16;
static_assert(kWideOut % kWideTileO == 0);

// R rows x O outputs over n (a multiple of 16) consecutive k: weights at wr + j * n, activations
// at x + r * n; acc holds [R][O] vectors of 16 lanes, started at +0 unless resume.
template <int R, int O>
[[gnu::noinline]] void tile_f32z(const float* wr, const float* x, int64_t n, bool resume,
                                 float* acc) {
  __m512 a[R][O];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j)
      a[r][j] = resume ? _mm512_load_ps(acc + (r * O + j) * 16) : _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 16) {
    __m512 wv[O];
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) wv[j] = _mm512_load_ps(wr + j * n + k);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_load_ps(x + r * n + k);
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j) a[r][j] = _mm512_fmadd_ps(wv[j], xv, a[r][j]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) _mm512_store_ps(acc + (r * O + j) * 16, a[r][j]);
}

template <class D>
void range_wide_z(const PackedWeight& w, const float* x, int64_t n_rows, int64_t xs, float* y,
                  int64_t ys, int64_t o_begin, int64_t o_end) {
  constexpr int TR = kWideTileR, TO = kWideTileO;
  const int64_t K = w.cols, K16 = K - K % 16, KT = K - K16;
  const WideBlocking blocking = wide_blocking();
  const int64_t kc = blocking.k_chunk;
  // Row blocks of equal size (a multiple of TR) whose activations fit blocking.row_bytes.
  const int64_t fit = std::max<int64_t>(TR, blocking.row_bytes / (K * 4) / TR * TR);
  const int64_t n_blocks = (n_rows + fit - 1) / fit;
  const int64_t mb = ((n_rows + n_blocks - 1) / n_blocks + TR - 1) / TR * TR;
  // Chunk c holds k in [c kc, min(K16, (c + 1) kc)), width wc; element (i, k) of a
  // chunk-major copy with m rows sits at m k0 + i wc + (k - k0). k in [K16, K) stays apart.
  const auto wbuf = alloc_aligned64<float>(size_t(kWideOut * K16));
  const auto wtail = alloc_aligned64<float>(size_t(kWideOut * KT));
  const auto xbuf = alloc_aligned64<float>(size_t(mb * K16));
  // 16 lanes at acc + (((g * kWideOut / TO + jt) * TR + r) * TO + j) * 16: row TR g + r of the
  // block, output o0 + TO jt + j (a short tile packs its R x O vectors from the group's slot).
  const auto acc = alloc_aligned64<float>(size_t(mb * kWideOut * 16));
  const auto tile_acc = [&](int64_t g, int64_t jt) {
    return acc.get() + (g * (kWideOut / TO) + jt) * TR * TO * 16;
  };
  const int64_t n_chunks = (K16 + kc - 1) / kc;
  float post[kWideOut];
  D d;
  d.init(w);
  for (int64_t r0 = 0; r0 < n_rows; r0 += mb) {
    const int64_t m = std::min(mb, n_rows - r0);
    for (int64_t k0 = 0; k0 < K16; k0 += kc) {
      const int64_t wc = std::min(kc, K16 - k0);
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(xbuf.get() + m * k0 + i * wc, x + (r0 + i) * xs + k0, size_t(wc) * 4);
    }
    for (int64_t o0 = o_begin; o0 < o_end; o0 += kWideOut) {
      const int64_t no = std::min(o_end, o0 + kWideOut) - o0;
      for (int64_t j = 0; j < no; ++j) {
        d.row(o0 + j);
        for (int64_t k0 = 0; k0 < K16; k0 += kc) {
          const int64_t wc = std::min(kc, K16 - k0);
          float* wr = wbuf.get() + no * k0 + j * wc - k0;
          for (int64_t k = k0; k < k0 + wc; k += 16) _mm512_store_ps(wr + k, d.decode16z(k));
        }
        for (int64_t k = K16; k < K; ++k) wtail[j * KT + k - K16] = d.at(k);
        post[j] = d.post();
      }
      for (int64_t c = 0; c < n_chunks; ++c) {
        const int64_t k0 = c * kc, wc = std::min(kc, K16 - k0);
        for (int64_t g = 0; g * TR < m; ++g)
          with_count<TR>(m - TR * g, [&]<int R>() {
            for (int64_t j = 0; j < no; j += TO)
              with_count<TO>(no - j, [&]<int O>() {
                tile_f32z<R, O>(wbuf.get() + no * k0 + j * wc, xbuf.get() + m * k0 + TR * g * wc,
                                wc, c > 0, tile_acc(g, j / TO));
              });
          });
      }
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = x + (r0 + i) * xs;
        const int64_t g = i / TR;
        float t[kWideOut];
        for (int64_t j = 0; j < no; ++j) {
          t[j] = 0.0f;
          for (int64_t k = K16; k < K; ++k) t[j] = std::fma(wtail[j * KT + k - K16], xr[k], t[j]);
        }
        // A short tile packs its R x O vectors from the tile's slot.
        const auto lanes = [&](int64_t j) {
          const int64_t O = std::min<int64_t>(TO, no - j / TO * TO);
          return n_chunks > 0 ? _mm512_load_ps(tile_acc(g, j / TO) + ((i % TR) * O + j % TO) * 16)
                              : _mm512_setzero_ps();
        };
        float* yr = y + (r0 + i) * ys + o0;
        int64_t j = 0;
        for (; j + 16 <= no; j += 16) {
          __m512 a[16];
#pragma GCC unroll 16
          for (int p = 0; p < 16; ++p) a[p] = lanes(j + p);
          finish_lanes16(a, t + j, post + j, yr + j);
        }
        for (; j < no; ++j) yr[j] = finish_lanes(lanes(j), t[j], post[j]);
      }
    }
  }
}

// Up to MaxRows rows (kMaxRowsZ, or kMaxRowsZIntel in the Intel kernels): one pass over the
// weights. MaxRows + 1..D::kWideRows-1 rows: output blocks small enough to stay in L2 (~64 KB of
// packed weights) are swept by every row group in turn (even_row_groups of at most MaxRows: 8 rows
// as 4 + 4 where MaxRows is 7), decoding in registers, so memory is read once. Wider:
// range_wide_z. Each decoder sets kWideRows where the
// wide path starts to pay (measured on Zen 5: only NVFP4's decode is dear enough; FP8 and the
// dense formats ran faster swept at 64 rows too). WideRows overrides it for a CPU that measured
// otherwise (range_fp8_avx512_wide); TileShape the tiles' widths and table rows (FourOutputs).
template <class D, int64_t WideRows = D::kWideRows, int MaxRows = kMaxRowsZ,
          class TileShape = FourOutputs>
void range_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t xs, float* y,
                  int64_t ys, int64_t o_begin, int64_t o_end) {
  if (n_rows <= 0 || o_begin >= o_end) return;
  if (n_rows >= WideRows) return range_wide_z<D>(w, x, n_rows, xs, y, ys, o_begin, o_end);
  // The tiles' activations: x itself, or for a PermutedLanes decoder a copy in its lane order
  // (the wide passes decode in canonical order, D::decode16z).
  std::unique_ptr<float[], FreeDeleter> laid;
  if constexpr (PermutedLanes<D>) {
    const int64_t K = w.cols;
    laid = alloc_aligned64<float>(size_t(n_rows * K));
    for (int64_t r = 0; r < n_rows; ++r) lay_row_lanes<D>(x + r * xs, K, laid.get() + r * K);
    x = laid.get(), xs = K;
  }
  const auto rows = [&](int64_t r0, int64_t n, int64_t o0, int64_t o1) {
    const float* xr = x + r0 * xs;
    float* yr = y + r0 * ys;
    with_row_tile<MaxRows>(n, [&]<int R>() {
      rows_z<D, R, TileShape::outputs(R), TileShape::scale_bytes(R)>(w, xr, xs, yr, ys, o0, o1);
    });
  };
  if (n_rows <= MaxRows) return rows(0, n_rows, o_begin, o_end);
  const int64_t ob = swept_block_outputs(w);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += ob) {
    const int64_t o1 = std::min(o_end, o0 + ob);
    even_row_groups(n_rows, MaxRows, [&](int64_t r, int64_t n) { rows(r, n, o0, o1); });
  }
}

#pragma GCC pop_options

// ---- Arith::Bf16 with VDPBF16PS (NVFP4 and FP8; the formats' files hold the decoders and the
// order) ----
// T::round_row(x, K, words, tail) prepares a row: its K32 chunks as bf16 words in the decoder's
// order (stride K), its tail [K32, K) as f32 (stride K - K32). T::Cursor walks one output row:
// init(w, o), decode(k0) = the chunk's 32 weights as bf16 words in that order, and
// prefetch_next_tile<O, L2>(step) on the tile's first row = step's share of the next O rows (into
// L2 if L2), one of them every T::kPrefetchK weights (prefetch_tile_bf16). T::Ref is the format's
// scalar decoder (tails and post). T::kFinishInRegisters: tile_bf16_z finishes each (r, j) from its
// accumulator, else through a staged copy (the formats' files say what each measured).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c,bmi2")

// A tile's prefetch every T::kPrefetchK weights, of the next O rows: T::kPrefetchOneRow in one-row
// tiles, T::kPrefetchRows in the others (the formats' files say what each measured; a row-by-row
// kind into L1 was last used by FP8 until 2026-12-04). Both go through the asm helper above
// (prefetch_lines): GCC 12 drops a cursor's _mm_prefetch depending on the code around it (at
// 7194cbb from the 2-row remainder tile; in an experimental build from every 2+-row tile).
enum class TilePrefetch {
  kNextTile,    // the next tile as one sequential run into L1 (prefetch_next_tile<O, false>)
  kNextTileL2,  // the same into L2 (prefetch_next_tile<O, true>): it leaves L1 to the activations
};
template <class T, int R, int O>
inline void prefetch_tile_bf16(const typename T::Cursor (&c)[O], int64_t k0) {
  if ((k0 & (T::kPrefetchK - 1)) != 0) return;
  constexpr TilePrefetch how = R == 1 ? T::kPrefetchOneRow : T::kPrefetchRows;
  c[0].template prefetch_next_tile<O, how == TilePrefetch::kNextTileL2>(k0 / T::kPrefetchK);
}

// tile_tails: visit(r, j, t, post) for every (r, j), t and post as finish_tile_bf16 takes them.
template <class T, int R, int O, class Visit>
[[gnu::always_inline]] inline void tile_tails(const PackedWeight& w, const float* xt, int64_t o,
                                              Visit&& visit) {
  const int64_t K = w.cols, K32 = K - K % 32, KT = K - K32;
  typename T::Ref d;
  d.init(w);
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) {
    d.row(o + j);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float t = 0.0f;
      for (int64_t k = K32; k < K; ++k) t = std::fma(d.at(k), xt[r * KT + (k - K32)], t);
      visit(r, j, t, d.post());
    }
  }
}
// The end of a tile: y(r, j) = fin(r, j, t, post), t the tail [K32, K) of row r and output
// o + j, fin the canonical finish of its accumulated lanes (finish_lanes, as the f32 kernels
// finish). The loops are unrolled so that fin may read accumulators in registers.
template <class T, int R, int O, class Fin>
[[gnu::always_inline]] inline void finish_tile_bf16(const PackedWeight& w, const float* xt,
                                                    float* y, int64_t ys, int64_t o, Fin&& fin) {
  tile_tails<T, R, O>(
      w, xt, o, [&](int r, int j, float t, float post) { y[r * ys + o + j] = fin(r, j, t, post); });
}

// finish_tile_bf16 for tiles of 16+ (row, output) pairs, through finish_pairs. (Twenty-four
// scalar finishes after 84 chunks were a visible part of an 8-row FP8 tile: docs/PERFORMANCE.md,
// 2026-12-06.)
template <class T, int R, int O>
[[gnu::always_inline]] inline void finish_tile_bf16_by16(const PackedWeight& w, const float* xt,
                                                         float* y, int64_t ys, int64_t o,
                                                         const __m512 (&acc)[R][O]) {
  static_assert(R * O >= 16);
  alignas(64) float t[R * O], post[R * O];
  tile_tails<T, R, O>(
      w, xt, o, [&](int r, int j, float tr, float pr) { t[r * O + j] = tr, post[r * O + j] = pr; });
  finish_pairs<R, O>([&](int r, int j) { return acc[r][j]; }, t, post, y, ys, o);
}

// R rows x O outputs [o, o + O). The accumulators leave the registers only once, through
// `lanes` (indexing them in the finishing loop spilled them on every iteration of the main
// loop).
// With T::kScaleWords the chunks go four at a time (128 weights, one T::kPrefetchK step) while
// they last, each output's decode taking its rows from T::Cursor::scale_word(k0) (the same chunks
// in the same order, so the same bits), then one at a time.
template <class T>
inline constexpr bool kStepsByScaleWord = requires {
  requires T::kScaleWords;
};
// Outputs a one-row tile_bf16_z takes: T::kOneRowOutputs where T says, else 8.
template <class T>
inline constexpr int kOneRowOutputs = [] {
  if constexpr (requires { T::kOneRowOutputs; })
    return T::kOneRowOutputs;
  else
    return 8;
}();
template <class T, int R, int O>
[[gnu::noinline]] void tile_bf16_z(const PackedWeight& w, const uint16_t* xw, const float* xt,
                                   float* y, int64_t ys, int64_t o) {
  const int64_t K = w.cols, K32 = K - K % 32;
  typename T::Cursor c[O];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) c[j].init(w, o + j);
  __m512 acc[R][O];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) acc[r][j] = _mm512_setzero_ps();
  // The chunk at k of every row against the tile's decoded weights.
  const auto dots = [&](int64_t k, const __m512i(&wv)[O]) [[gnu::always_inline]] {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_loadu_si512(xw + r * K + k);
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j)
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], (__m512bh)xv);
    }
  };
  int64_t k_words = 0;
  if constexpr (kStepsByScaleWord<T>) {
    static_assert(T::kPrefetchK == 128);
    for (; k_words + 128 <= K32; k_words += 128) {
      prefetch_tile_bf16<T, R, O>(c, k_words);
      uint64_t sw[O];
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j) sw[j] = c[j].scale_word(k_words);
#pragma GCC unroll 4
      for (int dk = 0; dk < 128; dk += 32) {
        __m512i wv[O];
#pragma GCC unroll 16
        for (int j = 0; j < O; ++j) wv[j] = c[j].decode(k_words, dk, sw[j]);
        dots(k_words + dk, wv);
      }
    }
  }
  for (int64_t k0 = k_words; k0 < K32; k0 += 32) {
    prefetch_tile_bf16<T, R, O>(c, k0);
    __m512i wv[O];
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) wv[j] = c[j].decode(k0);
    dots(k0, wv);
  }
  if constexpr (R * O >= 16) {
    finish_tile_bf16_by16<T, R, O>(w, xt, y, ys, o, acc);
  } else if constexpr (T::kFinishInRegisters) {
    // Straight from the accumulators: NVFP4 4 rows 1.06x on Zen 4 (docs/PERFORMANCE.md).
    finish_tile_bf16<T, R, O>(w, xt, y, ys, o, [&](int r, int j, float t, float post) {
      return finish_lanes(acc[r][j], t, post);
    });
  } else {
    alignas(64) float lanes[R][O][16];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j) _mm512_store_ps(lanes[r][j], acc[r][j]);
    finish_tile_bf16<T, R, O>(w, xt, y, ys, o, [&](int r, int j, float t, float post) {
      return finish_lanes(_mm512_loadu_ps(lanes[r][j]), t, post);
    });
  }
}

// Outputs per tile: 8 for 1-2 rows, 5 for 3, 4 for 4-5, 3 for 6-8 (8-24 accumulators of the 32
// registers). VDPBF16PS has ~1.9 ns latency on Zen 5, so a tile needs that many independent
// chains: with 4 outputs at 1-3 rows and 2 at 5-8 the same passes measured 1.1-1.5x slower
// (docs/PERFORMANCE.md). Rows go in groups of bf16_row_group(n_rows, K) over output blocks of
// ~64 KB of weights, so memory is read once however many groups sweep a block.
template <class T, int R>
inline void rows_bf16_z(const PackedWeight& w, const uint16_t* xw, const float* xt, float* y,
                        int64_t ys, int64_t o_begin, int64_t o_end) {
  constexpr int O = R == 1 ? kOneRowOutputs<T> : R <= 2 ? 8 : R == 3 ? 5 : R <= 5 ? 4 : 3;
  int64_t o = o_begin;
  for (; o + O <= o_end; o += O) tile_bf16_z<T, R, O>(w, xw, xt, y, ys, o);
  for (; o < o_end; ++o) tile_bf16_z<T, R, 1>(w, xw, xt, y, ys, o);
}

// The tile of tile_bf16_z for decoders whose chunk is two 16-weight scale blocks, one ymm each:
// T::Cursor::decode_halves(k0, dk, lo, hi) gives each block's weights as bf16 (or, with
// sw = T::Cursor::scale_word(k0), decode_halves(k0, dk, sw, lo, hi)), over activations laid out
// the same way (T::round_row_halves): lane m of block h's accumulator sums the pair of elements
// that lane 4 * (m / 2) + 2h + m % 2 of tile_bf16_z sums, in the same order, so the result is the
// same bits. Where a 512-bit operation runs as two 256-bit halves (Zen 4) a block's
// product row can be the permute's memory operand, with no merging of two rows into one zmm and no
// VPTERNLOGD: 1-2-row NVFP4 passes ran 1.10-1.25x faster there, and with the step unrolling and
// the scale words 3 rows too (64 x 2688 L2-resident 10.44 -> 8.23 us, 131072 x 2688 streamed
// 24.1 -> 21.5 ms), and 4 rows with 2 outputs per tile (with 3, 2 * 4 * 3 accumulators and 8
// activation registers left none for the decode and spilled: 26.4 -> 32.0 ms streamed, the
// first try) and the next tile prefetched into L1 (2026-12-04, night: 64 x 2688 11.45 -> 9.45 us,
// streamed 26.3 -> 22.4 ms; docs/PERFORMANCE.md). 4 outputs per tile at 1-2 rows (8 at one row
// spilled accumulators and pointers and ran 0.9-1.0x), 3 at 3 rows (2: 8.24 us), 2 at 4 (3: 1.05x
// slower).
template <class T, int R, int O>
[[gnu::noinline]] void tile_bf16_y(const PackedWeight& w, const uint16_t* xw, const float* xt,
                                   float* y, int64_t ys, int64_t o) {
  const int64_t K = w.cols, K32 = K - K % 32;
  typename T::Cursor c[O];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) c[j].init(w, o + j);
  __m256 acc0[R][O], acc1[R][O];  // blocks 0 and 1 (one 3-d array stayed in memory)
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) acc0[r][j] = acc1[r][j] = _mm256_setzero_ps();
  // The chunk at k0 + dk into the accumulators (same order at any unrolling), its scales from the
  // step's scale words sw (one per output) or, without them, byte by byte.
  const auto chunk = [&](int64_t k0, int dk, const uint64_t* sw) [[gnu::always_inline]] {
    __m256i x0[R], x1[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      x0[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xw + r * K + k0 + dk));
      x1[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xw + r * K + k0 + dk + 16));
    }
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) {
      // Each output's blocks are used as soon as decoded: 2 registers live, not 2 * O (with all
      // decoded first the accumulators spilled).
      __m256i lo, hi;
      if (sw)
        c[j].decode_halves(k0, dk, sw[j], lo, hi);
      else
        c[j].decode_halves(k0, dk, lo, hi);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        acc0[r][j] = _mm256_dpbf16_ps(acc0[r][j], (__m256bh)lo, (__m256bh)x0[r]);
        acc1[r][j] = _mm256_dpbf16_ps(acc1[r][j], (__m256bh)hi, (__m256bh)x1[r]);
      }
    }
  };
  // A prefetch step's chunks in one iteration: the loop's own instructions, the prefetch test and
  // the scale-word loads once per T::kPrefetchK weights (128: 8 blocks, one 8-byte scale word per
  // output). Zen 4, L2-resident 64 x 2688, 1 / 2 rows: 5.01 / 6.79 -> 4.64 / 6.33 us
  // (docs/PERFORMANCE.md).
  constexpr int U = int(T::kPrefetchK / 32);
  static_assert(U == 4, "a step is one scale word: 8 blocks of 16");
  int64_t k0 = 0;
  for (; k0 + 32 * U <= K32; k0 += 32 * U) {
    prefetch_tile_bf16<T, R, O>(c, k0);
    uint64_t sw[O];
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) sw[j] = c[j].scale_word(k0);
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) chunk(k0, 32 * u, sw);
  }
  for (; k0 < K32; k0 += 32) {
    prefetch_tile_bf16<T, R, O>(c, k0);
    chunk(k0, 0, nullptr);
  }
  // finish_lanes of lanes l = 4a + 2b + c = acc_b[2a + c], without leaving the registers (the
  // lanes staged through memory by scalar stores and read back as one zmm cost ~5 % of a one-row
  // pass on Zen 4: docs/PERFORMANCE.md, 2026-12-04). Its v[l] = lane l + lane l + 8 is
  // s_b[2a + c] with s_b[i] = acc_b[i] + acc_b[i + 4] (a < 2), and hsum8_fixed(v) =
  // ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) = ((s0[0] + s0[2]) + (s1[0] + s1[2])) +
  // ((s0[1] + s0[3]) + (s1[1] + s1[3])): the same adds of the same operands.
  finish_tile_bf16<T, R, O>(w, xt, y, ys, o, [&](int r, int j, float t, float post) {
    const __m128 s0 =
        _mm_add_ps(_mm256_castps256_ps128(acc0[r][j]), _mm256_extractf128_ps(acc0[r][j], 1));
    const __m128 s1 =
        _mm_add_ps(_mm256_castps256_ps128(acc1[r][j]), _mm256_extractf128_ps(acc1[r][j], 1));
    const __m128 q =
        _mm_add_ps(_mm_add_ps(s0, _mm_movehl_ps(s0, s0)), _mm_add_ps(s1, _mm_movehl_ps(s1, s1)));
    return (_mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_movehdup_ps(q)) + t) * post;
  });
}

template <class T, int R>
inline void rows_bf16_y(const PackedWeight& w, const uint16_t* xw, const float* xt, float* y,
                        int64_t ys, int64_t o_begin, int64_t o_end) {
  constexpr int O = R <= 2 ? 4 : R == 3 ? 3 : 2;
  int64_t o = o_begin;
  for (; o + O <= o_end; o += O) tile_bf16_y<T, R, O>(w, xw, xt, y, ys, o);
  for (; o < o_end; ++o) tile_bf16_y<T, R, 1>(w, xw, xt, y, ys, o);
}

// x~ of one row as bf16 in k order (VCVTNE2PS2BF16, nearest even; what it would flush as
// subnormal is below 2^-100 and zeroed first), then the tail [K32, K) as f32 in k order.
inline void round_row_bf16_kord(const float* x, int64_t K, uint16_t* words, float* tail) {
  const __m512 tiny = _mm512_set1_ps(0x1p-100f);
  const int64_t K32 = K - K % 32;
  for (int64_t k0 = 0; k0 < K32; k0 += 32) {
    __m512 a = _mm512_loadu_ps(x + k0), b = _mm512_loadu_ps(x + k0 + 16);
    a = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(a), tiny, _CMP_NLT_UQ), a);
    b = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(b), tiny, _CMP_NLT_UQ), b);
    _mm512_storeu_si512(words + k0, (__m512i)_mm512_cvtne2ps_pbh(b, a));
  }
  for (int64_t k = K32; k < K; ++k) tail[k - K32] = round_activation_bf16(x[k]);
}

// Rows of a tile_bf16_z pass: all of up to 8 in one sweep; more in groups of 8 while 8 rows of
// bf16 activations (16 K bytes) fit in half of L1 beside the streamed weights, else of 4 (the
// formats' files say what each measured).
inline int64_t bf16_row_group(int64_t n_rows, int64_t K) {
  return n_rows <= 8 || 16 * K <= 32 * 1024 ? 8 : 4;
}

// Passes of up to HalvesRows (0 or 4) rows take tile_bf16_y over rows in T::round_row_halves's
// order (with 0, T needs neither it nor decode_halves), the others tile_bf16_z over rows in
// T::round_row's order.
template <class T, int64_t HalvesRows = 0>
void range_bf16_z(const PackedWeight& w, const float* x, int64_t n_rows, int64_t xs, float* y,
                  int64_t ys, int64_t o_begin, int64_t o_end) {
  static_assert(HalvesRows == 0 || HalvesRows == 4);
  if (n_rows <= 0 || o_begin >= o_end) return;
  const int64_t K = w.cols, K32 = K - K % 32;
  const auto xw = alloc_aligned64<uint16_t>(size_t(std::max<int64_t>(1, n_rows * K)));
  const auto xt = alloc_aligned64<float>(size_t(std::max<int64_t>(1, n_rows * (K - K32))));
  if constexpr (HalvesRows > 0)
    if (n_rows <= HalvesRows) {
      for (int64_t r = 0; r < n_rows; ++r)
        T::round_row_halves(x + r * xs, K, xw.get() + r * K, xt.get() + r * (K - K32));
      const auto rows = [&]<int R>() {
        rows_bf16_y<T, R>(w, xw.get(), xt.get(), y, ys, o_begin, o_end);
      };
      if (n_rows == 1) return rows.template operator()<1>();
      if (n_rows == 2) return rows.template operator()<2>();
      if (n_rows == 3) return rows.template operator()<3>();
      return rows.template operator()<4>();
    }
  for (int64_t r = 0; r < n_rows; ++r)
    T::round_row(x + r * xs, K, xw.get() + r * K, xt.get() + r * (K - K32));
  const int64_t group = bf16_row_group(n_rows, K);
  const int64_t ob = n_rows <= group ? o_end - o_begin : swept_block_outputs(w);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += ob) {
    const int64_t o1 = std::min(o_end, o0 + ob);
    for (int64_t r = 0; r < n_rows; r += group) {
      const uint16_t* xr = xw.get() + r * K;
      const float* tr = xt.get() + r * (K - K32);
      float* yr = y + r * ys;
      with_row_tile<8>(std::min(group, n_rows - r),
                       [&]<int R>() { rows_bf16_z<T, R>(w, xr, tr, yr, ys, o0, o1); });
    }
  }
}

#pragma GCC pop_options

// The AVX2 tile of the formats whose words are in k order (FP8, bf16; NVFP4 has its own): R rows
// x O outputs over activations laid out by lay_row_bf16_pairs<T> with pair_even(p) = 2p. Each
// 16-weight half of a chunk is two 8-lane vectors, its odd elements' weights then its even ones'
// (T::half(row, k, odd, even), row = output row's first byte), each taken into the lanes by
// T::step(w, x~, acc) (a fused multiply-add, and for bf16 weights the instruction's flush);
// the next tile's bytes prefetched a line per 64 bytes; the finish and the tail [K32, K) from
// T::Ref, as the reference's.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
template <class T, int R, int O>
[[gnu::noinline]] void tile_kord_bf16_avx2(const PackedWeight& w, const float* xl, float* y,
                                           int64_t ys, int64_t o) {
  constexpr int64_t es = T::kWeightBytes;
  const int64_t K = w.cols, K32 = K - K % 32;
  const uint8_t* rp[O];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) rp[j] = static_cast<const uint8_t*>(w.data) + (o + j) * K * es;
  __m256 a[O][R], b[O][R];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) a[j][r] = b[j][r] = _mm256_setzero_ps();
  // T::kFlushByMxcsr: the chunks under denormals-are-zero and flush-to-zero (bf16 weights). The
  // empty asm statements pin the accumulators between the two MXCSR writes: without them the
  // compiler may move arithmetic across the writes, which it takes for unrelated to floats.
  constexpr bool by_mxcsr = requires {
    requires T::kFlushByMxcsr;
  };
  const unsigned csr = by_mxcsr ? _mm_getcsr() : 0;
  const auto pin = [&] {
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) asm volatile("" : "+x"(a[j][r]), "+x"(b[j][r]));
  };
  if constexpr (by_mxcsr) {
    _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ
    pin();
  }
  for (int64_t k0 = 0; k0 < K32; k0 += 32)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) {
      if (((k0 * es) & 63) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(rp[j] + (O * K + k0) * es), _MM_HINT_T0);
      __m256 wo, we;
      T::half(rp[j], k0, wo, we);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const float* xr = xl + r * K + k0;
        a[j][r] = T::step(wo, _mm256_loadu_ps(xr), a[j][r]);
        a[j][r] = T::step(we, _mm256_loadu_ps(xr + 8), a[j][r]);
      }
      T::half(rp[j], k0 + 16, wo, we);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const float* xr = xl + r * K + k0 + 16;
        b[j][r] = T::step(wo, _mm256_loadu_ps(xr), b[j][r]);
        b[j][r] = T::step(we, _mm256_loadu_ps(xr + 8), b[j][r]);
      }
    }
  if constexpr (by_mxcsr) {
    pin();
    _mm_setcsr(csr);
    pin();
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {  // -0 -> +0
        a[j][r] = _mm256_add_ps(a[j][r], _mm256_setzero_ps());
        b[j][r] = _mm256_add_ps(b[j][r], _mm256_setzero_ps());
      }
  }
  typename T::Ref d;
  d.init(w);
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) {
    d.row(o + j);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      alignas(32) float v[8];
      _mm256_store_ps(v, _mm256_add_ps(a[j][r], b[j][r]));
      float t = 0.0f;
      for (int64_t k = K32; k < K; ++k) t = std::fma(d.at(k), xl[r * K + k], t);
      y[r * ys + o + j] = (hsum8_fixed(v) + t) * d.post();
    }
  }
}
// The T of range_bf16_pairs for such a format.
template <class T>
struct KordBf16Pairs {
  static constexpr int pair_even(int p) { return 2 * p; }  // words in k order
  static constexpr int kPairApart = 1;
  template <int R, int O>
  static void tile(const PackedWeight& w, const float* xl, float* y, int64_t ys, int64_t o) {
    tile_kord_bf16_avx2<T, R, O>(w, xl, y, ys, o);
  }
};
#pragma GCC pop_options

// On AVX2: T::tile<R, O>(w, xl, y, ys, o) over rows laid out by lay_row_bf16_pairs<T> (stride K);
// tiles of up to 4 rows, two outputs at 1-2 rows (each chunk is two dependent FMAs per
// accumulator, so one or two rows need more chains in flight).
template <class T, int R>
inline void rows_bf16_pairs(const PackedWeight& w, const float* xl, float* y, int64_t ys,
                            int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  if constexpr (R <= 2)
    for (; o + 2 <= o_end; o += 2) T::template tile<R, 2>(w, xl, y, ys, o);
  for (; o < o_end; ++o) T::template tile<R, 1>(w, xl, y, ys, o);
}

template <class T>
void range_bf16_pairs(const PackedWeight& w, const float* x, int64_t n_rows, int64_t xs, float* y,
                      int64_t ys, int64_t o_begin, int64_t o_end) {
  if (n_rows <= 0 || o_begin >= o_end) return;
  const int64_t K = w.cols;
  const auto xl = alloc_aligned64<float>(size_t(n_rows * K));
  for (int64_t r = 0; r < n_rows; ++r) lay_row_bf16_pairs<T>(x + r * xs, K, xl.get() + r * K);
  const int64_t ob = n_rows <= 4 ? o_end - o_begin : swept_block_outputs(w);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += ob) {
    const int64_t o1 = std::min(o_end, o0 + ob);
    for (int64_t r = 0; r < n_rows; r += 4)
      with_row_tile(n_rows - r, [&]<int R>() {
        rows_bf16_pairs<T, R>(w, xl.get() + r * K, y + r * ys, ys, o0, o1);
      });
  }
}

// Activations for the bf16 kernels' self-checks: magnitudes over 2^-20..2^20 and both signs,
// every 17th a rounding tie, every 19th below the flush threshold. `next` gives 64 random bits.
template <class Next>
inline void self_check_activations(Next&& next, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = next();
    const float m = float(r >> 40) * 0x1p-24f * ((r & 1) ? -1.0f : 1.0f);
    x[i] = i % 17 == 3   ? 1.0f + 0x1p-8f
           : i % 19 == 5 ? 0x1p-101f
                         : std::ldexp(m, int((r >> 1) % 41) - 20);
  }
}

// The end of both bf16 self-checks: `kernel` against `ref` over every row count 1..max_rows of x
// (rows of w.cols values), bitwise; false at the first difference.
inline bool self_check_rows(const PackedWeight& w, const float* x, int64_t max_rows, RangeFn ref,
                            RangeFn kernel) {
  const int64_t n_out = w.rows;
  std::vector<float> want(size_t(max_rows * n_out)), got(size_t(max_rows * n_out), -1.0f);
  for (int64_t n = 1; n <= max_rows; ++n) {
    ref(w, x, n, w.cols, want.data(), n_out, 0, n_out);
    kernel(w, x, n, w.cols, got.data(), n_out, 0, n_out);
    if (std::memcmp(want.data(), got.data(), size_t(n * n_out) * 4) != 0) return false;
  }
  return true;
}

}  // namespace nemo::kernels::detail::packed
