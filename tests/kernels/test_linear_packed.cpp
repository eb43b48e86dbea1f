// Packed-weight linear kernels: SIMD == reference bitwise, batch/tile/thread invariance, equality
// with the dense kernel on the exact kernel weights, accuracy, and the FP8 W8A8 parity mode.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/fp8.h"
#include "kernels/linear.h"
#include "kernels/linear_impl.h"
#include "kernels/quantize.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

// A packed weight with its storage and, for checks, its exact kernel weights w' and `post`
// (linear_packed.h: y = dense(w') * post bitwise).
struct Case {
  std::string name;
  PackedWeight w;
  std::vector<uint8_t> data, scales, biases;
  std::vector<float> kernel_w;  // [rows, cols]
  float post = 1.0f;
};

float rand_bf16(std::mt19937& g, float lo, float hi) {
  return bf16_to_f32(f32_to_bf16(std::uniform_real_distribution<float>(lo, hi)(g)));
}

uint8_t rand_e4m3(std::mt19937& g, int lo, int hi) {  // code in [lo, hi], never NaN
  uint8_t b;
  do b = uint8_t(std::uniform_int_distribution<int>(lo, hi)(g));
  while ((b & 0x7F) == 0x7F);
  return b;
}

std::unique_ptr<Case> make_nvfp4(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  auto c = std::make_unique<Case>();
  c->name = "nvfp4 " + std::to_string(rows) + "x" + std::to_string(cols);
  c->data.resize(static_cast<size_t>(rows * cols / 2));
  c->scales.resize(static_cast<size_t>(rows * cols / 16));
  for (auto& b : c->data) b = uint8_t(g());
  for (auto& s : c->scales) s = rand_e4m3(g, 0x00, 0x7E);  // all magnitudes incl. subnormals
  c->post = 0.000173f;
  c->w = {WeightFormat::NVFP4, rows, cols, c->data.data(), c->scales.data(), nullptr, c->post, 16};
  const auto& t = e4m3_table();
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  c->kernel_w.resize(static_cast<size_t>(rows * cols));
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t b = c->data[size_t(o * cols / 2 + k / 2)];
      c->kernel_w[size_t(o * cols + k)] =
          e2m1[k & 1 ? b >> 4 : b & 15] * t[c->scales[size_t(o * cols / 16 + k / 16)]];
    }
  return c;
}

std::unique_ptr<Case> make_fp8(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  auto c = std::make_unique<Case>();
  c->name = "fp8 " + std::to_string(rows) + "x" + std::to_string(cols);
  c->data.resize(static_cast<size_t>(rows * cols));
  for (auto& b : c->data) b = rand_e4m3(g, 0x00, 0xFF);
  c->w = {WeightFormat::FP8_E4M3, rows, cols, c->data.data(), nullptr, nullptr, 0.0123f, 0};
  c->post = 0.0123f * 256.0f;
  c->kernel_w.resize(c->data.size());
  for (size_t i = 0; i < c->data.size(); ++i) c->kernel_w[i] = e4m3_table()[c->data[i]] / 256.0f;
  return c;
}

std::unique_ptr<Case> make_affine(int64_t rows, int64_t cols, int bits, int group, uint32_t seed) {
  std::mt19937 g(seed);
  auto c = std::make_unique<Case>();
  c->name = "affine" + std::to_string(bits) + " g" + std::to_string(group) + " " +
            std::to_string(rows) + "x" + std::to_string(cols);
  c->data.resize(static_cast<size_t>(rows * cols * bits / 8));
  for (auto& b : c->data) b = uint8_t(g());
  const int64_t ng = rows * cols / group;
  c->scales.resize(static_cast<size_t>(2 * ng));
  c->biases.resize(static_cast<size_t>(2 * ng));
  std::vector<float> s(static_cast<size_t>(ng)), b(static_cast<size_t>(ng));
  for (int64_t i = 0; i < ng; ++i) {
    s[i] = rand_bf16(g, -0.01f, 0.01f);  // negative scales occur in MLX files
    b[i] = rand_bf16(g, -0.1f, 0.1f);
    const uint16_t sb = f32_to_bf16(s[i]), bb = f32_to_bf16(b[i]);
    std::memcpy(&c->scales[size_t(2 * i)], &sb, 2);
    std::memcpy(&c->biases[size_t(2 * i)], &bb, 2);
  }
  c->w = {bits == 4 ? WeightFormat::AFFINE4 : WeightFormat::AFFINE8,
          rows,
          cols,
          c->data.data(),
          c->scales.data(),
          c->biases.data(),
          1.0f,
          group};
  c->kernel_w.resize(static_cast<size_t>(rows * cols));
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t i = o * cols + k;
      const int q = bits == 4 ? (c->data[size_t(i / 2)] >> (4 * (i & 1))) & 15 : c->data[size_t(i)];
      c->kernel_w[size_t(i)] = std::fma(float(q), s[size_t(i / group)], b[size_t(i / group)]);
    }
  return c;
}

std::vector<std::unique_ptr<Case>> all_cases() {
  std::vector<std::unique_ptr<Case>> v;
  v.push_back(make_nvfp4(37, 96, 1));
  v.push_back(make_nvfp4(20, 80, 2));  // K % 32 == 16
  v.push_back(make_nvfp4(9, 16, 3));
  v.push_back(make_fp8(37, 96, 4));
  v.push_back(make_fp8(23, 37, 5));  // scalar tail (K % 16 != 0)
  v.push_back(make_fp8(5, 7, 6));    // tail only
  v.push_back(make_affine(37, 128, 4, 32, 7));
  v.push_back(make_affine(21, 192, 4, 64, 8));
  v.push_back(make_affine(19, 256, 4, 128, 9));
  v.push_back(make_affine(37, 128, 8, 32, 10));
  v.push_back(make_affine(21, 192, 8, 64, 11));
  v.push_back(make_affine(19, 256, 8, 128, 12));
  return v;
}

// Matrices large enough that linear() really splits the outputs between threads: its grain is
// max(16, 2^18 / (K · rows)) outputs, so N = 640, K = 512 gives 2 blocks at 1 row and 5 at 3 rows.
std::vector<std::unique_ptr<Case>> split_cases() {
  std::vector<std::unique_ptr<Case>> v;
  v.push_back(make_nvfp4(640, 512, 21));
  v.push_back(make_fp8(640, 512, 22));
  v.push_back(make_affine(640, 512, 4, 64, 23));
  v.push_back(make_affine(640, 512, 8, 64, 24));
  return v;
}

