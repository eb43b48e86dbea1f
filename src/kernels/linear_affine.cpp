// MLX affine 4-/8-bit linear kernels.
//
// Kernel weight: w'[k] = fma(q[k], scale[g], bias[g]) with g = k / group and bf16 scale/bias
// widened exactly to f32. q*scale has at most 8+8 significant bits, so the fma equals MLX's
// `scale * q + bias` (one rounding). post = 1. Reduction: linear_packed.h.
// Storage: U32 words, element k at bits k*bits of its word, little-endian, so the byte stream is
// low-nibble-first (4-bit) or one byte per element (8-bit). group is 32, 64 or 128, so a 16-wide
// step never straddles two groups.
#include <immintrin.h>

#include <cstring>

#include "base/numeric.h"
#include "kernels/linear_packed.h"

namespace nemo::kernels::detail {

namespace {

inline float load_bf16(const uint8_t* p, int64_t i) {
  uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  return bf16_to_f32(b);
}

template <int BITS>
struct AffineRef {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  int64_t K = 0, G = 64, n_groups = 0;
  const uint8_t* rd = nullptr;
  const uint8_t* rs = nullptr;
  const uint8_t* rb = nullptr;

  void init(const PackedWeight& w) {
    data = static_cast<const uint8_t*>(w.data);
    scales = static_cast<const uint8_t*>(w.scales);
    biases = static_cast<const uint8_t*>(w.biases);
    K = w.cols;
    G = w.group;
    n_groups = K / G;
  }
  void row(int64_t o) {
    rd = data + o * (K * BITS / 8);
    rs = scales + 2 * o * n_groups;
    rb = biases + 2 * o * n_groups;
  }
  float at(int64_t k) const {
    const int q = BITS == 4 ? (rd[k >> 1] >> ((k & 1) * 4)) & 15 : rd[k];
    return std::fma(float(q), load_bf16(rs, k / G), load_bf16(rb, k / G));
  }
  float post() const { return 1.0f; }
};

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// In-lane decode (no lane-crossing ops): the bytes of 16 elements are broadcast to both 128-bit
// lanes; for 4-bit, shifting odd 64-bit slots by 4 and masking leaves even-element codes then
// odd-element codes in each lane; a shuffle then zero-extends each code into its element's
// dword, which converts exactly. Constants are literals so a tile's decoders share registers.
// Shuffle control placing source byte `s` in the low byte of a dword (other bytes zeroed).
constexpr int low(int s) {
  return int(0xFFFFFF00u | unsigned(s));
}

template <int BITS>
struct AffineAvx2 : AffineRef<BITS> {
  __m256 s{}, b{};

  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(
        reinterpret_cast<const char*>(this->rd + ahead * (this->K * BITS / 8) + k * BITS / 8),
        _MM_HINT_T0);
    if ((k & (this->G * 16 - 1)) == 0) {
      const int64_t g = ahead * this->n_groups + k / this->G;
      _mm_prefetch(reinterpret_cast<const char*>(this->rs + 2 * g), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(this->rb + 2 * g), _MM_HINT_T0);
    }
  }
  void decode16(int64_t k, __m256& w0, __m256& w1) {
    if ((k & (this->G - 1)) == 0) {  // new group (G is a power of two >= 32)
      s = _mm256_set1_ps(load_bf16(this->rs, k / this->G));
      b = _mm256_set1_ps(load_bf16(this->rb, k / this->G));
    }
    __m256i c, place0, place1;
    if constexpr (BITS == 4) {
      int64_t q;
      std::memcpy(&q, this->rd + (k >> 1), 8);
      c = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(q), _mm256_setr_epi64x(0, 4, 0, 4)),
                           _mm256_set1_epi8(0x0F));
      place0 = _mm256_setr_epi32(low(0), low(8), low(1), low(9), low(2), low(10), low(3), low(11));
      place1 =
          _mm256_setr_epi32(low(4), low(12), low(5), low(13), low(6), low(14), low(7), low(15));
    } else {
      c = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(this->rd + k)));
      place0 = _mm256_setr_epi32(low(0), low(1), low(2), low(3), low(4), low(5), low(6), low(7));
      place1 =
          _mm256_setr_epi32(low(8), low(9), low(10), low(11), low(12), low(13), low(14), low(15));
    }
    w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(c, place0)), s, b);
    w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(c, place1)), s, b);
  }
};

#pragma GCC pop_options

}  // namespace

void range_affine_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                      float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  if (w.format == WeightFormat::AFFINE4)
    packed::range_ref<AffineRef<4>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
  else
    packed::range_ref<AffineRef<8>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_affine_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                       float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  if (w.format == WeightFormat::AFFINE4)
    packed::range_avx2<AffineAvx2<4>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
  else
    packed::range_avx2<AffineAvx2<8>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void dequantize_row_affine(const PackedWeight& w, int64_t o, float* out) {
  if (w.format == WeightFormat::AFFINE4) {
    AffineRef<4> d;
    d.init(w);
    d.row(o);
    for (int64_t k = 0; k < w.cols; ++k) out[k] = d.at(k);
  } else {
    AffineRef<8> d;
    d.init(w);
    d.row(o);
    for (int64_t k = 0; k < w.cols; ++k) out[k] = d.at(k);
  }
}

}  // namespace nemo::kernels::detail
