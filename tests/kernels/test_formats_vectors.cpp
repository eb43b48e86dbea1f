// Test vectors of spec/formats.md §7 (E2M1 packing, E4M3, TV-NVFP4-1/2, FP8, MLX affine).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "kernels/fp8.h"
#include "kernels/linear.h"
#include "kernels/quantize.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float fbits(uint32_t u) {
  return std::bit_cast<float>(u);
}

// Equal bit patterns, with +0 and -0 treated as equal (formats.md §2.3).
::testing::AssertionResult same_bits(float got, uint32_t want) {
  if (bits(got) == want || (got == 0.0f && fbits(want) == 0.0f))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hex << "got 0x" << bits(got) << " want 0x" << want;
}

int ulp_diff(float a, float b) {
  const int32_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT32_MAX;
  return std::abs(ia - ib);
}

PackedWeight nvfp4_view(const std::vector<uint8_t>& w, const std::vector<uint8_t>& s, float s2,
                        int64_t rows) {
  PackedWeight p;
  p.format = WeightFormat::NVFP4;
  p.rows = rows;
  p.cols = int64_t(w.size()) * 2 / rows;
  p.data = w.data();
  p.scales = s.data();
  p.scale = s2;
  p.group = 16;
  return p;
}

}  // namespace

// formats.md §7.1
TEST(FormatVectors, E2M1Packing) {
  struct Case {
    uint8_t byte;
    float lo, hi;
  } cases[] = {{0x00, 0, 0},         {0x21, 0.5f, 1.0f},  {0x10, 0, 0.5f},    {0xF7, 6.0f, -6.0f},
               {0x8A, -1.0f, -0.0f}, {0x5B, -1.5f, 3.0f}, {0xC4, 2.0f, -2.0f}};
  for (const auto& c : cases) {
    EXPECT_EQ(e2m1_to_f32(c.byte & 15), c.lo) << std::hex << int(c.byte);
    EXPECT_EQ(e2m1_to_f32(c.byte >> 4), c.hi) << std::hex << int(c.byte);
  }
  EXPECT_TRUE(std::signbit(e2m1_to_f32(0x8)));
  // Row 10 32 .. FE with unit scales decodes to codes 0..15 in order (through the kernel API).
  std::vector<uint8_t> w = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE}, s = {0x38};
  const PackedWeight p = nvfp4_view(w, s, 1.0f, 1);
  float out[16];
  dequantize_row(p, 0, out);
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int k = 0; k < 16; ++k) EXPECT_EQ(out[k], want[k]) << k;
  // And through linear with one-hot inputs (weight_scale_2 = 1, E4M3 1.0: exact).
  for (int k = 0; k < 16; ++k) {
    std::vector<float> x(16, 0.0f);
    x[k] = 1.0f;
    for (Isa isa : available_isas()) {
      float y = NAN;
      linear_range(p, x.data(), 1, 16, &y, 1, 0, 1, isa);
      EXPECT_EQ(y, want[k]) << k << " " << isa_name(isa);
    }
  }
}

// E2M1 encoder = ModelOpt _cast_fp4 (ties to the even code, saturation, sign of small negatives).
TEST(FormatVectors, E2M1Encode) {
  struct Case {
    float x;
    uint8_t code;
  } cases[] = {{0.0f, 0},  {0.25f, 0},   {0.2500001f, 1}, {0.5f, 1},  {0.75f, 2},
               {1.0f, 2},  {1.25f, 2},   {1.3f, 3},       {1.75f, 4}, {2.5f, 4},
               {2.6f, 5},  {3.5f, 6},    {5.0f, 6},       {5.01f, 7}, {100.0f, 7},
               {-0.1f, 8}, {-0.75f, 10}, {-6.0f, 15},     {-0.0f, 0}, {-3.5f, 14}};
  for (const auto& c : cases) EXPECT_EQ(f32_to_e2m1(c.x), c.code) << c.x;
  for (int c = 0; c < 16; ++c) {
    if (c == 8) continue;  // -0 encodes as +0
    EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(uint8_t(c))), c);
  }
}