std::vector<float> rand_x(int64_t n_rows, int64_t stride, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_rows * stride));
  for (auto& v : x) v = nd(g);
  return x;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp(null, null, 0) is undefined (UBSan): empty outputs of 0-row jobs compare by size.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::string first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]))
      return "index " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
  return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

const int64_t kRowCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 25};

// Restores the process-wide ISA after a test that overrides it.
struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

}  // namespace

TEST(LinearPacked, SimdEqualsReferenceBitwise) {
  if (detected_isa() == Isa::Reference) GTEST_SKIP() << "no SIMD ISA on this CPU";
  int checked = 0;
  const auto cases = all_cases();
  for (const auto& c : cases) {
    const int64_t K = c->w.cols, N = c->w.rows;
    for (int64_t n : kRowCounts) {
      const int64_t xs = K + 3, ys = N + 5;
      const auto x = rand_x(n, xs, uint32_t(n * 7 + K));
      std::vector<float> y_ref(static_cast<size_t>(n * ys), -1.0f),
          y_simd(static_cast<size_t>(n * ys), -1.0f);
      linear_range(c->w, x.data(), n, xs, y_ref.data(), ys, 0, N, Isa::Reference);
      for (Isa isa : available_isas()) {
        if (isa == Isa::Reference) continue;
        ++checked;
        std::fill(y_simd.begin(), y_simd.end(), -1.0f);
        linear_range(c->w, x.data(), n, xs, y_simd.data(), ys, 0, N, isa);
        EXPECT_TRUE(bitwise_equal(y_ref, y_simd))
            << c->name << " rows=" << n << " " << isa_name(isa) << " " << first_diff(y_ref, y_simd);
      }
    }
  }
  std::printf("[ SIMD paths ] %s: %d comparisons\n", isa_name(detected_isa()), checked);
  EXPECT_EQ(checked, int(cases.size() * std::size(kRowCounts) * (available_isas().size() - 1)));
}

// `kernel` over every output of w, called on ranges of 1-11 outputs that split its tiles.
static std::vector<float> run_in_ranges(detail::RangeFn kernel, const PackedWeight& w,
                                        const std::vector<float>& x, int64_t n, int64_t xs,
                                        int64_t ys) {
  std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
  for (int64_t b = 0; b < w.rows;) {
    const int64_t e = std::min(w.rows, b + 1 + (b * 7) % 11);
    kernel(w, x.data(), n, xs, y.data(), ys, b, e);
    b = e;
  }
  return y;
}

// Each of `kernels` against `ref`, bitwise, on every case over row_counts (kRowCounts: wide
// passes included) and output ranges that split the tiles; returns how many comparisons ran.
int expect_equal_reference(const std::vector<std::unique_ptr<Case>>& cases, detail::RangeFn ref,
                           std::initializer_list<detail::RangeFn> kernels,
                           std::span<const int64_t> row_counts = kRowCounts) {
  int compared = 0;
  for (const auto& c : cases) {
    const int64_t rows = c->w.rows, cols = c->w.cols;
    for (int64_t n : row_counts) {
      const int64_t xs = cols + 1, ys = rows + 2;
      const auto x = rand_x(n, xs, uint32_t(n * 31 + cols));
      std::vector<float> want(static_cast<size_t>(n * ys), -1.0f);
      ref(c->w, x.data(), n, xs, want.data(), ys, 0, rows);
      for (auto kernel : kernels) {
        const auto y = run_in_ranges(kernel, c->w, x, n, xs, ys);
        ++compared;
        EXPECT_TRUE(bitwise_equal(want, y))
            << c->name << " rows=" << n << " " << first_diff(want, y);
      }
    }
  }
  return compared;
}

// Both AVX-512 NVFP4 f32 kernels, whichever this CPU selects (cpu_is_intel): 8-row passes as two
// tiles of 4 rows or as one of 8.
TEST(LinearPacked, BothNvfp4Avx512KernelsEqualTheReference) {
  if (detected_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  std::vector<std::unique_ptr<Case>> cases;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {9, 2688}, {64, 1856}})
    cases.push_back(make_nvfp4(rows, cols, uint32_t(rows * 13 + cols)));
  EXPECT_EQ(expect_equal_reference(cases, detail::range_nvfp4_ref,
                                   {detail::range_nvfp4_avx512, detail::range_nvfp4_avx512_8row}),
            int(3 * std::size(kRowCounts) * 2));
}

// Both AVX-512 FP8 f32 kernels, whichever this CPU selects (cpu_is_intel): passes swept in
// registers at every width, or decoded to f32 once from 16 rows.
TEST(LinearPacked, BothFp8Avx512KernelsEqualTheReference) {
  if (detected_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  std::vector<std::unique_ptr<Case>> cases;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {9, 2688}, {21, 1864}})
    cases.push_back(make_fp8(rows, cols, uint32_t(rows * 17 + cols)));
  EXPECT_EQ(expect_equal_reference(cases, detail::range_fp8_ref,
                                   {detail::range_fp8_avx512, detail::range_fp8_avx512_wide}),
            int(3 * std::size(kRowCounts) * 2));
}

// Intel's FP8 kernel with GFNI's two-uop decode below 16 rows (the dispatch's choice where the CPU
// has GFNI): the reference's bits at every width, and, on a matrix holding every one of the 256
// codes (NaN codes too, which the reference decodes to NaN and the Intel decoders to 1.875), the
// three-uop kernel's bits.
TEST(LinearPacked, Fp8GfniKernelEqualsTheReference) {
  if (detected_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  if (!cpu_has_gfni()) GTEST_SKIP() << "no GFNI here";
  std::vector<std::unique_ptr<Case>> cases;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {9, 2688}, {21, 1864}})
    cases.push_back(make_fp8(rows, cols, uint32_t(rows * 17 + cols)));
  EXPECT_EQ(
      expect_equal_reference(cases, detail::range_fp8_ref, {detail::range_fp8_avx512_wide_gfni}),
      int(3 * std::size(kRowCounts)));
  auto every = make_fp8(13, 272, 5);  // 3536 weights: each code at least 13 times
  for (size_t i = 0; i < every->data.size(); ++i) every->data[i] = uint8_t(i * 37 % 256);
  int compared = 0;
  for (int64_t n : kRowCounts) {
    const int64_t K = every->w.cols, N = every->w.rows;
    const auto x = rand_x(n, K, uint32_t(n));
    const auto want = run_in_ranges(detail::range_fp8_avx512_wide, every->w, x, n, K, N);
    const auto got = run_in_ranges(detail::range_fp8_avx512_wide_gfni, every->w, x, n, K, N);
    ++compared;
    EXPECT_TRUE(bitwise_equal(want, got)) << "rows=" << n << " " << first_diff(want, got);
  }
  EXPECT_EQ(compared, int(std::size(kRowCounts)));
}

