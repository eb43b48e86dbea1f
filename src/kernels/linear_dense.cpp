// Dense (f32 / bf16 / f16) linear kernels.
//
// Canonical reduction for one (row r, output o) pair, shared by every ISA so results are bitwise
// identical across ISAs, tiles and thread counts:
//   acc[0..15] = 0; for k in steps of 16: acc[l] = fma(w[k+l], x[k+l], acc[l])
//   v[l] = acc[l] + acc[l+8] (l < 8); s = hsum8_fixed(v)
//   tail (k >= cols - cols%16): t = fma(w[k], x[k], t) sequentially from 0; y = s + t
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "base/random.h"
#include "kernels/linear_impl.h"
#include "kernels/linear_packed.h"

namespace nemo::kernels::detail {

namespace {

inline float load_w(const PackedWeight& w, int64_t idx) {
  switch (w.format) {
    case WeightFormat::F32: {
      float v;
      std::memcpy(&v, static_cast<const uint8_t*>(w.data) + 4 * idx, 4);
      return v;
    }
    case WeightFormat::BF16: {
      uint16_t b;
      std::memcpy(&b, static_cast<const uint8_t*>(w.data) + 2 * idx, 2);
      return bf16_to_f32(b);
    }
    case WeightFormat::F16: {
      uint16_t b;
      std::memcpy(&b, static_cast<const uint8_t*>(w.data) + 2 * idx, 2);
      return f16_to_f32(b);
    }
    default:
      return NAN;
  }
}

}  // namespace

void dequantize_row_dense(const PackedWeight& w, int64_t o, float* out) {
  for (int64_t k = 0; k < w.cols; ++k) out[k] = load_w(w, o * w.cols + k);
}

void range_dense_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                     float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  const int64_t K = w.cols, K16 = K - K % 16;
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * x_stride;
      float acc[16] = {};
      for (int64_t k = 0; k < K16; k += 16)
        for (int l = 0; l < 16; ++l) acc[l] = std::fma(load_w(w, o * K + k + l), xr[k + l], acc[l]);
      float v[8];
      for (int l = 0; l < 8; ++l) v[l] = acc[l] + acc[l + 8];
      float t = 0.0f;
      for (int64_t k = K16; k < K; ++k) t = std::fma(load_w(w, o * K + k), xr[k], t);
      y[r * y_stride + o] = hsum8_fixed(v) + t;
    }
  }
}

namespace {

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(WeightFormat f, const uint8_t* p) {
  switch (f) {
    case WeightFormat::BF16: {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case WeightFormat::F16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    default:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
}

// The packed formats' decoder interface over dense weights (post = 1, so (s + t) * 1 == s + t),
// ISA-neutral part; the AVX2 and AVX-512 decoders add their decode.
template <WeightFormat F>
struct DenseRows {
  static constexpr int64_t es = F == WeightFormat::F32 ? 4 : 2;
  const PackedWeight* w = nullptr;
  const uint8_t* p = nullptr;  // row o
  int64_t K = 0, o = 0;
  void init(const PackedWeight& pw) { w = &pw, K = pw.cols; }
  void row(int64_t r) { o = r, p = static_cast<const uint8_t*>(w->data) + r * K * es; }
  float at(int64_t k) const { return load_w(*w, o * K + k); }
  float post() const { return 1.0f; }
  // Called every 64 k: every cache line of those 64 weights (2 for 16-bit, 4 for f32).
  void prefetch(int64_t k, int64_t ahead) const {
    const char* a = reinterpret_cast<const char*>(p + (ahead * K + k) * es);
    for (int64_t line = 0; line < es; ++line) _mm_prefetch(a + 64 * line, _MM_HINT_T0);
  }
};

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// One row runs packed::rows_fused, two outputs at a time with the next rows prefetched (one
// output's two FMA chains are latency-bound: bf16 10304x2688, 1 row, 1 thread, ~1.4x slower).
template <WeightFormat F>
struct DenseAvx2 : DenseRows<F> {
  using DenseRows<F>::es;
  using DenseRows<F>::p;
  void decode16(int64_t k, __m256& w0, __m256& w1) const {
    w0 = load8(F, p + k * es);
    w1 = load8(F, p + (k + 8) * es);
  }
};

#pragma GCC pop_options

template <WeightFormat F, int R>
[[gnu::noinline]] __attribute__((target("avx2,fma,f16c"))) void tile_avx2(
    const PackedWeight& w, const float* x, int64_t x_stride, float* y, int64_t y_stride,
    int64_t o) {
  constexpr int64_t es = F == WeightFormat::F32 ? 4 : 2;
  const int64_t K = w.cols, K16 = K - K % 16;
  const uint8_t* wr = static_cast<const uint8_t*>(w.data) + o * K * es;
  __m256 a0[R], a1[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16) {
    const __m256 w0 = load8(F, wr + k * es), w1 = load8(F, wr + (k + 8) * es);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * x_stride + k;
      a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), a0[r]);
      a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), a1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(a0[r], a1[r]));
    float t = 0.0f;
    const float* xr = x + r * x_stride;
    for (int64_t k = K16; k < K; ++k) t = std::fma(load_w(w, o * K + k), xr[k], t);
    y[r * y_stride + o] = hsum8_fixed(v) + t;
  }
}

