// Block-level tests in the style of ggml's tests/test-backend-ops.cpp: each engine block function
// against a plain scalar version written from the spec (nemotron_h.md §2–§6), over several shapes
// (odd widths included) and seeds. References accumulate in double and keep activations unrounded
// (the engine keeps every activation in f32, docs/ARCHITECTURE.md "Numerics"). Every assertion
// names its case (shape, seed, T, ...) so a failure says exactly what broke.
//
// Tolerances are measured, not guessed: each bound below states the measured worst case and the
// margin. Set NEMO_BLOCK_ERRORS=1 to print the measured errors again. Where an operation is exactly
// defined element-wise (conv taps in the documented k order, softplus, the state update in the
// spec's op order, copies) the check is bitwise or a stated number of ulps.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "../support/temp_dir.h"
#include "base/numeric.h"
#include "base/random.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/attention.h"
#include "model/mamba2.h"
#include "model/moe.h"
#include "model/mtp.h"
#include "model/nemotron_h.h"
#include "model/state.h"
#include "tools/synth/synth.h"

using namespace nemo;
using namespace nemo::model;

namespace {

using Vec = std::vector<double>;

// ---- helpers ---------------------------------------------------------------------------------

std::vector<float> uniform(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(lo + (hi - lo) * r.uniform());
  return v;
}

// Independent streams per (case seed, purpose).
uint64_t sub(uint64_t seed, uint64_t k) { return seed * 1000003ull + k; }

Vec widen(const float* p, size_t n) { return Vec(p, p + n); }
Vec widen(const std::vector<float>& v) { return widen(v.data(), v.size()); }

kernels::PackedWeight f32_weight(const std::vector<float>& w, int64_t rows, int64_t cols) {
  kernels::PackedWeight p;
  p.format = kernels::WeightFormat::F32;
  p.rows = rows;
  p.cols = cols;
  p.data = w.data();
  return p;
}

double silu_d(double v) { return v / (1.0 + std::exp(-v)); }
double sigmoid_d(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Largest |got − ref| over the reference's largest magnitude (scale-relative error), and where.
struct Err {
  double err = 0.0;
  size_t at = 0;
};
Err max_err(const float* got, const double* ref, size_t n) {
  double scale = 0.0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(ref[i]));
  if (scale == 0.0) scale = 1.0;
  Err e;
  for (size_t i = 0; i < n; ++i) {
    double d = std::abs(double(got[i]) - ref[i]) / scale;
    if (!std::isfinite(d)) d = INFINITY;
    if (d > e.err) e = {d, i};
  }
  return e;
}
Err max_err(const float* got, const Vec& ref) { return max_err(got, ref.data(), ref.size()); }

// Distance in units in the last place (0 = same value; ±0 are equal).
int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<int64_t>::max();
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i >= 0 ? int64_t(i) : -int64_t(i & 0x7fffffff);
  };
  return std::abs(key(a) - key(b));
}

// First index where two float arrays differ bitwise, or -1.
int64_t first_bit_diff(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return int64_t(i);
  return -1;
}

// The measured worst case of a test, printed with NEMO_BLOCK_ERRORS=1 (to re-measure tolerances).
struct Measured {
  const char* what;
  double worst = 0.0;
  explicit Measured(const char* w) : what(w) {}
  void add(double e) { worst = std::max(worst, e); }
  ~Measured() {
    if (std::getenv("NEMO_BLOCK_ERRORS")) std::printf("[measured] %-40s %.3g\n", what, worst);
  }
};

// y[r] = Σ_c W[r, c]·x[c], W row-major [rows, cols] (a linear layer, §0 conventions: y = x·Wᵀ).
Vec matvec(const Vec& W, int64_t rows, int64_t cols, const double* x) {
  Vec y(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += W[size_t(r * cols + c)] * x[c];
    y[size_t(r)] = acc;
  }
  return y;
}

// nemotron_h.md §2 RMSNorm: x / sqrt(mean(x²) + eps) · w (activations unrounded, see the header).
Vec rms_norm_ref(const double* x, const double* w, int64_t n, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double s = 1.0 / std::sqrt(ss / double(n) + eps);
  Vec y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = x[i] * s * w[i];
  return y;
}

// ---- Mamba-2 fixtures ------------------------------------------------------------------------

struct MambaShape {
  int64_t NH, P, G, N, K;
};

Mamba2Dims dims_of(const MambaShape& s, int64_t H = 0) {
  Mamba2Dims d;
  d.H = H;
  d.NH = s.NH, d.P = s.P, d.G = s.G, d.N = s.N, d.K = s.K;
  d.DI = s.NH * s.P;
  d.CD = d.DI + 2 * s.G * s.N;
  d.DP = d.DI + d.CD + s.NH;
  return d;
}

std::string str(const MambaShape& s) {
  const Mamba2Dims d = dims_of(s);
  return fmt::format("NH={} P={} G={} N={} K={} (DI={} CD={})", s.NH, s.P, s.G, s.N, s.K, d.DI, d.CD);
}

// The small (non-projection) weights of one Mamba layer, in ranges that keep the scan well-conditioned.
Mamba2Weights mamba_weights(const MambaShape& s, uint64_t seed, int64_t H = 0) {
  Mamba2Weights w;
  w.dims = dims_of(s, H);
  const Mamba2Dims& d = w.dims;
  w.conv_taps = uniform(size_t(d.CD * d.K), sub(seed, 1), -0.6, 0.6);
  w.conv_b = uniform(size_t(d.CD), sub(seed, 2), -0.2, 0.2);
  w.dt_bias = uniform(size_t(d.NH), sub(seed, 3), -3.0, 0.0);
  const auto a_log = uniform(size_t(d.NH), sub(seed, 4), -1.0, 1.5);
  w.A.resize(a_log.size());
  for (size_t h = 0; h < a_log.size(); ++h) w.A[h] = -std::exp(a_log[h]);  // §3.4 A = −exp(A_log)
  w.D = uniform(size_t(d.NH), sub(seed, 5), 0.5, 1.5);
  w.norm_w = uniform(size_t(d.DI), sub(seed, 6), 0.5, 1.5);
  w.norm_eps = 1e-5f;
  return w;
}

// nemotron_h.md §3.3: causal depthwise conv + SiLU; tap K−1 multiplies the newest row, rows before
// the first new one come from the window (oldest first). raw(t, c) reads the pre-conv xBC.
template <typename Raw>
Vec conv_ref(const Mamba2Weights& w, const float* window, Raw raw, int64_t T) {
  const Mamba2Dims& d = w.dims;
  Vec out(static_cast<size_t>(T * d.CD));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < d.CD; ++c) {
      double acc = w.conv_b[size_t(c)];
      for (int64_t k = 0; k < d.K; ++k) {
        const int64_t s = t - (d.K - 1) + k;
        const double v = s < 0 ? window[(d.K - 1 + s) * d.CD + c] : raw(s, c);
        acc += double(w.conv_taps[size_t(k * d.CD + c)]) * v;
      }
      out[size_t(t * d.CD + c)] = silu_d(acc);
    }
  return out;
}

// §3.4 softplus with the threshold 20, then the time_step_limit clamp ((0, inf) is a no-op).
float dt_ref(float raw, float bias, float lo, float hi) {
  const float v = raw + bias;  // fp32(dt_raw) + fp32(dt_bias): an exact IEEE f32 add, as the spec writes it
  const double sp = v > 20.0f ? double(v) : std::log1p(std::exp(double(v)));
  return float(std::min(std::max(sp, double(lo)), double(hi)));
}

// §3.5 the recurrence over T rows for all heads, state S [NH, P, N] in double; xbc rows [T, CD]
// (x | B | C), dt [T, NH]. Returns y [T, DI].
Vec scan_ref(const Mamba2Weights& w, const float* xbc, const float* dt, int64_t T, Vec& S) {
  const Mamba2Dims& d = w.dims;
  Vec y(static_cast<size_t>(T * d.DI));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = xbc + t * d.CD;
    for (int64_t h = 0; h < d.NH; ++h) {
      const int64_t g = h / (d.NH / d.G);  // heads g·(NH/G) .. share B[g], C[g]
      const double dth = dt[t * d.NH + h], dA = std::exp(dth * double(w.A[size_t(h)]));
      const float* B = row + d.DI + g * d.N;
      const float* C = row + d.DI + d.G * d.N + g * d.N;
      for (int64_t p = 0; p < d.P; ++p) {
        const double xv = row[h * d.P + p];
        double* s = &S[size_t((h * d.P + p) * d.N)];
        double acc = 0.0;
        for (int64_t n = 0; n < d.N; ++n) {
          s[n] = s[n] * dA + (double(B[n]) * dth) * xv;
          acc += s[n] * double(C[n]);
        }
        y[size_t(t * d.DI + h * d.P + p)] = acc + double(w.D[size_t(h)]) * xv;
      }
    }
  }
  return y;
}

