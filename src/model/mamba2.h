// Mamba-2 mixer (Nemotron-H `M` layers), spec nemotron_h.md §3.
#pragma once
#include <vector>

#include "base/threads.h"
#include "io/model_config.h"
#include "model/state.h"
#include "model/weights.h"

namespace nemo::model {

struct Mamba2Weights {
  Linear in_proj;             // [DI + CD + NH, H]: z | xBC | dt
  Linear out_proj;            // [H, DI]
  std::vector<float> conv_w;  // [CD, K]: tap K-1 multiplies the newest row
  std::vector<float> conv_b;  // [CD] (zeros if the config has no conv bias)
  std::vector<float> dt_bias, A, D;  // [NH]; A = -exp(A_log)
  std::vector<float> norm_w;  // [DI] gated grouped RMSNorm weight

  static Mamba2Weights bind(const WeightBinder& b, const std::string& prefix, const io::ModelConfig& c);
};

struct Mamba2Options {
  bool record = false;         // keep a journal so NemotronH::accept can roll back
  int64_t ssd_min_rows = 17;   // row counts >= this use the chunked SSD form (never when recording)
};

// out[T, H] = mixer(hn[T, H]); advances `st` by T rows.
void mamba2_forward(const Mamba2Weights& w, const io::ModelConfig& c, const float* hn, int64_t T, float* out,
                    MambaState& st, MambaJournal* journal, const Mamba2Options& opt, const ThreadConfig& tc);

// Rebuild `st` as if only the first `keep` rows of the journaled round had run.
void mamba2_replay(const io::ModelConfig& c, const Mamba2Weights& w, const MambaJournal& j, int64_t keep,
                   MambaState& st);

// One recurrence step for head-row block: S[P, N] = S·dA + (B·dt) ⊗ x; y = S·C + D·x.
// The single definition of the Mamba-2 recurrence, shared by decode, verify and replay.
void ssm_step_head(float* S, const float* x, const float* B, const float* C, float dt, float A, float D,
                   int64_t P, int64_t N, float* y);

}  // namespace nemo::model
