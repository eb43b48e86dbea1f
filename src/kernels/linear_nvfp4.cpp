// NVFP4 (ModelOpt W4A16) linear kernels.
//
// Kernel weight (exact in f32): w'[k] = E2M1(code[k]) * E4M3(scale[k/16]), with code 0x8 = +0
// (ModelOpt's table; the sign of a zero weight cannot change an fma chain that starts at +0 in a
// way the SIMD path would not reproduce). post = weight_scale_2. Reduction: linear_packed.h.
// The AVX2 decoder gets the same exact values as int8(2*E2M1) -> f32 times E4M3/2: both products
// have at most 6 significant bits, so they are exact and equal.
#include <immintrin.h>

#include <array>

#include "kernels/fp8.h"
#include "kernels/linear_packed.h"

namespace nemo::kernels::detail {

namespace {

// E2M1 as used by the kernels: ModelOpt's table (+0 for code 8).
constexpr float kE2m1Kernel[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                   0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

const std::array<float, 256>& e4m3_half_table() {
  static constexpr std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = e4m3_to_f32(uint8_t(i)) * 0.5f;
    return a;
  }();
  return t;
}

struct Nvfp4Ref {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  const float* e4m3 = nullptr;
  int64_t K = 0;
  float s2 = 1.0f;
  const uint8_t* rd = nullptr;
  const uint8_t* rs = nullptr;

  void init(const PackedWeight& w) {
    data = static_cast<const uint8_t*>(w.data);
    scales = static_cast<const uint8_t*>(w.scales);
    e4m3 = e4m3_table().data();
    K = w.cols;
    s2 = w.scale;
  }
  void row(int64_t o) {
    rd = data + o * (K / 2);
    rs = scales + o * (K / 16);
  }
  float at(int64_t k) const {
    const uint8_t b = rd[k >> 1];
    return kE2m1Kernel[(k & 1) ? (b >> 4) : (b & 15)] * e4m3[rs[k >> 4]];
  }
  float post() const { return s2; }
};

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

struct Nvfp4Avx2 : Nvfp4Ref {
  const float* half = nullptr;
  __m128i lut{}, m0f{};
  __m256i lut16{}, m0f16{};

  void init(const PackedWeight& w) {
    Nvfp4Ref::init(w);
    half = e4m3_half_table().data();
    // High byte of the IEEE half of each E2M1 value (the low byte is always 0): +-0, .5, 1, 1.5,
    // 2, 3, 4, 6. Code 8 gives +0 like the reference table.
    lut16 = _mm256_setr_epi8(0, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, 0, int8_t(0xB8), int8_t(0xBC),
                             int8_t(0xBE), int8_t(0xC0), int8_t(0xC2), int8_t(0xC4), int8_t(0xC6), 0, 0x38, 0x3C,
                             0x3E, 0x40, 0x42, 0x44, 0x46, 0, int8_t(0xB8), int8_t(0xBC), int8_t(0xBE),
                             int8_t(0xC0), int8_t(0xC2), int8_t(0xC4), int8_t(0xC6));
    m0f16 = _mm256_set1_epi16(0x0F0F);
    // 2 * E2M1 as int8, indexed by the 4-bit code.
    lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    m0f = _mm_set1_epi8(0x0F);
  }
  void decode16(int64_t k, __m256& w0, __m256& w1) const {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rd + (k >> 1)));
    const __m128i lo = _mm_and_si128(b, m0f);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m0f);
    const __m128i v = _mm_shuffle_epi8(lut, _mm_unpacklo_epi8(lo, hi));  // element order k..k+15
    const __m256 s = _mm256_broadcast_ss(half + rs[k >> 4]);
    w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), s);
    w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v))), s);
  }
  // Two blocks: bytes -> words (b | b << 4) & 0x0F0F puts the codes of elements 2j, 2j+1 in bytes
  // 2j, 2j+1 (element order across both 128-bit lanes); the LUT gives IEEE-half high bytes;
  // interleaving with zero makes halves, which F16C widens exactly. Then times E4M3 (exact).
  void decode32(int64_t k, __m256& w0, __m256& w1, __m256& w2, __m256& w3) const {
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rd + (k >> 1))));
    const __m256i c = _mm256_and_si256(_mm256_or_si256(b, _mm256_slli_epi16(b, 4)), m0f16);
    const __m256i h = _mm256_shuffle_epi8(lut16, c);
    const __m256i z = _mm256_setzero_si256();
    const __m256i lo = _mm256_unpacklo_epi8(z, h), hi = _mm256_unpackhi_epi8(z, h);  // 0-7|16-23, 8-15|24-31
    const __m256 s0 = _mm256_broadcast_ss(e4m3 + rs[k >> 4]), s1 = _mm256_broadcast_ss(e4m3 + rs[(k >> 4) + 1]);
    w0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(lo)), s0);
    w1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(hi)), s0);
    w2 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1)), s1);
    w3 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1)), s1);
  }
};

#pragma GCC pop_options

}  // namespace

void range_nvfp4_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
                     int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_ref<Nvfp4Ref>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
                      int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx2<Nvfp4Avx2>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

// Spec order (ModelOpt / vLLM): s = E4M3 * weight_scale_2 (one f32 rounding), w = E2M1 * s.
void dequantize_row_nvfp4(const PackedWeight& w, int64_t o, float* out) {
  const auto& e4m3 = e4m3_table();
  const int64_t K = w.cols;
  const uint8_t* rd = static_cast<const uint8_t*>(w.data) + o * (K / 2);
  const uint8_t* rs = static_cast<const uint8_t*>(w.scales) + o * (K / 16);
  for (int64_t k = 0; k < K; ++k) {
    const float s = e4m3[rs[k >> 4]] * w.scale;
    const uint8_t b = rd[k >> 1];
    out[k] = kE2m1Kernel[(k & 1) ? (b >> 4) : (b & 15)] * s;
  }
}

}  // namespace nemo::kernels::detail
