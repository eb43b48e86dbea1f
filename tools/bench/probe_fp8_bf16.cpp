// Probe (not built by CMake): would bf16 activations pay for FP8 (E4M3) weights? One 4-output x
// 2688 tile, L1-resident, 1 or 4 activation rows, ns per 32 weights per output (the values are
// not checked; only the instruction mix is timed):
//   F32  the engine's Fp8Avx512::decode16z (VPERMB to the high byte, the half-float trick,
//        VCVTPH2PS) and one FMA per row per 16 weights
//   B1   32 weights per VPERMB in the bf16 word order, the half-float trick, two VCVTPH2PS and
//        VCVTNE2PS2BF16 (exact: E4M3 * 2^-8 fits bf16), one VDPBF16PS per row
//   B2   the bf16 bits built directly (shift, mask, exponent bias) with the E4M3 subnormals and
//        zeros patched from a 16-entry VPERMW table: a sketch of the cheapest exact decode
//   F32b the byte to the top of its dword (VPERMB), arithmetic shift by 4 and a mask: E4M3 *
//        2^-120 as an f32 (subnormals as f32 subnormals), times 2^112: the engine's values
//        without VCVTPH2PS (needs MXCSR's DAZ clear)
// Measured (Zen 5; ns per 32 weights per output, 1 row / 4 rows): F32 1.08-1.13 / 1.64-1.86,
// F32b 0.91-1.02 / 1.52-1.94, B1 1.22-1.32 / 1.55-1.74, B2 0.94-1.04 / 1.20-1.33. F32b in the
// engine measured no faster on the streamed Mamba in_proj (microbench Linear_fp8_10304x2688, 1
// thread, medians of 5, three alternations: 1 row 1333-1683 vs 1044-1300 us, 4 rows mixed), so
// the engine keeps VCVTPH2PS; B2 (the bf16 arithmetic for FP8) would save ~1.35x of the 4-row
// tile's instructions, ~1.1x at one row.
// Build and run (one line):
//   g++ -O3 -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vbmi -mavx512bf16 -mfma
//   -mf16c -o /tmp/probe_fp8_bf16 tools/bench/probe_fp8_bf16.cpp && /tmp/probe_fp8_bf16
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

constexpr int K = 2688, O = 4;
alignas(64) static uint8_t w8[O][K];
alignas(64) static float xf[4][K];
alignas(64) static uint16_t xw[4][K];

#define TARGET                                                                                \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,f16c,fma"), \
                 noinline))

template <int R, int V = 0>
TARGET float run_f32(int reps) {
  alignas(64) static uint8_t top[64];
  for (int i = 0; i < 16; ++i)
    top[4 * i] = top[4 * i + 1] = top[4 * i + 2] = 0, top[4 * i + 3] = uint8_t(i);
  const __m512i topv = _mm512_load_si512(top);
  const __m256i hi = _mm256_setr_epi8(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7,  //
                                      0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15);
  __m512 acc[R][O];
  for (auto& r : acc)
    for (auto& a : r) a = _mm512_setzero_ps();
  for (int rep = 0; rep < reps; ++rep)
    for (int k = 0; k < K; k += 16) {
      __m512 wv[O];
      for (int j = 0; j < O; ++j) {
        const __m128i b = _mm_loadu_si128((const __m128i*)(w8[j] + k));
        if constexpr (V == 0) {
          const __m256i h =
              _mm256_maskz_permutexvar_epi8(0xAAAAAAAAu, hi, _mm256_castsi128_si256(b));
          wv[j] = _mm512_cvtph_ps(
              _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(int16_t(0xBFFF))));
        } else {  // byte to the top of its dword, >>arith 4, mask: E4M3 * 2^-120 (subnormals too),
                  // * 2^112
          const __m512i d =
              _mm512_maskz_permutexvar_epi8(0x8888888888888888ull, topv, _mm512_castsi128_si512(b));
          wv[j] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(
                                    _mm512_srai_epi32(d, 4), _mm512_set1_epi32(int(0x87F00000u)))),
                                _mm512_set1_ps(0x1p112f));
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_load_ps(xf[r] + k);
        for (int j = 0; j < O; ++j) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
      }
    }
  float s = 0;
  for (auto& r : acc)
    for (auto& a : r) s += _mm512_reduce_add_ps(a);
  return s;
}