// §3.7 gate first (y·silu(z)), then RMSNorm per group of DI/G contiguous channels, times the weight.
Vec gated_norm_ref(const Mamba2Weights& w, const float* y, const float* z, int64_t z_stride, int64_t T) {
  const Mamba2Dims& d = w.dims;
  const int64_t gs = d.DI / d.G;
  Vec out(static_cast<size_t>(T * d.DI));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < d.G; ++g) {
      Vec u(static_cast<size_t>(gs));
      for (int64_t i = 0; i < gs; ++i) {
        const int64_t c = g * gs + i;
        u[size_t(i)] = double(y[t * d.DI + c]) * silu_d(z[t * z_stride + c]);
      }
      const Vec wn = widen(w.norm_w.data() + g * gs, size_t(gs));
      const Vec n = rms_norm_ref(u.data(), wn.data(), gs, w.norm_eps);
      std::copy(n.begin(), n.end(), out.begin() + t * d.DI + g * gs);
    }
  return out;
}

const MambaShape kConvShapes[] = {
    {2, 8, 1, 4, 4}, {3, 5, 1, 3, 4}, {4, 6, 2, 5, 3}, {5, 7, 5, 3, 2}, {8, 16, 2, 16, 4},
};
// Scan shapes: groups > 1 with 1, 2, 3 and 4 heads per group, odd P and N.
const MambaShape kScanShapes[] = {
    {6, 5, 3, 7, 4}, {8, 16, 2, 16, 4}, {4, 3, 4, 5, 4}, {9, 7, 3, 11, 4}, {4, 9, 1, 10, 4},
};

}  // namespace

// ---- 1. conv1d + SiLU, window shift ------------------------------------------------------------

TEST(BlockConv, Conv1dSiluMatchesScalar) {
  // Measured worst scale-relative error vs the double reference: 1.7e-7 (f32 rounding of ≤ 5 terms
  // and of silu); bound 2e-6 (~10x margin). The f32 sum in the documented order is bitwise-equal.
  Measured m("conv1d_silu vs double");
  for (const auto& s : kConvShapes)
    for (uint64_t seed : {1, 2, 3})
      for (int64_t T : {1, 3, 7})
        for (bool zero_window : {false, true}) {
          const Mamba2Weights w = mamba_weights(s, seed);
          const Mamba2Dims& d = w.dims;
          const auto proj = uniform(size_t(T * d.DP), sub(seed, 10 + T), -2.0, 2.0);
          auto window = uniform(size_t((d.K - 1) * d.CD), sub(seed, 20 + T), -2.0, 2.0);
          if (zero_window) std::fill(window.begin(), window.end(), 0.0f);
          const int threads = T == 7 ? 2 : 1;
          const std::string what = fmt::format("{} T={} seed={} window={} threads={}", str(s), T, seed,
                                               zero_window ? "zeros" : "random", threads);
          std::vector<float> out(size_t(T * d.CD), NAN);
          conv1d_silu(w, window.data(), ProjRows{proj.data(), d}, T, out.data(), ThreadConfig{threads});

          auto raw = [&](int64_t t, int64_t c) { return double(proj[size_t(t * d.DP + d.DI + c)]); };
          const Vec ref = conv_ref(w, window.data(), raw, T);
          const Err e = max_err(out.data(), ref);
          m.add(e.err);
          EXPECT_LE(e.err, 2e-6) << what << ": worst at t=" << e.at / d.CD << " c=" << e.at % d.CD << " got "
                                 << out[e.at] << " want " << ref[e.at];

          // The same definition in f32, bias first then taps k = 0..K−1 (the order mamba2.h documents).
          std::vector<float> f32(out.size());
          for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < d.CD; ++c) {
              float acc = w.conv_b[size_t(c)];
              for (int64_t k = 0; k < d.K; ++k) {
                const int64_t src = t - (d.K - 1) + k;
                const float v = src < 0 ? window[size_t((d.K - 1 + src) * d.CD + c)] : float(raw(src, c));
                acc = acc + w.conv_taps[size_t(k * d.CD + c)] * v;
              }
              f32[size_t(t * d.CD + c)] = acc / (1.0f + std::exp(-acc));
            }
          const int64_t bad = first_bit_diff(out.data(), f32.data(), out.size());
          EXPECT_EQ(bad, -1) << what << ": not bitwise equal to the documented tap order at t=" << bad / d.CD
                             << " c=" << bad % d.CD;
        }
}

TEST(BlockConv, ShiftConvWindowKeepsLastRawRows) {
  for (const auto& s : kConvShapes)
    for (uint64_t seed : {1, 2})
      for (int64_t T : {1, 2, 3, 7})
        for (bool proj_stride : {true, false}) {
          const Mamba2Dims d = dims_of(s);
          const int64_t KW = d.K - 1, stride = proj_stride ? d.DP : d.CD;
          const std::string what = fmt::format("{} T={} seed={} stride={}", str(s), T, seed, proj_stride ? "DP" : "CD");
          const auto old = uniform(size_t(KW * d.CD), sub(seed, 30 + T));
          const auto rows = uniform(size_t(T * stride), sub(seed, 40 + T));
          // Raw xBC rows start DI into a projection row, or at 0 in a bare [T, CD] buffer.
          const float* first = rows.data() + (proj_stride ? d.DI : 0);
          Buffer<float> window(size_t(KW * d.CD));
          std::copy(old.begin(), old.end(), window.data());
          shift_conv_window(d, window, first, stride, T);
          // §3.3 decode form: the window is the last K−1 raw rows of [old window ‖ new rows].
          ASSERT_EQ(window.size(), size_t(KW * d.CD)) << what;
          for (int64_t r = 0; r < KW; ++r) {
            const int64_t src = T - KW + r;  // index into the new rows; < 0 is an old window row
            const float* want = src < 0 ? old.data() + (KW + src) * d.CD : first + src * stride;
            const int64_t bad = first_bit_diff(window.data() + r * d.CD, want, size_t(d.CD));
            EXPECT_EQ(bad, -1) << what << ": window row " << r << " channel " << bad;
          }
        }
}

// ---- 2. dt -------------------------------------------------------------------------------------

TEST(BlockDt, SoftplusMatchesScalar) {
  // f32 log1p(exp(v)) vs the correctly rounded double value: measured ≤ 1 ulp; asserted ≤ 1 ulp.
  Measured m("dt softplus ulps");
  for (uint64_t seed : {1, 2, 3}) {
    Mamba2Weights w = mamba_weights({4, 2, 1, 2, 4}, seed);
    const auto raw = uniform(2000, sub(seed, 50), -25.0, 25.0);
    for (size_t i = 0; i < raw.size(); ++i) {
      const int64_t h = int64_t(i % 4);
      const float got = dt_from_raw(w, raw[i], h), want = dt_ref(raw[i], w.dt_bias[size_t(h)], 0.0f, INFINITY);
      m.add(double(ulps(got, want)));
      ASSERT_LE(ulps(got, want), 1) << "seed=" << seed << " head=" << h << " raw=" << raw[i]
                                    << " bias=" << w.dt_bias[size_t(h)] << ": got " << got << " want " << want;
    }
  }
}

TEST(BlockDt, ThresholdAt20IsIdentity) {
  // Above 20 softplus is the identity. In f32 the threshold only shows where exp(v) overflows
  // (v > 88.7): without it dt would be inf. Near 20 both branches round to v.
  Mamba2Weights w = mamba_weights({2, 2, 1, 2, 4}, 1);
  w.dt_bias = {0.0f, 0.5f};
  for (int64_t h : {0, 1})
    for (float v : {19.5f, 19.999f, 20.0f, 20.001f, 21.0f, 50.0f, 88.0f, 89.0f, 100.0f, 1000.0f, 1e30f}) {
      const float raw = v - w.dt_bias[size_t(h)];
      const float got = dt_from_raw(w, raw, h), want = dt_ref(raw, w.dt_bias[size_t(h)], 0.0f, INFINITY);
      EXPECT_TRUE(std::isfinite(got)) << "head=" << h << " raw+bias=" << v << ": got " << got;
      EXPECT_LE(ulps(got, want), 1) << "head=" << h << " raw+bias=" << v << ": got " << got << " want " << want;
      if (raw + w.dt_bias[size_t(h)] > 20.0f) {
        EXPECT_EQ(got, raw + w.dt_bias[size_t(h)]) << "head=" << h << " raw+bias=" << v << ": identity above 20";
      }
    }
}

