// A copy of the 4-row x 4-output bf16 NVFP4 tile's loop (tile_bf16_z with decode32_bf16), outside
// the kernel, on L2-resident weights (64 x 2688) and random scale bytes, to see what the loop
// costs without the kernel's cursors and finish (docs/PERFORMANCE.md, "Zen 4: the GEMM-blocked
// wide passes, measured at last"): "xload" = the decode replaced by a broadcast of the codes and
// one VPTERNLOGD (the dot products and loads alone); "decode var 0" = the kernel's decode (two
// product rows merged with a masked broadcast); var 3 = one 64-byte table load instead of the
// merge (wrong words, timing only); vars 1, 2, 4 = one row, VINSERTI64X4, VPERMT2W. Prints cycles
// per output and 32-weight chunk at an assumed 3.65 GHz (measure the clock with probe_fma_tile).
// Not part of the build:
//   g++ -O2 -std=c++20 -mavx512f -mavx512bf16 -mavx512vl -mavx512bw -mavx512vbmi -mavx512dq
//       -o /tmp/probe_bf16_tile_copy tools/bench/probe_bf16_tile_copy.cpp &&
//       /tmp/probe_bf16_tile_copy
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr int64_t K = 2688;
alignas(64) uint16_t X[8 * K];
alignas(64) uint8_t C[64 * K / 2];
alignas(64) uint8_t S[64 * K / 16];
alignas(64) uint16_t T[256 * 16];
float sink;
template <int R, int O, int MODE, int VAR = 0>
__attribute__((noinline)) void tile(const uint8_t* codes, int64_t o) {
  __m512 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < O; ++j) acc[r][j] = _mm512_setzero_ps();
  const __m512i m = _mm512_set1_epi16(0x000F), b = _mm512_set1_epi16(0x3f00);
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    __m512i wv[O];
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) {
      const __m512i q = _mm512_broadcast_i64x2(
          _mm_loadu_si128((const __m128i*)(codes + (o + j) * (K / 2) + k0 / 2)));
      if (MODE == 2) {
        const __m512i ctrl = _mm512_set_epi64(
            0x003C003800340030, 0x003C003800340030, 0x002C002800240020, 0x002C002800240020,
            0x001C001800140010, 0x001C001800140010, 0x000C000800040000, 0x000C000800040000);
        const __m512i block1 = _mm512_set_epi64(0x0010001000100010, 0, 0x0010001000100010, 0,
                                                0x0010001000100010, 0, 0x0010001000100010, 0);
        const uint8_t* sc = S + (o + j) * (K / 16) + k0 / 16;
        const __m512i idx =
            _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q), m, block1, 0xEA);
        __m512i table;
        if (VAR == 0)
          table = _mm512_mask_broadcast_i64x4(
              _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)(T + 16 * sc[0]))), 0xF0,
              _mm256_load_si256((const __m256i*)(T + 16 * sc[1])));
        else if (VAR == 1)
          table = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)(T + 16 * sc[0])));
        else if (VAR == 2)
          table = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_load_si256((const __m256i*)(T + 16 * sc[0]))),
              _mm256_load_si256((const __m256i*)(T + 16 * sc[1])), 1);
        else
          table = _mm512_loadu_si512((const void*)(T + 16 * sc[0]));
        if (VAR == 4)
          wv[j] = _mm512_permutex2var_epi16(
              _mm512_castsi256_si512(_mm256_load_si256((const __m256i*)(T + 16 * sc[0]))), idx,
              _mm512_castsi256_si512(_mm256_load_si256((const __m256i*)(T + 16 * sc[1]))));
        else
          wv[j] = _mm512_permutexvar_epi16(idx, table);
      } else
        wv[j] = _mm512_ternarylogic_epi32(q, m, b, 0xEA);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512i xv;
      if (MODE == 0)
        xv = _mm512_loadu_si512(X + r * K + k0);
      else
        xv = _mm512_set1_epi16(0x3f80 + r);
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j)
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], (__m512bh)xv);
    }
  }
  float s = 0;
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < O; ++j) s += _mm512_reduce_add_ps(acc[r][j]);
  sink += s;
}
template <int R, int O, int MODE, int VAR = 0>
void bench(const char* name) {
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    double t0 = now();
    for (int it = 0; it < 50; ++it)
      for (int64_t o = 0; o + O <= 64; o += O) tile<R, O, MODE, VAR>(C, o);
    double t = (now() - t0) / 50;
    if (t < best) best = t;
  }
  const double chunks = 64.0 / O * O * K / 32;
  std::printf("var %d %s R=%d O=%d: %.2f us, %.2f cycles/output-chunk at 3.65 GHz (DP floor %d)\n",
              VAR, name, R, O, best * 1e6, best * 3.65e9 / chunks, R);
}

