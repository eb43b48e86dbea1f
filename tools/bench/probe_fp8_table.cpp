// Probe (not built by CMake): the FP8 bf16 tile's weight decode, shift-and-add (the kernel's, with
// its exponent-0 branch) against a VPERMT2B table lookup of 64 weights ("new": two chunks per
// step, output by output; "new32": the table on one chunk in the kernel's loop order), 4 outputs
// x R rows at K = 2688, on an L2-resident matrix (120 outputs) and one streamed from memory
// (80000 outputs, 210 MB), with the kernel's next-tile prefetch (docs/PERFORMANCE.md, "Verify
// overheads"). Times are the best of 5; run it several times, the VM drifts.
//   g++ -O3 -fopenmp -std=c++20 -o /tmp/probe_fp8_table tools/bench/probe_fp8_table.cpp
//   /tmp/probe_fp8_table 1; /tmp/probe_fp8_table 2      (threads)
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
int NT = 1;
// probe: 4 outputs x R rows, K=2688 codes per output, L2-resident matrix of NO outputs
constexpr int K = 2688;
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16"))) static inline __m512i dec_old(
    const uint8_t* p) {
  const __m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)p));
  const __m512i n = _mm512_add_epi16(
      _mm512_and_si512(_mm512_slli_epi16(h, 4), _mm512_set1_epi16(int16_t(0x87F0))),
      _mm512_set1_epi16(112 << 7));
  const __mmask32 low = _mm512_testn_epi16_mask(h, _mm512_set1_epi16(0x78));
  if (low == 0) [[likely]]
    return n;
  return _mm512_mask_mov_epi16(n, low, _mm512_setzero_si512());
}
struct Tabs {
  __m512i perm, h0, h1, l0, l1;
};
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16"))) static inline __m512i dec32_new(
    const uint8_t* p, const Tabs& t) {
  const __m512i c =
      _mm512_maskz_permutexvar_epi8(~0ull, t.perm, _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p));
  __m512i hi = _mm512_permutex2var_epi8(t.h0, c, t.h1);
  const __m512i lo = _mm512_permutex2var_epi8(t.l0, c, t.l1);
  hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8(char(0x80)), 0xF8);
  return _mm512_unpacklo_epi8(lo, hi);
}
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16"))) static inline void dec_new(
    const uint8_t* p, const Tabs& t, __m512i& a, __m512i& b) {
  const __m512i c = _mm512_permutexvar_epi8(t.perm, _mm512_loadu_si512(p));
  __m512i hi = _mm512_permutex2var_epi8(t.h0, c, t.h1);
  const __m512i lo = _mm512_permutex2var_epi8(t.l0, c, t.l1);
  hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8(char(0x80)), 0xF8);
  a = _mm512_unpacklo_epi8(lo, hi);
  b = _mm512_unpackhi_epi8(lo, hi);
}
template <int R, int O, int NEW>
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16"), noinline)) void tile(
    const uint8_t* w, const uint16_t* x, float* y, const Tabs& t) {
  __m512 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < O; ++j) acc[r][j] = _mm512_setzero_ps();
  if constexpr (NEW == 3) {
    for (int k0 = 0; k0 < K; k0 += 32) {
      if ((k0 & 63) == 0)
        for (int j = 0; j < O; ++j) _mm_prefetch((const char*)(w + (j + O) * K + k0), _MM_HINT_T0);
      __m512i wv[O];
      for (int j = 0; j < O; ++j) wv[j] = dec32_new(w + j * K + k0, t);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_loadu_si512(x + r * K + k0);
        for (int j = 0; j < O; ++j)
          acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], (__m512bh)xv);
      }
    }
  } else if constexpr (NEW == 0) {
    for (int k0 = 0; k0 < K; k0 += 32) {
      if ((k0 & 63) == 0)
        for (int j = 0; j < O; ++j) _mm_prefetch((const char*)(w + (j + O) * K + k0), _MM_HINT_T0);
      __m512i wv[O];
      for (int j = 0; j < O; ++j) wv[j] = dec_old(w + j * K + k0);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_loadu_si512(x + r * K + k0);
        for (int j = 0; j < O; ++j)
          acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], (__m512bh)xv);
      }
    }
  } else
    for (int k0 = 0; k0 < K; k0 += 64) {
      for (int j = 0; j < O; ++j) _mm_prefetch((const char*)(w + (j + O) * K + k0), _MM_HINT_T0);
      for (int j = 0; j < O; ++j) {
        __m512i a, b;
        if constexpr (NEW == 2) {
          a = _mm512_loadu_si512(w + j * K + k0);
          b = _mm512_loadu_si512(w + j * K + k0 + 32);
        } else if constexpr (NEW)
          dec_new(w + j * K + k0, t, a, b);
        else {
          a = dec_old(w + j * K + k0);
          b = dec_old(w + j * K + k0 + 32);
        }
        for (int r = 0; r < R; ++r) {
          acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)a,
                                       (__m512bh)_mm512_loadu_si512(x + r * K + k0));
          acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)b,
                                       (__m512bh)_mm512_loadu_si512(x + r * K + k0 + 32));
        }
      }
    }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < O; ++j) y[r * O + j] = _mm512_reduce_add_ps(acc[r][j]);
}
template <int R, int O, int NEW>
double run(const std::vector<uint8_t>& w, const std::vector<uint16_t>& x, int NO, const Tabs& t) {
  double best = 1e9;
  const int it_n = NO > 1000 ? 2 : 20;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < it_n; ++it) {
#pragma omp parallel num_threads(NT)
      {
        std::vector<float> y(R * O);
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int per = (NO / O + nt - 1) / nt * O;
        int o0 = id * per, o1 = std::min(NO, o0 + per);
        for (int o = o0; o + O <= o1; o += O)
          tile<R, O, NEW>(w.data() + size_t(o) * K, x.data(), y.data(), t);
      }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / it_n;
    best = std::min(best, s);
  }
  return best * 1e6;
}
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16"))) int main2(int NO) {
  std::mt19937 g(1);
  std::vector<uint8_t> w(size_t(NO) * K);
  for (auto& b : w) {
    b = uint8_t(g());
    if ((b & 0x78) == 0) b |= 0x08;
    if ((b & 0x7f) == 0x7f) b = 0x3e;
  }
  std::vector<uint16_t> x(8 * K);
  for (auto& v : x) v = 0x3f80 + (g() & 0x7f);
  Tabs t;
  alignas(64) uint8_t perm[64], h[128], l[128];
  for (int L = 0; L < 4; ++L)
    for (int i = 0; i < 8; ++i) {
      perm[16 * L + i] = 8 * L + i;
      perm[16 * L + 8 + i] = 32 + 8 * L + i;
    }
  for (int m = 0; m < 128; ++m) {
    uint16_t v = uint16_t(((m << 4) & 0x7F0) + (112 << 7));
    h[m] = v >> 8;
    l[m] = v & 0xff;
  }
  t.perm = _mm512_load_si512(perm);
  t.h0 = _mm512_load_si512(h);
  t.h1 = _mm512_load_si512(h + 64);
  t.l0 = _mm512_load_si512(l);
  t.l1 = _mm512_load_si512(l + 64);
  printf("NO=%d (%.1f KB)\n", NO, NO * K / 1024.0);
  printf("R1 O8 old %.1f new %.1f new32 %.1f us\n", run<1, 8, 0>(w, x, NO, t),
         run<1, 8, 1>(w, x, NO, t), run<1, 8, 3>(w, x, NO, t));
  printf("R2 O8 old %.1f new %.1f new32 %.1f us\n", run<2, 8, 0>(w, x, NO, t),
         run<2, 8, 1>(w, x, NO, t), run<2, 8, 3>(w, x, NO, t));
  printf("R3 O5 old %.1f new %.1f new32 %.1f us\n", run<3, 5, 0>(w, x, NO, t),
         run<3, 5, 1>(w, x, NO, t), run<3, 5, 3>(w, x, NO, t));
  printf("R4 O4 old %.1f new %.1f new32 %.1f us\n", run<4, 4, 0>(w, x, NO, t),
         run<4, 4, 1>(w, x, NO, t), run<4, 4, 3>(w, x, NO, t));
  // printf("R8 O3 old %.1f new %.1f new32 %.1f us\n", run<8, 3, 0>(w, x, NO, t), run<8, 3, 1>(w, x,
  // NO, t), run<8, 3, 3>(w, x, NO, t));
  return 0;
}
int main(int argc, char** argv) {
  NT = atoi(argv[1]);
  for (int r = 0; r < 2; ++r) {
    main2(120);
    main2(80000);
  }
}