TEST(BlockDt, ClampOnlyWhenTimeStepLimitIsSet) {
  struct Limit {
    float lo, hi;
  };
  // (0, inf) is the Nemotron default: no clamp (§3.4, §8.2 pitfall 1). The others clamp.
  for (Limit lim : {Limit{0.0f, INFINITY}, Limit{1e-3f, INFINITY}, Limit{0.0f, 0.1f}, Limit{0.01f, 0.5f}})
    for (uint64_t seed : {1, 2}) {
      Mamba2Weights w = mamba_weights({3, 2, 1, 2, 4}, seed);
      w.dt_min = lim.lo;
      w.dt_max = lim.hi;
      const std::string what = fmt::format("time_step_limit=({}, {}) seed={}", lim.lo, lim.hi, seed);
      // Very negative (dt ~ 1e-13, must survive unclamped at (0, inf)), small, mid and large values.
      for (float v : {-30.0f, -12.0f, -7.0f, -3.0f, -1.0f, 0.0f, 1.5f, 5.0f, 25.0f})
        for (int64_t h = 0; h < 3; ++h) {
          const float raw = v - w.dt_bias[size_t(h)];
          const float got = dt_from_raw(w, raw, h), want = dt_ref(raw, w.dt_bias[size_t(h)], lim.lo, lim.hi);
          EXPECT_LE(ulps(got, want), 1) << what << " head=" << h << " raw+bias≈" << v << ": got " << got << " want "
                                        << want;
          EXPECT_GE(got, lim.lo) << what << " raw+bias≈" << v;
          EXPECT_LE(got, lim.hi) << what << " raw+bias≈" << v;
        }
    }
}

// ---- 3. the recurrence -------------------------------------------------------------------------

TEST(BlockSsm, StepHeadMatchesScalar) {
  // y uses the engine's 16-lane dot: measured worst scale-relative error 1.3e-7 vs double; bound
  // 1e-6 (~8x margin). The state update is element-wise in the spec's op order (§3.5: S·exp(dt·A) + (B·dt)·x)
  // and must be bitwise equal to that order in f32.
  Measured m("ssm_step_head y vs double");
  struct PN {
    int64_t P, N;
  };
  for (PN pn : {PN{1, 1}, PN{5, 7}, PN{16, 16}, PN{13, 33}, PN{64, 128}})
    for (uint64_t seed : {1, 2, 3}) {
      const int64_t P = pn.P, N = pn.N;
      const std::string what = fmt::format("P={} N={} seed={}", P, N, seed);
      const auto S0 = uniform(size_t(P * N), sub(seed, 60), -1.0, 1.0);
      const auto x = uniform(size_t(P), sub(seed, 61)), B = uniform(size_t(N), sub(seed, 62));
      const auto C = uniform(size_t(N), sub(seed, 63));
      const float dt = uniform(1, sub(seed, 64), 0.01, 1.0)[0], A = uniform(1, sub(seed, 65), -3.0, -0.1)[0];
      const float D = uniform(1, sub(seed, 66), 0.5, 1.5)[0];

      std::vector<float> S = S0, y(size_t(P), NAN);
      ssm_step_head(S.data(), x.data(), B.data(), C.data(), dt, A, D, P, N, y.data());

      // f32 state update in the spec's order.
      std::vector<float> S32 = S0;
      const float dA = std::exp(dt * A);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) S32[size_t(p * N + n)] = S32[size_t(p * N + n)] * dA + (B[n] * dt) * x[p];
      const int64_t bad = first_bit_diff(S.data(), S32.data(), S.size());
      EXPECT_EQ(bad, -1) << what << ": state differs from the §3.5 op order at p=" << bad / N << " n=" << bad % N;

      // y against the double recurrence.
      Vec Sd = widen(S0), yd(static_cast<size_t>(P));
      const double dAd = std::exp(double(dt) * double(A));
      for (int64_t p = 0; p < P; ++p) {
        double acc = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          double& s = Sd[size_t(p * N + n)];
          s = s * dAd + (double(B[n]) * dt) * double(x[p]);
          acc += s * double(C[n]);
        }
        yd[size_t(p)] = acc + double(D) * double(x[p]);
      }
      const Err ey = max_err(y.data(), yd), es = max_err(S.data(), Sd);
      m.add(ey.err);
      EXPECT_LE(ey.err, 1e-6) << what << ": y worst at p=" << ey.at << " got " << y[ey.at] << " want " << yd[ey.at];
      EXPECT_LE(es.err, 1e-6) << what << ": state worst at " << es.at;

      // Without y (replay form) the state update is the same.
      std::vector<float> S2 = S0;
      ssm_step_head(S2.data(), x.data(), B.data(), nullptr, dt, A, D, P, N, nullptr);
      EXPECT_EQ(first_bit_diff(S2.data(), S.data(), S.size()), -1) << what << ": y = nullptr changes the state";
    }
}

TEST(BlockSsm, ScanRecurrentMatchesScalar) {
  // Measured worst scale-relative error vs the double recurrence (y and state): 1.8e-7; bound 2e-6
  // (~11x margin).
  Measured m("ssm_scan_recurrent vs double");
  for (const auto& s : kScanShapes)
    for (uint64_t seed : {1, 2})
      for (int64_t T : {1, 4, 9})
        for (int threads : {1, 2}) {
          const Mamba2Weights w = mamba_weights(s, seed);
          const Mamba2Dims& d = w.dims;
          const std::string what = fmt::format("{} T={} seed={} threads={}", str(s), T, seed, threads);
          const auto xbc = uniform(size_t(T * d.CD), sub(seed, 70 + T));
          const auto dt = uniform(size_t(T * d.NH), sub(seed, 80 + T), 0.01, 0.8);
          const auto S0 = uniform(size_t(d.NH * d.P * d.N), sub(seed, 90), -0.5, 0.5);
          std::vector<float> S = S0, y(size_t(T * d.DI), NAN);
          ssm_scan_recurrent(w, XbcRows{xbc.data(), d}, dt.data(), T, S.data(), y.data(), ThreadConfig{threads});

          Vec Sd = widen(S0);
          const Vec yd = scan_ref(w, xbc.data(), dt.data(), T, Sd);
          const Err ey = max_err(y.data(), yd), es = max_err(S.data(), Sd);
          m.add(std::max(ey.err, es.err));
          EXPECT_LE(ey.err, 2e-6) << what << ": y worst at t=" << ey.at / d.DI << " head=" << ey.at % d.DI / d.P
                                  << " p=" << ey.at % d.P << " got " << y[ey.at] << " want " << yd[ey.at];
          EXPECT_LE(es.err, 2e-6) << what << ": state worst at head=" << es.at / (d.P * d.N) << " got " << S[es.at]
                                  << " want " << Sd[es.at];
        }
}

// ---- 4. the chunked SSD scan -------------------------------------------------------------------

TEST(BlockSsd, ChunkedMatchesRecurrence) {
  // §3.6 is mathematically the §3.5 recurrence, so the oracle is the double recurrence. The chunked form
  // rounds differently (exp of cumulative sums, Gram products): measured worst scale-relative error
  // (y and state) 5.2e-7; bound 5e-6 (~10x margin). T spans several chunks, with a partial last
  // chunk and a non-zero initial state.
  Measured m("ssm_scan_chunked vs double");
  struct Run {
    int64_t chunk, T;
  };
  for (const auto& s : kScanShapes)
    for (Run r : {Run{8, 20}, Run{8, 8}, Run{8, 17}, Run{5, 13}, Run{128, 20}, Run{1, 6}})
      for (uint64_t seed : {1, 2})
        for (int threads : {1, 2}) {
          Mamba2Weights w = mamba_weights(s, seed);
          w.chunk_size = r.chunk;
          const Mamba2Dims& d = w.dims;
          const int64_t T = r.T;
          const std::string what =
              fmt::format("{} chunk={} T={} seed={} threads={}", str(s), r.chunk, T, seed, threads);
          const auto xbc = uniform(size_t(T * d.CD), sub(seed, 100 + T));
          const auto dt = uniform(size_t(T * d.NH), sub(seed, 110 + T), 0.01, 0.8);
          const auto S0 = uniform(size_t(d.NH * d.P * d.N), sub(seed, 120), -0.5, 0.5);
          std::vector<float> S = S0, y(size_t(T * d.DI), NAN);
          ssm_scan_chunked(w, XbcRows{xbc.data(), d}, dt.data(), T, S.data(), y.data(), ThreadConfig{threads});

          Vec Sd = widen(S0);
          const Vec yd = scan_ref(w, xbc.data(), dt.data(), T, Sd);
          const Err ey = max_err(y.data(), yd), es = max_err(S.data(), Sd);
          m.add(std::max(ey.err, es.err));
          EXPECT_LE(ey.err, 5e-6) << what << ": y worst at t=" << ey.at / d.DI << " head=" << ey.at % d.DI / d.P
                                  << " p=" << ey.at % d.P << " got " << y[ey.at] << " want " << yd[ey.at];
          EXPECT_LE(es.err, 5e-6) << what << ": state worst at head=" << es.at / (d.P * d.N) << " got " << S[es.at]
                                  << " want " << Sd[es.at];
        }
}

