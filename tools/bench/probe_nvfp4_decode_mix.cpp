// Probe (not built by CMake): three ways to decode NVFP4 to bf16 words for VDPBF16PS, one row of
// activations, 8 outputs at a time (the one-row tile's shape), 64 x 2688 weights (L2-resident),
// 1 thread, in one process:
//   table:      the kernel's decode32_bf16: a 32-weight chunk (two scale blocks) per zmm; the two
//               blocks' 16-entry product rows (bf16 E2M1 x E4M3, 256 x 16 words) merged into one
//               zmm, VPMULTISHIFTQB + VPTERNLOGD for the 5-bit index, VPERMW.
//   arithmetic: no scale-dependent loads: a 64-entry VPERMT2W table indexed by (E2M1 magnitude,
//               scale mantissa), the scale's exponent added to the bf16 bits, zero magnitudes
//               masked, the sign OR-ed in (valid for normal positive scales only).
//   ymm block:  one scale block per ymm: VPMULTISHIFTQB, then VPERMW with the block's product row
//               as its memory operand (no merge, no VPTERNLOGD); activations in k order.
//   factored:   ANOTHER ARITHMETIC (not the engine's): the words are E2M1 alone (VPMULTISHIFTQB and
//               a VPERMW from a register), VDPBF16PS from zero gives each lane's two products, and
//               an FMA applies the lane's block scale (f32, 16 per output staged every 8 chunks and
//               picked by VPERMPS): acc = fma(x1 e1 + x2 e2, scale, acc). Timing only.
// It checks that all three give the same words (in their orders) and prints GB/s of weights.
// Needs AVX512_BF16 and VBMI. Build and run:
//   g++ -O2 -std=c++20 -o /tmp/probe_nvfp4_decode_mix tools/bench/probe_nvfp4_decode_mix.cpp &&
//   /tmp/probe_nvfp4_decode_mix
#include <immintrin.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kRows = 64, kK = 2688;
constexpr int kO = 8;  // outputs per tile

alignas(64) uint16_t g_products[256 * 16];  // bf16(E2M1(c) * E4M3(s)) at 16 s + c
alignas(64) uint16_t g_arith[64];           // magnitude m | mantissa << 3, see main()

float e4m3(uint8_t s) {
  const int e = (s >> 3) & 15, m = s & 7;
  const float v = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(m / 8.0f, -6);
  return (s & 0x80) ? -v : v;
}
constexpr float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
uint16_t bf16_exact(float f) {  // the values here have <= 8 significant bits
  return uint16_t(std::bit_cast<uint32_t>(f) >> 16);
}
// Word i of a zmm chunk holds element e(i) (the kernels' order until 2026-12-04, when the pairs
// became elements 4 apart: linear_nvfp4.cpp); the ymm variant uses k order.
int word_element(int i) {
  return 16 * ((i >> 2) & 1) + 4 * (i >> 3) + (i & 3);
}

enum class Mix { Table, Arithmetic, YmmBlock, Factored };

