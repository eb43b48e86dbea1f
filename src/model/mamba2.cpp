#include "model/mamba2.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

using kernels::dot;
using layout::Role;

Mamba2Dims::Mamba2Dims(const io::ModelConfig& c)
    : H(c.hidden_size),
      NH(c.mamba_num_heads),
      P(c.mamba_head_dim),
      G(c.n_groups),
      N(c.ssm_state_size),
      K(c.conv_kernel),
      DI(c.mamba_inner()),
      CD(c.conv_dim()),
      DP(c.in_proj_dim()) {}

Mamba2Weights Mamba2Weights::bind(const WeightBinder& b, const layout::Block& L,
                                  const io::ModelConfig& c) {
  Mamba2Weights w;
  w.dims = Mamba2Dims(c);
  // ssm_steps_head keeps B·dt for 8 rows on the stack.
  if (w.dims.N > 512) fail("ssm_state_size {} > 512 is not supported", w.dims.N);
  w.in_proj = b.linear(L.at(Role::MambaInProj));
  w.out_proj = b.linear(L.at(Role::MambaOutProj));
  // By tap, so that each tap's loop over channels reads its weights in a row (vectorized; [CD, K]
  // took them K floats apart).
  const std::vector<float> conv = b.values(L.at(Role::MambaConv));
  w.conv_taps.resize(conv.size());
  for (int64_t ch = 0; ch < w.dims.CD; ++ch)
    for (int64_t k = 0; k < w.dims.K; ++k)
      w.conv_taps[size_t(k * w.dims.CD + ch)] = conv[size_t(ch * w.dims.K + k)];
  const layout::TensorSpec* bias = L.find(Role::MambaConvBias);
  w.conv_b = bias ? b.values(*bias) : std::vector<float>(size_t(w.dims.CD), 0.0f);
  w.dt_bias = b.values(L.at(Role::MambaDtBias));
  w.A = b.values(L.at(Role::MambaALog));
  for (auto& a : w.A) a = -std::exp(a);
  w.D = b.values(L.at(Role::MambaD));
  w.norm_w = b.values(L.at(Role::MambaNorm));
  w.norm_eps = c.norm_eps;
  w.dt_min = c.dt_limit_min;
  w.dt_max = c.dt_limit_max;
  w.chunk_size = c.chunk_size;
  return w;
}

void conv1d_silu(const Mamba2Weights& w, const float* window, const ProjRows& raw, int64_t T,
                 float* out, const ThreadConfig& tc) {
  const Mamba2Dims& d = w.dims;
  const int64_t KW = d.K - 1;
  // Per channel: the bias, then taps k = 0..K-1 added in turn, then SiLU (the order mamba2.h
  // documents), each step a loop over the block's channels that the compiler vectorizes (the taps
  // as the inner loop took ~9 ns a channel); blocks of 2048 / T channels, so a decode step's 6144
  // run on two threads. Per 52-layer Mamba layer, 2 threads, Zen 5: T = 1 46 -> 38 us and T = 8
  // 285 -> 232 us by the grain, then 33-37 and 143-209 us by the channel loops; the weights by tap
  // (conv_taps) T = 8 130 -> 109 us (tools/bench/probe_scan.cpp, 2026-12-06), the rest SiLU; SiLU
  // in vectors (kernels::silu_inplace, same bits), Xeon: T = 1 21-26 -> 9-12 us, T = 8 129-176 ->
  // 58-68.
  parallel_for(tc, d.CD, std::max<int64_t>(256, 2048 / T), [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + t * d.CD;
      for (int64_t ch = c0; ch < c1; ++ch) o[ch] = w.conv_b[ch];
      for (int64_t k = 0; k < d.K; ++k) {
        const int64_t src = t - KW + k;  // < 0: a row of the window
        const float* v = src < 0 ? window + (KW + src) * d.CD : raw.xBC(src);
        const float* wk = w.conv_taps.data() + k * d.CD;
        for (int64_t ch = c0; ch < c1; ++ch) o[ch] = o[ch] + wk[ch] * v[ch];
      }
      kernels::silu_inplace(o + c0, c1 - c0);
    }
  });
}

