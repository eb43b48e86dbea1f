#include "kernels/peak.h"

#include <immintrin.h>

#include <cmath>

namespace nemo::kernels {

namespace {

constexpr int kChains = 12;

// Accumulators grow by 2^-20 per step from 1: no overflow and no subnormal for any round count
// the bench uses, so every instruction runs at its normal speed.
float run_scalar(int64_t rounds) {
  float acc[kChains];
  for (float& a : acc) a = 1.0f;
  const float x = 0x1p-10f;
  for (int64_t i = 0; i < rounds; ++i)
    for (float& a : acc) a = std::fma(x, x, a);
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
float run_avx2(int64_t rounds) {
  __m256 acc[kChains];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 x = _mm256_set1_ps(0x1p-10f);
  for (int64_t i = 0; i < rounds; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(x, x, acc[c]);
  }
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  return _mm256_cvtss_f32(s);  // lane 0 suffices to keep the work observable
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16,avx512vl")
// kChains accumulators from 1, `rounds` times acc = step(acc) on each; lane 0 of their sum.
template <class Step>
float run_zmm(int64_t rounds, Step step) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < rounds; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = step(acc[c]);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_cvtss_f32(s);  // lane 0 suffices to keep the work observable
}
float run_avx512(int64_t rounds) {
  const __m512 x = _mm512_set1_ps(0x1p-10f);
  return run_zmm(rounds, [x](__m512 a) { return _mm512_fmadd_ps(x, x, a); });
}
float run_avx512_bf16(int64_t rounds) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3A80);  // bf16 2^-10
  return run_zmm(rounds, [x](__m512 a) { return _mm512_dpbf16_ps(a, x, x); });
}
#pragma GCC pop_options

enum class Kind { Scalar, Avx2, Avx512, Avx512Bf16 };

Kind kind(Arith a, Isa isa) {
  if (isa >= Isa::Avx512 && a == Arith::Bf16 && bf16_kernel_verified()) return Kind::Avx512Bf16;
  // Arith::Bf16 without the bf16 kernels runs the AVX2 kernel's f32 fused multiply-adds.
  if (isa >= Isa::Avx512 && a == Arith::F32) return Kind::Avx512;
  return isa >= Isa::Avx2 ? Kind::Avx2 : Kind::Scalar;
}

}  // namespace

DotPeak dot_peak_instruction(Arith a, Isa isa) {
  switch (kind(a, std::min(isa, detected_isa()))) {
    case Kind::Avx512Bf16:
      return {"VDPBF16PS zmm", 32};
    case Kind::Avx512:
      return {"VFMADD231PS zmm", 16};
    case Kind::Avx2:
      return {"VFMADD231PS ymm", 8};
    case Kind::Scalar:
      break;
  }
  return {"scalar fma", 1};
}

int64_t run_dot_peak(Arith a, Isa isa, int64_t rounds) {
  float s = 0;
  switch (kind(a, std::min(isa, detected_isa()))) {
    case Kind::Avx512Bf16:
      s = run_avx512_bf16(rounds);
      break;
    case Kind::Avx512:
      s = run_avx512(rounds);
      break;
    case Kind::Avx2:
      s = run_avx2(rounds);
      break;
    case Kind::Scalar:
      s = run_scalar(rounds);
      break;
  }
  // The sum is 12 * lanes * (1 + rounds * 2^-20 * pairs) > 0: kept observable, never taken.
  if (!(s > 0)) return 0;
  return kChains * rounds * dot_peak_instruction(a, isa).macs_per_instruction;
}

}  // namespace nemo::kernels