template <WeightFormat F>
__attribute__((target("avx2,fma,f16c"))) void range_avx2_fmt(const PackedWeight& w, const float* x,
                                                             int64_t n_rows, int64_t x_stride,
                                                             float* y, int64_t y_stride,
                                                             int64_t o_begin, int64_t o_end) {
  if (n_rows == 1) return packed::rows_fused<DenseAvx2<F>>(w, x, y, o_begin, o_end);
  // Outputs in blocks so the weight block stays cache-resident while all row tiles pass over it.
  const int64_t es = F == WeightFormat::F32 ? 4 : 2;
  const int64_t ob = std::max<int64_t>(1, (256 * 1024) / std::max<int64_t>(1, w.cols * es));
  for (int64_t o0 = o_begin; o0 < o_end; o0 += ob) {
    const int64_t o1 = std::min(o_end, o0 + ob);
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4)
      for (int64_t o = o0; o < o1; ++o)
        tile_avx2<F, 4>(w, x + r * x_stride, x_stride, y + r * y_stride, y_stride, o);
    for (; r < n_rows; ++r)
      for (int64_t o = o0; o < o1; ++o)
        tile_avx2<F, 1>(w, x + r * x_stride, x_stride, y + r * y_stride, y_stride, o);
  }
}

}  // namespace

void range_dense_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                      float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  switch (w.format) {
    case WeightFormat::BF16:
      return range_avx2_fmt<WeightFormat::BF16>(w, x, n_rows, x_stride, y, y_stride, o_begin,
                                                o_end);
    case WeightFormat::F16:
      return range_avx2_fmt<WeightFormat::F16>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
    default:
      return range_avx2_fmt<WeightFormat::F32>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
  }
}

// ---- AVX-512: the packed formats' tile driver (linear_packed.h) over a dense "decoder" ----
// The canonical order above is the packed one with post = 1 ((s + t) * 1 == s + t), so the
// tiles of up to 4 rows x 4 outputs and the wide f32-block path serve the dense formats unchanged.
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")

template <WeightFormat F>
struct DenseAvx512 : DenseRows<F> {
  using DenseRows<F>::es;
  using DenseRows<F>::p;
  using DenseRows<F>::K;
  // Never wide: sweeping measured 14-45 % faster at 8-64 rows (bf16; Zen 5, before the wide
  // path's scratch was 64-byte aligned); range_dense_avx512_wide is wide from 32.
  static constexpr int64_t kWideRows = INT64_MAX;
  // 64 k of O rows: O * es lines of the next tile's rows, which are contiguous, into L2 in every
  // tile (kNextTileL2Rows; none into L1): a tile's bf16 rows and the f32 activations leave L1 no
  // room for the next tile. Zen 4, 1 thread, bf16, 2026-12-04 (docs/PERFORMANCE.md): 1 row 20480 x
  // 2688 7.6-9.5 -> 5.6-6.2 ms against the next tile into L1 (itself 1.08x faster than row by row
  // on 12-01), 10240 x 4096 5.6 -> 4.1 ms; 2 / 4 rows 10304 x 2688 4.1-4.7 / 4.5-5.0 -> 3.0-3.3 /
  // 3.0-3.2 ms against row by row into L1 (the next tile into L1 was slower still).
  static constexpr int kNextTileRows = 0;
  static constexpr int kNextTileL2Rows = packed::kMaxRowsZIntel;  // every tile
  template <int O, bool L2>
  void prefetch_next_tile(int64_t step) const {
    packed::prefetch_lines<int(O * es), L2>(p + O * K * es, step);
  }
  __m512 decode16z(int64_t k) const {
    if constexpr (F == WeightFormat::BF16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k));
      // maskz forms: GCC 12's unmasked ones warn of an uninitialised pass-through operand.
      return _mm512_castsi512_ps(
          _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
    } else if constexpr (F == WeightFormat::F16) {
      return _mm512_maskz_cvtph_ps(0xFFFF,
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k)));
    } else {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p + 4 * k));
    }
  }
};

