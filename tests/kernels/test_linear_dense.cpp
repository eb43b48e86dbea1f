// Dense linear kernels: SIMD == scalar reference bitwise; batch and thread invariance; values
// against a float64 dot product.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/numeric.h"
#include "kernels/linear.h"
#include "kernels/linear_impl.h"
#include "kernels/ops.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

struct Mat {
  std::vector<uint8_t> bytes;
  PackedWeight w;
  std::vector<float> f32;  // exact widened values
};

Mat make(WeightFormat f, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Mat m;
  m.f32.resize(size_t(rows * cols));
  const int es = f == WeightFormat::F32 ? 4 : 2;
  m.bytes.resize(size_t(rows * cols * es) + 1);  // +1: test an unaligned base
  uint8_t* base = m.bytes.data() + 1;
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = u(g);
    if (f == WeightFormat::BF16) {
      uint16_t b = f32_to_bf16(v);
      std::memcpy(base + 2 * i, &b, 2);
      v = bf16_to_f32(b);
    } else if (f == WeightFormat::F16) {
      uint16_t b = f32_to_f16(v);
      std::memcpy(base + 2 * i, &b, 2);
      v = f16_to_f32(b);
    } else {
      std::memcpy(base + 4 * i, &v, 4);
    }
    m.f32[size_t(i)] = v;
  }
  m.w.format = f;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.data = base;
  return m;
}

std::vector<float> rand_x(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = u(g);
  return x;
}

class DenseLinear : public testing::TestWithParam<std::tuple<WeightFormat, int64_t>> {};

}  // namespace

TEST_P(DenseLinear, SimdEqualsReferenceAndBatchInvariant) {
  const auto [fmt, cols] = GetParam();
  const int64_t rows = 37;
  Mat m = make(fmt, rows, cols, 1);
  int simd_checked = 0;
  // 1..4: one register tile; 5+: 4-row groups over L2 blocks, or (Intel, AVX-512) from 32 rows
  // the f32-block path (both AVX-512 kernels: DenseLinear.BothAvx512KernelsEqualTheReference).
  for (int64_t n : {1, 3, 4, 5, 7, 8, 16, 17, 33}) {
    auto x = rand_x(n * cols, uint32_t(n));
    std::vector<float> yref(size_t(n * rows)), ysimd(size_t(n * rows)),
        yone(static_cast<size_t>(rows));
    linear_range(m.w, x.data(), n, cols, yref.data(), rows, 0, rows, Isa::Reference);
    for (Isa isa : available_isas()) {
      if (isa == Isa::Reference) continue;
      std::fill(ysimd.begin(), ysimd.end(), -1.0f);
      linear_range(m.w, x.data(), n, cols, ysimd.data(), rows, 0, rows, isa);
      ASSERT_EQ(0, std::memcmp(yref.data(), ysimd.data(), yref.size() * 4))
          << "n=" << n << " " << isa_name(isa);
      ++simd_checked;
    }
    for (int threads : {1, 2, 3}) {
      std::vector<float> yt(size_t(n * rows));
      linear(m.w, x.data(), n, cols, yt.data(), rows, ThreadConfig{threads});
      ASSERT_EQ(0, std::memcmp(yref.data(), yt.data(), yt.size() * 4)) << "threads=" << threads;
    }
    // Each row alone gives the same bits as inside the batch.
    for (int64_t r = 0; r < n; ++r) {
      linear(m.w, x.data() + r * cols, 1, cols, yone.data(), rows, ThreadConfig{1});
      ASSERT_EQ(0, std::memcmp(yone.data(), yref.data() + r * rows, size_t(rows) * 4))
          << "row " << r;
    }
    // Values: close to a float64 dot product.
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < rows; ++o) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < cols; ++k) {
          s += double(m.f32[size_t(o * cols + k)]) * x[size_t(r * cols + k)];
          mag += std::fabs(double(m.f32[size_t(o * cols + k)]) * x[size_t(r * cols + k)]);
        }
        ASSERT_NEAR(yref[size_t(r * rows + o)], s, 1e-6 * mag + 1e-30);
      }
  }
  EXPECT_EQ(simd_checked, 9 * int(available_isas().size() - 1));  // every SIMD path ran
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DenseLinear,
    testing::Combine(testing::Values(WeightFormat::F32, WeightFormat::BF16, WeightFormat::F16),
                     testing::Values(int64_t(16), int64_t(72), int64_t(100), int64_t(2688))));

