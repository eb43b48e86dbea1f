// Probe of AVX512_BF16's vdpbf16ps rounding on the machine at hand (docs/PERFORMANCE.md, "What
// stands between..."): random bf16 pairs and f32 accumulators, compared lane by lane with three
// candidate definitions. Not part of the build; run it by hand:
//   g++ -O2 -std=c++20 -o /tmp/probe_dpbf16 tools/bench/probe_dpbf16.cpp && /tmp/probe_dpbf16
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

namespace {

float bf(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool same(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

__attribute__((target("avx512f,avx512bf16"))) void dp(const uint16_t* a, const uint16_t* b,
                                                      const float* c, float* out) {
  __m512bh va, vb;
  std::memcpy(&va, a, 64);
  std::memcpy(&vb, b, 64);
  _mm512_storeu_ps(out, _mm512_dpbf16_ps(_mm512_loadu_ps(c), va, vb));
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("this CPU has no AVX512_BF16\n");
    return 0;
  }
  std::mt19937 rng(1);
  // Normal range: exponents 110..139 and accumulators in [-1, 1], so nothing is subnormal or
  // overflows.
  auto rbf = [&] {
    return uint16_t(((rng() & 1) << 15) | ((110 + rng() % 30) << 7) | (rng() & 127));
  };
  long lanes = 0, odd_first = 0, even_first = 0, fused = 0;
  for (int it = 0; it < 150000; ++it) {
    uint16_t a[32], b[32];
    float c[16], o[16];
    for (int i = 0; i < 32; ++i) a[i] = rbf(), b[i] = rbf();
    for (float& x : c) x = float(int(rng() % 2000000) - 1000000) * 1e-6f;
    dp(a, b, c, o);
    for (int j = 0; j < 16; ++j) {
      const float p1 = bf(a[2 * j + 1]) * bf(b[2 * j + 1]), p0 = bf(a[2 * j]) * bf(b[2 * j]);
      ++lanes;
      odd_first += !same(o[j], (c[j] + p1) + p0);
      even_first += !same(o[j], (c[j] + p0) + p1);
      fused += !same(o[j], float(double(c[j]) + double(p1) + double(p0)));
    }
  }
  std::printf("%ld lanes, mismatches: odd element first %ld, even first %ld, one rounding %ld\n",
              lanes, odd_first, even_first, fused);
  // Every exponent (subnormals, overflowing products): where odd-first f32 arithmetic differs.
  long wide = 0, differ = 0, shown = 0;
  auto any = [&] { return uint16_t(((rng() & 1) << 15) | ((rng() % 255) << 7) | (rng() & 127)); };
  for (int it = 0; it < 50000; ++it) {
    uint16_t a[32], b[32];
    float c[16], o[16];
    for (int i = 0; i < 32; ++i) a[i] = any(), b[i] = any();
    for (float& x : c) x = std::ldexp(float(int(rng() % 2000) - 1000), int(rng() % 300) - 150);
    dp(a, b, c, o);
    for (int j = 0; j < 16; ++j) {
      const float p1 = bf(a[2 * j + 1]) * bf(b[2 * j + 1]), p0 = bf(a[2 * j]) * bf(b[2 * j]);
      ++wide;
      if (same(o[j], (c[j] + p1) + p0)) continue;
      ++differ;
      if (shown++ < 4)
        std::printf("  acc %a, odd product %a, even product %a: hardware %a, odd first %a\n", c[j],
                    p1, p0, o[j], (c[j] + p1) + p0);
    }
  }
  std::printf("every exponent: %ld lanes, %ld differ from odd-first f32 arithmetic\n", wide,
              differ);
}