// Intel's FP8 passes below 16 rows run on the activations times 2^112 where that is exact (every
// finite |x| < 2^16) and on the four-uop decode otherwise: one activation at and around that edge,
// non-finite or subnormal, in a full block or the tail, gives the reference's bits either way.
TEST(LinearPacked, Fp8ActivationsAtTheScaledEdgeEqualTheReference) {
  if (detected_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  const float below = std::nextafter(65536.0f, 0.0f);  // (2 - 2^-23) 2^15: times 2^112 = FLT_MAX
  const float edges[] = {below,     -below, 65536.0f, -65536.0f, 3e38f,           INFINITY,
                         -INFINITY, NAN,    1e-45f,   -1e-40f,   1.17549435e-38f, -0.0f};
  const auto c = make_fp8(21, 37, 41);  // K % 16 == 5: a tail after two blocks
  const int64_t K = c->w.cols, N = c->w.rows;
  int compared = 0;
  for (float v : edges)
    for (int64_t n : {1, 3, 8, 15, 16})
      for (int64_t at : {int64_t(7), K - 2}) {  // in a block, in the tail
        auto x = rand_x(n, K, uint32_t(n + at));
        x[size_t((n - 1) * K + at)] = v;
        std::vector<float> want(size_t(n * N)), got(size_t(n * N));
        detail::range_fp8_ref(c->w, x.data(), n, K, want.data(), N, 0, N);
        for (auto kernel : {detail::range_fp8_avx512_wide, detail::range_fp8_avx512_wide_gfni}) {
          if (kernel == detail::range_fp8_avx512_wide_gfni && !cpu_has_gfni()) continue;
          std::fill(got.begin(), got.end(), -1.0f);
          kernel(c->w, x.data(), n, K, got.data(), N, 0, N);
          ++compared;
          EXPECT_TRUE(bitwise_equal(want, got))
              << "x = " << v << " rows=" << n << " at " << at << ": " << first_diff(want, got);
        }
      }
  EXPECT_EQ(compared, int(std::size(edges)) * 5 * 2 * (cpu_has_gfni() ? 2 : 1));
}

// Prefill widths: range_wide_z splits the rows into blocks whose activations fit L2, copies them
// chunk-major, and finishes 16 outputs at once; FP8 at K = 2696 leaves a tail of 8 after the
// last 16. Under each blocking a CPU may pick (wide_blocking: k chunks of 384 and 768 KB row
// blocks, 72 rows at K = 2688; 256 and 384 KB, 30 rows; whole rows and 768 KB) and a small one
// (k 112, 64 KB: blocks of 6 rows).
TEST(LinearPacked, WidePassesOverRowBlocksEqualTheReference) {
  if (detected_isa() < Isa::Avx512) GTEST_SKIP() << "no AVX-512 here";
  const int64_t row_counts[] = {73, 150};
  std::vector<std::unique_ptr<Case>> nvfp4, fp8;
  // NVFP4's K is a multiple of its 16-weight scale blocks; FP8 at K = 2696 has a tail.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{40, 2688}, {21, 1856}})
    nvfp4.push_back(make_nvfp4(rows, cols, uint32_t(rows * 19 + cols)));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{40, 2688}, {21, 2696}})
    fp8.push_back(make_fp8(rows, cols, uint32_t(rows * 23 + cols)));
  for (WideBlocking b :
       {WideBlocking{384, 768 << 10}, {256, 384 << 10}, {kWholeRow, 768 << 10}, {112, 64 << 10}}) {
    set_wide_blocking(b);
    EXPECT_EQ(expect_equal_reference(nvfp4, detail::range_nvfp4_ref,
                                     {detail::range_nvfp4_avx512, detail::range_nvfp4_avx512_8row},
                                     row_counts),
              2 * 2 * 2)
        << "k chunk " << b.k_chunk;
    EXPECT_EQ(expect_equal_reference(fp8, detail::range_fp8_ref, {detail::range_fp8_avx512_wide},
                                     row_counts),
              2 * 2)
        << "k chunk " << b.k_chunk;
  }
  set_wide_blocking({0, 0});
}

TEST(LinearPacked, ThreadsAndRangesDoNotChangeBits) {
  IsaGuard guard;
  auto cases = all_cases();
  for (auto& c : split_cases()) cases.push_back(std::move(c));
  int split = 0;  // (case, rows) pairs where 2+ threads really got outputs
  for (const auto& c : cases) {
    const int64_t K = c->w.cols, N = c->w.rows;
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(5), int64_t(17)}) {
      split += N > std::max<int64_t>(16, (int64_t(1) << 18) / (K * n));
      const auto x = rand_x(n, K, uint32_t(n + 100));
      std::vector<float> y_ref(static_cast<size_t>(n * N));
      linear_range(c->w, x.data(), n, K, y_ref.data(), N, 0, N, Isa::Reference);
      for (Isa isa : available_isas()) {
        set_active_isa(isa);
        for (int nt : {1, 2, 3}) {
          std::vector<float> y(static_cast<size_t>(n * N), NAN);
          linear(c->w, x.data(), n, K, y.data(), N, ThreadConfig{nt});
          EXPECT_TRUE(bitwise_equal(y_ref, y))
              << c->name << " rows=" << n << " threads=" << nt << " " << isa_name(isa) << " "
              << first_diff(y_ref, y);
        }
        // Odd output ranges (a caller partitioning work) give the same bits.
        std::vector<float> y(static_cast<size_t>(n * N), NAN);
        for (int64_t b = 0; b < N;) {
          const int64_t e = std::min(N, b + 1 + b % 3);
          linear_range(c->w, x.data(), n, K, y.data(), N, b, e, isa);
          b = e;
        }
        EXPECT_TRUE(bitwise_equal(y_ref, y))
            << c->name << " ranges " << isa_name(isa) << " " << first_diff(y_ref, y);
      }
    }
  }
  EXPECT_GE(split, 12) << "the thread checks must use shapes that split between threads";
}