// formats.md §7.2: all 256 codes against an independent formula, the listed values, and MLX's f16
// trick.
TEST(FormatVectors, E4M3DecodeAll256) {
  const auto& t = e4m3_table();
  for (int b = 0; b < 256; ++b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(t[b])) << b;
      EXPECT_TRUE(std::isnan(e4m3_to_f32(uint8_t(b))));
      continue;
    }
    const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    const double want = s ? -mag : mag;
    EXPECT_EQ(double(t[b]), want) << b;
    EXPECT_EQ(std::signbit(t[b]), bool(s)) << b;
    // MLX: ((b & 0x7F) << 7) as f16, times 256, sign applied.
    const float mlx = f16_to_f32(uint16_t((b & 0x7F) << 7)) * 256.0f;
    EXPECT_EQ(s ? -mlx : mlx, t[b]) << b;
  }
  struct Case {
    uint8_t b;
    float v;
  } listed[] = {{0x00, 0.0f},     {0x01, 0.001953125f}, {0x07, 0.013671875f}, {0x08, 0.015625f},
                {0x26, 0.21875f}, {0x30, 0.5f},         {0x38, 1.0f},         {0x3C, 1.5f},
                {0x40, 2.0f},     {0x44, 3.0f},         {0x2A, 0.3125f},      {0x18, 0.0625f},
                {0x4C, 6.0f},     {0x50, 8.0f},         {0x66, 56.0f},        {0x70, 128.0f},
                {0x77, 240.0f},   {0x78, 256.0f},       {0x7E, 448.0f},       {0x80, -0.0f},
                {0xB8, -1.0f},    {0xC4, -3.0f},        {0xFE, -448.0f}};
  for (const auto& c : listed) {
    EXPECT_EQ(t[c.b], c.v) << std::hex << int(c.b);
    EXPECT_EQ(std::signbit(t[c.b]), std::signbit(c.v));
  }
  EXPECT_TRUE(std::isnan(t[0x7F]));
  EXPECT_TRUE(std::isnan(t[0xFF]));
}

TEST(FormatVectors, E4M3Encode) {
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);
  EXPECT_EQ(f32_to_e4m3(0.3f), 0x2A);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3(3.0f * std::ldexp(1.0f, -10)), 0x02);
  EXPECT_EQ(f32_to_e4m3(600.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-600.0f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);  // saturates (no NaN)
  // Round trip of every finite code, and the midpoint between neighbours goes to the even code.
  const auto& t = e4m3_table();
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    EXPECT_EQ(f32_to_e4m3(t[b]), b) << b;
    const int nb = b + 1;
    if ((b & 0x7F) < 0x7E) {
      const float mid = float((double(t[b]) + double(t[nb])) / 2.0);
      const uint8_t even = (b & 1) ? uint8_t(nb) : uint8_t(b);
      EXPECT_EQ(f32_to_e4m3(mid), even) << b;
    }
  }
}

