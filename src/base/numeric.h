// Scalar numeric types stored in checkpoints and their exact conversions to f32.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace nemo {

// bfloat16 -> f32 is exact: the upper 16 bits of the f32.
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// f32 -> bfloat16, round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE half -> f32 (exact, handles subnormals, inf, nan).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float v = std::ldexp(float(man), -24);
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

// f32 -> IEEE half, round to nearest even, saturating to inf on overflow.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return sign | 0x7e00u;       // nan
  if (au >= 0x477ff000u) return sign | 0x7c00u;      // rounds to inf
  if (au < 0x38800000u) {                            // subnormal or zero in half
    const float a = std::bit_cast<float>(au);
    const float scaled = a * 16777216.0f;            // a / 2^-24, exact
    return sign | uint16_t(std::nearbyint(scaled));  // default rounding mode is RNE
  }
  uint32_t r = au + 0xfffu + ((au >> 13) & 1u);
  return sign | uint16_t(((r >> 13) - (112u << 10)) & 0xffffu);
}

}  // namespace nemo
