// GQA self-attention without positional encoding (Nemotron-H `*` layers), nemotron_h.md §4.
#pragma once
#include <span>
#include "base/threads.h"
#include "io/model_config.h"
#include "model/layout.h"
#include "model/state.h"
#include "model/weights.h"

namespace nemo::model {

struct AttentionWeights {
  Linear q_proj, k_proj, v_proj, o_proj;
  float k_scale = 1.0f, v_scale = 1.0f;  // FP8 KV-cache scales (k_proj.k_scale / v_proj.v_scale)
  static AttentionWeights bind(const WeightBinder& b, const layout::Block& L);
};

// out[T, H] = attention over [cached n_past rows ‖ T new rows]; appends the new K/V rows at
// positions n_past..n_past+T-1 of `kv` (capacity must already be ensured).
void attention_forward(const AttentionWeights& w, const io::ModelConfig& c, const float* hn, int64_t T,
                       int64_t n_past, float* out, KvCache& kv, const ThreadConfig& tc);

// One sequence's rows [row0, row0 + T) of a batched pass, after n_past cached rows.
struct AttnSeq {
  int64_t row0 = 0, T = 0, n_past = 0;
  KvCache* kv = nullptr;
};
// The same over several sequences sharing one pass: the projections run over all rows at once,
// each row attends only to its own sequence's cache (bitwise what it would get alone).
void attention_forward(const AttentionWeights& w, const io::ModelConfig& c, const float* hn,
                       int64_t T, std::span<const AttnSeq> seqs, float* out, const ThreadConfig& tc);

}  // namespace nemo::model
