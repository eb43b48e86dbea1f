// SiLU over arrays (ops.h), bitwise the scalar silu(v) = v / (1 + expf(-v)) with glibc's expf.
//
// glibc's expf (2.28 on; the FMA build its x86-64 dispatch picks on every CPU with FMA, so on
// every CPU these kernels run on) works in double: with N = 32,
//   kd = fma(32/ln 2, x, 0x1.8p52); ki = the bits of kd; kd -= 0x1.8p52; r = fma(32/ln 2, x, -kd)
//   s = the double with bits kTab[ki % 32] + (ki << 47)                          (2^(k/32))
//   y = fma(fma(C0, r, C1), r·r, fma(C2, r, 1)) · s, rounded to float
// and x > 0x1.62e42ep6 gives +inf, x < -0x1.9fe368p6 gives +0, NaN gives x + x. The vector paths
// do each of those IEEE operations on 8 (AVX-512) or 4 (AVX2) doubles at a time, so each lane
// gets the scalar bits: both paths' silu matched silu() on all 2^32 inputs, NaN payloads included
// (tools/check/silu_exp.cpp, Debian's glibc 2.36). That glibc fuses the two reductions of x
// (kd, r) shows there: without the fusion 2 of 2^32 expf results differ. A libm that differs
// would fail silu_vector_verified's sampled check, and the scalar loop then runs. 6144 values
// (a Lightning conv row), one thread, Xeon: scalar 32.7 us, AVX2 9.2, AVX-512 4.8.

#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/linear.h"
#include "kernels/ops.h"

namespace nemo::kernels {

namespace {

// glibc's data for it (e_exp2f_data.c, the algorithm of ARM's optimized-routines): kTab[i] =
// bits(2^(i/32)) - (i << 47), 2^(i/32) rounded to the nearest double; 32/ln 2, the shift, and the
// polynomial's coefficients scaled by powers of 1/32.
alignas(64) constexpr std::array<uint64_t, 32> kTab = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32, kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                 kC2 = 0x1.62e42ff0c52d6p-1 / 32;
constexpr float kOverflow = 0x1.62e42ep6f, kUnderflow = -0x1.9fe368p6f;

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")

// The normal path of 8 lanes (the special inputs are replaced after).
inline __m256 expf8_avx512(__m256 x) {
  const __m512d xd = _mm512_maskz_cvtps_pd(0xFF, x), inv = _mm512_set1_pd(kInvLn2N);
  __m512d kd = _mm512_fmadd_pd(inv, xd, _mm512_set1_pd(kShift));
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, _mm512_set1_pd(kShift));
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  // kTab[ki % 32]: two permutes of 16 entries (index bits 3..0), bit 4 picks one.
  const __m512i* tab = reinterpret_cast<const __m512i*>(kTab.data());
  const __m512i lo =
      _mm512_permutex2var_epi64(_mm512_load_si512(tab), ki, _mm512_load_si512(tab + 1));
  const __m512i hi =
      _mm512_permutex2var_epi64(_mm512_load_si512(tab + 2), ki, _mm512_load_si512(tab + 3));
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  const __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(upper, lo, hi),
                                     _mm512_maskz_slli_epi64(0xFF, ki, 47));
  const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, _mm512_mul_pd(r, r), y);
  return _mm512_maskz_cvtpd_ps(0xFF, _mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

inline __m512 expf16_avx512(__m512 x) {
  const __m256 lo = expf8_avx512(_mm512_maskz_extractf32x8_ps(0xFF, x, 0));
  const __m256 hi = expf8_avx512(_mm512_maskz_extractf32x8_ps(0xFF, x, 1));
  __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(kOverflow), _CMP_GT_OQ),
                         _mm512_set1_ps(INFINITY));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(kUnderflow), _CMP_LT_OQ),
                         _mm512_setzero_ps());
  return _mm512_mask_add_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}

inline __m512 silu16_avx512(__m512 v) {
  const __m512 e = expf16_avx512(_mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int32_t(0x80000000u)))));
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")

inline __m128 expf4_avx2(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x), inv = _mm256_set1_pd(kInvLn2N);
  __m256d kd = _mm256_fmadd_pd(inv, xd, _mm256_set1_pd(kShift));
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, _mm256_set1_pd(kShift));
  const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
  const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_add_epi64(
      _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTab.data()), idx, 8),
      _mm256_slli_epi64(ki, 47));
  const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, _mm256_mul_pd(r, r), y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