// Sum over kRows x kK weights with one activation row x (bf16 words: word order for the zmm
// variants, k order for YmmBlock); if dump, the decoded words go there (row-major, chunk order).
template <Mix M>
__attribute__((noinline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16"))) float
run(const uint8_t* codes, const uint8_t* scales, const uint16_t* x, uint16_t* dump) {
  const __m512i ctrl = _mm512_set_epi64(0x003C003800340030, 0x003C003800340030, 0x002C002800240020,
                                        0x002C002800240020, 0x001C001800140010, 0x001C001800140010,
                                        0x000C000800040000, 0x000C000800040000);
  // Arithmetic: the nibble in bits 0-3 of a word's low byte and bits 4-7 of its high byte.
  const __m512i ctrl2 = _mm512_set_epi64(0x383C343830342C30, 0x383C343830342C30, 0x282C242820241C20,
                                         0x282C242820241C20, 0x181C141810140C10, 0x181C141810140C10,
                                         0x080C040800043C00, 0x080C040800043C00);
  const __m512i block1 = _mm512_set_epi64(0x0010001000100010, 0, 0x0010001000100010, 0,
                                          0x0010001000100010, 0, 0x0010001000100010, 0);
  const __m512i pick1 = _mm512_srli_epi16(block1, 4);  // word = 1 in block 1's qwords
  const __m256i ctrl_y = _mm256_set_epi64x(0x003C003800340030, 0x002C002800240020,
                                           0x001C001800140010, 0x000C000800040000);
  const __m512i arith_lo = _mm512_load_si512(g_arith), arith_hi = _mm512_load_si512(g_arith + 32);
  const __m512i e2m1_words = _mm512_set_epi16(  // bf16 E2M1(i & 15), i = 31 .. 0
      -16192, -16256, -16320, -16384, -16448, -16512, -16640, 0, 16576, 16512, 16448, 16384, 16320,
      16256, 16128, 0, -16192, -16256, -16320, -16384, -16448, -16512, -16640, 0, 16576, 16512,
      16448, 16384, 16320, 16256, 16128, 0);
  const __m512i lane_block = _mm512_set_epi32(1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0);
  __m512 acc[kO];
  __m256 acc_y[kO][2];
  for (int j = 0; j < kO; ++j) acc[j] = _mm512_setzero_ps();
  for (int j = 0; j < kO; ++j) acc_y[j][0] = acc_y[j][1] = _mm256_setzero_ps();
  for (int64_t o = 0; o < kRows; o += kO)
    for (int64_t g = 0; g < kK; g += 256) {
      // Arithmetic: per output, 16 scales as words (mantissa << 3) | (exponent << 7).
      __m512i z[kO];
      __m512 sf[kO];  // Factored: the 16 block scales as f32 (normal E4M3: bits << 20, rebiased)
      if constexpr (M == Mix::Factored)
        for (int j = 0; j < kO; ++j)
          sf[j] = _mm512_castsi512_ps(_mm512_add_epi32(
              _mm512_maskz_slli_epi32(0xFFFF,
                                      _mm512_maskz_cvtepu8_epi32(
                                          0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                                      scales + (o + j) * (kK / 16) + g / 16))),
                                      20),
              _mm512_set1_epi32(120 << 23)));
      if constexpr (M == Mix::Arithmetic)
        for (int j = 0; j < kO; ++j) {
          const __m256i s = _mm256_cvtepu8_epi16(_mm_loadu_si128(
              reinterpret_cast<const __m128i*>(scales + (o + j) * (kK / 16) + g / 16)));
          const __m256i t = _mm256_ternarylogic_epi32(
              _mm256_slli_epi16(s, 4), _mm256_slli_epi16(s, 3), _mm256_set1_epi16(0x0780), 0xE4);
          z[j] = _mm512_castsi256_si512(_mm256_and_si256(t, _mm256_set1_epi16(0x07B8)));
        }
      for (int64_t k0 = g; k0 < g + 256 && k0 < kK; k0 += 32) {
        const __m512i xv = _mm512_loadu_si512(x + k0);
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k0));
        const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k0 + 16));
        const __m512i zi = _mm512_add_epi16(pick1, _mm512_set1_epi16(int16_t((k0 - g) / 16)));
        const __m512i si = _mm512_add_epi32(lane_block, _mm512_set1_epi32(int((k0 - g) / 16)));