// ---- 5. gated grouped RMSNorm ------------------------------------------------------------------

TEST(BlockGatedNorm, MatchesScalar) {
  // Measured worst scale-relative error vs double: 2.0e-7; bound 2e-6 (~10x margin). Groups get
  // scales 10^-3 .. 10^1 so a norm over all DI channels (§8.2 pitfall 3) or a misplaced eps shows.
  Measured m("gated_group_rmsnorm vs double");
  const MambaShape shapes[] = {{3, 5, 3, 2, 4}, {4, 9, 2, 2, 4}, {8, 16, 2, 2, 4}, {5, 7, 1, 2, 4}, {6, 3, 2, 2, 4}};
  for (const auto& s : shapes)
    for (uint64_t seed : {1, 2, 3})
      for (int64_t T : {1, 3}) {
        const Mamba2Weights w = mamba_weights(s, seed);
        const Mamba2Dims& d = w.dims;
        const int64_t gs = d.DI / d.G;
        const std::string what = fmt::format("{} group_size={} T={} seed={}", str(s), gs, T, seed);
        const auto proj = uniform(size_t(T * d.DP), sub(seed, 130 + T), -4.0, 4.0);  // z = first DI of a row
        auto y = uniform(size_t(T * d.DI), sub(seed, 140 + T), -1.0, 1.0);
        const double scales[] = {1.0, 10.0, 1e-3, 0.1};
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < d.DI; ++c) y[size_t(t * d.DI + c)] *= float(scales[(c / gs + t) % 4]);
        const Vec ref = gated_norm_ref(w, y.data(), proj.data(), d.DP, T);
        std::vector<float> got = y;
        gated_group_rmsnorm(w, got.data(), ProjRows{proj.data(), d}, T, ThreadConfig{T == 3 ? 2 : 1});
        // Per-group error: the groups differ in scale by design.
        for (int64_t t = 0; t < T; ++t)
          for (int64_t g = 0; g < d.G; ++g) {
            const size_t o = size_t(t * d.DI + g * gs);
            const Err e = max_err(got.data() + o, ref.data() + o, size_t(gs));
            m.add(e.err);
            EXPECT_LE(e.err, 2e-6) << what << ": t=" << t << " group=" << g << " worst at channel "
                                   << g * gs + int64_t(e.at) << " got " << got[o + e.at] << " want " << ref[o + e.at];
          }
      }
}

// ---- 6. attention ------------------------------------------------------------------------------

namespace {

struct AttnShape {
  int64_t H, HQ, HKV, HD;
};

struct AttnRefWeights {
  Vec q, k, v, o;  // [HQ·HD, H], [HKV·HD, H], [HKV·HD, H], [H, HQ·HD]
};

// nemotron_h.md §4 for one new row: project, append k/v to the cache, then causal softmax attention
// over every cached row (the new row is the last: τ ≤ t by construction), no positional encoding,
// kv head j = i / (HQ/HKV), scale HD^-1/2; output through o_proj.
Vec attention_row_ref(const AttnShape& s, const AttnRefWeights& w, const double* hn, std::vector<Vec>& K,
                      std::vector<Vec>& V) {
  const int64_t QW = s.HQ * s.HD, KW = s.HKV * s.HD;
  const Vec q = matvec(w.q, QW, s.H, hn);
  K.push_back(matvec(w.k, KW, s.H, hn));
  V.push_back(matvec(w.v, KW, s.H, hn));
  Vec ctx(size_t(QW), 0.0);
  const double scale = 1.0 / std::sqrt(double(s.HD));
  for (int64_t i = 0; i < s.HQ; ++i) {
    const int64_t j = i / (s.HQ / s.HKV);
    Vec sc(K.size());
    double mx = -INFINITY;
    for (size_t tau = 0; tau < K.size(); ++tau) {
      double dot = 0.0;
      for (int64_t e = 0; e < s.HD; ++e) dot += q[size_t(i * s.HD + e)] * K[tau][size_t(j * s.HD + e)];
      sc[tau] = dot * scale;
      mx = std::max(mx, sc[tau]);
    }
    double sum = 0.0;
    for (double& v : sc) sum += (v = std::exp(v - mx));
    for (size_t tau = 0; tau < K.size(); ++tau)
      for (int64_t e = 0; e < s.HD; ++e) ctx[size_t(i * s.HD + e)] += sc[tau] / sum * V[tau][size_t(j * s.HD + e)];
  }
  return matvec(w.o, s.H, QW, ctx.data());
}

}  // namespace

TEST(BlockAttention, CausalGqaMatchesScalar) {
  // Measured worst scale-relative error vs double (output and new K/V rows): 2.7e-7; bound 3e-6
  // (~11x margin). Cached rows must be untouched, bitwise.
  Measured m("attention_forward vs double");
  struct Rows {
    int64_t n_past, T;
  };
  const AttnShape shapes[] = {{20, 4, 2, 6}, {37, 6, 3, 11}, {64, 8, 1, 16}, {24, 3, 3, 8}, {50, 10, 2, 13}};
  for (const auto& s : shapes)
    for (Rows r : {Rows{0, 1}, Rows{0, 5}, Rows{5, 4}, Rows{9, 7}, Rows{3, 1}})
      for (uint64_t seed : {1, 2}) {
        const int64_t QW = s.HQ * s.HD, KW = s.HKV * s.HD, T = r.T, n_past = r.n_past;
        const int threads = T > 1 ? 2 : 1;
        const std::string what = fmt::format("H={} HQ={} HKV={} HD={} n_past={} T={} seed={} threads={}", s.H, s.HQ,
                                             s.HKV, s.HD, n_past, T, seed, threads);
        const double a = 1.5 / std::sqrt(double(s.H));
        const auto wq = uniform(size_t(QW * s.H), sub(seed, 200), -a, a);
        const auto wk = uniform(size_t(KW * s.H), sub(seed, 201), -a, a);
        const auto wv = uniform(size_t(KW * s.H), sub(seed, 202), -a, a);
        const auto wo =
            uniform(size_t(s.H * QW), sub(seed, 203), -1.0 / std::sqrt(double(QW)), 1.0 / std::sqrt(double(QW)));
        AttentionWeights w;
        w.q_proj = f32_weight(wq, QW, s.H);
        w.k_proj = f32_weight(wk, KW, s.H);
        w.v_proj = f32_weight(wv, KW, s.H);
        w.o_proj = f32_weight(wo, s.H, QW);
        io::ModelConfig c;
        c.hidden_size = s.H, c.num_attention_heads = s.HQ, c.num_key_value_heads = s.HKV, c.head_dim = s.HD;

        // A pre-filled cache of n_past rows.
        KvCache kv;
        grow_kv(kv, n_past + T, 0, KW);
        const auto k_old = uniform(size_t(n_past * KW), sub(seed, 204), -1.5, 1.5);
        const auto v_old = uniform(size_t(n_past * KW), sub(seed, 205), -1.5, 1.5);
        std::vector<Vec> K, V;
        for (int64_t t = 0; t < n_past; ++t) {
          kv.store(true, t, KW, k_old.data() + t * KW, 1.0f);
          kv.store(false, t, KW, v_old.data() + t * KW, 1.0f);
          K.push_back(widen(k_old.data() + t * KW, size_t(KW)));
          V.push_back(widen(v_old.data() + t * KW, size_t(KW)));
        }
        const auto hn = uniform(size_t(T * s.H), sub(seed, 206));
        std::vector<float> out(size_t(T * s.H), NAN);
        attention_forward(w, c, hn.data(), T, n_past, out.data(), kv, ThreadConfig{threads});

        const AttnRefWeights rw{widen(wq), widen(wk), widen(wv), widen(wo)};
        for (int64_t t = 0; t < T; ++t) {
          const Vec x = widen(hn.data() + t * s.H, size_t(s.H));
          const Vec o = attention_row_ref(s, rw, x.data(), K, V);
          const Err e = max_err(out.data() + t * s.H, o);
          m.add(e.err);
          EXPECT_LE(e.err, 3e-6) << what << ": output row t=" << t << " (position " << n_past + t << ") worst at "
                                 << e.at << " got " << out[size_t(t * s.H) + e.at] << " want " << o[e.at];
          const Err ek = max_err(kv.f32_row(true, n_past + t, KW), K.back());
          const Err ev = max_err(kv.f32_row(false, n_past + t, KW), V.back());
          m.add(std::max(ek.err, ev.err));
          EXPECT_LE(ek.err, 3e-6) << what << ": K row written at position " << n_past + t << " worst at " << ek.at;
          EXPECT_LE(ev.err, 3e-6) << what << ": V row written at position " << n_past + t << " worst at " << ev.at;
        }
        for (int64_t t = 0; t < n_past; ++t) {
          EXPECT_EQ(first_bit_diff(kv.f32_row(true, t, KW), k_old.data() + t * KW, size_t(KW)), -1)
              << what << ": cached K row " << t << " changed";
          EXPECT_EQ(first_bit_diff(kv.f32_row(false, t, KW), v_old.data() + t * KW, size_t(KW)), -1)
              << what << ": cached V row " << t << " changed";
        }
      }
}

