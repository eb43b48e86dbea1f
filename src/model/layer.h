// One Nemotron-H layer (nemotron_h.md §2): h ← h + mixer(rms_norm(h)), with exactly one mixer of
// four kinds. The layer loop below is the only one: the backbone and the MTP module both run it.
#pragma once
#include <span>
#include <variant>
#include <vector>

#include "base/threads.h"
#include "io/model_config.h"
#include "model/attention.h"
#include "model/layout.h"
#include "model/mamba2.h"
#include "model/moe.h"
#include "model/state.h"

namespace nemo::model {

// Optional wall-time breakdown of forward passes (accumulated), for `bench`.
struct ForwardProfile {
  double mamba_s = 0, attention_s = 0, moe_s = 0, mlp_s = 0, norms_s = 0, lm_head_s = 0;
  int64_t calls = 0;
  // [layer][expert]: 1 once a row was routed to the expert (bench's memory check: the expert
  // weights a run touches). Filled for the layers of the passes that carry this profile.
  std::vector<std::vector<uint8_t>> experts_used;
};

struct Layer {
  io::LayerKind kind;
  std::vector<float> norm_w;  // pre-mixer RMSNorm
  std::variant<Mamba2Weights, AttentionWeights, MoEWeights, MlpWeights> mixer;

  static Layer bind(const WeightBinder& b, const layout::Block& L, io::LayerKind kind,
                    const io::ModelConfig& c);
};

// Where one layer keeps its part of a sequence's state (null where its kind keeps none).
struct LayerState {
  MambaState* mamba = nullptr;
  MambaJournal* journal = nullptr;  // set when the forward is recorded for rollback
  KvCache* kv = nullptr;
};

// One sequence's rows [row0, row0 + T) of a pass, after n_past rows already in its state.
struct SeqRows {
  int64_t row0 = 0, T = 0, n_past = 0;
  Mamba2Options mamba;
  std::span<const LayerState> states;  // one per layer: where this sequence keeps its state
};

struct LayerPass {
  int64_t T = 0;  // rows in this pass, all sequences together
  // The sequences sharing the pass (one for a plain forward). Layers without state (MoE, MLP,
  // norms, projections) run over all T rows at once; Mamba's conv/scan and attention's cache
  // reads run per sequence. Kernels are batch-invariant, so each row is what it would be alone.
  std::span<const SeqRows> seqs;
  ForwardProfile* profile = nullptr;
  // Residual-stream taps (dflash_dspark.md §1.1): after layer taps[k], row t of h is copied to
  // tap_out[t·taps.size()·H + k·H ..]. Empty = no copies.
  std::span<const int64_t> taps;
  float* tap_out = nullptr;
};

// h[T, H] ← each layer in order applied to h, advancing each sequence's layer states.
void forward_layers(std::span<const Layer> layers, const io::ModelConfig& c, float* h,
                    const LayerPass& pass, const ThreadConfig& tc);

}  // namespace nemo::model