// linear_many (a MoE layer's experts in one parallel region): each job's output is bitwise its
// linear() alone, for jobs of every format, row count (0 included) and thread count.
TEST(LinearPacked, ManyJobsEqualEachAlone) {
  IsaGuard guard;
  auto cases = all_cases();
  for (auto& c : split_cases()) cases.push_back(std::move(c));
  const int64_t rows[] = {1, 3, 0, 5, 2, 17};
  std::vector<std::vector<float>> xs, refs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const int64_t K = cases[i]->w.cols, N = cases[i]->w.rows, n = rows[i % std::size(rows)];
    xs.push_back(rand_x(n, K, uint32_t(300 + i)));
    refs.emplace_back(static_cast<size_t>(n * N));
    linear_range(cases[i]->w, xs[i].data(), n, K, refs[i].data(), N, 0, N, Isa::Reference);
  }
  int compared = 0;
  for (Isa isa : available_isas()) {
    set_active_isa(isa);
    for (int nt : {1, 2, 3}) {
      std::vector<std::vector<float>> ys;
      std::vector<LinearJob> jobs;
      for (size_t i = 0; i < cases.size(); ++i) {
        const int64_t K = cases[i]->w.cols, N = cases[i]->w.rows, n = rows[i % std::size(rows)];
        ys.emplace_back(static_cast<size_t>(n * N), NAN);
        jobs.push_back({&cases[i]->w, xs[i].data(), n, K, ys[i].data(), N});
      }
      linear_many(jobs, ThreadConfig{nt});
      for (size_t i = 0; i < cases.size(); ++i, ++compared)
        EXPECT_TRUE(bitwise_equal(refs[i], ys[i]))
            << cases[i]->name << " job " << i << " threads=" << nt << " " << isa_name(isa) << " "
            << first_diff(refs[i], ys[i]);
    }
  }
  EXPECT_EQ(compared, int(available_isas().size() * 3 * cases.size()));
}

TEST(LinearPacked, RowAloneEqualsRowInBatch) {
  for (const auto& c : all_cases()) {
    const int64_t K = c->w.cols, N = c->w.rows, n = 17;
    const auto x = rand_x(n, K, 77);
    for (Isa isa : available_isas()) {
      std::vector<float> y(static_cast<size_t>(n * N));
      linear_range(c->w, x.data(), n, K, y.data(), N, 0, N, isa);
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> y1(static_cast<size_t>(N));
        linear_range(c->w, x.data() + r * K, 1, K, y1.data(), N, 0, N, isa);
        EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + r * N, size_t(N) * 4))
            << c->name << " row " << r << " " << isa_name(isa);
        // ... and inside a batch of a different size at a different position.
        std::vector<float> x3(static_cast<size_t>(3 * K));
        for (int j = 0; j < 3; ++j)
          std::memcpy(&x3[size_t(j * K)], x.data() + ((r + j) % n) * K, size_t(K) * 4);
        std::vector<float> y3(static_cast<size_t>(3 * N));
        linear_range(c->w, x3.data(), 3, K, y3.data(), N, 0, N, isa);
        EXPECT_EQ(0, std::memcmp(y3.data(), y.data() + r * N, size_t(N) * 4))
            << c->name << " row " << r;
      }
    }
  }
}

TEST(LinearPacked, EqualsDenseKernelOnKernelWeights) {
  for (const auto& c : all_cases()) {
    const int64_t K = c->w.cols, N = c->w.rows, n = 5;
    const auto x = rand_x(n, K, 5);
    PackedWeight d{WeightFormat::F32, N, K, c->kernel_w.data()};
    std::vector<float> yd(static_cast<size_t>(n * N)), yp(static_cast<size_t>(n * N));
    linear_range(d, x.data(), n, K, yd.data(), N, 0, N, Isa::Reference);
    for (auto& v : yd) v *= c->post;
    linear_range(c->w, x.data(), n, K, yp.data(), N, 0, N, Isa::Reference);
    EXPECT_TRUE(bitwise_equal(yd, yp)) << c->name << " " << first_diff(yd, yp);
  }
}

TEST(LinearPacked, AccurateAgainstDoubleDequantized) {
  for (const auto& c : all_cases()) {
    const int64_t K = c->w.cols, N = c->w.rows, n = 3;
    const auto x = rand_x(n, K, 9);
    std::vector<float> y(static_cast<size_t>(n * N));
    linear(c->w, x.data(), n, K, y.data(), N, ThreadConfig{2});
    std::vector<float> wr(static_cast<size_t>(K));
    for (int64_t o = 0; o < N; ++o) {
      dequantize_row(c->w, o, wr.data());
      for (int64_t r = 0; r < n; ++r) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += double(wr[k]) * x[size_t(r * K + k)];
          a += std::fabs(double(wr[k]) * x[size_t(r * K + k)]);
        }
        EXPECT_NEAR(y[size_t(r * N + o)], s, 4e-6 * a + 1e-30)
            << c->name << " o=" << o << " r=" << r;
      }
    }
  }
}

TEST(LinearPacked, DequantizeRowMatchesKernelWeights) {
  for (const auto& c : all_cases()) {
    const int64_t K = c->w.cols;
    std::vector<float> wr(static_cast<size_t>(K));
    for (int64_t o = 0; o < c->w.rows; ++o) {
      dequantize_row(c->w, o, wr.data());
      for (int64_t k = 0; k < K; ++k) {
        const float want = c->kernel_w[size_t(o * K + k)] * c->post;
        // NVFP4 decodes E2M1 * (E4M3 * s2) (formats.md §2.5 order): within 1 ulp of (E2M1 * E4M3) *
        // s2.
        EXPECT_LE(std::fabs(wr[k] - want), std::fabs(want) * 1.2e-7f)
            << c->name << " o=" << o << " k=" << k;
      }
    }
  }
}

