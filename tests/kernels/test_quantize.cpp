// Quantizer -> dequantize round trips with error bounds, and the producers' special cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/fp8.h"
#include "kernels/linear.h"
#include "kernels/quantize.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

std::vector<float> gaussian(int64_t n, float sigma, uint32_t seed, bool student_t = false) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::student_t_distribution<float> td(4.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = student_t ? sigma * td(g) : nd(g);
  return v;
}

std::vector<float> dequantize_all(const PackedWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t o = 0; o < w.rows; ++o) dequantize_row(w, o, out.data() + o * w.cols);
  return out;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(Quantize, Nvfp4RoundTrip) {
  const int64_t rows = 64, cols = 2688;
  for (bool heavy : {false, true}) {
    auto w = gaussian(rows * cols, 0.02f, 1, heavy);
    w[12345] = 0.5f;  // outlier: sets the tensor amax
    const Nvfp4Quantized q = quantize_nvfp4(w, rows, cols);
    float amax = 0;
    for (float v : w) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(q.scale2, amax / 2688.0f);
    const PackedWeight pw = q.view();
    EXPECT_NO_THROW(validate_packed_weight(pw, "t"));
    const auto d = dequantize_all(pw);
    const auto& e4m3 = e4m3_table();
    float dmax = 0;
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t k = 0; k < cols; ++k) {
        const uint8_t sb = q.scales[size_t(o * (cols / 16) + k / 16)];
        ASSERT_GE(e4m3[sb], 0.001953125f);
        ASSERT_LE(e4m3[sb], 448.0f);
        // |error| <= half the widest E2M1 gap (2 -> 1) times the block step, saturation included.
        const float step = e4m3[sb] * q.scale2;
        const size_t i = size_t(o * cols + k);
        EXPECT_LE(std::fabs(d[i] - w[i]), 1.0f * step * 1.0001f) << o << "," << k;
        dmax = std::max(dmax, std::fabs(d[i]));
      }
    // formats.md §6.4: ~9.5 % (Gaussian), ~9.1 % (Student-t) relative RMS; max |w| ~ amax.
    const double e = rel_rms(d, w);
    EXPECT_GT(e, 0.05);
    EXPECT_LT(e, 0.12);
    EXPECT_LE(dmax, 6.0f * 448.0f * q.scale2 * 1.0001f);
    EXPECT_GE(dmax, amax * 0.9f);
  }
}

TEST(Quantize, Nvfp4SpecialBlocks) {
  std::vector<float> w(64, 0.0f);
  for (int i = 16; i < 32; ++i) w[size_t(i)] = 1e-30f;  // tiny block: scale clamps at 2^-9
  w[40] = 3.0f;
  w[41] = -3.0f;
  w[42] = -1e-9f;  // small negative -> code 8 (-0), as ModelOpt
  const Nvfp4Quantized q = quantize_nvfp4(w, 1, 64);
  EXPECT_EQ(q.scales[0], 0x38);  // all-zero block -> 1.0
  EXPECT_EQ(q.scales[1], 0x01);  // clamped to 2^-9
  EXPECT_EQ(q.scales[2], 0x7E);  // the amax block -> 448
  EXPECT_EQ(q.packed[20] & 15, 7);
  EXPECT_EQ(q.packed[20] >> 4, 15);
  EXPECT_EQ(q.packed[21] & 15, 8);
  // All-zero tensor: finite, decodable, zero.
  std::vector<float> z(32, 0.0f);
  const Nvfp4Quantized qz = quantize_nvfp4(z, 1, 32);
  EXPECT_TRUE(std::isfinite(qz.scale2));
  EXPECT_GT(qz.scale2, 0.0f);
  for (float v : dequantize_all(qz.view())) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(quantize_nvfp4(z, 1, 30), nemo::Error);
}

TEST(Quantize, Fp8RoundTrip) {
  const int64_t rows = 32, cols = 1000;
  const auto w = gaussian(rows * cols, 0.05f, 3);
  const Fp8Quantized q = quantize_fp8(w, rows, cols);
  float amax = 0;
  for (float v : w) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(q.scale, amax / 448.0f);
  const auto d = dequantize_all(q.view());
  for (size_t i = 0; i < w.size(); ++i) {
    // Relative 2^-4 in the normal range, absolute half a subnormal step below it.
    const float tol = std::max(std::fabs(w[i]) * 0.0625f, q.scale * 0.001953125f * 0.5f) * 1.0001f;
    EXPECT_LE(std::fabs(d[i] - w[i]), tol) << i;
  }
  const double e = rel_rms(d, w);
  EXPECT_GT(e, 0.01);
  EXPECT_LT(e, 0.035);  // formats.md §6.4: 2.6 %
  // The amax element is exact (448 * scale), sign kept.
  for (size_t i = 0; i < w.size(); ++i)
    if (std::fabs(w[i]) == amax) {
      EXPECT_EQ(std::fabs(d[i]), 448.0f * q.scale);
    }
}