// ---- 7. MoE ------------------------------------------------------------------------------------

namespace {

struct RouteRef {
  std::vector<int32_t> experts;  // ascending
  Vec weights;
  double margin;  // k-th minus (k+1)-th biased score: how far the selection is from a tie
};

// nemotron_h.md §5.2: s = sigmoid(logit); select top-k of s + bias (ties → lowest index); weights =
// unbiased s of the chosen, / Σ (+1e-20) when norm_topk_prob, × routed_scaling_factor.
RouteRef route_ref(const io::ModelConfig& c, const double* logits, const float* bias) {
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  Vec s(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    s[size_t(e)] = sigmoid_d(logits[e]);
    sel[size_t(e)] = s[size_t(e)] + double(bias[e]);
  }
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel[size_t(a)] > sel[size_t(b)]; });
  RouteRef r;
  r.margin = k < E ? sel[size_t(order[size_t(k - 1)])] - sel[size_t(order[size_t(k)])] : INFINITY;
  r.experts.assign(order.begin(), order.begin() + k);
  std::sort(r.experts.begin(), r.experts.end());
  double sum = 0.0;
  for (auto e : r.experts) sum += s[size_t(e)];
  for (auto e : r.experts)
    r.weights.push_back((c.norm_topk_prob ? s[size_t(e)] / (sum + 1e-20) : s[size_t(e)]) * c.routed_scaling_factor);
  return r;
}

io::ModelConfig moe_config(int64_t E, int64_t k, bool norm, float rsf) {
  io::ModelConfig c;
  c.n_routed_experts = E, c.num_experts_per_tok = k, c.norm_topk_prob = norm, c.routed_scaling_factor = rsf;
  return c;
}

std::string str(const std::vector<int32_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// Route with the engine and check against the reference: same experts, weights within `tol`
// (relative; sigmoid in f32 vs double).
void expect_route(const io::ModelConfig& c, const std::vector<float>& logits, const std::vector<float>& bias,
                  const std::string& what, Measured* m = nullptr) {
  const Routing r = route(c, logits.data(), bias);
  const Vec ld = widen(logits);
  const RouteRef ref = route_ref(c, ld.data(), bias.data());
  ASSERT_EQ(r.experts, ref.experts) << what << ": selected " << str(r.experts) << ", want " << str(ref.experts);
  ASSERT_EQ(r.weights.size(), ref.weights.size()) << what;
  for (size_t j = 0; j < ref.weights.size(); ++j) {
    const double rel = std::abs(r.weights[j] - ref.weights[j]) / std::abs(ref.weights[j]);
    if (m) m->add(rel);
    // Measured ≤ 1.4e-7 relative; bound 1e-6 (~7x margin).
    EXPECT_LE(rel, 1e-6) << what << ": weight of expert " << ref.experts[j] << " is " << r.weights[j] << ", want "
                         << ref.weights[j];
  }
}

}  // namespace

TEST(BlockMoE, RouteTiesGoToTheLowestIndex) {
  for (bool norm : {true, false}) {
    const std::string tag = fmt::format(" norm_topk_prob={}", norm);
    {  // all equal: the first k
      const auto c = moe_config(8, 3, norm, 2.5f);
      expect_route(c, std::vector<float>(8, 0.3f), std::vector<float>(8, 0.0f), "E=8 k=3 all logits 0.3" + tag);
    }
    {  // four-way tie straddling the cut: the two lowest of {1, 3, 4, 6} join expert 2
      const auto c = moe_config(8, 3, norm, 1.0f);
      const std::vector<float> logits = {0.1f, 0.7f, 0.9f, 0.7f, 0.7f, 0.2f, 0.7f, 0.0f};
      expect_route(c, logits, std::vector<float>(8, 0.0f), "E=8 k=3 tie at the cut" + tag);
      const Routing r = route(c, logits.data(), std::vector<float>(8, 0.0f));
      EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2, 3})) << "E=8 k=3 tie at the cut" << tag;
    }
    {  // ties in the biased score: equal logits and equal biases, bias lifting the high indices
      const auto c = moe_config(13, 5, norm, 2.5f);
      std::vector<float> logits(13, -0.5f), bias(13, 0.0f);
      for (int e : {4, 7, 9, 11, 12}) bias[size_t(e)] = 0.25f;
      for (int e : {2, 5}) bias[size_t(e)] = 0.5f;
      const Routing r = route(c, logits.data(), bias);
      EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 4, 5, 7, 9})) << "E=13 k=5 biased ties" << tag;
      expect_route(c, logits, bias, "E=13 k=5 biased ties" + tag);
    }
  }
}

TEST(BlockMoE, CorrectionBiasSelectsButDoesNotWeigh) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f};
  for (bool norm : {true, false})
    for (float rsf : {1.0f, 2.5f}) {
      const auto c = moe_config(6, 2, norm, rsf);
      const std::string tag = fmt::format("E=6 k=2 norm_topk_prob={} routed_scaling_factor={}", norm, rsf);
      // No bias: the two largest logits.
      EXPECT_EQ(route(c, logits.data(), std::vector<float>(6, 0.0f)).experts, (std::vector<int32_t>{0, 1})) << tag;
      // +1 on expert 4 (sigmoid 0.5 → 1.5) pulls it in; -1 on expert 0 pushes it out.
      std::vector<float> bias = {-1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f};
      const Routing r = route(c, logits.data(), bias);
      EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 4})) << tag << " bias {-1, 0, 0, 0, +1, 0}";
      expect_route(c, logits, bias, tag + " bias {-1, 0, 0, 0, +1, 0}");
      // Weights are the unbiased sigmoid scores of experts 1 and 4.
      const double s1 = sigmoid_d(1.5), s4 = sigmoid_d(0.0);
      const double w1 = (norm ? s1 / (s1 + s4) : s1) * rsf, w4 = (norm ? s4 / (s1 + s4) : s4) * rsf;
      ASSERT_EQ(r.weights.size(), 2u) << tag;
      EXPECT_NEAR(r.weights[0], w1, 1e-6 * w1) << tag << ": expert 1 weighed by a biased score?";
      EXPECT_NEAR(r.weights[1], w4, 1e-6 * w4) << tag << ": expert 4 weighed by a biased score?";
      // Another bias with the same selection gives bitwise the same weights.
      std::vector<float> bias2 = bias;
      for (auto& b : bias2) b += 0.375f;
      bias2[4] = 3.0f;
      const Routing r2 = route(c, logits.data(), bias2);
      EXPECT_EQ(r2.experts, r.experts) << tag;
      EXPECT_EQ(r2.weights, r.weights) << tag << ": the weights moved with the bias";
    }
}