inline __m256 expf8_avx2(__m256 x) {
  const __m128 lo = expf4_avx2(_mm256_castps256_ps128(x));
  const __m128 hi = expf4_avx2(_mm256_extractf128_ps(x, 1));
  __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY),
                       _mm256_cmp_ps(x, _mm256_set1_ps(kOverflow), _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(),
                       _mm256_cmp_ps(x, _mm256_set1_ps(kUnderflow), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline __m256 silu8_avx2(__m256 v) {
  const __m256 e = expf8_avx2(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)));
  return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

#pragma GCC pop_options

// a[i] = silu(a[i]) (kSilu), a[i] · silu(b[i]) (kMulSilu) or silu(a[i]) · b[i] (kSiluMul): the
// scalar forms, and each vector path's blocks from i = 0 (they return where their blocks end).
enum Form { kSilu, kMulSilu, kSiluMul };

template <int F>
void silu_scalar(float* a, const float* b, int64_t i, int64_t n) {
  for (; i < n; ++i) {
    if constexpr (F == kSilu)
      a[i] = silu(a[i]);
    else if constexpr (F == kMulSilu)
      a[i] = a[i] * silu(b[i]);
    else
      a[i] = silu(a[i]) * b[i];
  }
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
template <int F>
int64_t silu_avx512(float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(a + i);
    __m512 y;
    if constexpr (F == kSilu)
      y = silu16_avx512(x);
    else if constexpr (F == kMulSilu)
      y = _mm512_mul_ps(x, silu16_avx512(_mm512_loadu_ps(b + i)));
    else
      y = _mm512_mul_ps(silu16_avx512(x), _mm512_loadu_ps(b + i));
    _mm512_storeu_ps(a + i, y);
  }
  return i;
}
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
template <int F>
int64_t silu_avx2(float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    __m256 y;
    if constexpr (F == kSilu)
      y = silu8_avx2(x);
    else if constexpr (F == kMulSilu)
      y = _mm256_mul_ps(x, silu8_avx2(_mm256_loadu_ps(b + i)));
    else
      y = _mm256_mul_ps(silu8_avx2(x), _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(a + i, y);
  }
  return i;
}
#pragma GCC pop_options

template <int F>
int64_t silu_vector(Isa path, float* a, const float* b, int64_t n) {
  if (path >= Isa::Avx512) return silu_avx512<F>(a, b, n);
  if (path >= Isa::Avx2) return silu_avx2<F>(a, b, n);
  return 0;
}

// Whether `path`'s blocks give silu()'s bits (NaN payloads included) on a sample: every 65521st
// bit pattern (all exponents, both signs), the edges of expf's special cases and of the
// subnormals, 0, ±inf, NaN.
bool vector_matches(Isa path) {
  std::vector<float> in;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65521) {
    float f;
    const uint32_t b = uint32_t(u);
    std::memcpy(&f, &b, sizeof f);
    in.push_back(f);
  }
  for (const float e : {kOverflow, -kOverflow, kUnderflow, -kUnderflow, 88.0f, -88.0f, 0x1p-126f,
                        0x1p-149f, 1.0f, 0.0f, INFINITY, NAN})
    for (const float f : {e, std::nextafter(e, -INFINITY), std::nextafter(e, INFINITY)})
      in.push_back(f), in.push_back(-f);
  while (in.size() % 16) in.push_back(0.5f);
  std::vector<float> got = in;
  if (silu_vector<kSilu>(path, got.data(), nullptr, int64_t(got.size())) != int64_t(got.size()))
    return false;
  for (size_t i = 0; i < in.size(); ++i)
    if (const float want = silu(in[i]); std::memcmp(&got[i], &want, sizeof want) != 0) return false;
  return true;
}

// Checked once per path, on first use.
bool path_verified(Isa path) {
  static const bool avx512 = detected_isa() >= Isa::Avx512 && vector_matches(Isa::Avx512);
  static const bool avx2 = detected_isa() >= Isa::Avx2 && vector_matches(Isa::Avx2);
  return path == Isa::Avx512 ? avx512 : path == Isa::Avx2 ? avx2 : false;
}

// The widest verified vector path the active ISA allows; Reference = the scalar loop.
Isa silu_path() {
  const Isa isa = active_isa();
  if (isa >= Isa::Avx512 && path_verified(Isa::Avx512)) return Isa::Avx512;
  if (isa >= Isa::Avx2 && path_verified(Isa::Avx2)) return Isa::Avx2;
  return Isa::Reference;
}

template <int F>
void silu_form(float* a, const float* b, int64_t n) {
  silu_scalar<F>(a, b, silu_vector<F>(silu_path(), a, b, n), n);
}

}  // namespace

bool silu_vector_verified(Isa isa) {
  return path_verified(isa);
}

void silu_inplace(float* x, int64_t n) {
  silu_form<kSilu>(x, nullptr, n);
}
void mul_silu(float* y, const float* z, int64_t n) {
  silu_form<kMulSilu>(y, z, n);
}
void silu_mul(float* g, const float* u, int64_t n) {
  silu_form<kSiluMul>(g, u, n);
}

}  // namespace nemo::kernels