TEST(LinearPacked, NonFiniteInputsPropagate) {
  for (const auto& c : all_cases()) {
    const int64_t K = c->w.cols, N = c->w.rows;
    auto x = rand_x(2, K, 3);
    x[size_t(K + K / 2)] = NAN;
    for (Isa isa : available_isas()) {
      std::vector<float> y(static_cast<size_t>(2 * N));
      linear_range(c->w, x.data(), 2, K, y.data(), N, 0, N, isa);
      for (int64_t o = 0; o < N; ++o) {
        EXPECT_FALSE(std::isnan(y[size_t(o)])) << c->name;
        EXPECT_TRUE(std::isnan(y[size_t(N + o)])) << c->name;
      }
    }
  }
}

TEST(LinearPacked, Fp8StaticActivationParity) {
  const auto c = make_fp8(13, 64, 21);
  const int64_t K = 64, N = 13, n = 3;
  auto x = rand_x(n, K, 22);
  x[5] = 1000.0f;  // clipped at 448 * input_scale
  const float is = 0.02f;
  std::vector<float> y(static_cast<size_t>(n * N));
  linear_fp8_static(c->w, is, x.data(), n, K, y.data(), N, ThreadConfig{2});
  std::vector<float> xq(static_cast<size_t>(K)), wr(static_cast<size_t>(K));
  for (int64_t r = 0; r < n; ++r) {
    fp8_quantize_activations(x.data() + r * K, K, is, xq.data());
    for (int64_t o = 0; o < N; ++o) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(e4m3_table()[c->data[size_t(o * K + k)]]) * xq[k];
        s += p;
        a += std::fabs(p);
      }
      const double want = s * double(is * c->w.scale);
      EXPECT_NEAR(y[size_t(r * N + o)], want, 4e-6 * a * double(is * c->w.scale)) << o;
    }
  }
  EXPECT_EQ(xq.size(), size_t(K));
  // Row 0 element 5 saturated: x_q = 448.
  fp8_quantize_activations(x.data(), K, is, xq.data());
  EXPECT_EQ(xq[5], 448.0f);
  EXPECT_THROW(
      linear_fp8_static(make_nvfp4(2, 16, 1)->w, is, x.data(), 1, K, y.data(), N, ThreadConfig{1}),
      nemo::Error);
}

TEST(LinearPacked, Fp8NanCodesAreFoundByTheScan) {
  std::vector<uint8_t> b(1000, 0x3C);
  EXPECT_FALSE(e4m3_has_nan(b));
  b[777] = 0xFF;
  EXPECT_TRUE(e4m3_has_nan(b));
  b[777] = 0x7F;
  EXPECT_TRUE(e4m3_has_nan(b));
  b[777] = 0x7E;
  EXPECT_FALSE(e4m3_has_nan(b));
}

// Every E4M3 code, subnormals included, decodes the same with MXCSR's denormals-are-zero bit set
// (a host program's setting), on every ISA. The half-float conversions do not read the bit; a
// decoder that multiplies f32 subnormals would (the F32b mix of tools/bench/probe_fp8_bf16.cpp
// failed here on all 14 subnormal codes until it cleared the bit).
TEST(LinearPacked, Fp8DecodeIgnoresDenormalsAreZero) {
  std::vector<uint8_t> data;
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7F) != 0x7F) data.push_back(uint8_t(b));  // the 254 non-NaN codes
  data.resize(16 * 32, 0x08);                            // 16 x 32, a subnormal filling the rest
  const PackedWeight w{WeightFormat::FP8_E4M3, 16, 32, data.data(), nullptr, nullptr, 0.5f, 0};
  std::vector<float> x(32);
  int checked = 0;
  for (int64_t o = 0; o < 16; ++o)
    for (int64_t k = 0; k < 32; ++k) {
      std::fill(x.begin(), x.end(), 0.0f);
      x[size_t(k)] = 1.0f;  // y[o] = the kernel weight of (o, k) times post
      std::vector<float> ref(16), got(16);
      linear_range(w, x.data(), 1, 32, ref.data(), 16, o, o + 1, Isa::Reference);
      const unsigned csr = _mm_getcsr();
      _mm_setcsr(csr | 0x40u);  // DAZ
      for (Isa isa : available_isas()) {
        linear_range(w, x.data(), 1, 32, got.data(), 16, o, o + 1, isa);
        EXPECT_EQ(std::bit_cast<uint32_t>(got[size_t(o)]), std::bit_cast<uint32_t>(ref[size_t(o)]))
            << "code 0x" << std::hex << int(data[size_t(o * 32 + k)]) << " " << isa_name(isa);
        ++checked;
      }
      EXPECT_EQ(_mm_getcsr(), csr | 0x40u);  // the caller's setting is back
      _mm_setcsr(csr);
    }
  EXPECT_EQ(checked, 16 * 32 * int(available_isas().size()));
}

TEST(LinearPacked, ValidatePackedWeight) {
  const auto c = make_nvfp4(4, 32, 1);
  EXPECT_NO_THROW(validate_packed_weight(c->w, "m"));
  PackedWeight w = c->w;
  w.scale = NAN;
  try {
    validate_packed_weight(w, "backbone.layers.1.mixer.experts.0.up_proj");
    FAIL();
  } catch (const nemo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("backbone.layers.1.mixer.experts.0.up_proj"),
              std::string::npos);
  }
  w = c->w;
  w.cols = 24;
  EXPECT_THROW(validate_packed_weight(w, "m"), nemo::Error);
  w = c->w;
  w.scales = nullptr;
  EXPECT_THROW(validate_packed_weight(w, "m"), nemo::Error);
  const auto a = make_affine(2, 64, 4, 64, 1);
  w = a->w;
  EXPECT_NO_THROW(validate_packed_weight(w, "m"));
  w.group = 48;
  EXPECT_THROW(validate_packed_weight(w, "m"), nemo::Error);
  const auto f = make_fp8(2, 8, 1);
  w = f->w;
  w.scale = 0.0f;
  EXPECT_THROW(validate_packed_weight(w, "m"), nemo::Error);
}

TEST(LinearPacked, BytesAndNames) {
  EXPECT_EQ(make_nvfp4(4, 32, 1)->w.bytes(), 4 * 16 + 4 * 2);
  EXPECT_EQ(make_affine(2, 64, 4, 64, 1)->w.bytes(), 2 * 32 + 2 * 4);
  EXPECT_STREQ(weight_format_name(WeightFormat::NVFP4), "nvfp4");
}