// formats.md §7.3 TV-NVFP4-1
TEST(FormatVectors, TvNvfp4_1) {
  const std::vector<uint8_t> w = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,
                                  0x7F, 0x00, 0x21, 0xA9, 0x4C, 0xE7, 0x18, 0x5B};
  const std::vector<uint8_t> s = {0x3C, 0x26};
  const float s2 = fbits(0x3B23D70A);
  EXPECT_EQ(s2, 0.0025f);
  EXPECT_EQ(bits(e4m3_table()[0x3C] * s2), 0x3B75C28Fu);
  EXPECT_EQ(bits(e4m3_table()[0x26] * s2), 0x3A0F5C29u);
  const uint32_t f32[32] = {0x00000000, 0x3AF5C28F, 0x3B75C28F, 0x3BB851EB, 0x3BF5C28F, 0x3C3851EB,
                            0x3C75C28F, 0x3CB851EB, 0x80000000, 0xBAF5C28F, 0xBB75C28F, 0xBBB851EB,
                            0xBBF5C28F, 0xBC3851EB, 0xBC75C28F, 0xBCB851EB, 0xBB570A3E, 0x3B570A3E,
                            0x00000000, 0x00000000, 0x398F5C29, 0x3A0F5C29, 0xB98F5C29, 0xBA0F5C29,
                            0xBA8F5C29, 0x3A8F5C29, 0x3B570A3E, 0xBB0F5C29, 0x80000000, 0x398F5C29,
                            0xBA570A3E, 0x3AD70A3E};
  const uint16_t bf[32] = {0x0000, 0x3AF6, 0x3B76, 0x3BB8, 0x3BF6, 0x3C38, 0x3C76, 0x3CB8,
                           0x8000, 0xBAF6, 0xBB76, 0xBBB8, 0xBBF6, 0xBC38, 0xBC76, 0xBCB8,
                           0xBB57, 0x3B57, 0x0000, 0x0000, 0x398F, 0x3A0F, 0xB98F, 0xBA0F,
                           0xBA8F, 0x3A8F, 0x3B57, 0xBB0F, 0x8000, 0x398F, 0xBA57, 0x3AD7};
  const PackedWeight p = nvfp4_view(w, s, s2, 1);
  float out[32];
  dequantize_row(p, 0, out);
  for (int k = 0; k < 32; ++k) {
    EXPECT_TRUE(same_bits(out[k], f32[k])) << "k=" << k;
    EXPECT_EQ(f32_to_bf16(out[k]) & 0x7FFF, bf[k] & 0x7FFF) << "k=" << k;
  }
  // The kernel computes (E2M1*E4M3) * s2: within 1 ulp of the table (1 ulp at k = 16, 17, 26, 30,
  // 31).
  for (int k = 0; k < 32; ++k) {
    std::vector<float> x(32, 0.0f);
    x[k] = 1.0f;
    for (Isa isa : available_isas()) {
      float y = NAN;
      linear_range(p, x.data(), 1, 32, &y, 1, 0, 1, isa);
      EXPECT_LE(ulp_diff(y, fbits(f32[k])), 1) << "k=" << k << " " << isa_name(isa);
      EXPECT_EQ(f32_to_bf16(y) & 0x7FFF, bf[k] & 0x7FFF) << "k=" << k;
    }
  }
}

