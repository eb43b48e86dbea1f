// FP8 E4M3 per-tensor (ModelOpt FP8, run as W8A16) linear kernels and the W8A8 parity mode.
//
// Kernel weight: w'[k] = E4M3(byte[k]) * 2^-8 (exact), post = weight_scale * 256 (exact).
// The 2^-8 is what the AVX2 decoder gets for free: an E4M3 byte shifted into an IEEE half
// (sign to bit 15, exponent+mantissa to bits 13..7) is the same value times 2^-8, subnormals
// included, and F16C converts it exactly. Reduction: linear_packed.h.
// NaN codes (0x7F/0xFF) decode to NaN in the reference but to 1.875 (480 * 2^-8) in AVX2;
// weights are scanned once at load instead (e4m3_has_nan), so valid data agrees bitwise.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <vector>

#include "base/error.h"
#include "kernels/fp8.h"
#include "kernels/linear_packed.h"
#include "kernels/quantize.h"

namespace nemo::kernels {

namespace detail {

namespace {

const std::array<float, 256>& e4m3_scaled_table() {
  static constexpr std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = e4m3_to_f32(uint8_t(i)) * (1.0f / 256.0f);
    return a;
  }();
  return t;
}

struct Fp8Ref {
  const uint8_t* data = nullptr;
  const float* tab = nullptr;
  int64_t K = 0;
  float scale = 1.0f;
  const uint8_t* rd = nullptr;

  void init(const PackedWeight& w) {
    data = static_cast<const uint8_t*>(w.data);
    tab = e4m3_scaled_table().data();
    K = w.cols;
    scale = w.scale;
  }
  void row(int64_t o) { rd = data + o * K; }
  float at(int64_t k) const { return tab[rd[k]]; }
  float post() const { return scale * 256.0f; }
};

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

struct Fp8Avx2 : Fp8Ref {
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * K + k), _MM_HINT_T0);
  }
  void decode16(int64_t k, __m256& w0, __m256& w1) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rd + k));
    const __m128i zero = _mm_setzero_si128(), keep = _mm_set1_epi16(int16_t(0xBFFF));
    // (b << 8) >>arith 1 puts sign at bit 15 (and a copy at 14, cleared), e4m3 bits 6..0 at 13..7.
    const __m128i h0 = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(zero, b), 1), keep);
    const __m128i h1 = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(zero, b), 1), keep);
    w0 = _mm256_cvtph_ps(h0);
    w1 = _mm256_cvtph_ps(h1);
  }
};

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")

// The AVX2 decoder's half-float trick on 16 bytes at once: VPERMB places byte i in the high byte
// of word i (low bytes zeroed), the arithmetic shift and mask give sign | e4m3 << 7, and one
// VCVTPH2PS widens the 16 halves exactly.
struct Fp8Avx512 : Fp8Ref {
  // Never wide: the decode is cheap, and sweeping measured 17-50 % faster at 8-64 rows.
  static constexpr int64_t kWideRows = INT64_MAX;
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * K + k), _MM_HINT_T0);
  }
  __m512 decode16z(int64_t k) const {
    const __m256i hi = _mm256_setr_epi8(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7,  //
                                        0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rd + k));
    const __m256i h = _mm256_maskz_permutexvar_epi8(0xAAAAAAAAu, hi, _mm256_castsi128_si256(b));
    return _mm512_maskz_cvtph_ps(
        0xFFFF, _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(int16_t(0xBFFF))));
  }
};

#pragma GCC pop_options

}  // namespace

void range_fp8_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                      float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx512<Fp8Avx512>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_fp8_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                   float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_ref<Fp8Ref>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_fp8_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                    float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx2<Fp8Avx2>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

// Spec order: W = E4M3 * weight_scale (one f32 multiply).
void dequantize_row_fp8(const PackedWeight& w, int64_t o, float* out) {
  const auto& t = e4m3_table();
  const uint8_t* rd = static_cast<const uint8_t*>(w.data) + o * w.cols;
  for (int64_t k = 0; k < w.cols; ++k) out[k] = t[rd[k]] * w.scale;
}

}  // namespace detail

void fp8_quantize_activations(const float* x, int64_t n, float input_scale, float* out) {
  const auto& t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[f32_to_e4m3(x[i] / input_scale)];
}

void fp8_fake_quant(const float* x, int64_t n, float input_scale, float* out) {
  const auto& t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[f32_to_e4m3(x[i] / input_scale)] * input_scale;
}

void linear_fp8_static(const PackedWeight& w, float input_scale, const float* x, int64_t n_rows,
                       int64_t x_stride, float* y, int64_t y_stride, const ThreadConfig& tc) {
  NEMO_CHECK(w.format == WeightFormat::FP8_E4M3,
             "linear_fp8_static: weight format is {}, expected fp8_e4m3",
             weight_format_name(w.format));
  NEMO_CHECK(w.arith == Arith::F32,
             "linear_fp8_static: bf16 activations are not implemented for fp8");
  NEMO_CHECK(std::isfinite(input_scale) && input_scale > 0.0f,
             "linear_fp8_static: bad input_scale {}", input_scale);
  // Quantised activations are exact E4M3 values; the combined scale is one f32 product, as on GPU.
  std::vector<float> xq(static_cast<size_t>(n_rows * w.cols));
  for (int64_t r = 0; r < n_rows; ++r)
    fp8_quantize_activations(x + r * x_stride, w.cols, input_scale, xq.data() + r * w.cols);
  PackedWeight wq = w;
  wq.scale = input_scale * w.scale;
  // Straight to the range kernel (not linear()), so a dispatch on an activation-scale field in
  // linear() can never route back here.
  const detail::RangeFn fn = detail::select_range_fn(wq.format, active_isa());
  const int64_t grain =
      std::max<int64_t>(16, (int64_t(1) << 18) / std::max<int64_t>(1, w.cols * n_rows));
  parallel_for(tc, w.rows, grain,
               [&](int64_t b, int64_t e) { fn(wq, xq.data(), n_rows, w.cols, y, y_stride, b, e); });
}

}  // namespace nemo::kernels