// ---- NVFP4 with bf16 activations (Arith::Bf16) ----
// The activation rounding against an independent round-to-nearest-even, the reference against a
// separately written statement of the order in linear_nvfp4.cpp, every ISA path (the AVX512_BF16
// kernel where the CPU has it) bitwise against the reference at every row count, thread count and
// output range, and the accuracy bound.
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

// bf16 weights over +-2^-9..2^3, with zeros and subnormals of both signs (every 41st) and weights
// of 2^-106..2^-105 (every 43rd, whose products fall below 2^-126 for |x~| < 2^-20).
std::unique_ptr<Case> make_dense_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 g(seed);
  auto c = std::make_unique<Case>();
  c->name = "bf16 " + std::to_string(rows) + "x" + std::to_string(cols);
  c->data.resize(static_cast<size_t>(2 * rows * cols));
  c->kernel_w.resize(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < c->kernel_w.size(); ++i) {
    const uint32_t r = g();
    const uint16_t sign = (r & 1) ? 0x8000 : 0;
    const uint16_t b =
        i % 41 == 5 ? uint16_t(sign | ((r >> 4) & 0x7F))
        : i % 43 == 7
            ? uint16_t(sign | 0x0A80 | ((r >> 4) & 0x7F))
            : f32_to_bf16(std::ldexp(1.0f + float((r >> 8) & 0xFF) / 256, int((r >> 16) % 13) - 9) *
                          (sign ? -1.0f : 1.0f));
    std::memcpy(&c->data[2 * i], &b, 2);
    c->kernel_w[i] = bf16_to_f32(b);
  }
  c->w = {WeightFormat::BF16, rows, cols, c->data.data(), nullptr, nullptr, 1.0f, 0};
  return c;
}

// make_nvfp4, make_fp8 (every code but NaN: zeros and subnormals in most 32-weight chunks, none
// in some) or make_dense_bf16, with Arith::Bf16.
std::unique_ptr<Case> make_bf16(WeightFormat f, int64_t rows, int64_t cols, uint32_t seed) {
  auto c = f == WeightFormat::NVFP4  ? make_nvfp4(rows, cols, seed)
           : f == WeightFormat::BF16 ? make_dense_bf16(rows, cols, seed)
                                     : make_fp8(rows, cols, seed);
  c->w.arith = Arith::Bf16;
  return c;
}
constexpr WeightFormat kBf16Formats[] = {WeightFormat::NVFP4, WeightFormat::FP8_E4M3,
                                         WeightFormat::BF16};

// The order, written from its statement: in each 32-weight chunk, NVFP4's decoder holds 4 words
// in each of its 8 qwords; qword j's words come from scale block j % 2, word i from position
// 4 * i + j / 2 (so a lane's two words are 4 apart). FP8's and bf16's words are in k order. Lane
// l sums words 2l + 1 then 2l; lanes fold as (l, l + 8), then the fixed 8-lane sum. bf16 weights
// in the chunks: a subnormal one is a zero of its sign, and a lane's sum that lands strictly
// between -2^-126 and 2^-126, zero aside, is +0 (VDPBF16PS; the other formats never get there).
float by_definition(const Case& m, int64_t o, const std::vector<float>& xr, float post) {
  const bool dense = m.w.format == WeightFormat::BF16;
  const auto chunk_w = [&](float w) {
    return dense && std::fpclassify(w) == FP_SUBNORMAL ? (std::signbit(w) ? -0.0f : 0.0f) : w;
  };
  const auto settle = [&](float v) {
    return dense && std::fpclassify(v) == FP_SUBNORMAL ? 0.0f : v;
  };
  const int64_t K = m.w.cols, K32 = K / 32 * 32;
  int element[32];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i)
      element[4 * j + i] =
          m.w.format == WeightFormat::NVFP4 ? (j % 2) * 16 + 4 * i + j / 2 : 4 * j + i;
  float lane[16] = {};
  for (int64_t c = 0; c < K32; c += 32)
    for (int l = 0; l < 16; ++l)
      for (int word : {2 * l + 1, 2 * l}) {
        const int64_t k = c + element[word];
        lane[l] = settle(std::fma(chunk_w(m.kernel_w[size_t(o * K + k)]), xr[size_t(k)], lane[l]));
      }
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = lane[l] + lane[l + 8];
  const float s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  float t = 0.0f;
  for (int64_t k = K32; k < K; ++k) t = std::fma(m.kernel_w[size_t(o * K + k)], xr[size_t(k)], t);
  return (s + t) * post;
}

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
  for (WeightFormat f : kBf16Formats)
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {20, 80}, {9, 16}, {5, 2688}}) {
      const auto m = make_bf16(f, rows, cols, uint32_t(rows * 131 + cols));
      for (int64_t n : {1, 3, 6}) {
        const auto x = rand_x(n, cols, uint32_t(n + cols));
        std::vector<float> y(static_cast<size_t>(n * rows));
        linear_range(m->w, x.data(), n, cols, y.data(), rows, 0, rows, Isa::Reference);
        for (int64_t r = 0; r < n; ++r) {
          std::vector<float> xr(static_cast<size_t>(cols));
          for (int64_t k = 0; k < cols; ++k) xr[size_t(k)] = rne8(x[size_t(r * cols + k)]);
          for (int64_t o = 0; o < rows; ++o, ++compared)
            ASSERT_EQ(std::bit_cast<uint32_t>(y[size_t(r * rows + o)]),
                      std::bit_cast<uint32_t>(by_definition(*m, o, xr, m->post)))
                << m->name << " row " << r << " output " << o;
        }
      }
    }
  EXPECT_EQ(compared, 3 * (37 + 20 + 9 + 5) * (1 + 3 + 6));
}