void shift_conv_window(const Mamba2Dims& d, Buffer<float>& window, const float* raw_xbc,
                       int64_t stride, int64_t T) {
  // In place, without a fresh buffer per layer and step: rows still in the window move up first,
  // then the new rows follow.
  const int64_t KW = d.K - 1, keep = std::max<int64_t>(0, KW - T);
  if (keep > 0)
    std::memmove(window.data(), window.data() + (KW - keep) * d.CD,
                 size_t(keep * d.CD) * sizeof(float));
  for (int64_t r = keep; r < KW; ++r)
    std::memcpy(window.data() + r * d.CD, raw_xbc + (T - KW + r) * stride,
                size_t(d.CD) * sizeof(float));
}

float dt_from_raw(const Mamba2Weights& w, float raw, int64_t head) {
  float dt = kernels::softplus(raw + w.dt_bias[head]);
  // time_step_limit (0, inf) is a no-op; only a configured limit clamps.
  if (w.dt_min > 0.0f || std::isfinite(w.dt_max)) dt = std::clamp(dt, w.dt_min, w.dt_max);
  return dt;
}

void ssm_steps_head(const float* from, float* S, int64_t T, const HeadRows& rows, float A, float D,
                    int64_t P, int64_t N) {
  // Up to 8 rows at a time: their exp(dt·A) and B·dt on the stack (N <= 512, checked at load).
  constexpr int64_t kRows = 8;
  float dA[kRows], dtB[kRows * 512];
  for (int64_t t0 = 0; t0 < T; t0 += kRows) {
    const int64_t n = std::min(kRows, T - t0);
    for (int64_t i = 0; i < n; ++i) {
      const float dt = rows.dt[(t0 + i) * rows.dt_stride];
      dA[i] = std::exp(dt * A);
      const float* B = rows.B + (t0 + i) * rows.stride;
      for (int64_t k = 0; k < N; ++k) dtB[i * N + k] = B[k] * dt;
    }
    const float* x = rows.x + t0 * rows.stride;
    if (!rows.y) {  // S[p][n] = S[p][n]·dA + dtB[n]·x[p], step by step
      if (t0 == 0 && from != S) std::copy_n(from, P * N, S);
      for (int64_t i = 0; i < n; ++i)
        kernels::decay_outer_add(S, P, N, dA[i], dtB + i * N, x + i * rows.stride);
      continue;
    }
    // The same update, then y[p] = S[p]·C + D·x[p], each dot bitwise dot()'s, each state row read
    // and written once for the n steps.
    float* y = rows.y + t0 * rows.y_stride;
    kernels::decay_outer_add_dot_steps(
        t0 == 0 ? from : S, S, P, N,
        {n, dA, dtB, N, x, rows.stride, rows.C + t0 * rows.stride, rows.stride, y, rows.y_stride});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < P; ++p)
        y[i * rows.y_stride + p] = y[i * rows.y_stride + p] + D * x[i * rows.stride + p];
  }
}

void ssm_step_head(float* S, const float* x, const float* B, const float* C, float dt, float A,
                   float D, int64_t P, int64_t N, float* y) {
  ssm_steps_head(S, S, 1, HeadRows{x, B, C, 0, &dt, 0, y, 0}, A, D, P, N);
}

void ssm_scan_recurrent(const Mamba2Weights& w, const XbcRows& xbc, const float* dt, int64_t T,
                        float* S, float* y, const ThreadConfig& tc, float* S_out) {
  const Mamba2Dims& d = w.dims;
  // Heads are independent, so threads split heads; each head runs its rows in order.
  parallel_for(tc, d.NH, std::max<int64_t>(1, 65536 / (T * d.P * d.N)),
               [&](int64_t h0, int64_t h1) {
                 for (int64_t h = h0; h < h1; ++h) {
                   const int64_t g = d.group_of(h);
                   float* Sh = S + h * d.P * d.N;
                   const HeadRows rows{xbc.x(0, h), xbc.B(0, g), xbc.C(0, g), d.CD,
                                       dt + h,      d.NH,        y + h * d.P, d.DI};
                   ssm_steps_head(Sh, S_out ? S_out + h * d.P * d.N : Sh, T, rows, w.A[h], w.D[h],
                                  d.P, d.N);
                 }
               });
}