// formats.md §7.4 TV-NVFP4-2 and the MLX requantization of the same group.
TEST(FormatVectors, TvNvfp4_2_AndMlxRequant) {
  const std::vector<uint8_t> w = {0x60, 0xB6, 0xCA, 0x84, 0xF5, 0x97, 0x94, 0x3B, 0x94, 0x49, 0xED,
                                  0xC2, 0xCF, 0xEB, 0x0E, 0x95, 0x1A, 0x92, 0x71, 0xA8, 0x11, 0xB2,
                                  0xA9, 0x0C, 0xC4, 0x56, 0x34, 0xE5, 0x44, 0x2F, 0x5A, 0x8B};
  const std::vector<uint8_t> s = {0x68, 0x69, 0x74, 0x68};
  EXPECT_EQ(e4m3_table()[0x68], 64.0f);
  EXPECT_EQ(e4m3_table()[0x69], 72.0f);
  EXPECT_EQ(e4m3_table()[0x74], 192.0f);
  const float s2 = fbits(0x38C30C31);
  EXPECT_EQ(s2, 0.25f / 2688.0f);
  const uint32_t f32[64] = {0x00000000, 0x3CC30C31, 0x3CC30C31, 0xBC124925, 0xBBC30C31, 0xBC430C31,
                            0x3C430C31, 0x80000000, 0x3C924925, 0xBD124925, 0x3D124925, 0xBB430C31,
                            0x3C430C31, 0xBB430C31, 0xBC124925, 0x3C124925, 0x3C5B6DB7, 0xBB5B6DB7,
                            0xBB5B6DB7, 0x3C5B6DB7, 0xBCA49249, 0xBCDB6DB7, 0x3BDB6DB7, 0xBC5B6DB7,
                            0xBD249249, 0xBC5B6DB7, 0xBC249249, 0xBCDB6DB7, 0xBCDB6DB7, 0x00000000,
                            0x3CA49249, 0xBB5B6DB7, 0xBC924925, 0x3C124925, 0x3C924925, 0xBC124925,
                            0x3C124925, 0x3DDB6DB8, 0x80000000, 0xBC924925, 0x3C124925, 0x3C124925,
                            0x3C924925, 0xBCDB6DB8, 0xBC124925, 0xBC924925, 0xBD124925, 0x00000000,
                            0x3C430C31, 0xBC430C31, 0x3CC30C31, 0x3C924925, 0x3C430C31, 0x3C124925,
                            0x3C924925, 0xBCC30C31, 0x3C430C31, 0x3C430C31, 0xBD124925, 0x3BC30C31,
                            0xBBC30C31, 0x3C924925, 0xBC124925, 0x80000000};
  const uint16_t bf[64] = {
      0x0000, 0x3CC3, 0x3CC3, 0xBC12, 0xBBC3, 0xBC43, 0x3C43, 0x8000, 0x3C92, 0xBD12, 0x3D12,
      0xBB43, 0x3C43, 0xBB43, 0xBC12, 0x3C12, 0x3C5B, 0xBB5B, 0xBB5B, 0x3C5B, 0xBCA5, 0xBCDB,
      0x3BDB, 0xBC5B, 0xBD25, 0xBC5B, 0xBC25, 0xBCDB, 0xBCDB, 0x0000, 0x3CA5, 0xBB5B, 0xBC92,
      0x3C12, 0x3C92, 0xBC12, 0x3C12, 0x3DDB, 0x8000, 0xBC92, 0x3C12, 0x3C12, 0x3C92, 0xBCDB,
      0xBC12, 0xBC92, 0xBD12, 0x0000, 0x3C43, 0xBC43, 0x3CC3, 0x3C92, 0x3C43, 0x3C12, 0x3C92,
      0xBCC3, 0x3C43, 0x3C43, 0xBD12, 0x3BC3, 0xBBC3, 0x3C92, 0xBC12, 0x8000};
  const PackedWeight p = nvfp4_view(w, s, s2, 1);
  float out[64];
  dequantize_row(p, 0, out);
  std::vector<float> wb(64);
  for (int k = 0; k < 64; ++k) {
    EXPECT_TRUE(same_bits(out[k], f32[k])) << "k=" << k;
    EXPECT_EQ(f32_to_bf16(out[k]) & 0x7FFF, bf[k] & 0x7FFF) << "k=" << k;
    wb[k] = bf16_to_f32(bf[k]);
  }
  // MLX affine 4-bit g64 of the BF16 values.
  uint8_t q[64];
  float sc, bi;
  affine_quantize_group(wb.data(), 64, 4, q, &sc, &bi);
  EXPECT_EQ(bi, 0.10693359375f);
  EXPECT_EQ(f32_to_bf16(sc), 0xBC1F);
  EXPECT_EQ(f32_to_bf16(bi), 0x3DDB);
  const uint8_t want_q[64] = {11, 9,  9,  12, 12, 12, 10, 11, 9,  15, 7,  11, 10, 11, 12, 10,
                              10, 11, 11, 10, 13, 14, 10, 12, 15, 12, 12, 14, 14, 11, 9,  11,
                              13, 10, 9,  12, 10, 0,  11, 13, 10, 10, 9,  14, 12, 13, 15, 11,
                              10, 12, 9,  9,  10, 10, 9,  13, 10, 10, 15, 10, 12, 9,  12, 11};
  for (int k = 0; k < 64; ++k) EXPECT_EQ(q[k], want_q[k]) << k;
  const AffineQuantized a = quantize_affine(wb, 1, 64, 4, 64);
  const uint32_t words[8] = {0xBACCC99B, 0xACBAB7F9, 0xCAEDABBA, 0xB9BEECCF,
                             0xDB0AC9AD, 0xBFDCE9AA, 0xD9AA99CA, 0xBC9CAFAA};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a.words[i], words[i]) << i;
  EXPECT_EQ(a.scales[0], 0xBC1F);
  EXPECT_EQ(a.biases[0], 0x3DDB);
  // Dequantized with the stored BF16 scale/bias: max |error| 0.00458 vs the NVFP4 values.
  float deq[64];
  dequantize_row(a.view(), 0, deq);
  double maxerr = 0;
  for (int k = 0; k < 64; ++k) maxerr = std::max(maxerr, std::fabs(double(deq[k]) - double(wb[k])));
  EXPECT_NEAR(maxerr, 0.00458, 0.00001);
  // The NVFP4 quantizer reproduces this row from its own dequantized values (same scale2).
  // (Codes may differ only by the sign of zero: the decoded -0 of code 8 is +0.)
  const Nvfp4Quantized re = quantize_nvfp4(std::span<const float>(out, 64), 1, 64, s2);
  EXPECT_EQ(re.scales, s);
  float again[64];
  dequantize_row(re.view(), 0, again);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(again[k], out[k]) << k;
}

