// Probe (not built by CMake): where the one-row NVFP4 bf16 tile's time goes. One 4-output x 2688
// tile, L1-resident, one activation row, 200 K passes; ns per 32 weights per output of each
// instruction mix (the products are not checked: only the instruction mix is timed):
//   V0  the engine's decode32_bf16 (the two blocks' product rows merged by masked broadcasts,
//       VPERMW)
//   V1  VPERMT2W over two plain 64-byte table rows (each row stored twice)
//   V2  one constant register table (no table loads): the floor of multishift + VPERMW + VDPBF16PS
//   V3  V0 without the multishift and ternlog
//   V4  V0's loads and the dot only
//   V5  one 64-byte table row + VPERMW (half V0's table loads; wrong for two scales)
//   V8  a plain 32-byte row load + VINSERTI64X4 of the second row from memory
//   V9  two plain 64-byte loads of doubled rows + a blend
//   V10 a 64-byte load + a masked merge load of the second row
//   V11 V0 with each output's scale bytes from one 8-byte load per 4 chunks (shifted out in
//       general registers); V12 the same for V8
//   "x 6 / x 8 outputs": V0, V2, V5 with 6 or 8 outputs per tile (more independent chains)
//   V6  E2M1 from a register table, VDPBF16PS into a fresh accumulator, times the blocks' f32
//       scales (16 decoded at a time, VPERMPS per chunk), FMA into the sum: a different arithmetic
//   V7  V6 with the scales broadcast-loaded as [sA, sA, sB, sB] per chunk (no VPERMPS)
// Measured (Zen 5, fast phase): V0 0.77, V2 0.47, V4 0.71, V5 0.51, V8 0.73-0.75, V9/V10 no
// better than V0, V11/V12 0.85-0.87, V0 x 8 outputs 0.80 (so not latency-bound), V7 0.66: the two
// table-row loads per chunk are the cost, in every form tried.
// Needs AVX512_BF16 and VBMI. Build and run (one line):
//   g++ -O3 -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vbmi -mavx512bf16 -mfma
//   -o /tmp/probe_bf16_row tools/bench/probe_bf16_row.cpp && /tmp/probe_bf16_row
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
alignas(64) static uint16_t tab[256 * 16];
alignas(64) static uint16_t tab2[256 * 32];  // each row repeated twice (32 words)
constexpr int K = 2688, O = 4;
alignas(64) static uint8_t codes[O][K / 2];
alignas(64) static uint8_t scales[O][K / 16];
alignas(64) static uint16_t xw[K];
static const __m512i ctrl = _mm512_set_epi64(
    0x003C003800340030, 0x003C003800340030, 0x002C002800240020, 0x002C002800240020,
    0x001C001800140010, 0x001C001800140010, 0x000C000800040000, 0x000C000800040000);
template <int V>
__attribute__((
    target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"))) static inline __m512i
dec(const uint8_t* c, const uint8_t* s, __m512i ctab) {
  const __m512i block1 = _mm512_set_epi64(0x0010001000100010, 0, 0x0010001000100010, 0,
                                          0x0010001000100010, 0, 0x0010001000100010, 0);
  const __m512i block1b = _mm512_set_epi64(0x0020002000200020, 0, 0x0020002000200020, 0,
                                           0x0020002000200020, 0, 0x0020002000200020, 0);
  const __m512i q = _mm512_broadcast_i64x2(_mm_loadu_si128((const __m128i*)c));
  if constexpr (V == 0) {
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1, 0xEA);
    __m512i t = _mm512_mask_broadcast_i64x4(
        _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)(tab + 16 * s[0]))), 0xF0,
        _mm256_load_si256((const __m256i*)(tab + 16 * s[1])));
    return _mm512_permutexvar_epi16(idx, t);
  } else if constexpr (V == 1) {  // vpermt2w on two plain broadcasts
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1b, 0xEA);
    __m512i a = _mm512_load_si512(tab2 + 32 * s[0]);
    __m512i b = _mm512_load_si512(tab2 + 32 * s[1]);
    return _mm512_permutex2var_epi16(a, idx, b);
  } else if constexpr (V == 2) {  // constant table: no table loads
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1, 0xEA);
    return _mm512_permutexvar_epi16(idx, ctab);
  } else if constexpr (V == 3) {  // no multishift / ternlog
    __m512i t = _mm512_mask_broadcast_i64x4(
        _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)(tab + 16 * s[0]))), 0xF0,
        _mm256_load_si256((const __m256i*)(tab + 16 * s[1])));
    return _mm512_permutexvar_epi16(q, t);
  } else if constexpr (V == 4) {  // only loads + dp (no decode ops)
    __m512i t = _mm512_mask_broadcast_i64x4(
        _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)(tab + 16 * s[0]))), 0xF0,
        _mm256_load_si256((const __m256i*)(tab + 16 * s[1])));
    return _mm512_xor_si512(q, t);
  } else if constexpr (V == 8) {  // plain 32B load + insert of the second row
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1, 0xEA);
    __m512i t = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_load_si256((const __m256i*)(tab + 16 * s[0]))),
        _mm256_load_si256((const __m256i*)(tab + 16 * s[1])), 1);
    return _mm512_permutexvar_epi16(idx, t);
  } else if constexpr (V == 9) {  // two plain 64B loads of doubled rows + blend
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1, 0xEA);
    __m512i t = _mm512_mask_blend_epi64(0xF0, _mm512_load_si512(tab2 + 32 * s[0]),
                                        _mm512_load_si512(tab2 + 32 * s[1]));
    return _mm512_permutexvar_epi16(idx, t);
  } else if constexpr (V == 10) {  // 64B load + masked merge load
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1, 0xEA);
    __m512i t = _mm512_mask_load_epi64(_mm512_load_si512(tab2 + 32 * s[0]), 0xF0, tab2 + 32 * s[1]);
    return _mm512_permutexvar_epi16(idx, t);
  } else {  // V5: v1 with permutexvar on a single 64-byte row pair? (table rows from tab2 a only)
    __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                            _mm512_set1_epi16(0x0F), block1, 0xEA);
    return _mm512_permutexvar_epi16(idx, _mm512_load_si512(tab2 + 32 * s[0]));
  }
}
template <int V>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"), noinline)) float
run(int reps) {
  __m512 acc[O];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i ctab = _mm512_load_si512(tab2 + 32 * 0x38);
  for (int rep = 0; rep < reps; ++rep)
    for (int k0 = 0; k0 < K; k0 += 32) {
      const __m512i xv = _mm512_load_si512(xw + k0);
      for (int j = 0; j < O; ++j) {
        __m512i w = dec<V>(codes[j] + k0 / 2, scales[j] + k0 / 16, ctab);
        acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)w, (__m512bh)xv);
      }
    }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}