TEST(Quantize, AffineRoundTrip) {
  const int64_t rows = 16, cols = 2688;
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      const auto w0 = gaussian(rows * cols, 0.02f, uint32_t(bits * 1000 + group));
      std::vector<float> w(w0.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_f32(f32_to_bf16(w0[i]));  // BF16 source
      const AffineQuantized q = quantize_affine(w, rows, cols, bits, group);
      const PackedWeight pw = q.view();
      EXPECT_NO_THROW(validate_packed_weight(pw, "t"));
      const auto d = dequantize_all(pw);
      const int n = (1 << bits) - 1;
      for (int64_t g = 0; g < rows * cols / group; ++g) {
        const float s = std::fabs(bf16_to_f32(q.scales[size_t(g)])), b = std::fabs(bf16_to_f32(q.biases[size_t(g)]));
        // One step: half a step of rounding, except at the non-edge extreme, which MLX's
        // algorithm may clip by up to (n/2)/|q0| <= ~0.94 steps (scale = edge/q0 after rounding
        // q0); plus the BF16 rounding of the stored scale (times q <= n) and bias.
        const float tol = 1.0f * s * 1.001f + n * s * 0.0039f + b * 0.0039f;
        for (int j = 0; j < group; ++j) {
          const size_t i = size_t(g * group + j);
          ASSERT_LE(std::fabs(d[i] - w[i]), tol) << "bits " << bits << " g" << group << " i=" << i;
        }
      }
      const double e = rel_rms(d, w);
      if (bits == 4) {
        EXPECT_LT(e, group == 128 ? 0.12 : 0.10) << group;
      } else {
        EXPECT_LT(e, 0.01) << group;
      }
    }
}

TEST(Quantize, AffineZeroIsExactAndEdgeCases) {
  // Zero is a code of every group whose extreme is nonzero (q0 = rint(edge/scale) != 0).
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i) w[size_t(i)] = 0.01f * float(i - 20);
  w[7] = 0.0f;
  uint8_t q[64];
  float s, b;
  affine_quantize_group(w.data(), 64, 4, q, &s, &b);
  EXPECT_LE(std::fabs(std::fma(float(q[7]), s, b)), std::fabs(s) * 1e-5f);  // 0 up to f32 rounding
  EXPECT_EQ(b, w[63]);  // |wmax| > |wmin| -> edge = wmax, negative scale
  EXPECT_LT(s, 0.0f);
  // Constant group: scale floors at 1e-7; all-zero group has bias 0 and codes 0.
  std::vector<float> z(32, 0.0f);
  affine_quantize_group(z.data(), 32, 4, q, &s, &b);
  EXPECT_EQ(b, 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], 0);
  EXPECT_THROW(quantize_affine(z, 1, 32, 3, 32), nemo::Error);
  EXPECT_THROW(quantize_affine(z, 1, 32, 4, 16), nemo::Error);
  EXPECT_THROW(quantize_affine(z, 1, 32, 4, 64), nemo::Error);
}

TEST(Quantize, LinearOverQuantizedWeightsTracksFloat) {
  // End to end: y from the NVFP4 kernel vs y from the float weights, Lightning-like shape.
  const int64_t rows = 256, cols = 2688;
  const auto w = gaussian(rows * cols, 0.02f, 5);
  const auto x = gaussian(cols, 1.0f, 6);
  const Nvfp4Quantized q = quantize_nvfp4(w, rows, cols);
  std::vector<float> yq(static_cast<size_t>(rows)), yf(static_cast<size_t>(rows));
  linear(q.view(), x.data(), 1, cols, yq.data(), rows, ThreadConfig{2});
  PackedWeight f{WeightFormat::F32, rows, cols, w.data()};
  linear(f, x.data(), 1, cols, yf.data(), rows, ThreadConfig{2});
  EXPECT_LT(rel_rms(yq, yf), 0.12);
}