// §5.2 grouped top-k on hand-made scores: logits 0 (sigmoid exactly 0.5) and biases on a 1/16 grid,
// so every biased score and group score (sum of a group's two best) is exact.
TEST(BlockMoE, GroupedRoutingKeepsTheBestGroups) {
  auto grouped = [](int64_t E, int64_t k, int64_t n_group, int64_t topk_group) {
    auto c = moe_config(E, k, true, 1.0f);
    c.n_group = n_group, c.topk_group = topk_group;
    return c;
  };
  auto experts = [](const io::ModelConfig& c, const std::vector<float>& sel) {
    const std::vector<float> logits(sel.size(), 0.0f);
    std::vector<float> bias(sel.size());
    for (size_t e = 0; e < sel.size(); ++e) bias[e] = sel[e] - 0.5f;
    const Routing r = route(c, logits.data(), bias);
    for (float w : r.weights)
      EXPECT_EQ(w, 1.0f / float(c.num_experts_per_tok)) << "weights from unbiased 0.5s";
    return r.experts;
  };
  // Groups {0,1} {2,3} {4,5} {6,7} score 1.0, 1.25, 1.125, 0.875.
  const std::vector<float> sel = {0.875f,  0.125f,  0.625f,  0.625f,
                                  0.5625f, 0.5625f, 0.8125f, 0.0625f};
  using V = std::vector<int32_t>;
  EXPECT_EQ(experts(grouped(8, 2, 1, 1), sel), (V{0, 6})) << "ungrouped: the two best experts";
  EXPECT_EQ(experts(grouped(8, 2, 4, 4), sel), (V{0, 6})) << "every group kept: as ungrouped";
  EXPECT_EQ(experts(grouped(8, 2, 4, 2), sel), (V{2, 3}))
      << "groups 1, 2 kept: the two best experts are out";
  EXPECT_EQ(experts(grouped(8, 2, 4, 3), sel), (V{0, 2}))
      << "groups 0, 1, 2 kept; expert tie 2/3 to the lowest";
  EXPECT_EQ(experts(grouped(8, 4, 4, 2), sel), (V{2, 3, 4, 5}))
      << "k = all experts of the kept groups";
  EXPECT_EQ(experts(grouped(8, 2, 2, 1), sel), (V{0, 2})) << "groups {0..3} 1.5 vs {4..7} 1.375";
  // A group-score tie at the cut (groups 2 and 3 both 1.125) keeps the lower group: experts 2, 3,
  // not 6, 2 as keeping group 3 would give.
  std::vector<float> tie = sel;
  tie[7] = 0.3125f;
  EXPECT_EQ(experts(grouped(8, 2, 4, 2), tie), (V{2, 3})) << "group tie to the lowest group index";
  // The dropped groups' experts are out even against a negative biased score in a kept group
  // (vLLM/SGLang/llama.cpp; Hugging Face fills 0.0 and would pick {0, 2}: moe.cpp
  // kDroppedGroupScore).
  EXPECT_EQ(experts(grouped(4, 2, 2, 1), {0.875f, -0.125f, 0.3125f, 0.3125f}), (V{0, 1}));
}

TEST(BlockMoE, RouteNormAndScalingMatchScalar) {
  Measured m("route weights relative");
  struct Cfg {
    int64_t E, k;
  };
  for (Cfg g : {Cfg{6, 1}, Cfg{8, 2}, Cfg{13, 3}, Cfg{16, 4}, Cfg{128, 6}, Cfg{5, 5}})
    for (bool norm : {true, false})
      for (float rsf : {1.0f, 2.5f, 0.75f})
        for (uint64_t seed : {1, 2, 3}) {
          const auto c = moe_config(g.E, g.k, norm, rsf);
          const std::string what =
              fmt::format("E={} k={} norm_topk_prob={} routed_scaling_factor={} seed={}", g.E, g.k, norm, rsf, seed);
          // Distinct logits on a grid (no accidental near-ties), biases on a coarser grid.
          std::vector<float> logits(static_cast<size_t>(g.E)), bias(static_cast<size_t>(g.E));
          std::vector<int> perm(static_cast<size_t>(g.E));
          std::iota(perm.begin(), perm.end(), 0);
          Rng rng(sub(seed, 300 + uint64_t(g.E)));
          for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.next() % i]);
          for (int64_t e = 0; e < g.E; ++e) {
            logits[size_t(e)] = -4.0f + 8.0f * float(perm[size_t(e)]) / float(g.E);
            bias[size_t(e)] = float(int(rng.next() % 9) - 4) * 0.0625f + 0.001953125f * float(e);
          }
          const Vec ld = widen(logits);
          ASSERT_GT(route_ref(c, ld.data(), bias.data()).margin, 1e-4) << what << ": test data has a near-tie";
          expect_route(c, logits, bias, what, &m);
          if (HasFatalFailure()) return;
        }
}

namespace {

struct MoeShape {
  int64_t H, E, k, F, FS;  // FS = 0: no shared expert
  bool norm;
  float rsf;
};

std::string str(const MoeShape& s) {
  return fmt::format("H={} E={} k={} F={} FS={} norm_topk_prob={} routed_scaling_factor={}", s.H, s.E, s.k, s.F, s.FS,
                     s.norm, s.rsf);
}

// §5.3 a non-gated relu² MLP: down(relu(up·x)²).
Vec relu2_mlp_ref(const Vec& up, const Vec& down, int64_t H, int64_t F, const double* x) {
  Vec h = matvec(up, F, H, x);
  for (double& v : h) v = v > 0.0 ? v * v : 0.0;
  return matvec(down, H, F, h.data());
}

}  // namespace

TEST(BlockMoE, ForwardMatchesScalar) {
  // Measured worst scale-relative error vs double: 3.5e-7; bound 4e-6 (~11x margin).
  Measured m("moe_forward vs double");
  const MoeShape shapes[] = {
      {24, 8, 2, 12, 20, true, 2.5f}, {37, 6, 3, 13, 0, false, 1.0f}, {50, 16, 4, 19, 33, true, 2.5f},
      {17, 5, 5, 9, 11, true, 1.0f},  {64, 8, 2, 32, 48, true, 2.5f}, {31, 7, 1, 23, 0, true, 0.5f},
  };
  for (const auto& s : shapes)
    for (uint64_t seed : {1, 2})
      for (int64_t T : {1, 5}) {
        const int threads = T > 1 ? 2 : 1;
        const std::string what = fmt::format("{} T={} seed={} threads={}", str(s), T, seed, threads);
        const auto c = moe_config(s.E, s.k, s.norm, s.rsf);
        io::ModelConfig cc = c;
        cc.hidden_size = s.H;
        const double au = 1.5 / std::sqrt(double(s.H));
        const auto gate = uniform(size_t(s.E * s.H), sub(seed, 400), -au, au);
        const auto bias = uniform(size_t(s.E), sub(seed, 401), -0.1, 0.1);
        std::vector<std::vector<float>> ups, downs;
        for (int64_t e = 0; e <= s.E; ++e) {  // e == E: the shared expert
          const int64_t F = e == s.E ? s.FS : s.F;
          ups.push_back(uniform(size_t(F * s.H), sub(seed, 410 + 2 * uint64_t(e)), -au, au));
          downs.push_back(uniform(size_t(s.H * F), sub(seed, 411 + 2 * uint64_t(e)), -1.0 / std::sqrt(double(F + 1)),
                                  1.0 / std::sqrt(double(F + 1))));
        }
        MoEWeights w;
        w.gate = f32_weight(gate, s.E, s.H);
        w.correction_bias = bias;
        for (int64_t e = 0; e < s.E; ++e)
          w.experts.push_back({f32_weight(ups[size_t(e)], s.F, s.H), f32_weight(downs[size_t(e)], s.H, s.F)});
        if (s.FS > 0) w.shared.push_back({f32_weight(ups.back(), s.FS, s.H), f32_weight(downs.back(), s.H, s.FS)});

        const auto hn = uniform(size_t(T * s.H), sub(seed, 402));
        std::vector<float> out(size_t(T * s.H), NAN);
        moe_forward(w, cc, hn.data(), T, out.data(), ThreadConfig{threads});

        const Vec gd = widen(gate);
        for (int64_t t = 0; t < T; ++t) {
          const Vec x = widen(hn.data() + t * s.H, size_t(s.H));
          const Vec logits = matvec(gd, s.E, s.H, x.data());
          const RouteRef r = route_ref(c, logits.data(), bias.data());
          ASSERT_GT(r.margin, 1e-4) << what << " t=" << t << ": test data has a near-tie";
          Vec o(size_t(s.H), 0.0);
          for (size_t j = 0; j < r.experts.size(); ++j) {
            const auto e = size_t(r.experts[j]);
            const Vec y = relu2_mlp_ref(widen(ups[e]), widen(downs[e]), s.H, s.F, x.data());
            for (int64_t i = 0; i < s.H; ++i) o[size_t(i)] += r.weights[j] * y[size_t(i)];
          }
          if (s.FS > 0) {
            const Vec y = relu2_mlp_ref(widen(ups.back()), widen(downs.back()), s.H, s.FS, x.data());
            for (int64_t i = 0; i < s.H; ++i) o[size_t(i)] += y[size_t(i)];
          }
          const Err e = max_err(out.data() + t * s.H, o);
          m.add(e.err);
          EXPECT_LE(e.err, 4e-6) << what << ": row t=" << t << " experts " << str(r.experts) << " worst at " << e.at
                                 << " got " << out[size_t(t * s.H) + e.at] << " want " << o[e.at];
        }
      }
}