// Both AVX-512 dense kernels, whichever this CPU selects (cpu_is_intel): passes swept in
// registers at every width, or from 32 rows the weights decoded to f32 once (row blocks of
// activations within wide_blocking().row_bytes: at K = 2688, 72 rows with 2 MB of L2, 30 with
// 1 MB, so 80 and 150 rows run as several blocks), on output ranges that split the 16-output
// blocks.
TEST(DenseLinear, BothAvx512KernelsEqualTheReference) {
  if (detected_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  int compared = 0;
  for (WeightFormat fmt : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::F16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 2688}, {21, 100}}) {
      const Mat m = make(fmt, rows, cols, uint32_t(rows + cols));
      for (int64_t n : {8, 31, 32, 33, 80, 150}) {  // 8: Intel's one-tile passes
        const auto x = rand_x(n * cols, uint32_t(n + 7));
        std::vector<float> want(size_t(n * rows));
        detail::range_dense_ref(m.w, x.data(), n, cols, want.data(), rows, 0, rows);
        for (auto kernel : {detail::range_dense_avx512, detail::range_dense_avx512_wide}) {
          std::vector<float> got(size_t(n * rows), -1.0f);
          for (int64_t b = 0; b < rows;) {
            const int64_t e = std::min(rows, b + 1 + (b * 7) % 19);
            kernel(m.w, x.data(), n, cols, got.data(), rows, b, e);
            b = e;
          }
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
              << weight_format_name(fmt) << " " << rows << "x" << cols << " n=" << n;
          ++compared;
        }
      }
    }
  EXPECT_EQ(compared, 3 * 2 * 6 * 2);
}

TEST(Ops, DotAndRmsNorm) {
  auto a = rand_x(1001, 5), b = rand_x(1001, 6);
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  EXPECT_NEAR(dot(a.data(), b.data(), 1001), s, 1e-3);
  std::vector<float> w(1001, 2.0f), out(1001);
  rms_norm(a.data(), w.data(), 1001, 1e-5f, out.data());
  double ms = 0;
  for (auto v : out) ms += double(v) * v;
  EXPECT_NEAR(std::sqrt(ms / 1001), 2.0, 1e-3);
  // SIMD dot == reference dot bitwise (same canonical order).
  const Isa saved = active_isa();
  set_active_isa(Isa::Reference);
  const float r = dot(a.data(), b.data(), 1001);
  set_active_isa(saved);
  EXPECT_EQ(std::memcmp(&r, &(const float&)dot(a.data(), b.data(), 1001), 4), 0);
}

TEST(Ops, DotRowsIsDotPerRow) {
  // dot_rows: each row bitwise dot()'s, on every path the machine has, for row counts around the
  // 4-row blocks and lengths with and without a tail (the SSM readout: 64 rows of 128).
  const Isa saved = active_isa();
  int checked = 0;
  for (Isa isa : available_isas()) {
    set_active_isa(isa);
    for (int64_t n : {int64_t(7), int64_t(16), int64_t(128), int64_t(131)})
      for (int64_t rows : {int64_t(1), int64_t(3), int64_t(4), int64_t(9), int64_t(64)}) {
        const int64_t stride = n + 5;
        const auto a = rand_x(size_t(rows * stride), uint64_t(11 + n + rows)),
                   b = rand_x(size_t(n), uint64_t(12 + n));
        std::vector<float> got(size_t(rows), -1.0f);
        dot_rows(a.data(), stride, rows, b.data(), n, got.data());
        for (int64_t r = 0; r < rows; ++r) {
          const float want = dot(a.data() + r * stride, b.data(), n);
          ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(r)]), std::bit_cast<uint32_t>(want))
              << isa_name(isa) << " n " << n << " rows " << rows << " row " << r;
          ++checked;
        }
      }
  }
  set_active_isa(saved);
  EXPECT_EQ(checked, int(available_isas().size()) * 4 * (1 + 3 + 4 + 9 + 64));
}