#pragma GCC unroll 8
        for (int j = 0; j < kO; ++j) {
          const uint8_t* c = codes + (o + j) * (kK / 2) + k0 / 2;
          const uint8_t* s = scales + (o + j) * (kK / 16) + k0 / 16;
          if constexpr (M == Mix::YmmBlock) {
            __m256i w[2];
            for (int h = 0; h < 2; ++h) {
              int64_t q;
              std::memcpy(&q, c + 8 * h, 8);
              w[h] = _mm256_permutexvar_epi16(
                  _mm256_maskz_multishift_epi64_epi8(~__mmask32(0), ctrl_y, _mm256_set1_epi64x(q)),
                  _mm256_load_si256(reinterpret_cast<const __m256i*>(g_products + 16 * s[h])));
            }
            if (dump) {
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(dump + (o + j) * kK + k0), w[0]);
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(dump + (o + j) * kK + k0 + 16), w[1]);
            }
            acc_y[j][0] = _mm256_dpbf16_ps(acc_y[j][0], (__m256bh)w[0], (__m256bh)x0);
            acc_y[j][1] = _mm256_dpbf16_ps(acc_y[j][1], (__m256bh)w[1], (__m256bh)x1);
            continue;
          }
          const __m512i q = _mm512_maskz_broadcast_i64x2(
              0xFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
          __m512i w;
          if constexpr (M == Mix::Factored) {
            w = _mm512_permutexvar_epi16(_mm512_maskz_multishift_epi64_epi8(~__mmask64(0), ctrl, q),
                                         e2m1_words);
            if (dump) _mm512_storeu_si512(dump + (o + j) * kK + k0, w);
            const __m512 pair = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)w, (__m512bh)xv);
            acc[j] = _mm512_fmadd_ps(pair, _mm512_maskz_permutexvar_ps(0xFFFF, si, sf[j]), acc[j]);
            continue;
          }
          if constexpr (M == Mix::Table) {
            const __m512i idx = _mm512_ternarylogic_epi32(
                _mm512_maskz_multishift_epi64_epi8(~__mmask64(0), ctrl, q), _mm512_set1_epi16(0x0F),
                block1, 0xEA);
            const __m512i table = _mm512_mask_broadcast_i64x4(
                _mm512_maskz_broadcast_i64x4(
                    0xFF,
                    _mm256_load_si256(reinterpret_cast<const __m256i*>(g_products + 16 * s[0]))),
                0xF0, _mm256_load_si256(reinterpret_cast<const __m256i*>(g_products + 16 * s[1])));
            w = _mm512_permutexvar_epi16(idx, table);
          } else {
            const __m512i nw = _mm512_maskz_multishift_epi64_epi8(~__mmask64(0), ctrl2, q);
            const __m512i zw = _mm512_permutexvar_epi16(zi, z[j]);
            const __m512i idx = _mm512_ternarylogic_epi32(nw, zw, _mm512_set1_epi16(7), 0xE4);
            const __m512i p = _mm512_permutex2var_epi16(arith_lo, idx, arith_hi);
            const __mmask32 nonzero = _mm512_test_epi16_mask(nw, _mm512_set1_epi16(7));
            w = _mm512_ternarylogic_epi32(_mm512_maskz_add_epi16(nonzero, p, zw), nw,
                                          _mm512_set1_epi16(int16_t(0x8000)), 0xF8);
          }
          if (dump) _mm512_storeu_si512(dump + (o + j) * kK + k0, w);
          acc[j] = _mm512_dpbf16_ps(acc[j], (__m512bh)w, (__m512bh)xv);
        }
      }
    }
  alignas(64) float lanes[16], halves[2][8];
  float t = 0;
  for (int j = 0; j < kO; ++j) {
    _mm512_store_ps(lanes, acc[j]);
    _mm256_store_ps(halves[0], acc_y[j][0]);
    _mm256_store_ps(halves[1], acc_y[j][1]);
    for (float v : lanes) t += v;
    for (int i = 0; i < 8; ++i) t += halves[0][i] + halves[1][i];
  }
  return t;
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vbmi")) {
    std::printf("needs AVX512_BF16 and VBMI\n");
    return 1;
  }
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 16; ++c) g_products[16 * s + c] = bf16_exact(kE2m1[c] * e4m3(uint8_t(s)));
  // bf16(|E2M1(m)| * (1 + mantissa / 8) * 2^-7) less the mantissa << 3 that z also adds.
  for (int i = 0; i < 64; ++i) {
    const int m = i & 7, mant = i >> 3;
    g_arith[i] = m ? uint16_t(bf16_exact(kE2m1[m] * (1 + mant / 8.0f) * 0x1p-7f) - (mant << 3)) : 0;
  }
  std::vector<uint8_t> codes(kRows * kK / 2), scales(kRows * kK / 16);
  uint64_t st = 88172645463325252ull;
  const auto next = [&] {
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    return st;
  };
  for (auto& c : codes) c = uint8_t(next());
  for (auto& s : scales) s = uint8_t(0x08 + next() % 0x77);  // normal, positive, not NaN
  std::vector<uint16_t> x(kK, 0x3f80);
  std::vector<uint16_t> d[4];
  for (auto& v : d) v.assign(kRows * kK, 0);
  run<Mix::Table>(codes.data(), scales.data(), x.data(), d[0].data());
  run<Mix::Arithmetic>(codes.data(), scales.data(), x.data(), d[1].data());
  run<Mix::YmmBlock>(codes.data(), scales.data(), x.data(), d[2].data());
  run<Mix::Factored>(codes.data(), scales.data(), x.data(), d[3].data());
  int64_t bad_arith = 0, bad_ymm = 0, bad_factored = 0;
  for (int64_t o = 0; o < kRows; ++o)
    for (int64_t k0 = 0; k0 < kK; k0 += 32)
      for (int i = 0; i < 32; ++i) {
        const uint16_t want = d[0][o * kK + k0 + i], a = d[1][o * kK + k0 + i];
        // The arithmetic decode may give -0 for +0 (harmless in an FMA chain from +0).
        bad_arith += a != want && ((a | want) & 0x7FFF) != 0;
        bad_ymm += d[2][o * kK + k0 + word_element(i)] != want;
        const int64_t k = k0 + word_element(i);
        const uint8_t b = codes[size_t(o * kK + k) / 2];
        bad_factored += d[3][o * kK + k0 + i] != bf16_exact(kE2m1[(k & 1) ? b >> 4 : b & 15]);
      }
  std::printf(
      "words differing from the table's: arithmetic %lld, ymm block %lld; from E2M1: factored %lld "
      "(of %lld)\n",
      (long long)bad_arith, (long long)bad_ymm, (long long)bad_factored, (long long)(kRows * kK));
  const auto time = [&](auto fn, const char* name) {
    float sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 2000; ++r) sink += fn(codes.data(), scales.data(), x.data(), nullptr);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-11s %6.2f GB/s  %.2f ns per 32 weights  (%g)\n", name,
                2000.0 * kRows * kK * 0.5625 / dt / 1e9, dt / (2000.0 * kRows * kK / 32) * 1e9,
                sink);
  };
  for (int round = 0; round < 3; ++round) {
    time(run<Mix::Table>, "table");
    time(run<Mix::Arithmetic>, "arithmetic");
    time(run<Mix::YmmBlock>, "ymm block");
    time(run<Mix::Factored>, "factored");
  }
  return bad_arith || bad_ymm || bad_factored;
}
