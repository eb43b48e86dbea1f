// Probe (not built by CMake): an NVFP4 lm_head-shaped product (131072 x 2688) over 1, 2 and 4
// activation rows, 1 thread, two instruction mixes on the same data in one process:
//   f32: the engine's AVX-512 decode (VPMULTISHIFTQB + VPERMPS of E2M1, times the block's E4M3
//        scale) and one f32 FMA per 16 weights per row;
//   bf16: AVX512_BF16. A 32-weight pair of scale blocks is decoded with one VPMULTISHIFTQB, one
//        VPTERNLOGD and one VPERMW from a 32-entry table of the two blocks' exact E2M1 x E4M3
//        products (rows of a 256 x 16 bf16 table, 8 KB), and VDPBF16PS takes 32 multiply-adds per
//        instruction against activations rounded to bf16 (RNE) and permuted once per row into the
//        decoder's word order.
// It prints both times and each result's largest error against an exact (double) dot product of
// what it multiplied. Needs AVX512_BF16 and VBMI. Build and run (one line):
//   g++ -O3 -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vbmi -mavx512bf16 -mfma
//   -o /tmp/probe_nvfp4_bf16 tools/bench/probe_nvfp4_bf16.cpp && /tmp/probe_nvfp4_bf16
#include <immintrin.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static float e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float v = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (b & 0x80) ? -v : v;
}
static uint16_t bf16_rne(float f) {  // finite inputs only
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float hsum(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float s = 0.0f;
  for (float f : l) s += f;
  return s;
}
static const float kE2m1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6};

