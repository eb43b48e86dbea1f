// Mamba-2 mixer (Nemotron-H `M` layers), nemotron_h.md §3. Each spec step is one function below;
// mamba2_forward composes them in the spec's order. Row views (Mamba2Dims, ProjRows, XbcRows) name
// the pieces of a row instead of offset arithmetic.
#pragma once
#include <cmath>
#include <span>
#include <vector>

#include "base/threads.h"
#include "io/model_config.h"
#include "model/layout.h"
#include "model/state.h"
#include "model/weights.h"

namespace nemo::model {

// Widths of one Mamba-2 layer (nemotron_h.md §3.1).
struct Mamba2Dims {
  int64_t H = 0;   // hidden size
  int64_t NH = 0;  // SSM heads
  int64_t P = 0;   // head dim
  int64_t G = 1;   // B/C groups; head h reads group h / (NH/G)
  int64_t N = 0;   // state size
  int64_t K = 0;   // conv taps
  int64_t DI = 0;  // NH·P: x, z and y width
  int64_t CD = 0;  // DI + 2·G·N: the conv runs over xBC = x | B | C
  int64_t DP = 0;  // DI + CD + NH: in_proj output z | xBC | dt
  Mamba2Dims() = default;
  explicit Mamba2Dims(const io::ModelConfig& c);
  int64_t group_of(int64_t head) const { return head / (NH / G); }
};

// Rows of the in_proj output: z [DI] | xBC [CD] | dt_raw [NH] (nemotron_h.md §3.2).
struct ProjRows {
  const float* data;
  const Mamba2Dims& d;
  const float* z(int64_t t) const { return data + t * d.DP; }
  const float* xBC(int64_t t) const { return data + t * d.DP + d.DI; }
  const float* dt_raw(int64_t t) const { return data + t * d.DP + d.DI + d.CD; }
};

// Rows of the (post-conv) xBC activations: x [NH heads of P] | B [G groups of N] | C [G groups of
// N].
template <typename T>
struct XbcRowsOf {
  T* data;
  const Mamba2Dims& d;
  T* row(int64_t t) const { return data + t * d.CD; }
  T* x(int64_t t, int64_t head = 0) const { return row(t) + head * d.P; }
  T* B(int64_t t, int64_t group = 0) const { return row(t) + d.DI + group * d.N; }
  T* C(int64_t t, int64_t group = 0) const { return row(t) + d.DI + d.G * d.N + group * d.N; }
};
using XbcRows = XbcRowsOf<const float>;

struct Mamba2Weights {
  Mamba2Dims dims;
  Linear in_proj;                    // [DP, H]: z | xBC | dt
  Linear out_proj;                   // [H, DI]
  std::vector<float> conv_taps;      // [K, CD] (the checkpoint's [CD, 1, K] by tap): tap K-1
                                     // multiplies the newest row
  std::vector<float> conv_b;         // [CD] (zeros if the config has no conv bias)
  std::vector<float> dt_bias, A, D;  // [NH]; A = -exp(A_log)
  std::vector<float> norm_w;         // [DI] gated grouped RMSNorm weight
  float norm_eps = 1e-5f;
  float dt_min = 0.0f, dt_max = INFINITY;  // time_step_limit; (0, inf) = no clamp
  int64_t chunk_size = 128;                // SSD chunk length