TEST(Ops, DecayOuterAddSameBitsEveryPath) {
  // S·decay + b ⊗ x, element by element unfused: every path gives the reference's bits, tails
  // included (n = 128: the SSM state rows).
  const Isa saved = active_isa();
  int checked = 0;
  for (int64_t n : {int64_t(5), int64_t(128), int64_t(131)}) {
    const int64_t rows = 6;
    const auto S0 = rand_x(size_t(rows * n), uint64_t(21 + n)), b = rand_x(size_t(n), 22),
               x = rand_x(size_t(rows), 23);
    set_active_isa(Isa::Reference);
    auto want = S0;
    decay_outer_add(want.data(), rows, n, 0.8125f, b.data(), x.data());
    // The reference is the formula, rounded after each operation.
    for (int64_t i = 0; i < rows * n; ++i)
      ASSERT_EQ(want[size_t(i)], S0[size_t(i)] * 0.8125f + b[size_t(i % n)] * x[size_t(i / n)]);
    for (Isa isa : available_isas()) {
      set_active_isa(isa);
      auto got = S0;
      decay_outer_add(got.data(), rows, n, 0.8125f, b.data(), x.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << isa_name(isa) << " n " << n;
      ++checked;
    }
  }
  set_active_isa(saved);
  EXPECT_EQ(checked, 3 * int(available_isas().size()));
}

TEST(Ops, DecayOuterAddDotStepsIsStepsInTurn) {
  // decay_outer_add_dot_steps: the state and outputs of its T steps as decay_outer_add then dot()
  // in turn (the reference path is the oracle), bitwise, on every path the machine has: lengths
  // held in registers (64, 128) and not (5, 16, 131), 1-11 steps, 1-64 rows, in
  // place and from another buffer (which must stay as it was), rows strided as the SSM's are.
  const Isa saved = active_isa();
  int checked = 0;
  for (Isa isa : available_isas())
    for (int64_t n : {int64_t(5), int64_t(16), int64_t(64), int64_t(128), int64_t(131)})
      for (int64_t rows : {int64_t(1), int64_t(3), int64_t(4), int64_t(9), int64_t(64)})
        for (int64_t T : {int64_t(1), int64_t(3), int64_t(8), int64_t(11)})
          for (bool in_place : {true, false}) {
            const int64_t bs = n + 7, xs = rows + 5, cs = n + 3, os = rows + 2;
            const auto S0 = rand_x(size_t(rows * n), uint64_t(41 + n + rows));
            const auto b = rand_x(size_t(T * bs), uint64_t(42 + n)),
                       x = rand_x(size_t(T * xs), uint64_t(43 + T)),
                       c = rand_x(size_t(T * cs), uint64_t(44 + n));
            std::vector<float> decay(static_cast<size_t>(T));
            for (int64_t t = 0; t < T; ++t) decay[size_t(t)] = 0.5f + 0.0625f * float(t % 8);
            set_active_isa(Isa::Reference);
            auto want = S0;
            std::vector<float> want_y(size_t(T * os), -2.0f);
            for (int64_t t = 0; t < T; ++t) {
              decay_outer_add(want.data(), rows, n, decay[size_t(t)], b.data() + t * bs,
                              x.data() + t * xs);
              for (int64_t r = 0; r < rows; ++r)
                want_y[size_t(t * os + r)] = dot(want.data() + r * n, c.data() + t * cs, n);
            }
            set_active_isa(isa);
            auto from = S0;
            std::vector<float> got(S0.size(), -3.0f), got_y(size_t(T * os), -2.0f);
            if (in_place) got = S0;
            const DecaySteps steps{T,  decay.data(), b.data(), bs,           x.data(),
                                   xs, c.data(),     cs,       got_y.data(), os};
            decay_outer_add_dot_steps(in_place ? got.data() : from.data(), got.data(), rows, n,
                                      steps);
            const std::string what = std::string(isa_name(isa)) + " n " + std::to_string(n) +
                                     " rows " + std::to_string(rows) + " T " + std::to_string(T) +
                                     (in_place ? " in place" : " from another buffer");
            ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << what;
            ASSERT_EQ(std::memcmp(from.data(), S0.data(), S0.size() * 4), 0) << what;
            ASSERT_EQ(std::memcmp(got_y.data(), want_y.data(), want_y.size() * 4), 0) << what;
            ++checked;
          }
  set_active_isa(saved);
  EXPECT_EQ(checked, int(available_isas().size()) * 5 * 5 * 4 * 2);
}

TEST(Ops, AxpyRowsIsAxpyInTurn) {
  // axpy_rows: the bits of its m axpy calls in j order, on every path the machine has, for
  // lengths around the 8- and 16-lane vectors and the 64 / 128 blocks (the SSD chunk: 64 and 128).
  const Isa saved = active_isa();
  int checked = 0;
  for (int64_t n : {1, 7, 16, 63, 64, 65, 128, 131, 200, 257})
    for (int64_t m : {1, 3, 17}) {
      const int64_t xs = n + 3;
      const auto X = rand_x(size_t(m * xs), uint64_t(31 + n + m)), a = rand_x(size_t(m), 32),
                 y0 = rand_x(size_t(n), uint64_t(33 + n));
      auto want = y0;
      for (int64_t j = 0; j < m; ++j) axpy(a[size_t(j)], X.data() + j * xs, want.data(), n);
      for (Isa isa : available_isas()) {
        set_active_isa(isa);
        auto got = y0;
        axpy_rows(a.data(), m, X.data(), xs, got.data(), n);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), size_t(n) * 4), 0)
            << isa_name(isa) << " n " << n << " m " << m;
        ++checked;
      }
    }
  set_active_isa(saved);
  EXPECT_EQ(checked, 10 * 3 * int(available_isas().size()));
}