// Every AVX512_BF16 NVFP4 kernel, whichever this CPU selects: the 512-bit tiles, the tiles stepping
// by scale words (1 and 3+ rows; K = 96: no whole step; 2688: whole steps only; 1856: 14 and a
// half), and the one-scale-block-per-ymm tiles of 1-4-row passes, bitwise the reference at 1-5 rows
// over output ranges that split the 4- and 8-output tiles.
TEST(LinearBf16, EveryNvfp4Avx512KernelEqualsTheReference) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16 here";
  int compared = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {9, 2688}, {64, 1856}}) {
    const auto m = make_bf16(WeightFormat::NVFP4, rows, cols, uint32_t(rows * 17 + cols));
    for (int64_t n = 1; n <= 5; ++n) {
      const int64_t xs = cols + 1, ys = rows + 2;
      const auto x = rand_x(n, xs, uint32_t(n * 29 + cols));
      std::vector<float> ref(static_cast<size_t>(n * ys), -1.0f);
      detail::range_nvfp4_bf16_ref(m->w, x.data(), n, xs, ref.data(), ys, 0, rows);
      for (auto kernel : {detail::range_nvfp4_bf16_avx512, detail::range_nvfp4_bf16_avx512_words,
                          detail::range_nvfp4_bf16_avx512_halves}) {
        const auto y = run_in_ranges(kernel, m->w, x, n, xs, ys);
        ++compared;
        EXPECT_TRUE(bitwise_equal(ref, y)) << m->name << " rows=" << n;
      }
    }
  }
  EXPECT_EQ(compared, 3 * 5 * 3);
}

TEST(LinearBf16, EveryIsaEqualsTheReferenceAtEveryWidthThreadAndRange) {
  IsaGuard guard;
  int compared = 0;
  // K = 2080: rows past 8 go in groups of 4 (their activations would crowd L1 in groups of 8).
  for (WeightFormat f : kBf16Formats)
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{37, 96}, {20, 80}, {9, 16}, {640, 512}, {22, 2080}}) {
      const auto m = make_bf16(f, rows, cols, uint32_t(rows + 7 * cols));
      for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {
        const int64_t xs = cols + 3, ys = rows + 5;
        auto x = rand_x(n, xs, uint32_t(9 * n + cols));
        for (size_t i = 0; i < x.size(); ++i) {  // ties, and either side of the flush threshold
          if (i % 7 == 3) x[i] = (i % 2 ? -1.0f : 1.0f) * (1.0f + 0x1p-8f);
          if (i % 11 == 5) x[i] = i % 2 ? -0x1p-101f : 0x1p-99f;
          if (i % 13 == 6) x[i] = 1.5e-38f;
        }
        std::vector<float> ref(static_cast<size_t>(n * ys), -1.0f);
        linear_range(m->w, x.data(), n, xs, ref.data(), ys, 0, rows, Isa::Reference);
        for (Isa isa : available_isas()) {
          set_active_isa(isa);
          for (int nt : {1, 2, 3}) {
            std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
            linear(m->w, x.data(), n, xs, y.data(), ys, ThreadConfig{nt});
            ++compared;
            EXPECT_TRUE(bitwise_equal(ref, y))
                << m->name << " rows=" << n << " threads=" << nt << " " << isa_name(isa);
          }
          std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
          for (int64_t b = 0; b < rows;) {
            const int64_t e = std::min(rows, b + 1 + b % 5);
            linear_range(m->w, x.data(), n, xs, y.data(), ys, b, e, isa);
            b = e;
          }
          ++compared;
          EXPECT_TRUE(bitwise_equal(ref, y))
              << m->name << " ranges, rows=" << n << " " << isa_name(isa);
          // Each row alone gives the bits it has in the batch.
          for (int64_t r = 0; r < n; r += 3) {
            std::vector<float> y1(static_cast<size_t>(ys), -1.0f);
            linear_range(m->w, x.data() + r * xs, 1, xs, y1.data(), ys, 0, rows, isa);
            ++compared;
            EXPECT_EQ(0, std::memcmp(y1.data(), ref.data() + r * ys, size_t(rows) * 4))
                << m->name << " row " << r << " alone, " << isa_name(isa);
          }
        }
      }
    }
  // A CPU with the instruction must pass the kernel's self-check (else the comparisons above ran
  // the reference against itself).
  EXPECT_EQ(bf16_kernel_verified(), cpu_has_avx512_bf16());
  EXPECT_EQ(detail::dense_bf16_verified(), cpu_has_avx512_bf16());  // (so far every such CPU)
  std::printf("[ bf16 paths ] %s%s: %d comparisons\n", isa_name(detected_isa()),
              cpu_has_avx512_bf16() ? " with AVX512_BF16 (vdpbf16ps kernel)" : " (reference only)",
              compared);
  const int per_isa = 5 * (10 * 4 + (1 + 1 + 1 + 2 + 2 + 2 + 3 + 3 + 3 + 6));  // + rows 0, 3, ...
  EXPECT_EQ(compared, 3 * per_isa * int(available_isas().size()));
}