// formats.md §7.5
TEST(FormatVectors, Fp8WeightAndStaticActivation) {
  const std::vector<uint8_t> w = {0x38, 0xC4, 0x26, 0x7E, 0x01, 0x80, 0x4C, 0xB8};
  const float ws = fbits(0x3C4CCCCD);
  EXPECT_EQ(ws, 0.0125f);
  const uint32_t want[8] = {0x3C4CCCCD, 0xBD19999A, 0x3B333333, 0x40B33333,
                            0x37CCCCCD, 0x80000000, 0x3D99999A, 0xBC4CCCCD};
  PackedWeight p;
  p.format = WeightFormat::FP8_E4M3;
  p.rows = 1;
  p.cols = 8;
  p.data = w.data();
  p.scale = ws;
  float out[8];
  dequantize_row(p, 0, out);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(bits(out[k]), want[k]) << k;
  // Kernel with one-hot inputs: (E4M3 * 2^-8) * (ws * 256) is the same single product.
  for (int k = 0; k < 8; ++k) {
    std::vector<float> x(8, 0.0f);
    x[k] = 1.0f;
    for (Isa isa : available_isas()) {
      float y = NAN;
      linear_range(p, x.data(), 1, 8, &y, 1, 0, 1, isa);
      EXPECT_TRUE(same_bits(y, want[k])) << k << " " << isa_name(isa);
    }
  }
  const float is = fbits(0x3D4CCCCD);
  EXPECT_EQ(is, 0.05f);
  const float x[5] = {1.0f, -3.3f, 22.4f, 30.0f, 0.0001f};
  const uint8_t bytes[5] = {0x5A, 0xE8, 0x7E, 0x7E, 0x01};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f32_to_e4m3(x[i] / is), bytes[i]) << i;
  float xq[5], xf[5];
  fp8_quantize_activations(x, 5, is, xq);
  fp8_fake_quant(x, 5, is, xf);
  const float want_q[5] = {20.0f, -64.0f, 448.0f, 448.0f, 0.001953125f};
  const float want_f[5] = {1.0f, -3.2f, 22.4f, 22.4f, 9.765625e-5f};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(xq[i], want_q[i]) << i;
    EXPECT_NEAR(xf[i], want_f[i], std::fabs(want_f[i]) * 1e-6f) << i;
    EXPECT_EQ(xf[i], want_q[i] * is) << i;
  }
}