// V6: E2M1 from a register table, dp into a fresh accumulator per chunk, times the blocks' f32
// scales (decoded 16 at a time), fma into the running sum.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"), noinline)) float
run6(int reps) {
  __m512 acc[O];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i e2m1 = _mm512_load_si512(tab2 + 32 * 0x38);
  const __m512i m0f = _mm512_set1_epi16(0x0F);
  // lane l of a chunk takes block (l >> 1) & 1: pattern 0,0,1,1,0,0,1,1,...
  const __m512i lane_blk = _mm512_set_epi32(1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0);
  for (int rep = 0; rep < reps; ++rep)
    for (int k0 = 0; k0 < K; k0 += 256) {  // 8 chunks = 16 blocks
      __m512 sc[O];
      for (int j = 0; j < O; ++j) {
        const __m512i b =
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(scales[j] + k0 / 16)));
        const __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(
                                           _mm512_and_si512(b, _mm512_set1_epi32(0x7f)), 20)),
                                       _mm512_set1_ps(0x1p120f));
        sc[j] = _mm512_castsi512_ps(
            _mm512_ternarylogic_epi32(_mm512_castps_si512(f), _mm512_slli_epi32(b, 24),
                                      _mm512_set1_epi32(int(0x80000000)), 0xF8));
      }
      for (int c = 0; c < 8 && k0 + 32 * c < K; ++c) {
        const __m512i xv = _mm512_load_si512(xw + k0 + 32 * c);
        const __m512i sel = _mm512_add_epi32(lane_blk, _mm512_set1_epi32(2 * c));
        for (int j = 0; j < O; ++j) {
          const __m512i q = _mm512_broadcast_i64x2(
              _mm_loadu_si128((const __m128i*)(codes[j] + (k0 + 32 * c) / 2)));
          const __m512i idx = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, q), m0f);
          const __m512i w = _mm512_permutexvar_epi16(idx, e2m1);
          const __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)w, (__m512bh)xv);
          acc[j] = _mm512_fmadd_ps(t, _mm512_permutexvar_ps(sel, sc[j]), acc[j]);
        }
      }
    }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}
alignas(64) static float scl4[O][K / 32][4];  // per chunk [sA, sA, sB, sB]
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"), noinline)) float
run7(int reps) {
  __m512 acc[O];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i e2m1 = _mm512_load_si512(tab2 + 32 * 0x38);
  const __m512i m0f = _mm512_set1_epi16(0x0F);
  for (int rep = 0; rep < reps; ++rep)
    for (int k0 = 0; k0 < K; k0 += 32) {
      const __m512i xv = _mm512_load_si512(xw + k0);
      for (int j = 0; j < O; ++j) {
        const __m512i q =
            _mm512_broadcast_i64x2(_mm_loadu_si128((const __m128i*)(codes[j] + k0 / 2)));
        const __m512i idx = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, q), m0f);
        const __m512i w = _mm512_permutexvar_epi16(idx, e2m1);
        const __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)w, (__m512bh)xv);
        acc[j] = _mm512_fmadd_ps(t, _mm512_broadcast_f32x4(_mm_load_ps(scl4[j][k0 / 32])), acc[j]);
      }
    }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}