  static Mamba2Weights bind(const WeightBinder& b, const layout::Block& L,
                            const io::ModelConfig& c);
};

struct Mamba2Options {
  bool record = false;        // keep a journal so NemotronH::accept can roll back
  int64_t ssd_min_rows = 17;  // row counts >= this use the chunked SSD form (never when recording)
};

// ---- the spec steps ------------------------------------------------------------------------

// nemotron_h.md §3.3 causal depthwise conv + SiLU over the xBC channels of T new rows, the window
// being the K−1 raw rows before them: out[t][c] = silu(b[c] + Σ_k w[c][k] · raw[t−K+1+k][c]), taps
// summed in k order.
void conv1d_silu(const Mamba2Weights& w, const float* window, const ProjRows& raw, int64_t T,
                 float* out, const ThreadConfig& tc);
// The conv window after T rows: the last K−1 raw xBC rows of [window ‖ rows].
void shift_conv_window(const Mamba2Dims& d, Buffer<float>& window, const float* raw_xbc,
                       int64_t stride, int64_t T);
// nemotron_h.md §3.4 dt = softplus(dt_raw + dt_bias), clamped only when the config sets
// time_step_limit.
float dt_from_raw(const Mamba2Weights& w, float raw, int64_t head);
// One head's rows: x_t = x + t·stride (P values), B_t, C_t likewise (N values; C unused without
// y), dt_t = dt[t·dt_stride], y_t = y + t·y_stride (null: the state only, the journal's replay).
struct HeadRows {
  const float *x, *B, *C;
  int64_t stride;
  const float* dt;
  int64_t dt_stride;
  float* y;
  int64_t y_stride;
};
// nemotron_h.md §3.5 the recurrence of one head over T rows, step by step: S[P, N] = S·exp(dt·A) +
// (B·dt) ⊗ x;  y = S·C + D·x. The single definition of the recurrence, shared by decode, verify and
// replay. The state before the rows is read from `from`, after them written to S (`from` may be
// S; else the two do not overlap).
void ssm_steps_head(const float* from, float* S, int64_t T, const HeadRows& rows, float A, float D,
                    int64_t P, int64_t N);
// One step of it.
void ssm_step_head(float* S, const float* x, const float* B, const float* C, float dt, float A,
                   float D, int64_t P, int64_t N, float* y);
// The recurrence over T rows, heads split across threads: y[t] [DI]; S = state [NH, P, N]. With
// `S_out` the state after the rows goes there and S keeps the one before them (a recorded round:
// the journal's buffer, then swapped with the state, in place of a copy of the old one).
void ssm_scan_recurrent(const Mamba2Weights& w, const XbcRows& xbc, const float* dt, int64_t T,
                        float* S, float* y, const ThreadConfig& tc, float* S_out = nullptr);
// nemotron_h.md §3.6 the chunked SSD form of the same scan (mathematically equal, rounds
// differently): long prefills.
void ssm_scan_chunked(const Mamba2Weights& w, const XbcRows& xbc, const float* dt, int64_t T,
                      float* S, float* y, const ThreadConfig& tc);
// nemotron_h.md §3.7 y ← rmsnorm(y · silu(z)) per group of DI/G channels, times norm_w (in place on
// T rows of y).
void gated_group_rmsnorm(const Mamba2Weights& w, float* y, const ProjRows& proj, int64_t T,
                         const ThreadConfig& tc);

// ---- the mixer -----------------------------------------------------------------------------

// out[T, H] = mixer(hn[T, H]); advances `st` by T rows (journaling them when `journal`).
void mamba2_forward(const Mamba2Weights& w, const float* hn, int64_t T, float* out, MambaState& st,
                    MambaJournal* journal, const Mamba2Options& opt, const ThreadConfig& tc);
// One sequence's rows [row0, row0 + T) of a batched pass, with its state.
struct MambaSeq {
  int64_t row0 = 0, T = 0;
  MambaState* st = nullptr;
  MambaJournal* journal = nullptr;
  Mamba2Options opt;
};
// The same over several sequences sharing one pass: in_proj, the gated norm and out_proj run over
// all rows at once; the conv and the scan run per sequence on its own state. Each row's result is
// bitwise what its sequence would get alone.
void mamba2_forward(const Mamba2Weights& w, const float* hn, int64_t T, float* out,
                    std::span<const MambaSeq> seqs, const ThreadConfig& tc);
// Rebuild `st` as if only the first `keep` rows of the journaled round had run (heads split
// across threads; each head's replay is the same sequence of steps at any thread count).
void mamba2_replay(const Mamba2Weights& w, const MambaJournal& j, int64_t keep, MambaState& st,
                   const ThreadConfig& tc);

}  // namespace nemo::model
