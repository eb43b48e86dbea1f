// NVFP4 (ModelOpt W4A16) linear kernels.
//
// Kernel weight (exact in f32): w'[k] = E2M1(code[k]) * E4M3(scale[k/16]), with code 0x8 = +0
// (ModelOpt's table; the sign of a zero weight cannot change an fma chain that starts at +0 in a
// way the SIMD path would not reproduce). post = weight_scale_2. Reduction: linear_packed.h.
// The AVX2 decoder gets the same exact values as (2*E2M1 * 2^24) * (E4M3 * 2^-25): every factor
// and product has at most 6 significant bits and stays in the normal range, so all are exact.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "kernels/fp8.h"
#include "kernels/linear_packed.h"

namespace nemo::kernels::detail {

namespace {

// E2M1 as used by the kernels: ModelOpt's table (+0 for code 8).
constexpr float kE2m1Kernel[16] = {0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Row s = the 16 kernel weights E2M1(c) * E4M3(s) (exact): 16 KB, one cache line per row.
alignas(64) constexpr std::array<float, 256 * 16> kProducts = [] {
  std::array<float, 256 * 16> a{};
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 16; ++c) a[size_t(s * 16 + c)] = kE2m1Kernel[c] * e4m3_to_f32(uint8_t(s));
  return a;
}();

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

// In-lane decode of 16 codes: the 8 bytes are broadcast to every 64-bit slot (a load, no ALU);
// shifting the odd slots by 4 and masking leaves, in each 128-bit lane, the 8 even-element codes
// then the 8 odd-element codes; one shuffle maps codes to int8 2*E2M1, and two more place each
// value in the top byte of its element's dword (sign included) = 2*E2M1 * 2^24 as int32, which
// converts exactly. The scale table holds E4M3 * 2^-25, so the product is E2M1 * E4M3, exact.
// Shuffle control placing source byte `s` in the top byte of a dword (other bytes zeroed).
constexpr int top(int s) {
  return int((unsigned(s) << 24) | 0xFFFFFFu);
}

struct Nvfp4Avx2 : Nvfp4Ref {
  const float* scaled = nullptr;

  static const std::array<float, 256>& e4m3_2m25_table() {
    static constexpr std::array<float, 256> t = [] {
      std::array<float, 256> a{};
      for (int i = 0; i < 256; ++i) a[i] = e4m3_to_f32(uint8_t(i)) * 0x1p-25f;
      return a;
    }();
    return t;
  }
  void init(const PackedWeight& w) {
    Nvfp4Ref::init(w);
    scaled = e4m3_2m25_table().data();
  }
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * (K / 2) + (k >> 1)), _MM_HINT_T0);
    if ((k & 1023) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(rs + ahead * (K / 16) + (k >> 4)), _MM_HINT_T0);
  }
  // Constants are literals (not members) so the four decoders of a tile share their registers.
  void decode16(int64_t k, __m256& w0, __m256& w1) const {
    const __m256i lut =
        _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    // Per lane after the shift: bytes 0-7 = codes of elements 0,2,..,14; bytes 8-15 = 1,3,..,15.
    const __m256i place0 =
        _mm256_setr_epi32(top(0), top(8), top(1), top(9), top(2), top(10), top(3), top(11));
    const __m256i place1 =
        _mm256_setr_epi32(top(4), top(12), top(5), top(13), top(6), top(14), top(7), top(15));
    int64_t q;
    std::memcpy(&q, rd + (k >> 1), 8);
    const __m256i b = _mm256_srlv_epi64(_mm256_set1_epi64x(q), _mm256_setr_epi64x(0, 4, 0, 4));
    const __m256i v = _mm256_shuffle_epi8(lut, _mm256_and_si256(b, _mm256_set1_epi8(0x0F)));
    const __m256 s = _mm256_broadcast_ss(scaled + rs[k >> 4]);
    w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, place0)), s);
    w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, place1)), s);
  }
};

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")

// Two shuffles per 16 weights: the 8 code bytes are broadcast to every qword (a load, no ALU);
// VPMULTISHIFTQB moves nibble l into the low bits of dword lane l (qword j holds lanes 2j and
// 2j+1: bit offsets 8j and 8j+4); VPERMPS reads only those low 4 bits as a table index, giving
// the weights directly in canonical order. The table is the block's row of kProducts, so
// no multiply is left: the kernel weight E2M1 * E4M3 is exact, the same value either way.
struct Nvfp4Avx512 : Nvfp4Ref {
  // Decoding once to f32 pays from ~16 rows (microbench, Zen 5, 1-2 threads: 8-12 rows run
  // 10-30 % faster swept, 64 rows 25 % faster wide).
  static constexpr int64_t kWideRows = 16;
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * (K / 2) + (k >> 1)), _MM_HINT_T0);
    if ((k & 1023) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(rs + ahead * (K / 16) + (k >> 4)), _MM_HINT_T0);
  }
  static __m512i codes(const uint8_t* p) {
    const __m512i ctrl =
        _mm512_set_epi64(0x3C00000038, 0x3400000030, 0x2C00000028, 0x2400000020,  //
                         0x1C00000018, 0x1400000010, 0x0C00000008, 0x0400000000);
    int64_t q;
    std::memcpy(&q, p, 8);
    return _mm512_maskz_multishift_epi64_epi8(~__mmask64(0), ctrl, _mm512_set1_epi64(q));
  }
  // Tiles of 3+ rows and the decode-once paths: 3-12 rows 9-13 % faster than decode16z_1
  // (lm_head shape, 1 thread, Zen 5; docs/PERFORMANCE.md).
  __m512 decode16z(int64_t k) const {
    // maskz: GCC 12's unmasked form reads an "undefined" register (-Wmaybe-uninitialized).
    return _mm512_maskz_permutexvar_ps(0xFFFF, codes(rd + (k >> 1)),
                                       _mm512_load_ps(kProducts.data() + 16 * rs[k >> 4]));
  }
  // Tiles of 1-2 rows: E2M1 from a register table times the broadcast scale measured faster there
  // (lm_head 1 row 11.4 vs 13.2 ms, 2 rows 14.3 vs 15.7); the product is the same exact value.
  __m512 decode16z_1(int64_t k) const {
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,  //
                                       0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(_mm512_maskz_permutexvar_ps(0xFFFF, codes(rd + (k >> 1)), e2m1),
                         _mm512_set1_ps(e4m3[rs[k >> 4]]));
  }
};

#pragma GCC pop_options

}  // namespace

void range_nvfp4_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                        float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx512<Nvfp4Avx512>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                     float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_ref<Nvfp4Ref>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                      float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
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