// ---- Mamba-2 mixer end to end ------------------------------------------------------------------

namespace {

// The whole mixer (§3.2–§3.7) over successive calls, carrying its own conv window and SSM state.
struct MambaMixerRef {
  const Mamba2Weights& w;
  Vec in_d, out_d;
  std::vector<float> window;  // last K−1 raw xBC rows, oldest first
  Vec S;                      // [NH, P, N]

  MambaMixerRef(const Mamba2Weights& mw, const std::vector<float>& in_w, const std::vector<float>& out_w)
      : w(mw), in_d(widen(in_w)), out_d(widen(out_w)) {
    window.assign(size_t((w.dims.K - 1) * w.dims.CD), 0.0f);
    S.assign(size_t(w.dims.NH * w.dims.P * w.dims.N), 0.0);
  }

  Vec forward(const float* hn, int64_t T) {
    const Mamba2Dims& d = w.dims;
    const int64_t H = d.H;
    // §3.2 in_proj and split z | xBC | dt (rounded to f32: the engine's activations are f32).
    std::vector<float> proj(static_cast<size_t>(T * d.DP));
    for (int64_t t = 0; t < T; ++t) {
      const Vec x = widen(hn + t * H, size_t(H));
      const Vec p = matvec(in_d, d.DP, H, x.data());
      for (int64_t i = 0; i < d.DP; ++i) proj[size_t(t * d.DP + i)] = float(p[size_t(i)]);
    }
    auto raw = [&](int64_t t, int64_t c) { return double(proj[size_t(t * d.DP + d.DI + c)]); };
    const Vec conv = conv_ref(w, window.data(), raw, T);  // §3.3
    std::vector<float> xbc(conv.begin(), conv.end()), dt(static_cast<size_t>(T * d.NH));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < d.NH; ++h)  // §3.4
        dt[size_t(t * d.NH + h)] =
            dt_ref(proj[size_t(t * d.DP + d.DI + d.CD + h)], w.dt_bias[size_t(h)], w.dt_min, w.dt_max);
    // §3.3 decode form: the window keeps the last K−1 raw rows.
    std::vector<float> all(window);
    for (int64_t t = 0; t < T; ++t)
      all.insert(all.end(), proj.begin() + t * d.DP + d.DI, proj.begin() + t * d.DP + d.DI + d.CD);
    window.assign(all.end() - (d.K - 1) * d.CD, all.end());
    const Vec y = scan_ref(w, xbc.data(), dt.data(), T, S);  // §3.5
    const std::vector<float> yf(y.begin(), y.end());
    const Vec yn = gated_norm_ref(w, yf.data(), proj.data(), d.DP, T);  // §3.7
    Vec out(static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t) {
      const Vec o = matvec(out_d, H, d.DI, yn.data() + t * d.DI);
      std::copy(o.begin(), o.end(), out.begin() + t * H);
    }
    return out;
  }
};

struct MambaLayer {
  Mamba2Weights w;
  std::vector<float> in_w, out_w;  // the F32 projections w.in_proj / w.out_proj point into
  MambaLayer(const MambaShape& s, uint64_t seed, int64_t H) : w(mamba_weights(s, seed, H)) {
    w.chunk_size = 8;
    in_w = uniform(size_t(w.dims.DP * H), sub(seed, 500), -0.35, 0.35);
    out_w = uniform(size_t(H * w.dims.DI), sub(seed, 501), -0.3, 0.3);
    w.in_proj = f32_weight(in_w, w.dims.DP, H);
    w.out_proj = f32_weight(out_w, H, w.dims.DI);
  }
  MambaLayer(const MambaLayer&) = delete;
  MambaState fresh_state() const {
    MambaState st;
    st.conv.resize(size_t((w.dims.K - 1) * w.dims.CD));
    st.ssm.resize(size_t(w.dims.NH * w.dims.P * w.dims.N));
    return st;
  }
};

const MambaShape kMixerShapes[] = {{8, 16, 2, 16, 4}, {6, 5, 3, 7, 4}, {4, 9, 1, 10, 3}};

}  // namespace

TEST(BlockMamba2, ForwardMatchesScalar) {
  // in_proj → conv → dt → scan → gated norm → out_proj (§3.2–§3.7), over two successive calls so the
  // second starts from the carried conv window and SSM state; T = 20 takes the chunked SSD path.
  // Measured worst scale-relative error vs double (output, SSM state, conv window): 4.7e-7; bound
  // 5e-6 (~10x margin).
  Measured m("mamba2_forward vs double");
  struct Calls {
    int64_t T1, T2;
  };
  for (const auto& s : kMixerShapes)
    for (Calls calls : {Calls{1, 1}, Calls{3, 2}, Calls{20, 5}, Calls{5, 20}})
      for (uint64_t seed : {1, 2}) {
        const int64_t H = 23;
        const MambaLayer L(s, seed, H);
        const Mamba2Dims& d = L.w.dims;
        const std::string what =
            fmt::format("{} H={} T1={} T2={} chunk=8 seed={}", str(s), H, calls.T1, calls.T2, seed);
        MambaState st = L.fresh_state();
        MambaMixerRef ref(L.w, L.in_w, L.out_w);
        int call = 0;
        for (int64_t T : {calls.T1, calls.T2}) {
          ++call;
          const auto hn = uniform(size_t(T * H), sub(seed, 510 + uint64_t(call)));
          std::vector<float> out(size_t(T * H), NAN);
          mamba2_forward(L.w, hn.data(), T, out.data(), st, nullptr, Mamba2Options{}, ThreadConfig{2});
          const Vec want = ref.forward(hn.data(), T);
          const Err e = max_err(out.data(), want), es = max_err(st.ssm.data(), ref.S);
          // The engine's raw rows come from its own in_proj, so the window matches to rounding.
          const Err ew = max_err(st.conv.data(), widen(ref.window));
          m.add(std::max({e.err, es.err, ew.err}));
          EXPECT_LE(e.err, 5e-6) << what << " call " << call << ": output worst at t=" << e.at / H << " i=" << e.at % H
                                 << " got " << out[e.at] << " want " << want[e.at];
          EXPECT_LE(es.err, 5e-6) << what << " call " << call << ": SSM state worst at head=" << es.at / (d.P * d.N);
          EXPECT_LE(ew.err, 5e-6) << what << " call " << call
                                  << ": conv window is not the last K−1 raw rows (worst at row " << ew.at / d.CD
                                  << " c=" << ew.at % d.CD << ")";
        }
      }
}

TEST(BlockMamba2, ReplayKeepsExactlyAPrefix) {
  // A recorded round of T rows, then mamba2_replay(keep): the state must be the scalar mixer's state
  // after only the first `keep` rows (speculative rollback). Measured worst scale-relative error
  // (SSM state, conv window): 2.7e-7; bound 3e-6 (~11x margin).
  Measured m("mamba2_replay vs double");
  for (const auto& s : kMixerShapes)
    for (uint64_t seed : {1, 2})
      for (int64_t keep : {0, 1, 2, 4, 5}) {
        const int64_t H = 19, T0 = 3, T = 5;
        const MambaLayer L(s, seed, H);
        const Mamba2Dims& d = L.w.dims;
        const std::string what =
            fmt::format("{} H={} prefill={} round={} keep={} seed={}", str(s), H, T0, T, keep, seed);
        MambaState st = L.fresh_state();
        MambaMixerRef ref(L.w, L.in_w, L.out_w);
        // A plain prefill first, so the round starts from a non-zero conv window and state.
        const auto h0 = uniform(size_t(T0 * H), sub(seed, 520));
        std::vector<float> out(size_t(T * H));
        mamba2_forward(L.w, h0.data(), T0, out.data(), st, nullptr, Mamba2Options{}, ThreadConfig{1});
        ref.forward(h0.data(), T0);
        const auto h1 = uniform(size_t(T * H), sub(seed, 521));
        MambaJournal j;
        mamba2_forward(L.w, h1.data(), T, out.data(), st, &j, Mamba2Options{.record = true}, ThreadConfig{1});
        mamba2_replay(L.w, j, keep, st, ThreadConfig{2});
        ref.forward(h1.data(), keep);
        const Err es = max_err(st.ssm.data(), ref.S), ew = max_err(st.conv.data(), widen(ref.window));
        m.add(std::max(es.err, ew.err));
        EXPECT_LE(es.err, 3e-6) << what << ": SSM state worst at head=" << es.at / (d.P * d.N) << " got "
                                << st.ssm[es.at] << " want " << ref.S[es.at];
        EXPECT_LE(ew.err, 3e-6) << what << ": conv window worst at row " << ew.at / d.CD << " c=" << ew.at % d.CD;
      }
}