// bf16 weights' tiny values, by hand, on every path: one output per rule, 32 weights and
// activations (0 and 1.0 unless listed), the expected y worked out from the rules (plain fmas
// would give the value in the comment). A lane takes k = 1 first, then k = 0.
TEST(LinearBf16, DenseTinyValuesFollowTheInstructionOnEveryPath) {
  IsaGuard guard;
  constexpr int64_t K = 32;
  struct Rule {
    const char* what;
    std::vector<std::pair<int, float>> w, x;  // (k, value); weights 0 and x~ 1.0 elsewhere
    float want;
  };
  const std::vector<Rule> rules = {
      // 1.5 * 2^-126 - 2^-126 = 2^-127 is flushed (plain: 2^-127).
      {"a lane's sum below 2^-126 becomes +0", {{1, 0x1.8p-126f}, {0, -0x1p-126f}}, {}, 0.0f},
      // A subnormal weight is zero even against 2^100 (plain: 2^-30).
      {"a subnormal weight counts as zero", {{1, 0x1p-130f}}, {{1, 0x1p100f}}, 0.0f},
      // 2^-120, then the product 2^-40 * 2^-100 = 2^-140: subnormal, but the step is fused and
      // its sum normal.
      {"a tiny product inside a normal sum stays",
       {{1, 0x1p-120f}, {0, 0x1p-40f}},
       {{0, 0x1p-100f}},
       0x1p-120f + 0x1p-140f},
      // A product below 2^-126 alone is flushed: 2^-60 * 2^-70 (plain: 2^-130).
      {"a tiny product alone becomes +0", {{1, 0x1p-60f}}, {{1, 0x1p-70f}}, 0.0f},
      // Normal values are untouched: 3 * 2 + 5.
      {"normal values", {{1, 3.0f}, {0, 5.0f}}, {{1, 2.0f}}, 11.0f},
      // 2^-126 - 2^-152 rounds to 2^-126, which is not tiny (tininess after rounding).
      {"a sum that rounds up to 2^-126 stays",
       {{1, 0x1p-126f}, {0, 0x1p-52f}},
       {{0, -0x1p-100f}},
       0x1p-126f},
  };
  std::vector<uint16_t> words(rules.size() * K, 0);
  for (size_t o = 0; o < rules.size(); ++o)
    for (auto [k, v] : rules[o].w) words[o * K + size_t(k)] = f32_to_bf16(v);
  int checked = 0;
  for (size_t o = 0; o < rules.size(); ++o) {
    PackedWeight w{WeightFormat::BF16, 1, K, words.data() + o * K, nullptr, nullptr, 1.0f, 0};
    w.arith = Arith::Bf16;
    std::vector<float> x(K, 1.0f);
    for (auto [k, v] : rules[o].x) x[size_t(k)] = v;
    for (Isa isa : available_isas()) {
      float y = -1.0f;
      linear_range(w, x.data(), 1, K, &y, 1, 0, 1, isa);
      EXPECT_EQ(std::bit_cast<uint32_t>(y), std::bit_cast<uint32_t>(rules[o].want))
          << rules[o].what << " at " << isa_name(isa) << ": " << y;
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(rules.size() * available_isas().size()));
}

// The two AVX2 kernels of bf16 weights (the rules by MXCSR, the one this CPU runs if its flushing
// passed the self-check, and by hand) bitwise the reference on random weights with tiny values,
// at 1-6 rows; the caller's MXCSR is back afterwards, with and without its own DAZ / FTZ bits.
TEST(LinearBf16, DenseAvx2KernelsEqualTheReferenceAndRestoreMxcsr) {
  if (detected_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2 here";
  EXPECT_TRUE(detail::dense_bf16_avx2_verified());  // (so far every CPU with AVX2)
  int compared = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 96}, {9, 2688}, {20, 80}}) {
    const auto m = make_bf16(WeightFormat::BF16, rows, cols, uint32_t(rows * 31 + cols));
    for (int64_t n = 1; n <= 6; ++n) {
      const int64_t xs = cols + 1, ys = rows + 2;
      auto x = rand_x(n, xs, uint32_t(n * 37 + cols));
      for (size_t i = 0; i < x.size(); i += 9) x[i] *= 0x1p-24f;  // tiny products, cancellations
      std::vector<float> ref(static_cast<size_t>(n * ys), -1.0f);
      detail::range_dense_bf16_ref(m->w, x.data(), n, xs, ref.data(), ys, 0, rows);
      for (unsigned bits : {0u, 0x8040u})
        for (auto kernel : {detail::range_dense_bf16_avx2, detail::range_dense_bf16_avx2_by_hand}) {
          const unsigned csr = _mm_getcsr();
          _mm_setcsr(csr | bits);
          std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
          kernel(m->w, x.data(), n, xs, y.data(), ys, 0, rows);
          EXPECT_EQ(_mm_getcsr(), csr | bits);
          _mm_setcsr(csr);
          // Under the caller's DAZ / FTZ the tails (plain f32 fmas) may flush where the
          // reference, run without them, does not; the chunks must match either way.
          if (bits == 0 || cols % 32 == 0) {
            ++compared;
            EXPECT_TRUE(bitwise_equal(ref, y)) << m->name << " rows=" << n << " mxcsr " << bits;
          }
        }
    }
  }
  EXPECT_EQ(compared, 3 * 6 * 2 + 2 * 6 * 2);  // K = 80 has a tail: not under the caller's bits
}

TEST(LinearBf16, AccurateAgainstExactSums) {
  // Against the exact (double) sum of w' * round(x): only the f32 accumulation differs; against
  // the f32-activation product: the activation rounding (relative 2^-9 per term) dominates.
  for (WeightFormat f : kBf16Formats) {
    const auto m = make_bf16(f, 64, 2688, 3);
    const auto x = rand_x(1, 2688, 4);
    std::vector<float> y(64), y32(64);
    linear_range(m->w, x.data(), 1, 2688, y.data(), 64, 0, 64, active_isa());
    PackedWeight f32 = m->w;
    f32.arith = Arith::F32;
    linear_range(f32, x.data(), 1, 2688, y32.data(), 64, 0, 64, active_isa());
    double worst_acc = 0, worst_round = 0;
    for (int64_t o = 0; o < 64; ++o) {
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < 2688; ++k) {
        exact += double(m->kernel_w[size_t(o * 2688 + k)]) * rne8(x[size_t(k)]);
        mag += std::fabs(double(m->kernel_w[size_t(o * 2688 + k)]) * x[size_t(k)]);
      }
      exact *= m->post, mag *= m->post;
      worst_acc = std::max(worst_acc, std::fabs(y[size_t(o)] - exact) / mag);
      worst_round = std::max(worst_round, std::fabs(double(y[size_t(o)]) - y32[size_t(o)]) / mag);
    }
    std::printf("[ bf16 accuracy ] %s: accumulation %.3g, vs f32 activations %.3g (of sum |w x|)\n",
                m->name.c_str(), worst_acc, worst_round);
    EXPECT_LT(worst_acc, 1e-7) << m->name;    // measured 2.6e-8 / 1.8e-8: f32 sums of 2688 terms
    EXPECT_LT(worst_round, 2e-3) << m->name;  // measured 2.6e-4 / 2.2e-4; at most 2^-9 per term
    EXPECT_GT(worst_round, 1e-5) << m->name;  // and it did round
  }
}

TEST(LinearBf16, OtherFormatsFailWithAClearError) {
  std::vector<uint8_t> data(64 * 32 * 2);
  PackedWeight w{WeightFormat::F16, 64, 32, data.data(), nullptr, nullptr, 1.0f, 0};
  w.arith = Arith::Bf16;
  std::vector<float> x(32, 1.0f), y(64);
  try {
    linear(w, x.data(), 1, 32, y.data(), 64, ThreadConfig{1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 activations are implemented for nvfp4, fp8 and "
                                         "bf16 weights only, not f16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_STREQ(arith_name(Arith::Bf16), "bf16");
  EXPECT_STREQ(arith_name(Arith::F32), "f32");
}
