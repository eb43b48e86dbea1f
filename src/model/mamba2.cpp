#include "model/mamba2.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

using kernels::dot;

Mamba2Weights Mamba2Weights::bind(const WeightBinder& b, const std::string& p, const io::ModelConfig& c) {
  const int64_t H = c.hidden_size, DI = c.mamba_inner(), CD = c.conv_dim(), NH = c.mamba_num_heads;
  const int64_t K = c.conv_kernel;
  Mamba2Weights w;
  w.in_proj = b.linear(p + ".in_proj", c.in_proj_dim(), H);
  w.out_proj = b.linear(p + ".out_proj", H, DI);
  // HF stores [CD, 1, K]; MLX [CD, K, 1] — the same memory order.
  w.conv_w = b.tensor_f32_any(p + ".conv1d.weight", {{CD, 1, K}, {CD, K, 1}});
  w.conv_b = c.use_conv_bias ? b.vector(p + ".conv1d.bias", CD) : std::vector<float>(size_t(CD), 0.0f);
  w.dt_bias = b.vector(p + ".dt_bias", NH);
  w.A = b.vector(p + ".A_log", NH);
  for (auto& a : w.A) a = -std::exp(a);
  w.D = b.vector(p + ".D", NH);
  w.norm_w = b.vector(p + ".norm.weight", DI);
  return w;
}

void ssm_step_head(float* S, const float* x, const float* B, const float* C, float dt, float A, float D,
                   int64_t P, int64_t N, float* y) {
  const float dA = std::exp(dt * A);
  float dtB[512];  // N <= 512 (checked at load)
  for (int64_t n = 0; n < N; ++n) dtB[n] = B[n] * dt;
  for (int64_t p = 0; p < P; ++p) {
    float* s = S + p * N;
    const float xv = x[p];
    for (int64_t n = 0; n < N; ++n) s[n] = s[n] * dA + dtB[n] * xv;
    if (y) y[p] = dot(s, C, N) + D * xv;
  }
}

namespace {

struct Dims {
  int64_t H, DI, CD, NH, P, G, N, K, GN, DP, heads_per_group;
  explicit Dims(const io::ModelConfig& c)
      : H(c.hidden_size), DI(c.mamba_inner()), CD(c.conv_dim()), NH(c.mamba_num_heads), P(c.mamba_head_dim),
        G(c.n_groups), N(c.ssm_state_size), K(c.conv_kernel), GN(c.n_groups * c.ssm_state_size),
        DP(c.in_proj_dim()), heads_per_group(c.mamba_num_heads / c.n_groups) {}
};

float dt_value(const io::ModelConfig& c, float raw, float bias) {
  float dt = kernels::softplus(raw + bias);
  // time_step_limit (0, inf) is a no-op; only a configured limit clamps.
  if (c.dt_limit_min > 0.0f || std::isfinite(c.dt_limit_max)) dt = std::clamp(dt, c.dt_limit_min, c.dt_limit_max);
  return dt;
}

// Chunked SSD form (spec §3.6) for rows [t0, t1) of one head. Mathematically equal to the
// recurrence; used for long prefills. y rows have stride DI; x/B/C rows have stride CD.
void ssd_chunk_head(const Dims& d, const float* xbc, const float* dt_all, float A, float Dh, int64_t h,
                    int64_t t0, int64_t t1, const float* Gm, float* S, float* y, std::vector<float>& scratch) {
  const int64_t Q = t1 - t0, P = d.P, N = d.N, g = h / d.heads_per_group;
  scratch.resize(size_t(Q + Q * P));
  float* cs = scratch.data();
  float* u = cs + Q;
  float run = 0.0f;
  for (int64_t i = 0; i < Q; ++i) {
    const float dt = dt_all[(t0 + i) * d.NH + h];
    run += dt * A;
    cs[i] = run;
    const float* xi = xbc + (t0 + i) * d.CD + h * P;
    for (int64_t p = 0; p < P; ++p) u[i * P + p] = dt * xi[p];
  }
  for (int64_t i = 0; i < Q; ++i) {
    const float* Ci = xbc + (t0 + i) * d.CD + d.DI + d.GN + g * N;
    const float* xi = xbc + (t0 + i) * d.CD + h * P;
    float* yi = y + (t0 + i) * d.DI + h * P;
    const float e_in = std::exp(cs[i]);
    for (int64_t p = 0; p < P; ++p) yi[p] = e_in * dot(S + p * N, Ci, N);
    for (int64_t j = 0; j <= i; ++j) {
      const float coef = Gm[i * Q + j] * std::exp(cs[i] - cs[j]);
      kernels::axpy(coef, u + j * P, yi, P);
    }
    for (int64_t p = 0; p < P; ++p) yi[p] += Dh * xi[p];
  }
  // State update: S = exp(cs_last)·S + Σ_j exp(cs_last − cs_j) · u_j ⊗ B_j
  const float e_last = std::exp(cs[Q - 1]);
  for (int64_t k = 0; k < P * N; ++k) S[k] *= e_last;
  for (int64_t j = 0; j < Q; ++j) {
    const float* Bj = xbc + (t0 + j) * d.CD + d.DI + g * N;
    const float w = std::exp(cs[Q - 1] - cs[j]);
    for (int64_t p = 0; p < P; ++p) kernels::axpy(w * u[j * P + p], Bj, S + p * N, N);
  }
}

}  // namespace