namespace {

// One SSD chunk [t0, t1) of one head (nemotron_h.md §3.6), with Gm[i][j] = C_i·B_j of its group:
//   y_i = exp(cs_i)·(S·C_i) + Σ_{j≤i} Gm[i][j]·exp(cs_i − cs_j)·dt_j·x_j + D·x_i,   cs =
//   cumsum(dt·A) S  ← exp(cs_last)·S + Σ_j exp(cs_last − cs_j)·(dt_j·x_j) ⊗ B_j
void ssd_chunk_head(const Mamba2Weights& w, const XbcRows& xbc, const float* dt_all, int64_t h,
                    int64_t t0, int64_t t1, const float* Gm, float* S, float* y,
                    std::vector<float>& scratch) {
  const Mamba2Dims& d = w.dims;
  const int64_t Q = t1 - t0, P = d.P, N = d.N, g = d.group_of(h);
  const float A = w.A[h], Dh = w.D[h];
  scratch.resize(size_t(3 * Q + Q * P));
  float* cs = scratch.data();
  float* coef = cs + Q;  // row i's Gm[i][j]·exp(cs_i − cs_j); then w_j = exp(cs_last − cs_j)
  float* a = coef + Q;   // the state's coefficients w_j·u_j[p] of one p
  float* u = a + Q;      // u_j = dt_j · x_j
  float run = 0.0f;
  for (int64_t i = 0; i < Q; ++i) {
    const float dt = dt_all[(t0 + i) * d.NH + h];
    run += dt * A;
    cs[i] = run;
    const float* xi = xbc.x(t0 + i, h);
    for (int64_t p = 0; p < P; ++p) u[i * P + p] = dt * xi[p];
  }
  for (int64_t i = 0; i < Q; ++i) {
    const float* Ci = xbc.C(t0 + i, g);
    const float* xi = xbc.x(t0 + i, h);
    float* yi = y + (t0 + i) * d.DI + h * P;
    const float e_in = std::exp(cs[i]);
    kernels::dot_rows(S, N, P, Ci, N, yi);  // S[p]·C_i, side by side
    for (int64_t p = 0; p < P; ++p) yi[p] = e_in * yi[p];
    for (int64_t j = 0; j <= i; ++j) coef[j] = Gm[i * Q + j] * std::exp(cs[i] - cs[j]);
    kernels::axpy_rows(coef, i + 1, u, P, yi, P);  // += coef_j·u_j in j order
    for (int64_t p = 0; p < P; ++p) yi[p] += Dh * xi[p];
  }
  const float e_last = std::exp(cs[Q - 1]);
  for (int64_t k = 0; k < P * N; ++k) S[k] *= e_last;
  // S[p] += (w_j·u_j[p])·B_j in j order; the B_j rows are d.CD apart.
  for (int64_t j = 0; j < Q; ++j) coef[j] = std::exp(cs[Q - 1] - cs[j]);
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t j = 0; j < Q; ++j) a[j] = coef[j] * u[j * P + p];
    kernels::axpy_rows(a, Q, xbc.B(t0, g), d.CD, S + p * N, N);
  }
}

}  // namespace

