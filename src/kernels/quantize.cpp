#include "kernels/quantize.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/fp8.h"

namespace nemo::kernels {

namespace {

float amax_of(std::span<const float> w) {
  float m = 0.0f;
  for (float v : w) m = std::max(m, std::fabs(v));
  return m;
}

void check_shape(std::span<const float> w, int64_t rows, int64_t cols, const char* who) {
  NEMO_CHECK(rows >= 0 && cols >= 0 && int64_t(w.size()) == rows * cols,
             "{}: {} values for a [{}, {}] matrix", who, w.size(), rows, cols);
}

}  // namespace

// ---------------------------------------------------------------- NVFP4 (ModelOpt, max path)

PackedWeight Nvfp4Quantized::view() const {
  PackedWeight w;
  w.format = WeightFormat::NVFP4;
  w.rows = rows;
  w.cols = cols;
  w.data = packed.data();
  w.scales = scales.data();
  w.scale = scale2;
  w.group = 16;
  return w;
}

Nvfp4Quantized quantize_nvfp4(std::span<const float> w, int64_t rows, int64_t cols, float scale2) {
  check_shape(w, rows, cols, "quantize_nvfp4");
  NEMO_CHECK(cols % 16 == 0, "quantize_nvfp4: cols {} is not a multiple of 16", cols);
  Nvfp4Quantized q;
  q.rows = rows;
  q.cols = cols;
  // weight_scale_2 = amax / (6 * 448), f32 division as in ModelOpt.
  q.scale2 = scale2 > 0.0f ? scale2 : amax_of(w) / 2688.0f;
  // An all-zero tensor would give 0/0 block scales (as in ModelOpt); any positive scale2 decodes
  // it.
  if (!(q.scale2 > 0.0f) || !std::isfinite(q.scale2)) q.scale2 = 1.0f / 2688.0f;
  q.packed.assign(size_t(rows * cols / 2), 0);
  q.scales.assign(size_t(rows * cols / 16), 0);
  const auto& e4m3 = e4m3_table();
  const float denom = 6.0f * q.scale2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      const float* blk = w.data() + r * cols + b * 16;
      float bamax = 0.0f;
      for (int i = 0; i < 16; ++i) bamax = std::max(bamax, std::fabs(blk[i]));
      float s = bamax / denom;
      if (s == 0.0f) s = 1.0f;                  // all-zero block (or scale2 huge)
      s = std::clamp(s, 0.001953125f, 448.0f);  // [2^-9, 448]: no underflow to 0, no NaN cast
      const uint8_t sb = f32_to_e4m3(s);
      q.scales[size_t(r * (cols / 16) + b)] = sb;
      // scaled = w / (E4M3(s) * scale2): the product rounded once, then the division.
      const float d = e4m3[sb] * q.scale2;
      uint8_t* out = q.packed.data() + r * (cols / 2) + b * 8;
      for (int i = 0; i < 8; ++i) {
        const uint8_t lo = f32_to_e2m1(blk[2 * i] / d), hi = f32_to_e2m1(blk[2 * i + 1] / d);
        out[i] = uint8_t(lo | (hi << 4));
      }
    }
  return q;
}

// ---------------------------------------------------------------- FP8 per tensor

PackedWeight Fp8Quantized::view() const {
  PackedWeight w;
  w.format = WeightFormat::FP8_E4M3;
  w.rows = rows;
  w.cols = cols;
  w.data = data.data();
  w.scale = scale;
  return w;
}

Fp8Quantized quantize_fp8(std::span<const float> w, int64_t rows, int64_t cols, float scale) {
  check_shape(w, rows, cols, "quantize_fp8");
  Fp8Quantized q;
  q.rows = rows;
  q.cols = cols;
  if (scale <= 0.0f) {
    const float a = amax_of(w);
    scale = a > 0.0f ? a / 448.0f : 1.0f;
  }
  q.scale = scale;
  q.data.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) q.data[i] = f32_to_e4m3(w[i] / scale);
  return q;
}

// ---------------------------------------------------------------- MLX affine

PackedWeight AffineQuantized::view() const {
  PackedWeight w;
  w.format = bits == 4 ? WeightFormat::AFFINE4 : WeightFormat::AFFINE8;
  w.rows = rows;
  w.cols = cols;
  w.data = words.data();
  w.scales = scales.data();
  w.biases = biases.data();
  w.group = group;
  return w;
}