#pragma GCC pop_options

}  // namespace

template <int64_t WideRows, int MaxRows>
void range_dense_avx512_from(const PackedWeight& w, const float* x, int64_t n_rows,
                             int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                             int64_t o_end) {
  switch (w.format) {
    case WeightFormat::BF16:
      return packed::range_avx512<DenseAvx512<WeightFormat::BF16>, WideRows, MaxRows>(
          w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
    case WeightFormat::F16:
      return packed::range_avx512<DenseAvx512<WeightFormat::F16>, WideRows, MaxRows>(
          w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
    default:
      return packed::range_avx512<DenseAvx512<WeightFormat::F32>, WideRows, MaxRows>(
          w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
  }
}

void range_dense_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                        float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  range_dense_avx512_from<DenseAvx512<WeightFormat::BF16>::kWideRows, packed::kMaxRowsZ>(
      w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_dense_avx512_wide(const PackedWeight& w, const float* x, int64_t n_rows,
                             int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                             int64_t o_end) {
  range_dense_avx512_from<32, packed::kMaxRowsZIntel>(w, x, n_rows, x_stride, y, y_stride, o_begin,
                                                      o_end);
}

// ---- bf16 weights with bf16 activations (Arith::Bf16) ----
// The order of FP8's bf16 section (linear_fp8.cpp; docs/FORMATS.md §2.1) with w'[k] = the bf16
// weight and post = 1: x~[k] = round_activation_bf16(x[k]); each 32-weight chunk in k order, lane
// l (0..15) doing
//   acc[l] = step(w'[k0 + 2l + 1], x~[k0 + 2l + 1], acc[l]);
//   acc[l] = step(w'[k0 + 2l],     x~[k0 + 2l],     acc[l]);
// which is VDPBF16PS on words in k order; then v[l] = acc[l] + acc[l + 8], s = hsum8_fixed(v),
// t = an fma chain over the tail [K32, K) of the weights as stored, y = (s + t) * 1.
// Unlike E4M3 and NVFP4 weights, a bf16 weight can be tiny (|w| < 2^-26 makes w * x~ subnormal
// for some x~), so the chunks follow what the instruction does with tiny values (AMD Zen 5,
// tools/bench/probe_vdpbf16ps.cpp): a subnormal weight counts as a zero of its sign, and each
// step is one fma whose result, when nonzero and below 2^-126 in magnitude, becomes +0 (a
// subnormal product inside a normal sum is kept: the step is fused). The accumulators start at +0
// and never hold -0. dense_bf16_kernel_self_check tests exactly these cases on the CPU at hand;
// a CPU that does otherwise runs the AVX2 kernels below, which apply the same rules.
namespace {

inline float daz_bf16_weight(float w) {
  return std::fabs(w) < 0x1p-126f ? std::copysign(0.0f, w) : w;
}
inline float bf16_step(float w, float x, float acc) {
  const float v = std::fma(w, x, acc);
  return v != 0.0f && std::fabs(v) < 0x1p-126f ? 0.0f : v;
}
// A chunk's step of range_dense_bf16_ref: the weight's flush, then the fused step's.
float dense_bf16_step(float w, float x, float acc) {
  return bf16_step(daz_bf16_weight(w), x, acc);
}

}  // namespace

void range_dense_bf16_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                          float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_bf16_ref<DenseRows<WeightFormat::BF16>, packed::k_order_element, dense_bf16_step>(
      w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

// AVX-512 with AVX512_BF16: the packed formats' bf16 tiles (packed::range_bf16_z) over the
// weights as they are stored: a chunk is one 64-byte load, no decode.
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")

struct DenseBf16Z {
  using Ref = DenseRows<WeightFormat::BF16>;
  static constexpr int64_t kPrefetchK = 32;  // a cache line of weights
  // One row as FP8's (linear_fp8.cpp): the next tile into L2. More rows: the next tile into L1
  // (Zen 5, 2 threads, `probe_matrices 2 bf16 4 8`, three alternations, GB/s: attention's qkv
  // 26.2-30.9 against 21.8-28.9 into L2, 25.1-28.1 into L2 two tiles ahead; 8 rows again 26.4-29.4
  // against 24.0-24.9 and an outlier of 9.6; 4 rows within the noise).
  static constexpr auto kPrefetchOneRow = packed::TilePrefetch::kNextTileL2;
  static constexpr auto kPrefetchRows = packed::TilePrefetch::kNextTile;
  static constexpr bool kFinishInRegisters = false;
  struct Cursor {
    const uint16_t* words;
    int64_t K;
    void init(const PackedWeight& w, int64_t o) {
      K = w.cols;
      words = static_cast<const uint16_t*>(w.data) + o * K;
    }
    __m512i decode(int64_t k0) const { return _mm512_loadu_si512(words + k0); }
    template <int O, bool L2>
    void prefetch_next_tile(int64_t step) const {
      packed::prefetch_lines<O, L2>(words + O * K, step);  // 2 O K bytes over K / 32 steps
    }
  };
  static void round_row(const float* x, int64_t K, uint16_t* words, float* tail) {
    packed::round_row_bf16_kord(x, K, words, tail);
  }
};

#pragma GCC pop_options

}  // namespace

void range_dense_bf16_avx512(const PackedWeight& w, const float* x, int64_t n_rows,
                             int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                             int64_t o_end) {
  packed::range_bf16_z<DenseBf16Z>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

// AVX2, around FP8's pair layout (packed::range_bf16_pairs): a half chunk's 16 words are 8 dwords
// whose high words are its odd elements and low words its even ones. The rules two ways:
// - by MXCSR (range_dense_bf16_avx2): the chunks run with denormals-are-zero (a subnormal weight
//   is a zero of its sign) and flush-to-zero (a tiny result is a zero of its sign) set, and each
//   accumulator has +0 added after them (-0 -> +0: the rules' accumulators never hold -0, and a
//   zero's sign changes nothing else they compute). 1.4-1.5x the time of f32 weights' AVX2
//   kernel, by hand 2.7-2.8x (Zen 5, 256 x 2688 in L2, 1 / 4 / 8 rows: 38-39 / 103 / 209-211 us
//   against 27-28 / 68-71 / 141-142, by hand 74-77 / 195-197 / 388-396; `probe_linear_range bf16
//   256 2688 ROWS f32|bf16 avx2`, `... by_hand`), and used where dense_bf16_avx2_verified() found
//   this CPU's FMA flushing as the rules say (tininess after rounding, among others);
// - by hand (range_dense_bf16_avx2_by_hand, elsewhere): a mask per weight, three more
//   instructions per FMA.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {

inline __m256 daz_words_avx2(__m256i v) {  // a weight with a zero exponent: its sign only
  const __m256i exp_zero = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F800000)),
                                              _mm256_setzero_si256());
  return _mm256_castsi256_ps(_mm256_andnot_si256(
      _mm256_andnot_si256(_mm256_set1_epi32(int32_t(0x80000000u)), exp_zero), v));
}

template <bool ByMxcsr>
struct DenseBf16Avx2 {
  using Ref = DenseRows<WeightFormat::BF16>;
  static constexpr int64_t kWeightBytes = 2;
  static constexpr bool kFlushByMxcsr = ByMxcsr;
  static void half(const uint8_t* row, int64_t k, __m256& w_odd, __m256& w_even) {
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    const __m256i odd = _mm256_and_si256(d, _mm256_set1_epi32(int32_t(0xFFFF0000u)));
    const __m256i even = _mm256_slli_epi32(d, 16);
    if constexpr (ByMxcsr) {
      w_odd = _mm256_castsi256_ps(odd), w_even = _mm256_castsi256_ps(even);
    } else {
      w_odd = daz_words_avx2(odd), w_even = daz_words_avx2(even);
    }
  }
  static __m256 step(__m256 w, __m256 x, __m256 acc) {
    const __m256 v = _mm256_fmadd_ps(w, x, acc);
    if constexpr (ByMxcsr) return v;
    const __m256 tiny =
        _mm256_cmp_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))),
                      _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_andnot_ps(tiny, v);  // +-0 and tiny -> +0 (the accumulators never hold -0)
  }
};

}  // namespace

