// NVFP4 with bf16 activations (Arith::Bf16): the activation rounding against an independent
// round-to-nearest-even, the reference against a separately written statement of the order in
// linear_nvfp4.cpp, every ISA path (the AVX512_BF16 kernel where the CPU has it) bitwise against
// the reference at every row count, thread count and output range, and the accuracy bound.
#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/fp8.h"
#include "kernels/linear.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

// Round to 8 significant bits, nearest even, by arithmetic (not by bit tricks).
float rne8(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  int e;
  std::frexp(double(x), &e);                           // |x| = m * 2^e, m in [0.5, 1)
  const double scaled = std::ldexp(double(x), 8 - e);  // 8 bits before the point
  const int mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double r = std::nearbyint(scaled);
  std::fesetround(mode);
  const double v = std::ldexp(r, e - 8);
  return v > double(std::numeric_limits<float>::max()) ||
                 v < -double(std::numeric_limits<float>::max())
             ? std::copysign(INFINITY, x)
             : float(v);
}

struct Nvfp4 {
  int64_t rows, cols;
  std::vector<uint8_t> codes, scales;
  std::vector<float> w;  // exact kernel weights E2M1 * E4M3
  PackedWeight pw;
};

Nvfp4 make(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  Nvfp4 m{rows, cols, {}, {}, {}, {}};
  m.codes.resize(size_t(rows * cols / 2));
  m.scales.resize(size_t(rows * cols / 16));
  for (auto& b : m.codes) b = uint8_t(g());
  for (auto& s : m.scales) {
    do s = uint8_t(g() & 0x7F);  // every positive E4M3 magnitude, subnormals included
    while (s == 0x7F);
  }
  static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  m.w.resize(size_t(rows * cols));
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t b = m.codes[size_t((o * cols + k) / 2)];
      m.w[size_t(o * cols + k)] =
          e2m1[k & 1 ? b >> 4 : b & 15] * e4m3_table()[m.scales[size_t((o * cols + k) / 16)]];
    }
  m.pw = {WeightFormat::NVFP4, rows, cols, m.codes.data(), m.scales.data(), nullptr, 0.00731f, 16};
  m.pw.arith = Arith::Bf16;
  return m;
}

std::vector<float> rand_x(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(g);
  return x;
}

// The order, written from its statement: in each 32-weight chunk, the 8 qwords of the decoder
// hold 4 words each; qword j's words come from scale block j % 2, positions 4 * (j / 2) .. + 3.
// Lane l sums words 2l + 1 then 2l; lanes fold as (l, l + 8), then the fixed 8-lane sum.
float by_definition(const Nvfp4& m, int64_t o, const std::vector<float>& xr, float post) {
  const int64_t K = m.cols, K32 = K / 32 * 32;
  int element[32];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) element[4 * j + i] = (j % 2) * 16 + (j / 2) * 4 + i;
  float lane[16] = {};
  for (int64_t c = 0; c < K32; c += 32)
    for (int l = 0; l < 16; ++l)
      for (int word : {2 * l + 1, 2 * l}) {
        const int64_t k = c + element[word];
        lane[l] = std::fma(m.w[size_t(o * K + k)], xr[size_t(k)], lane[l]);
      }
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = lane[l] + lane[l + 8];
  const float s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  float t = 0.0f;
  for (int64_t k = K32; k < K; ++k) t = std::fma(m.w[size_t(o * K + k)], xr[size_t(k)], t);
  return (s + t) * post;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

}  // namespace

TEST(LinearBf16, ActivationRoundingIsNearestEvenWithTinyFlushed) {
  EXPECT_EQ(round_activation_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_activation_bf16(1.0f + 0x1p-8f), 1.0f);                // tie -> even
  EXPECT_EQ(round_activation_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);  // tie -> even
  EXPECT_EQ(round_activation_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_activation_bf16(-0x1p-101f), 0.0f);
  EXPECT_FALSE(std::signbit(round_activation_bf16(-0x1p-101f)));
  EXPECT_EQ(round_activation_bf16(0x1p-100f), 0x1p-100f);
  EXPECT_EQ(round_activation_bf16(std::numeric_limits<float>::max()), INFINITY);
  EXPECT_EQ(round_activation_bf16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_activation_bf16(NAN)));
  std::mt19937 g(5);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(uint32_t(g()));
    if (!std::isfinite(x) || std::fabs(x) < 0x1p-100f) continue;
    ++checked;
    ASSERT_EQ(std::bit_cast<uint32_t>(round_activation_bf16(x)), std::bit_cast<uint32_t>(rne8(x)))
        << x;
  }
  EXPECT_GT(checked, 150000);
}

TEST(LinearBf16, ReferenceFollowsTheStatedOrder) {
  int compared = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {20, 80}, {9, 16}, {5, 2688}}) {
    const Nvfp4 m = make(rows, cols, uint32_t(rows * 131 + cols));
    for (int64_t n : {1, 3, 6}) {
      const auto x = rand_x(n * cols, uint32_t(n + cols));
      std::vector<float> y(static_cast<size_t>(n * rows));
      linear_range(m.pw, x.data(), n, cols, y.data(), rows, 0, rows, Isa::Reference);
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> xr(static_cast<size_t>(cols));
        for (int64_t k = 0; k < cols; ++k) xr[size_t(k)] = rne8(x[size_t(r * cols + k)]);
        for (int64_t o = 0; o < rows; ++o, ++compared)
          ASSERT_EQ(std::bit_cast<uint32_t>(y[size_t(r * rows + o)]),
                    std::bit_cast<uint32_t>(by_definition(m, o, xr, m.pw.scale)))
              << rows << "x" << cols << " row " << r << " output " << o;
      }
    }
  }
  EXPECT_EQ(compared, (37 + 20 + 9 + 5) * (1 + 3 + 6));
}