// MLX CPU `quantize` (ml-explore/mlx backend/cpu/quantized.cpp), in f32.
void affine_quantize_group(const float* w, int n, int bits, uint8_t* q, float* scale_out,
                           float* bias_out) {
  const float n_bins = float((1 << bits) - 1);
  float wmin = std::numeric_limits<float>::infinity(), wmax = -wmin;
  for (int j = 0; j < n; ++j) {
    wmax = std::max(wmax, w[j]);
    wmin = std::min(wmin, w[j]);
  }
  const bool use_min = std::fabs(wmin) > std::fabs(wmax);
  float scale = std::max((wmax - wmin) / n_bins, 1e-7f);
  scale = use_min ? scale : -scale;
  const float edge = use_min ? wmin : wmax;
  const float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < n; ++j) {
    const float v = std::rint((w[j] - bias) / scale);
    q[j] = uint8_t(std::min(std::max(v, 0.0f), n_bins));
  }
  *scale_out = scale;
  *bias_out = bias;
}

AffineQuantized quantize_affine(std::span<const float> w, int64_t rows, int64_t cols, int bits,
                                int group) {
  check_shape(w, rows, cols, "quantize_affine");
  NEMO_CHECK(bits == 4 || bits == 8, "quantize_affine: bits {} (supported: 4, 8)", bits);
  NEMO_CHECK(group == 32 || group == 64 || group == 128,
             "quantize_affine: group {} (supported: 32, 64, 128)", group);
  NEMO_CHECK(cols % group == 0, "quantize_affine: cols {} not a multiple of group {}", cols, group);
  AffineQuantized q;
  q.rows = rows;
  q.cols = cols;
  q.bits = bits;
  q.group = group;
  const int per_word = 32 / bits;
  q.words.assign(size_t(rows * cols / per_word), 0);
  q.scales.resize(size_t(rows * cols / group));
  q.biases.resize(size_t(rows * cols / group));
  std::vector<uint8_t> codes(static_cast<size_t>(group));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / group; ++g) {
      float s, b;
      affine_quantize_group(w.data() + r * cols + g * group, group, bits, codes.data(), &s, &b);
      const size_t gi = size_t(r * (cols / group) + g);
      q.scales[gi] = f32_to_bf16(s);
      q.biases[gi] = f32_to_bf16(b);
      uint32_t* out = q.words.data() + (r * cols + g * group) / per_word;
      for (int j = 0; j < group; ++j)
        out[j / per_word] |= uint32_t(codes[j]) << ((j % per_word) * bits);
    }
  return q;
}

// ---------------------------------------------------------------- validation

void validate_packed_weight(const PackedWeight& w, const std::string& what) {
  const char* f = weight_format_name(w.format);
  NEMO_CHECK(w.rows > 0 && w.cols > 0, "{}: {} weight has shape [{}, {}]", what, f, w.rows, w.cols);
  NEMO_CHECK(w.data != nullptr, "{}: {} weight has no data", what, f);
  switch (w.format) {
    case WeightFormat::NVFP4:
      NEMO_CHECK(w.cols % 16 == 0, "{}: nvfp4 input dim {} is not a multiple of 16", what, w.cols);
      NEMO_CHECK(w.scales != nullptr, "{}: nvfp4 weight without weight_scale", what);
      NEMO_CHECK(w.group == 0 || w.group == 16, "{}: nvfp4 block size {} (must be 16)", what,
                 w.group);
      NEMO_CHECK(std::isfinite(w.scale) && w.scale > 0.0f,
                 "{}: nvfp4 weight_scale_2 = {} (must be finite > 0)", what, w.scale);
      break;
    case WeightFormat::FP8_E4M3:
      NEMO_CHECK(std::isfinite(w.scale) && w.scale > 0.0f,
                 "{}: fp8 weight_scale = {} (must be finite > 0)", what, w.scale);
      break;
    case WeightFormat::AFFINE4:
    case WeightFormat::AFFINE8:
      NEMO_CHECK(w.group == 32 || w.group == 64 || w.group == 128,
                 "{}: affine group size {} (supported 32/64/128)", what, w.group);
      NEMO_CHECK(w.cols % w.group == 0, "{}: affine input dim {} not a multiple of group {}", what,
                 w.cols, w.group);
      NEMO_CHECK(w.scales != nullptr && w.biases != nullptr,
                 "{}: affine weight without scales/biases", what);
      break;
    default:
      break;
  }
}

bool e4m3_has_nan(std::span<const uint8_t> bytes) {
  // (b | 0x80) == 0xFF for both NaN codes; OR-reduce a mask so the loop has no branch.
  uint8_t any = 0;
  for (uint8_t b : bytes) any |= uint8_t(uint8_t(b | 0x80) == 0xFF);
  return any != 0;
}

}  // namespace nemo::kernels