void mamba2_forward(const Mamba2Weights& w, const io::ModelConfig& c, const float* hn, int64_t T, float* out,
                    MambaState& st, MambaJournal* journal, const Mamba2Options& opt, const ThreadConfig& tc) {
  const Dims d(c);
  if (d.N > 512) fail("ssm_state_size {} > 512 is not supported", d.N);
  Buffer<float> zxbcdt(size_t(T * d.DP));
  kernels::linear(w.in_proj, hn, T, d.H, zxbcdt.data(), d.DP, tc);

  if (journal) {
    journal->conv0.resize(st.conv.size());
    std::memcpy(journal->conv0.data(), st.conv.data(), st.conv.bytes());
    journal->ssm0.resize(st.ssm.size());
    std::memcpy(journal->ssm0.data(), st.ssm.data(), st.ssm.bytes());
    journal->xbc.resize(size_t(T * d.CD));
    journal->x.resize(size_t(T * d.DI));
    journal->B.resize(size_t(T * d.GN));
    journal->dt.resize(size_t(T * d.NH));
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(journal->xbc.data() + t * d.CD, zxbcdt.data() + t * d.DP + d.DI, size_t(d.CD) * sizeof(float));
  }

  // Causal depthwise conv + SiLU over the xBC channels; window = [conv state (K-1 rows) ‖ new rows].
  Buffer<float> xbc(size_t(T * d.CD));
  const int64_t KW = d.K - 1;
  parallel_for(tc, d.CD, std::max<int64_t>(256, 65536 / (T * d.K)), [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        float acc = w.conv_b[ch];
        for (int64_t k = 0; k < d.K; ++k) {
          const int64_t src = t - KW + k;  // < 0: from the cached window
          const float v = src < 0 ? st.conv[(KW + src) * d.CD + ch] : zxbcdt[src * d.DP + d.DI + ch];
          acc = acc + w.conv_w[ch * d.K + k] * v;
        }
        xbc[t * d.CD + ch] = kernels::silu(acc);
      }
    }
  });
  // New window: last K-1 raw rows of [old window ‖ new rows].
  {
    Buffer<float> nw(st.conv.size());
    for (int64_t r = 0; r < KW; ++r) {
      const int64_t src = T - KW + r;
      const float* from = src < 0 ? st.conv.data() + (KW + src) * d.CD : zxbcdt.data() + src * d.DP + d.DI;
      std::memcpy(nw.data() + r * d.CD, from, size_t(d.CD) * sizeof(float));
    }
    st.conv = std::move(nw);
  }

  Buffer<float> dt(size_t(T * d.NH));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < d.NH; ++h) dt[t * d.NH + h] = dt_value(c, zxbcdt[t * d.DP + d.DI + d.CD + h], w.dt_bias[h]);

  if (journal) {
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(journal->x.data() + t * d.DI, xbc.data() + t * d.CD, size_t(d.DI) * sizeof(float));
      std::memcpy(journal->B.data() + t * d.GN, xbc.data() + t * d.CD + d.DI, size_t(d.GN) * sizeof(float));
    }
    std::memcpy(journal->dt.data(), dt.data(), dt.bytes());
  }

  Buffer<float> y(size_t(T * d.DI));
  const bool ssd = !opt.record && T >= opt.ssd_min_rows;
  if (!ssd) {
    // Sequential recurrence: heads are independent, so threads split heads.
    parallel_for(tc, d.NH, std::max<int64_t>(1, 65536 / (T * d.P * d.N)), [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t g = h / d.heads_per_group;
        float* S = st.ssm.data() + h * d.P * d.N;
        for (int64_t t = 0; t < T; ++t) {
          const float* row = xbc.data() + t * d.CD;
          ssm_step_head(S, row + h * d.P, row + d.DI + g * d.N, row + d.DI + d.GN + g * d.N, dt[t * d.NH + h],
                        w.A[h], w.D[h], d.P, d.N, y.data() + t * d.DI + h * d.P);
        }
      }
    });
  } else {
    const int64_t Qmax = c.chunk_size;
    std::vector<float> Gm(size_t(d.G * Qmax * Qmax));
    for (int64_t t0 = 0; t0 < T; t0 += Qmax) {
      const int64_t t1 = std::min(T, t0 + Qmax), Q = t1 - t0;
      // G[g][i][j] = C_i · B_j (j <= i), shared by the heads of group g.
      parallel_for(tc, d.G * Q, 1, [&](int64_t a, int64_t b) {
        for (int64_t gi = a; gi < b; ++gi) {
          const int64_t g = gi / Q, i = gi % Q;
          const float* Ci = xbc.data() + (t0 + i) * d.CD + d.DI + d.GN + g * d.N;
          for (int64_t j = 0; j <= i; ++j)
            Gm[(g * Qmax + i) * Qmax + j] = dot(Ci, xbc.data() + (t0 + j) * d.CD + d.DI + g * d.N, d.N);
        }
      });
      // Re-pack to [Q, Q] per group for the head kernel.
      parallel_for(tc, d.NH, 1, [&](int64_t h0, int64_t h1) {
        std::vector<float> scratch, Gq(size_t(Q * Q));
        int64_t cur_g = -1;
        for (int64_t h = h0; h < h1; ++h) {
          const int64_t g = h / d.heads_per_group;
          if (g != cur_g) {
            for (int64_t i = 0; i < Q; ++i)
              for (int64_t j = 0; j <= i; ++j) Gq[i * Q + j] = Gm[(g * Qmax + i) * Qmax + j];
            cur_g = g;
          }
          ssd_chunk_head(d, xbc.data(), dt.data(), w.A[h], w.D[h], h, t0, t1, Gq.data(),
                         st.ssm.data() + h * d.P * d.N, y.data(), scratch);
        }
      });
    }
  }

  // Gate then grouped RMSNorm (groups of DI/G contiguous channels), then out_proj.
  const int64_t gs = d.DI / d.G;
  parallel_for(tc, T * d.G, std::max<int64_t>(1, 65536 / gs), [&](int64_t a, int64_t b) {
    for (int64_t tg = a; tg < b; ++tg) {
      const int64_t t = tg / d.G, g = tg % d.G;
      float* yr = y.data() + t * d.DI + g * gs;
      const float* zr = zxbcdt.data() + t * d.DP + g * gs;
      for (int64_t i = 0; i < gs; ++i) yr[i] = yr[i] * kernels::silu(zr[i]);
      kernels::rms_norm(yr, w.norm_w.data() + g * gs, gs, c.norm_eps, yr);
    }
  });
  kernels::linear(w.out_proj, y.data(), T, d.DI, out, d.H, tc);
}

void mamba2_replay(const io::ModelConfig& c, const Mamba2Weights& w, const MambaJournal& j, int64_t keep,
                   MambaState& st) {
  const Dims d(c);
  std::memcpy(st.ssm.data(), j.ssm0.data(), j.ssm0.bytes());
  for (int64_t h = 0; h < d.NH; ++h) {
    const int64_t g = h / d.heads_per_group;
    float* S = st.ssm.data() + h * d.P * d.N;
    for (int64_t t = 0; t < keep; ++t)
      ssm_step_head(S, j.x.data() + t * d.DI + h * d.P, j.B.data() + t * d.GN + g * d.N, nullptr,
                    j.dt[t * d.NH + h], w.A[h], w.D[h], d.P, d.N, nullptr);
  }
  const int64_t KW = d.K - 1;
  for (int64_t r = 0; r < KW; ++r) {
    const int64_t src = keep - KW + r;
    const float* from = src < 0 ? j.conv0.data() + (KW + src) * d.CD : j.xbc.data() + src * d.CD;
    std::memcpy(st.conv.data() + r * d.CD, from, size_t(d.CD) * sizeof(float));
  }
}

}  // namespace nemo::model