void ssm_scan_chunked(const Mamba2Weights& w, const XbcRows& xbc, const float* dt, int64_t T,
                      float* S, float* y, const ThreadConfig& tc) {
  const Mamba2Dims& d = w.dims;
  const int64_t Qmax = w.chunk_size;
  std::vector<float> Gm(size_t(d.G * Qmax * Qmax));
  for (int64_t t0 = 0; t0 < T; t0 += Qmax) {
    const int64_t t1 = std::min(T, t0 + Qmax), Q = t1 - t0;
    // Gm[g][i][j] = C_i · B_j (j <= i), shared by the heads of group g.
    parallel_for(tc, d.G * Q, 1, [&](int64_t a, int64_t b) {
      for (int64_t gi = a; gi < b; ++gi) {
        const int64_t g = gi / Q, i = gi % Q;
        for (int64_t j = 0; j <= i; ++j)
          Gm[(g * Qmax + i) * Qmax + j] = dot(xbc.C(t0 + i, g), xbc.B(t0 + j, g), d.N);
      }
    });
    parallel_for(tc, d.NH, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> scratch, Gq(size_t(Q * Q));  // Gm of the current group, packed [Q, Q]
      int64_t cur_g = -1;
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t g = d.group_of(h);
        if (g != cur_g) {
          for (int64_t i = 0; i < Q; ++i)
            for (int64_t j = 0; j <= i; ++j) Gq[i * Q + j] = Gm[(g * Qmax + i) * Qmax + j];
          cur_g = g;
        }
        ssd_chunk_head(w, xbc, dt, h, t0, t1, Gq.data(), S + h * d.P * d.N, y, scratch);
      }
    });
  }
}

void gated_group_rmsnorm(const Mamba2Weights& w, float* y, const ProjRows& proj, int64_t T,
                         const ThreadConfig& tc) {
  const Mamba2Dims& d = w.dims;
  const int64_t gs = d.DI / d.G;  // groups of DI/G contiguous channels
  // A group (512 channels: a SiLU each, then an rms_norm) is ~1.5 us: two threads from 2 groups
  // (per 52-layer Mamba layer, 2 threads, Zen 5: T = 1 14 -> 11 us, T = 8 103 -> 55 us).
  parallel_for(tc, T * d.G, 2, [&](int64_t a, int64_t b) {
    for (int64_t tg = a; tg < b; ++tg) {
      const int64_t t = tg / d.G, g = tg % d.G;
      float* yr = y + t * d.DI + g * gs;
      const float* zr = proj.z(t) + g * gs;
      kernels::mul_silu(yr, zr, gs);
      kernels::rms_norm(yr, w.norm_w.data() + g * gs, gs, w.norm_eps, yr);
    }
  });
}

namespace {

// Before the round: the state; per row: the raw xBC (conv window replay) and the recurrence inputs.
void journal_round(const Mamba2Dims& d, const MambaState& st, const ProjRows& proj,
                   const XbcRows& xbc, const float* dt, int64_t T, MambaJournal& j) {
  j.conv0.resize(st.conv.size());
  std::memcpy(j.conv0.data(), st.conv.data(), st.conv.bytes());
  j.ssm0.resize(st.ssm.size());  // the scan's output, then swapped with the state
  // The rows' buffers only grow: a Buffer reallocates and zeroes on every new size, and rounds
  // change width (--spec auto, the verify curve: dt, these copies and the reallocations took
  // 50-66 us per 52-layer Mamba layer at 2-8 rows, Zen 5).
  const auto at_least = [](Buffer<float>& b, int64_t n) {
    if (b.size() < size_t(n)) b.resize(size_t(n));
  };
  at_least(j.xbc, T * d.CD);
  at_least(j.x, T * d.DI);
  at_least(j.B, T * d.G * d.N);
  at_least(j.dt, T * d.NH);
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(j.xbc.data() + t * d.CD, proj.xBC(t), size_t(d.CD) * sizeof(float));
    std::memcpy(j.x.data() + t * d.DI, xbc.x(t), size_t(d.DI) * sizeof(float));
    std::memcpy(j.B.data() + t * d.G * d.N, xbc.B(t), size_t(d.G * d.N) * sizeof(float));
  }
  std::memcpy(j.dt.data(), dt, size_t(T * d.NH) * sizeof(float));
}

}  // namespace

void mamba2_forward(const Mamba2Weights& w, const float* hn, int64_t T, float* out, MambaState& st,
                    MambaJournal* journal, const Mamba2Options& opt, const ThreadConfig& tc) {
  const MambaSeq one{0, T, &st, journal, opt};
  mamba2_forward(w, hn, T, out, std::span(&one, 1), tc);
}