template <int R>
int main_impl() {
  const int64_t O = 131072, K = 2688;
  std::mt19937_64 g(1);
  std::vector<uint8_t> codes(size_t(O * K / 2)), sc(size_t(O * K / 16));
  for (auto& b : codes) b = uint8_t(g());
  for (auto& b : sc) b = uint8_t(0x18 + g() % 32);
  alignas(64) static float tabf[256];
  alignas(64) static uint16_t tabbf[256 * 16];
  for (int s = 0; s < 256; ++s) {
    tabf[s] = e4m3(uint8_t(s));
    for (int c = 0; c < 16; ++c) {
      float p = kE2m1[c] * tabf[s];
      uint32_t u;
      std::memcpy(&u, &p, 4);
      tabbf[s * 16 + c] = uint16_t(u >> 16);  // exact: <= 6 significant bits
    }
  }

  std::vector<float> x(size_t(R * K));
  for (auto& v : x) v = float(int(g() % 2001) - 1000) * 1e-3f;
  std::vector<uint16_t> xb(size_t(R * K));  // bf16 (RNE), permuted to the word order below
  // Word w of a 32-weight pair: qword j = w/4 takes block j&1, nibble 4*(j>>1) + (w&3).
  for (int r = 0; r < R; ++r)
    for (int64_t k0 = 0; k0 < K; k0 += 32)
      for (int w = 0; w < 32; ++w) {
        const int j = w / 4, e = 16 * (j & 1) + 4 * (j >> 1) + (w & 3);
        xb[size_t(r * K + k0 + w)] = bf16_rne(x[size_t(r * K + k0 + e)]);
      }
  std::vector<float> y(size_t(R * O));
  const __m512i ctrl = _mm512_set_epi64(0x3C00000038, 0x3400000030, 0x2C00000028, 0x2400000020,
                                        0x1C00000018, 0x1400000010, 0x0C00000008, 0x0400000000);
  const __m512 lut = _mm512_setr_ps(0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6);
  // The 16 code bytes are broadcast per 128 bits, so qword j holds block j&1's codes; the low byte
  // of word i of qword j takes its nibble n = 4*(j>>1) + i (bit offset 4n), and the ternary-logic
  // step keeps 4 bits and sets bit 4 in the odd qwords: the index into the pair table.
  alignas(64) uint8_t mc[64];
  for (int j = 0; j < 8; ++j)
    for (int b = 0; b < 8; ++b) mc[j * 8 + b] = (b & 1) ? 0 : uint8_t(4 * (4 * (j >> 1) + b / 2));
  const __m512i ctrl2 = _mm512_loadu_si512(mc);
  const __m512i sel = _mm512_set_epi64(0x0010001000100010, 0, 0x0010001000100010, 0,
                                       0x0010001000100010, 0, 0x0010001000100010, 0);
  const __m512i low4 = _mm512_set1_epi16(0x0F);

  auto f32_pass = [&] {
    const float* X = x.data();
    for (int64_t o = 0; o < O; o += 4) {
      const uint8_t* C = codes.data() + o * (K / 2);
      const uint8_t* S = sc.data() + o * (K / 16);
      if (o + 8 < O)
        for (int64_t p = 0; p < 4 * K / 2; p += 64)
          _mm_prefetch((const char*)(C + 4 * (K / 2) + p), _MM_HINT_T0);
      __m512 acc[4][4];
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
      for (int64_t k = 0; k < K; k += 16) {
        __m512 wv[4];
        for (int j = 0; j < 4; ++j) {
          int64_t q;
          std::memcpy(&q, C + j * (K / 2) + k / 2, 8);
          wv[j] = _mm512_mul_ps(
              _mm512_maskz_permutexvar_ps(
                  0xFFFF, _mm512_maskz_multishift_epi64_epi8(~0ull, ctrl, _mm512_set1_epi64(q)),
                  lut),
              _mm512_set1_ps(tabf[S[j * (K / 16) + k / 16]]));
        }
        for (int r = 0; r < R; ++r) {
          const __m512 xv = _mm512_loadu_ps(X + r * K + k);
          for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
        }
      }
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) y[size_t(r * O + o + j)] = hsum(acc[r][j]);
    }
  };
  auto bf_pass = [&] {
    const uint16_t* XB = xb.data();
    for (int64_t o = 0; o < O; o += 4) {
      const uint8_t* C = codes.data() + o * (K / 2);
      const uint8_t* S = sc.data() + o * (K / 16);
      if (o + 8 < O)
        for (int64_t p = 0; p < 4 * K / 2; p += 64)
          _mm_prefetch((const char*)(C + 4 * (K / 2) + p), _MM_HINT_T0);
      __m512 acc[4][4];
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
      for (int64_t k = 0; k < K; k += 32) {
        __m512bh wv[4];
        for (int j = 0; j < 4; ++j) {
          const uint8_t* cp = C + j * (K / 2) + k / 2;
          const uint8_t* sp = S + j * (K / 16) + k / 16;
          const __m512i q = _mm512_maskz_broadcast_i64x2(
              0xFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(cp)));
          const __m512i idx = _mm512_ternarylogic_epi32(
              _mm512_maskz_multishift_epi64_epi8(~0ull, ctrl2, q), low4, sel, 0xEA);
          const __m512i t = _mm512_mask_broadcast_i64x4(
              _mm512_maskz_broadcast_i64x4(
                  0xFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(tabbf + 16 * sp[0]))),
              0xF0, _mm256_load_si256(reinterpret_cast<const __m256i*>(tabbf + 16 * sp[1])));
          wv[j] = (__m512bh)_mm512_permutexvar_epi16(idx, t);
        }
        for (int r = 0; r < R; ++r) {
          const __m512bh xv = (__m512bh)_mm512_loadu_si512(XB + r * K + k);
          for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[j], xv);
        }
      }
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) y[size_t(r * O + o + j)] = hsum(acc[r][j]);
    }
  };
  auto time = [&](auto f) {
    f();
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(
          best,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double a = time(f32_pass);
  std::vector<float> yf = y;
  const double b = time(bf_pass);
  // Exact (double) dot products of the first 256 outputs, row 0: with f32 x and with bf16 x.
  double ef = 0, eb = 0, rms = 0;
  for (int64_t o = 0; o < 256; ++o) {
    double df = 0, db = 0;
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t byte = codes[size_t(o * K / 2 + k / 2)];
      const double w =
          kE2m1[(k & 1) ? byte >> 4 : byte & 15] * tabf[sc[size_t(o * K / 16 + k / 16)]];
      const uint32_t u = uint32_t(bf16_rne(x[size_t(k)])) << 16;
      float xt;
      std::memcpy(&xt, &u, 4);
      df += w * x[size_t(k)];
      db += w * xt;
    }
    ef = std::max(ef, std::fabs(yf[size_t(o)] - df));
    eb = std::max(eb, std::fabs(y[size_t(o)] - db));
    rms += df * df;
  }
  std::printf(
      "rows %d: f32 fma %.2f ms, bf16 dp %.2f ms (%.2fx); |err| vs exact: f32 %.3g, bf16-x %.3g "
      "(rms y %.3g)\n",
      R, a, b, a / b, ef, eb, std::sqrt(rms / 256));
  return 0;
}
int main() {
  main_impl<1>();
  main_impl<2>();
  main_impl<4>();
}