// V11: V0's table rows, but each output's scale bytes come from one 8-byte load per 4 chunks
// (shifted out in general registers) instead of two byte loads per chunk.
template <int V>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"), noinline)) float
run11(int reps) {
  __m512 acc[O];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i block1 = _mm512_set_epi64(0x0010001000100010, 0, 0x0010001000100010, 0,
                                          0x0010001000100010, 0, 0x0010001000100010, 0);
  for (int rep = 0; rep < reps; ++rep)
    for (int k0 = 0; k0 < K; k0 += 128) {
      uint64_t sw[O];
      for (int j = 0; j < O; ++j) std::memcpy(&sw[j], scales[j] + k0 / 16, 8);
      for (int c = 0; c < 4; ++c) {
        const int k = k0 + 32 * c;
        const __m512i xv = _mm512_load_si512(xw + k);
        for (int j = 0; j < O; ++j) {
          const __m512i q =
              _mm512_broadcast_i64x2(_mm_loadu_si128((const __m128i*)(codes[j] + k / 2)));
          const __m512i idx = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl, q),
                                                        _mm512_set1_epi16(0x0F), block1, 0xEA);
          const unsigned s0 = unsigned(sw[j] >> (16 * c)) & 0xFF,
                         s1 = unsigned(sw[j] >> (16 * c + 8)) & 0xFF;
          __m512i t;
          if constexpr (V == 0)
            t = _mm512_mask_broadcast_i64x4(
                _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)(tab + 16 * s0))), 0xF0,
                _mm256_load_si256((const __m256i*)(tab + 16 * s1)));
          else
            t = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_load_si256((const __m256i*)(tab + 16 * s0))),
                _mm256_load_si256((const __m256i*)(tab + 16 * s1)), 1);
          const __m512i w = _mm512_permutexvar_epi16(idx, t);
          acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)w, (__m512bh)xv);
        }
      }
    }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}
// V0 / V5 / V2 with 8 outputs per tile (8 independent accumulator chains; the arithmetic per
// output is unchanged). Reported per 32 weights x 1 output as the others.
alignas(64) static uint8_t codes8[8][K / 2];
alignas(64) static uint8_t scales8[8][K / 16];
template <int V, int N>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"), noinline)) float
run_wide(int reps) {
  __m512 acc[N];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512i ctab = _mm512_load_si512(tab2 + 32 * 0x38);
  for (int rep = 0; rep < reps * 4 / N; ++rep)  // the same output count as the 4-output runs
    for (int k0 = 0; k0 < K; k0 += 32) {
      const __m512i xv = _mm512_load_si512(xw + k0);
      for (int j = 0; j < N; ++j) {
        __m512i w = dec<V>(codes8[j] + k0 / 2, scales8[j] + k0 / 16, ctab);
        acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)w, (__m512bh)xv);
      }
    }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}
int main() {
  std::mt19937 g(1);
  for (auto& t : tab) t = 0x3f80 + (g() & 0x7f);
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 32; ++j) tab2[i * 32 + j] = tab[i * 16 + (j & 15)];
  for (auto& r : codes)
    for (auto& c : r) c = g();
  for (auto& r : scales)
    for (auto& c : r) c = 0x18 + g() % 32;
  for (auto& r : codes8)
    for (auto& c : r) c = g();
  for (auto& r : scales8)
    for (auto& c : r) c = 0x18 + g() % 32;
  for (auto& x : xw) x = 0x3f80 + (g() & 0x7f);
  const int reps = 200000;
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
    std::printf("%-40s %.3f ns per 32 weights x 1 output\n", name, best);
  };
  for (int round = 0; round < 2; ++round) {
    T(run<0>, "V0 engine (masked bcast pair, vpermw)");
    T(run<1>, "V1 vpermt2w, two plain 64B loads");
    T(run<2>, "V2 constant table (no table loads)");
    T(run<3>, "V3 no multishift/ternlog");
    T(run<4>, "V4 loads + dp only");
    T(run<5>, "V5 one 64B table load + vpermw");
    T(run<8>, "V8 32B load + vinserti64x4 m256");
    T(run<9>, "V9 two 64B doubled rows + blend");
    T(run<10>, "V10 64B load + masked merge load");
    T(run11<0>, "V11 V0 + scales 8 bytes per 4 chunks");
    T(run11<1>, "V12 V8 + scales 8 bytes per 4 chunks");
    T(run_wide<0, 8>, "V0 x 8 outputs");
    T(run_wide<0, 6>, "V0 x 6 outputs");
    T(run_wide<2, 8>, "V2 x 8 outputs");
    T(run_wide<5, 8>, "V5 x 8 outputs");
    T(run6, "V6 register E2M1, dp(0), x f32 scale, fma");
    T(run7, "V7 as V6, scales [a,a,b,b] broadcast-loaded");
  }
}
