// What VDPBF16PS does with tiny values on the CPU at hand (docs/FORMATS.md §2.1, "bf16 weights"):
// one lane's two products against an accumulator, for each case the bf16 kernel's order states,
// printed beside what plain fused multiply-adds would give. On AMD Zen 5 (2026-12-05): a subnormal
// weight counts as a zero of its sign, each step is fused, and a nonzero result below 2^-126
// becomes +0 (the FMA with MXCSR's flush-to-zero gives -0 for a negative one).
// Not part of the build:
//   g++ -O2 -std=c++20 -o /tmp/probe_vdpbf16ps tools/bench/probe_vdpbf16ps.cpp &&
//   /tmp/probe_vdpbf16ps
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

uint16_t bf16(float f) {
  return uint16_t(std::bit_cast<uint32_t>(f) >> 16);
}  // exact inputs only

// Lane 0 of VDPBF16PS: acc + w1 * x1 (the odd pair first), then + w0 * x0.
[[gnu::target("avx512f,avx512bf16,avx512bw")]] float dp(float acc, float w1, float x1, float w0,
                                                        float x0) {
  alignas(64) uint16_t a[32] = {}, b[32] = {};
  a[1] = bf16(w1), b[1] = bf16(x1), a[0] = bf16(w0), b[0] = bf16(x0);
  const __m512 r = _mm512_dpbf16_ps(_mm512_set1_ps(acc), (__m512bh)_mm512_load_si512(a),
                                    (__m512bh)_mm512_load_si512(b));
  return _mm512_cvtss_f32(r);
}

}  // namespace

int main() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("no AVX512_BF16 on this CPU\n");
    return 0;
  }
  struct Case {
    const char* what;
    float acc, w1, x1, w0, x0;
  };
  const Case cases[] = {
      {"a product 2^-130 alone", 0, 0x1p-60f, 0x1p-70f, 0, 0},
      {"a product -2^-130 alone", 0, -0x1p-60f, 0x1p-70f, 0, 0},
      {"2^-120 + a product 2^-127", 0x1p-120f, 0x1p-60f, 0x1p-67f, 0, 0},
      {"1.5 * 2^-126 - 2^-126, then + 2^-126", 0x1.8p-126f, -0x1p-126f, 1, 0x1p-126f, 1},
      {"a subnormal weight -2^-130 times 2^100", -0.0f, -0x1p-130f, 0x1p100f, -0.0f, 1},
      {"2^-126 - 2^-152 (rounds up to 2^-126)", 0x1p-126f, 0x1p-52f, -0x1p-100f, 0, 0},
      {"-0 + -0 + -0", -0.0f, -0.0f, 1, -0.0f, 1},
  };
  for (const Case& c : cases) {
    const float plain = std::fma(c.w0, c.x0, std::fma(c.w1, c.x1, c.acc));
    std::printf("%-42s VDPBF16PS %-14a plain fmas %a\n", c.what,
                double(dp(c.acc, c.w1, c.x1, c.w0, c.x0)), double(plain));
  }
}