// formats.md §7.6
TEST(FormatVectors, MlxAffineGroups) {
  {  // TV-MLX-1: exact, negative scale
    std::vector<float> w(64);
    for (int i = 0; i < 64; ++i) w[i] = 1.0f - 0.125f * float(i % 16);
    const AffineQuantized a = quantize_affine(w, 1, 64, 4, 64);
    EXPECT_EQ(a.scales[0], 0xBE00);
    EXPECT_EQ(a.biases[0], 0x3F80);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(a.words[i], i % 2 ? 0xFEDCBA98u : 0x76543210u) << i;
    uint8_t b0[4];
    std::memcpy(b0, a.words.data(), 4);
    EXPECT_EQ(b0[0], 0x10);
    EXPECT_EQ(b0[3], 0x76);
    float deq[64];
    dequantize_row(a.view(), 0, deq);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(deq[i], w[i]) << i;
  }
  {  // TV-MLX-2: Gaussian x0.02, BF16 inputs
    const uint16_t in[64] = {
        0x37CE, 0x3BC4, 0xBBB4, 0xBC92, 0xBC15, 0xBCA2, 0x3A9E, 0x3CDC, 0xBC21, 0xBC4B, 0x3C21,
        0x3BEA, 0x3B0A, 0xBC98, 0xBA19, 0x3C64, 0xBCDC, 0xBC16, 0xBD1C, 0xBCD3, 0xBD17, 0xBB9A,
        0xBCD0, 0x3BB2, 0x3B4D, 0xBB75, 0xBD4E, 0xBC31, 0xBA7E, 0x3B15, 0xBCFB, 0xBC1D, 0xBCA0,
        0xBC85, 0x3CAE, 0xBC84, 0xBA2B, 0x3C91, 0xBC3F, 0xBB12, 0x3B11, 0x3AA7, 0xBCC9, 0x3AC8,
        0x3CDF, 0xBCFD, 0x3C8D, 0x3B1C, 0xBC52, 0x3D24, 0x3C7A, 0xBCC4, 0x3AC3, 0x3C3D, 0xBB77,
        0x3C60, 0xBAAE, 0x3C5B, 0x3CEC, 0xBC5D, 0x3B85, 0xBC18, 0x3B27, 0xBCC3};
    std::vector<float> w(64);
    for (int i = 0; i < 64; ++i) w[i] = bf16_to_f32(in[i]);
    const AffineQuantized a = quantize_affine(w, 1, 64, 4, 64);
    EXPECT_EQ(a.scales[0], 0x3BCE);
    EXPECT_EQ(a.biases[0], 0xBD4E);
    EXPECT_EQ(bf16_to_f32(a.scales[0]), 0.00628662109375f);
    EXPECT_EQ(bf16_to_f32(a.biases[0]), -0.05029296875f);
    const uint32_t words[8] = {0xC8575798, 0xA8589A66, 0x94724274, 0x63886078,
                               0x86B85B55, 0x8B3C8488, 0xA7A84AE6, 0x48796DA8};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(a.words[i], words[i]) << i;
    // The same group at 8 bits: within one step plus the BF16 rounding of the scale (x q <= 255).
    const AffineQuantized a8 = quantize_affine(w, 1, 64, 8, 64);
    float deq[64];
    dequantize_row(a8.view(), 0, deq);
    const float s8 = std::fabs(bf16_to_f32(a8.scales[0]));
    EXPECT_NEAR(s8, 0.0904f / 255.0f, 0.0904f / 255.0f * 0.01f);
    for (int i = 0; i < 64; ++i)
      EXPECT_NEAR(deq[i], w[i], s8 + 255.0f * s8 / 256.0f + 0.051f / 256.0f) << i;
    // The edge element (the minimum here) is exact up to the BF16 rounding of the bias.
    EXPECT_EQ(deq[26], bf16_to_f32(a8.biases[0]));
  }
}

// formats.md §7.7 is the GPU swizzle; the CPU kernels read the linear layout and need none (no
// test).