void range_dense_bf16_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                           float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_bf16_pairs<packed::KordBf16Pairs<DenseBf16Avx2<true>>>(w, x, n_rows, x_stride, y,
                                                                       y_stride, o_begin, o_end);
}

void range_dense_bf16_avx2_by_hand(const PackedWeight& w, const float* x, int64_t n_rows,
                                   int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                                   int64_t o_end) {
  packed::range_bf16_pairs<packed::KordBf16Pairs<DenseBf16Avx2<false>>>(w, x, n_rows, x_stride, y,
                                                                        y_stride, o_begin, o_end);
}

#pragma GCC pop_options

// `kernel` against the reference, bitwise, at 1-9 rows of 48 outputs x 96 columns: random bf16
// weights over 2^-40..2^8 with zeros and subnormals of both signs, activations as the other
// formats' self-checks take them, and outputs built so that each rule above decides a result of
// the first row.
namespace {
bool dense_bf16_self_check(RangeFn kernel) {
  constexpr int64_t kOut = 48, kCols = 96, kRows = 9;
  Rng rng(0xbf16);
  std::vector<uint16_t> words(size_t(kOut * kCols));
  for (size_t i = 0; i < words.size(); ++i) {
    const uint64_t r = rng.next();
    const uint16_t sign = (r & 1) ? 0x8000 : 0;
    words[i] = i % 29 == 7 ? uint16_t(sign | ((r >> 8) & 0x7F))  // zero or subnormal
               : i % 31 == 9
                   ? uint16_t(sign | 0x0A80)  // 2^-106: tiny products
                   : uint16_t(sign | (uint16_t(87 + (r >> 8) % 48) << 7) | ((r >> 20) & 0x7F));
  }
  std::vector<float> x(size_t(kRows * kCols));
  packed::self_check_activations([&] { return rng.next(); }, x.data(), int64_t(x.size()));
  // Outputs 0-5 hold only these weights, so that row 0's sums show each rule (x~ = 1 elsewhere
  // in the first chunk): a lane's sum of +-2^-127 (1.5 * 2^-126 - 2^-126; +0), a subnormal weight
  // against 2^100 (0), a product 2^-60 * 2^-70 alone (+0), 2^-120 then 2^-40 * 2^-100 (kept),
  // and 2^-126 then 2^-52 * -2^-100 (rounds up to 2^-126: kept, tininess after rounding); output
  // 6 as output 0 in the last chunk (a tiny sum in an earlier chunk meets the next step, where
  // denormals-are-zero alone would clear it).
  const auto only = [&](int64_t o, std::initializer_list<std::pair<int, uint16_t>> ws) {
    std::fill_n(words.begin() + o * kCols, kCols, uint16_t(0));
    for (auto [k, v] : ws) words[size_t(o * kCols + k)] = v;
  };
  only(0, {{1, 0x00C0}, {0, 0x8080}});
  only(1, {{5, 0x0001}});
  only(2, {{7, 67 << 7}});
  only(3, {{3, 7 << 7}, {2, 87 << 7}});
  only(4, {{1, 0x80C0}, {0, 0x0080}});
  only(5, {{9, 0x0080}, {8, 75 << 7}});
  only(6, {{65, 0x00C0}, {64, 0x8080}});
  for (int k = 0; k < 32; ++k) x[size_t(k)] = 1.0f;
  x[64] = x[65] = 1.0f;
  x[5] = 0x1p100f, x[7] = 0x1p-70f, x[2] = 0x1p-100f, x[8] = -0x1p-100f;
  PackedWeight w{.format = WeightFormat::BF16,
                 .rows = kOut,
                 .cols = kCols,
                 .data = words.data(),
                 .arith = Arith::Bf16};
  return packed::self_check_rows(w, x.data(), kRows, range_dense_bf16_ref, kernel);
}
}  // namespace

bool dense_bf16_kernel_self_check() {
  return dense_bf16_self_check(range_dense_bf16_avx512);
}
bool dense_bf16_avx2_self_check() {
  return dense_bf16_self_check(range_dense_bf16_avx2);
}

}  // namespace nemo::kernels::detail