TEST(LinearBf16, EveryIsaEqualsTheReferenceAtEveryWidthThreadAndRange) {
  IsaGuard guard;
  int compared = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {20, 80}, {9, 16}, {640, 512}}) {
    const Nvfp4 m = make(rows, cols, uint32_t(rows + 7 * cols));
    for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 17}) {
      const int64_t xs = cols + 3, ys = rows + 5;
      auto x = rand_x(n * xs, uint32_t(9 * n + cols));
      for (size_t i = 0; i < x.size(); ++i) {  // ties, and either side of the flush threshold
        if (i % 7 == 3) x[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + 0x1p-8f);
        if (i % 11 == 5) x[i] = i % 2 ? -0x1p-101f : 0x1p-99f;
        if (i % 13 == 6) x[i] = 1.5e-38f;
      }
      std::vector<float> ref(static_cast<size_t>(n * ys), -1.0f);
      linear_range(m.pw, x.data(), n, xs, ref.data(), ys, 0, rows, Isa::Reference);
      for (Isa isa : available_isas()) {
        set_active_isa(isa);
        for (int nt : {1, 2, 3}) {
          std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
          linear(m.pw, x.data(), n, xs, y.data(), ys, ThreadConfig{nt});
          ++compared;
          EXPECT_TRUE(same_bits(ref, y))
              << rows << "x" << cols << " rows=" << n << " threads=" << nt << " " << isa_name(isa);
        }
        std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
        for (int64_t b = 0; b < rows;) {
          const int64_t e = std::min(rows, b + 1 + b % 5);
          linear_range(m.pw, x.data(), n, xs, y.data(), ys, b, e, isa);
          b = e;
        }
        ++compared;
        EXPECT_TRUE(same_bits(ref, y))
            << rows << "x" << cols << " ranges, rows=" << n << " " << isa_name(isa);
        // Each row alone gives the bits it has in the batch.
        for (int64_t r = 0; r < n; r += 3) {
          std::vector<float> y1(static_cast<size_t>(ys), -1.0f);
          linear_range(m.pw, x.data() + r * xs, 1, xs, y1.data(), ys, 0, rows, isa);
          ++compared;
          EXPECT_EQ(0, std::memcmp(y1.data(), ref.data() + r * ys, size_t(rows) * 4))
              << rows << "x" << cols << " row " << r << " alone, " << isa_name(isa);
        }
      }
    }
  }
  std::printf("[ bf16 paths ] %s%s: %d comparisons\n", isa_name(detected_isa()),
              cpu_has_avx512_bf16() ? " with AVX512_BF16 (vdpbf16ps kernel)" : " (reference only)",
              compared);
  const int per_isa = 4 * (8 * 4 + (1 + 1 + 1 + 2 + 2 + 3 + 3 + 6));  // + rows 0, 3, 6, ..., alone
  EXPECT_EQ(compared, per_isa * int(available_isas().size()));
}

TEST(LinearBf16, AccurateAgainstExactSums) {
  // Against the exact (double) sum of w' * round(x): only the f32 accumulation differs; against
  // the f32-activation product: the activation rounding (relative 2^-9 per term) dominates.
  const Nvfp4 m = make(64, 2688, 3);
  const auto x = rand_x(2688, 4);
  std::vector<float> y(64), y32(64);
  linear_range(m.pw, x.data(), 1, 2688, y.data(), 64, 0, 64, active_isa());
  PackedWeight f32 = m.pw;
  f32.arith = Arith::F32;
  linear_range(f32, x.data(), 1, 2688, y32.data(), 64, 0, 64, active_isa());
  double worst_acc = 0, worst_round = 0;
  for (int64_t o = 0; o < 64; ++o) {
    double exact = 0, mag = 0;
    for (int64_t k = 0; k < 2688; ++k) {
      exact += double(m.w[size_t(o * 2688 + k)]) * rne8(x[size_t(k)]);
      mag += std::fabs(double(m.w[size_t(o * 2688 + k)]) * x[size_t(k)]);
    }
    exact *= m.pw.scale, mag *= m.pw.scale;
    worst_acc = std::max(worst_acc, std::fabs(y[size_t(o)] - exact) / mag);
    worst_round = std::max(worst_round, std::fabs(double(y[size_t(o)]) - y32[size_t(o)]) / mag);
  }
  std::printf("[ bf16 accuracy ] accumulation %.3g, vs f32 activations %.3g (of sum |w x|)\n",
              worst_acc, worst_round);
  EXPECT_LT(worst_acc, 1e-6);    // measured ~1e-7: f32 sums of 2688 terms
  EXPECT_LT(worst_round, 4e-3);  // the activation rounding, at most 2^-9 of each term
  EXPECT_GT(worst_round, 1e-5);  // and it did round
}

TEST(LinearBf16, OtherFormatsFailWithAClearError) {
  std::vector<uint8_t> data(64 * 32);
  PackedWeight w{WeightFormat::FP8_E4M3, 64, 32, data.data(), nullptr, nullptr, 1.0f, 0};
  w.arith = Arith::Bf16;
  std::vector<float> x(32, 1.0f), y(64);
  try {
    linear(w, x.data(), 1, 32, y.data(), 64, ThreadConfig{1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 activations are implemented for nvfp4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_STREQ(arith_name(Arith::Bf16), "bf16");
  EXPECT_STREQ(arith_name(Arith::F32), "f32");
}
