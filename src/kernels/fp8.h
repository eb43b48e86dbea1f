// Small floating-point codes used by the packed checkpoint formats (docs/FORMATS.md):
//   E2M1 (FP4, NVFP4 elements): bit 3 = sign, bits 2..1 exponent (bias 1), bit 0 mantissa.
//   E4M3 "e4m3fn" (FP8 weights, NVFP4 block scales): bias 7, no Inf, NaN = 0x7F / 0xFF, max 448.
// Decoding is exact in f32. Encoders round to nearest, ties to even, as the producers do.
#pragma once
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace nemo::kernels {

// E2M1 code -> value. Code 0x8 is -0 (sign-aware, like MLX and vLLM; ModelOpt's table says +0).
constexpr float e2m1_to_f32(uint8_t code) {
  constexpr float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = mag[code & 7];
  return (code & 8) ? -v : v;
}

// E4M3 byte -> value (NaN for 0x7F / 0xFF).
constexpr float e4m3_to_f32(uint8_t b) {
  const uint32_t s = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
  float v;
  if (e == 15 && m == 7) {
    v = std::bit_cast<float>(0x7FC00000u);
  } else if (e == 0) {
    v = float(m) * (1.0f / 512.0f);  // subnormal: m * 2^-9 (exact)
  } else {
    v = std::bit_cast<float>(((e + 120u) << 23) | (m << 20));  // (1 + m/8) * 2^(e-7)
  }
  return s ? -v : v;
}

// 256-entry decode table; hot loops fetch it once (function-local static, built at compile time).
inline const std::array<float, 256>& e4m3_table() {
  static constexpr std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = e4m3_to_f32(uint8_t(i));
    return a;
  }();
  return t;
}

// f32 -> E4M3, round to nearest even after saturating to +-448 (the clamp vLLM and ModelOpt apply
// before the cast). NaN -> 0x7F. Values below half the smallest subnormal round to +-0 (sign kept).
inline uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  float a = std::fabs(x);
  if (a > 448.0f) a = 448.0f;
  if (a < 0.015625f) {  // subnormal range: multiples of 2^-9; code 8 (= 2^-6) is the next normal
    const float q = std::nearbyint(a * 512.0f);  // exact scaling; default rounding mode is RNE
    return sign | uint8_t(q);
  }
  uint32_t u = std::bit_cast<uint32_t>(a);
  u += 0x7FFFFu + ((u >> 20) & 1u);  // RNE to 3 mantissa bits
  const uint32_t e = (u >> 23) - 120u, m = (u >> 20) & 7u;
  return sign | uint8_t((e << 3) | m);
}

// f32 -> E2M1 code exactly as ModelOpt's NVFP4 `_cast_fp4`: sign = (x < 0), magnitude by the
// decision bounds 0.25/0.75/1.25/1.75/2.5/3.5/5 with ties going to the even code, saturating at 6.
// Small negatives therefore give code 0x8 (-0); NaN gives 0x7 (searchsorted puts NaN last).
inline uint8_t f32_to_e2m1(float x) {
  const uint8_t sign = x < 0.0f ? 8 : 0;
  const float a = std::fabs(x);
  if (std::isnan(a)) return 7;
  // The code is the number of decision bounds passed (strict at the bounds that tie down to an
  // even code, inclusive where they tie up): branch-free, so random weights quantize fast.
  const int c = int(a > 0.25f) + int(a >= 0.75f) + int(a > 1.25f) + int(a >= 1.75f) +
                int(a > 2.5f) + int(a >= 3.5f) + int(a > 5.0f);
  return uint8_t(sign | c);
}

}  // namespace nemo::kernels