void mamba2_forward(const Mamba2Weights& w, const float* hn, int64_t T, float* out,
                    std::span<const MambaSeq> seqs, const ThreadConfig& tc) {
  const Mamba2Dims& d = w.dims;
  // 1. in_proj: each row splits into z | xBC | dt_raw.
  Buffer<float> zxbcdt(size_t(T * d.DP));
  kernels::linear(w.in_proj, hn, T, d.H, zxbcdt.data(), d.DP, tc);
  Buffer<float> xbc_buf(size_t(T * d.CD)), dt(size_t(T * d.NH)), y(size_t(T * d.DI));
  for (const MambaSeq& s : seqs) {
    const ProjRows proj{zxbcdt.data() + s.row0 * d.DP, d};
    MambaState& st = *s.st;
    // 2. xBC ← silu(causal depthwise conv over [window ‖ rows]); the window moves on by T rows.
    float* xbc_rows = xbc_buf.data() + s.row0 * d.CD;
    conv1d_silu(w, st.conv.data(), proj, s.T, xbc_rows, tc);
    const XbcRows xbc{xbc_rows, d};
    // 3. dt ← softplus(dt_raw + dt_bias).
    float* dt_rows = dt.data() + s.row0 * d.NH;
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < d.NH; ++h)
        dt_rows[t * d.NH + h] = dt_from_raw(w, proj.dt_raw(t)[h], h);
    if (s.journal) journal_round(d, st, proj, xbc, dt_rows, s.T, *s.journal);
    shift_conv_window(d, st.conv, proj.xBC(0), d.DP, s.T);
    // 4. y ← the SSM scan: the exact recurrence, or the chunked SSD form for long prefills.
    float* y_rows = y.data() + s.row0 * d.DI;
    if (s.opt.record || s.T < s.opt.ssd_min_rows) {
      // A journaled round leaves the state before it in place and writes the new one to the
      // journal's buffer; the two then swap, so the journal keeps the old one without a copy.
      ssm_scan_recurrent(w, xbc, dt_rows, s.T, st.ssm.data(), y_rows, tc,
                         s.journal ? s.journal->ssm0.data() : nullptr);
      if (s.journal) std::swap(st.ssm, s.journal->ssm0);
    } else
      ssm_scan_chunked(w, xbc, dt_rows, s.T, st.ssm.data(), y_rows, tc);
  }
  // 5. y ← rmsnorm(y · silu(z)) per group.
  gated_group_rmsnorm(w, y.data(), ProjRows{zxbcdt.data(), d}, T, tc);
  // 6. out_proj.
  kernels::linear(w.out_proj, y.data(), T, d.DI, out, d.H, tc);
}

void mamba2_replay(const Mamba2Weights& w, const MambaJournal& j, int64_t keep, MambaState& st,
                   const ThreadConfig& tc) {
  const Mamba2Dims& d = w.dims;
  parallel_for(tc, d.NH, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, keep * d.P * d.N)),
               [&](int64_t h0, int64_t h1) {
                 for (int64_t h = h0; h < h1; ++h) {
                   const int64_t g = d.group_of(h);
                   float* S = st.ssm.data() + h * d.P * d.N;
                   std::copy_n(j.ssm0.data() + h * d.P * d.N, d.P * d.N, S);
                   for (int64_t t = 0; t < keep; ++t)
                     ssm_step_head(S, j.x.data() + t * d.DI + h * d.P,
                                   j.B.data() + (t * d.G + g) * d.N, nullptr, j.dt[t * d.NH + h],
                                   w.A[h], w.D[h], d.P, d.N, nullptr);
                 }
               });
  st.conv.resize(j.conv0.size());
  std::memcpy(st.conv.data(), j.conv0.data(), j.conv0.bytes());
  shift_conv_window(d, st.conv, j.xbc.data(), d.CD, keep);
}

}  // namespace nemo::model