// ---- 8. MTP step -------------------------------------------------------------------------------

namespace {

// Tensor values widened to double straight from the safetensors file (bf16 → f32 is exact).
Vec tensor(const io::TensorStore& st, const std::string& name) {
  const io::TensorView& v = st.get(name);
  Vec out(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (v.dtype == io::DType::BF16) {
      uint16_t b;
      std::memcpy(&b, v.data + 2 * i, 2);
      out[i] = bf16_to_f32(b);
    } else if (v.dtype == io::DType::F32) {
      float f;
      std::memcpy(&f, v.data + 4 * i, 4);
      out[i] = f;
    } else {
      ADD_FAILURE() << name << ": unexpected dtype " << io::dtype_name(v.dtype);
      return out;
    }
  }
  return out;
}

// nemotron_h.md §6.2, one MTP module with sub-layers [attention, MoE], read from the checkpoint.
struct MtpRef {
  const io::ModelConfig& c;
  int64_t H, E, F, FS;
  double eps;
  Vec embed, enorm, hnorm, eh, norm0, norm1, final_norm, gate;
  std::vector<float> bias;
  AttnRefWeights attn;
  std::vector<Vec> up, down;  // E routed experts, then the shared one
  std::vector<Vec> K, V;      // the module's own KV cache
  double min_margin = INFINITY;

  MtpRef(const io::TensorStore& st, const io::ModelConfig& cfg) : c(cfg) {
    H = c.hidden_size, E = c.n_routed_experts, F = c.moe_intermediate_size;
    FS = c.moe_shared_expert_intermediate_size * c.n_shared_experts;
    eps = c.norm_eps;
    const std::string l0 = "mtp.layers.0.", l1 = "mtp.layers.1.";
    embed = tensor(st, "backbone.embeddings.weight");
    enorm = tensor(st, l0 + "enorm.weight");
    hnorm = tensor(st, l0 + "hnorm.weight");
    eh = tensor(st, l0 + "eh_proj.weight");
    norm0 = tensor(st, l0 + "norm.weight");
    attn = {tensor(st, l0 + "mixer.q_proj.weight"), tensor(st, l0 + "mixer.k_proj.weight"),
            tensor(st, l0 + "mixer.v_proj.weight"), tensor(st, l0 + "mixer.o_proj.weight")};
    norm1 = tensor(st, l1 + "norm.weight");
    gate = tensor(st, l1 + "mixer.gate.weight");
    const std::string bn = l1 + "mixer.gate.e_score_correction_bias";
    bias.assign(size_t(E), 0.0f);
    if (st.has(bn)) {
      const Vec b = tensor(st, bn);
      for (int64_t e = 0; e < E; ++e) bias[size_t(e)] = float(b[size_t(e)]);
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = l1 + "mixer.experts." + std::to_string(e);
      up.push_back(tensor(st, p + ".up_proj.weight"));
      down.push_back(tensor(st, p + ".down_proj.weight"));
    }
    if (FS > 0) {
      up.push_back(tensor(st, l1 + "mixer.shared_experts.up_proj.weight"));
      down.push_back(tensor(st, l1 + "mixer.shared_experts.down_proj.weight"));
    }
    final_norm = tensor(st, l1 + "final_layernorm.weight");
  }

  // One slot: (h_i, t_{i+1}) → post-final_layernorm hidden.
  Vec step(const float* h, int32_t token) {
    // x0 = eh_proj([enorm(embed(t)); hnorm(h)]): embedding first.
    const Vec e = rms_norm_ref(embed.data() + int64_t(token) * H, enorm.data(), H, eps);
    const Vec hd = widen(h, size_t(H));
    const Vec hh = rms_norm_ref(hd.data(), hnorm.data(), H, eps);
    Vec cat(e);
    cat.insert(cat.end(), hh.begin(), hh.end());
    Vec x = matvec(eh, H, 2 * H, cat.data());
    // x1 = x0 + Attn(RMSNorm(x0)) over the module's own cache (§4).
    const Vec a_in = rms_norm_ref(x.data(), norm0.data(), H, eps);
    const AttnShape as{H, c.num_attention_heads, c.num_key_value_heads, c.head_dim};
    const Vec a = attention_row_ref(as, attn, a_in.data(), K, V);
    for (int64_t i = 0; i < H; ++i) x[size_t(i)] += a[size_t(i)];
    // x2 = x1 + MoE(RMSNorm(x1)) (§5).
    const Vec m_in = rms_norm_ref(x.data(), norm1.data(), H, eps);
    const Vec logits = matvec(gate, E, H, m_in.data());
    const RouteRef r = route_ref(c, logits.data(), bias.data());
    min_margin = std::min(min_margin, r.margin);
    for (size_t j = 0; j < r.experts.size(); ++j) {
      const auto ex = size_t(r.experts[j]);
      const Vec y = relu2_mlp_ref(up[ex], down[ex], H, F, m_in.data());
      for (int64_t i = 0; i < H; ++i) x[size_t(i)] += r.weights[j] * y[size_t(i)];
    }
    if (FS > 0) {
      const Vec y = relu2_mlp_ref(up.back(), down.back(), H, FS, m_in.data());
      for (int64_t i = 0; i < H; ++i) x[size_t(i)] += y[size_t(i)];
    }
    return rms_norm_ref(x.data(), final_norm.data(), H, eps);
  }
};

struct MtpFixture {
  test::TempDir dir;
  std::unique_ptr<NemotronH> target;
  std::unique_ptr<MtpHead> head;
};

MtpFixture& mtp_fixture() {
  static std::unique_ptr<MtpFixture> f;
  if (!f) {
    f = std::make_unique<MtpFixture>();
    synth::SynthOptions o;
    o.seed = 11;
    o.tokenizer = false;
    synth::write_checkpoint(synth::preset_config("tiny-a"), f->dir.path(), o);
    f->target = NemotronH::load(f->dir.path());
    f->head = MtpHead::load(*f->target);
  }
  return *f;
}

}  // namespace

TEST(BlockMtp, ForwardMatchesScalar) {
  // tiny-a (H=64, 4/2 heads of 16, 8 experts top-2, shared expert), bf16 weights. Measured worst
  // scale-relative error vs double: 2.2e-7; bound 2e-6 (~9x margin).
  Measured m("MtpHead::forward vs double");
  MtpFixture& f = mtp_fixture();
  const io::ModelConfig& c = f.target->config();
  const int64_t H = c.hidden_size;
  for (uint64_t seed : {1, 2, 3}) {
    MtpRef ref(f.target->store(), c);
    MtpState st = f.head->new_state();
    int64_t slot = 0;
    // Several calls: a prefill-like batch, then decode-like steps over the growing MTP KV cache.
    for (int64_t T : {3, 1, 2}) {
      const std::string what = fmt::format("tiny-a seed={} slots {}..{} (T={})", seed, slot, slot + T - 1, T);
      auto hidden = uniform(size_t(T * H), sub(seed, 600 + uint64_t(slot)), -2.0, 2.0);
      std::vector<int32_t> tokens(static_cast<size_t>(T));
      Rng rng(sub(seed, 700 + uint64_t(slot)));
      for (auto& t : tokens) t = int32_t(rng.next() % uint64_t(c.vocab_size));
      std::vector<float> out(size_t(T * H), NAN);
      f.head->forward(st, hidden.data(), tokens, out.data(), ThreadConfig{T > 1 ? 2 : 1});
      EXPECT_EQ(st.n_past, slot + T) << what;
      for (int64_t t = 0; t < T; ++t) {
        const Vec want = ref.step(hidden.data() + t * H, tokens[size_t(t)]);
        ASSERT_GT(ref.min_margin, 1e-4) << what << ": test data has a routing near-tie";
        const Err e = max_err(out.data() + t * H, want);
        m.add(e.err);
        EXPECT_LE(e.err, 2e-6) << what << ": slot " << slot + t << " token " << tokens[size_t(t)] << " worst at "
                               << e.at << " got " << out[size_t(t * H) + e.at] << " want " << want[e.at];
      }
      slot += T;
    }
  }
}