template <int R, int O>
__attribute__((noinline)) void tile_y(const uint8_t* codes, int64_t o) {
  __m256 acc0[R][O], acc1[R][O];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < O; ++j) acc0[r][j] = acc1[r][j] = _mm256_setzero_ps();
  const __m256i ctrl = _mm256_set_epi64x(0x003C003800340030, 0x002C002800240020, 0x001C001800140010,
                                         0x000C000800040000);
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    __m256i x0[R], x1[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      x0[r] = _mm256_loadu_si256((const __m256i*)(X + r * K + k0));
      x1[r] = _mm256_loadu_si256((const __m256i*)(X + r * K + k0 + 16));
    }
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) {
      const uint8_t* cj = codes + (o + j) * (K / 2) + k0 / 2;
      const uint8_t* sc = S + (o + j) * (K / 16) + k0 / 16;
      int64_t q0, q1;
      std::memcpy(&q0, cj, 8);
      std::memcpy(&q1, cj + 8, 8);
      const __m256i lo =
          _mm256_permutexvar_epi16(_mm256_multishift_epi64_epi8(ctrl, _mm256_set1_epi64x(q0)),
                                   _mm256_load_si256((const __m256i*)(T + 16 * sc[0])));
      const __m256i hi =
          _mm256_permutexvar_epi16(_mm256_multishift_epi64_epi8(ctrl, _mm256_set1_epi64x(q1)),
                                   _mm256_load_si256((const __m256i*)(T + 16 * sc[1])));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        acc0[r][j] = _mm256_dpbf16_ps(acc0[r][j], (__m256bh)lo, (__m256bh)x0[r]);
        acc1[r][j] = _mm256_dpbf16_ps(acc1[r][j], (__m256bh)hi, (__m256bh)x1[r]);
      }
    }
  }
  float s = 0;
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < O; ++j) {
      float t[8];
      _mm256_storeu_ps(t, _mm256_add_ps(acc0[r][j], acc1[r][j]));
      for (float f : t) s += f;
    }
  sink += s;
}
template <int R, int O>
void bench_y() {
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    double t0 = now();
    for (int it = 0; it < 50; ++it)
      for (int64_t o = 0; o + O <= 64; o += O) tile_y<R, O>(C, o);
    double t = (now() - t0) / 50;
    if (t < best) best = t;
  }
  const double chunks = double(64 / O * O) * K / 32;
  std::printf("ymm R=%d O=%d: %.2f us, %.2f cycles/output-chunk (DP floor %d)\n", R, O, best * 1e6,
              best * 3.65e9 / chunks, R);
}
int main() {
  for (auto& v : X) v = 0x3f80;
  for (auto& c : C) c = uint8_t(rand());
  for (int i = 0; i < 256 * 16; ++i) T[i] = uint16_t(0x3f80 + (i & 31));
  for (auto& c : S) c = uint8_t(rand());
  bench<4, 4, 0>("xload ");
  bench<1, 4, 2, 0>("decode");
  bench<4, 4, 2, 0>("decode");
  bench<4, 4, 2, 1>("decode");
  bench<4, 4, 2, 2>("decode");
  bench<4, 4, 2, 3>("decode");
  bench<4, 4, 2, 4>("decode");
}