// Word i of a chunk = element e(i) = 16 * ((i >> 2) & 1) + 4 * (i >> 3) + (i & 3), in the high
// byte.
static __m512i word_order_hi() {
  alignas(64) static uint8_t idx[64];
  for (int i = 0; i < 32; ++i) {
    idx[2 * i] = 0;
    idx[2 * i + 1] = uint8_t(16 * ((i >> 2) & 1) + 4 * (i >> 3) + (i & 3));
  }
  return _mm512_load_si512(idx);
}

template <int R, int V>
TARGET float run_bf16(int reps) {
  const __m512i order = word_order_hi();
  __m512 acc[R][O];
  for (auto& r : acc)
    for (auto& a : r) a = _mm512_setzero_ps();
  const __m512i sub = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                       0, 0, 0, 0, 0, 0, 0, 0, 0x3860, 0x3840, 0x3820, 0x3800,
                                       0x37C0, 0x3780, 0x3700, 0);
  for (int rep = 0; rep < reps; ++rep)
    for (int k = 0; k < K; k += 32) {
      __m512i wv[O];
      for (int j = 0; j < O; ++j) {
        const __m256i b = _mm256_loadu_si256((const __m256i*)(w8[j] + k));
        const __m512i h =
            _mm512_maskz_permutexvar_epi8(0xAAAAAAAAAAAAAAAAull, order, _mm512_castsi256_si512(b));
        if constexpr (V == 1) {
          const __m512i f16 =
              _mm512_and_si512(_mm512_srai_epi16(h, 1), _mm512_set1_epi16(int16_t(0xBFFF)));
          const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(f16));
          const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f16, 1));
          wv[j] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        } else {
          const __m512i n = _mm512_add_epi16(
              _mm512_and_si512(_mm512_srai_epi16(h, 4), _mm512_set1_epi16(int16_t(0x87F0))),
              _mm512_set1_epi16(0x3800));
          const __mmask32 z = _mm512_testn_epi16_mask(h, _mm512_set1_epi16(0x7800));
          const __m512i s = _mm512_permutexvar_epi16(_mm512_srli_epi16(h, 8), sub);
          wv[j] = _mm512_mask_ternarylogic_epi32(n, 0, s, h, 0xCA);  // sketch: per-word blend
          wv[j] = _mm512_mask_mov_epi16(
              wv[j], z,
              _mm512_or_si512(s, _mm512_and_si512(h, _mm512_set1_epi16(int16_t(0x8000)))));
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_load_si512(xw[r] + k);
        for (int j = 0; j < O; ++j)
          acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], (__m512bh)xv);
      }
    }
  float s = 0;
  for (auto& r : acc)
    for (auto& a : r) s += _mm512_reduce_add_ps(a);
  return s;
}

int main() {
  std::mt19937 g(1);
  for (auto& r : w8)
    for (auto& c : r) c = uint8_t(g() & 0xF7);  // no NaN codes
  for (auto& r : xf)
    for (auto& v : r) v = float(g() % 1000) * 1e-3f;
  for (auto& r : xw)
    for (auto& v : r) v = uint16_t(0x3f80 + (g() & 0x7f));
  const int reps = 100000;
  auto T = [&](auto f, const char* name) {
    double best = 1e9;
    for (int t = 0; t < 5; ++t) {
      auto a = std::chrono::steady_clock::now();
      volatile float s = f(reps);
      (void)s;
      double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count();
      best = std::min(best, ns / (double(reps) * (K / 32) * O));
    }
    std::printf("%-28s %.3f ns per 32 weights x 1 output\n", name, best);
  };
  for (int round = 0; round < 2; ++round) {
    T(run_f32<1>, "F32 1 row");
    T(run_f32<1, 1>, "F32b 1 row (no vcvtph2ps)");
    T(run_bf16<1, 1>, "B1 1 row");
    T(run_bf16<1, 2>, "B2 1 row");
    T(run_f32<4>, "F32 4 rows");
    T(run_f32<4, 1>, "F32b 4 rows (no vcvtph2ps)");
    T(run_bf16<4, 1>, "B1 4 rows");
    T(run_bf16<4, 2>, "B2 4 rows");
  }
}