TEST(Ops, Activations) {
  EXPECT_FLOAT_EQ(softplus(25.0f), 25.0f);  // threshold 20: identity
  EXPECT_NEAR(softplus(0.0f), std::log(2.0f), 1e-7);
  EXPECT_FLOAT_EQ(relu2(-3.0f), 0.0f);
  EXPECT_FLOAT_EQ(relu2(3.0f), 9.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(relu2(-0.0f)), 0u);                     // +0
  EXPECT_TRUE(std::isnan(relu2(std::numeric_limits<float>::quiet_NaN())));  // as torch.relu
  EXPECT_EQ(relu2(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(relu2(-std::numeric_limits<float>::infinity()), 0.0f);
  // The four-lane loop gives relu2's bits for every value, tails included.
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {-0.0f,   0.0f, nan,   -nan,   inf,   -inf, 1e-30f,
                          -1e-30f, 3.0f, -3.0f, 1e-45f, -2.5f, 7.0f};
  std::mt19937 g(5);
  for (int i = 0; i < 200; ++i) v.push_back(std::bit_cast<float>(uint32_t(g())));
  int checked = 0;
  for (size_t n = 0; n <= v.size(); n += (n < 16 ? 1 : 37)) {
    std::vector<float> got(v.begin(), v.begin() + n);
    relu2_inplace(got.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i, ++checked)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(relu2(v[i])))
          << "n=" << n << " i=" << i;
  }
  EXPECT_EQ(checked, 771);  // n = 0..16, then every 37th length
  EXPECT_NEAR(silu(1.0f), 1.0f / (1.0f + std::exp(-1.0f)), 1e-7);
}

// first_non_finite is the first index std::isfinite rejects: at each position of a block and its
// edges, for NaN (both signs, quiet and signalling), infinities, and values next to them that are
// finite (the largest float, the smallest subnormal); -1 when there is none.
TEST(Ops, FirstNonFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> bad = {std::numeric_limits<float>::quiet_NaN(),
                                  -std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::signaling_NaN(),
                                  inf,
                                  -inf,
                                  std::bit_cast<float>(0x7F800001u)};
  std::vector<float> v(3000);
  std::mt19937 g(9);
  std::normal_distribution<float> nd;
  for (auto& x : v) x = nd(g);
  v[7] = std::numeric_limits<float>::max(), v[1100] = -std::numeric_limits<float>::max();
  v[2000] = std::numeric_limits<float>::denorm_min();
  const auto expect = [](const std::vector<float>& x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[size_t(i)])) return i;
    return int64_t(-1);
  };
  int checked = 0;
  for (const int64_t n : {0, 1, 1023, 1024, 1025, 3000}) {
    EXPECT_EQ(first_non_finite(v.data(), n), -1) << "n=" << n;
    for (const int64_t at : {0, 1, 511, 1022, 1023, 1024, 1025, 2047, 2048, 2999}) {
      if (at >= n) continue;
      for (const float b : bad) {
        std::vector<float> x = v;
        x[size_t(at)] = b;
        if (at + 5 < n) x[size_t(at + 5)] = -inf;  // a later one does not hide the first
        EXPECT_EQ(first_non_finite(x.data(), n), expect(x, n)) << "n=" << n << " at=" << at;
        EXPECT_EQ(expect(x, n), at);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * (1 + 4 + 5 + 6 + 10));  // n = 1, 1023, 1024, 1025, 3000
}

TEST(Numeric, Bf16F16Conversions) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(uint16_t(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), b);
    }
    const float h = f16_to_f32(uint16_t(b));
    if (!std::isnan(h)) {
      ASSERT_EQ(f32_to_f16(h), b) << b;
    }
  }
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie → even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // tie → even (up)
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);      // rounds to inf
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}
