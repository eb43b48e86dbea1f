// DFlash and DSpark drafters (dflash_dspark.md §1–§3): a small Qwen3-style stack that attends to
// the target's fused hidden-state taps and fills a block [anchor, MASK, ...] in one pass; the
// target's lm_head turns its rows into draft logits. DSpark is the same backbone with a causal,
// sliding-window block attention, a learned sink logit per head and a rank-r Markov head; each
// difference is a config switch here, so one file holds both.
//
//   context  (committed rows j):  c_j = RMSNorm(fc · taps_j, hidden_norm)              §1.2
//            per layer l:        K_l[j] = RoPE(k_norm(Wk_l c_j), j),  V_l[j] = Wv_l c_j   §1.3
//   block    rows i at p+i:      x = embed([anchor, MASK…]); per layer pre-norm attention over
//                                 the context + block keys (mask: §1.5 DFlash / §3.2 DSpark) and
//                                 a SwiGLU MLP; z_i = RMSNorm(x_i, norm)                  §1.5
//   logits                        target.lm_head(z_i); DSpark adds W2 · W1[prev]           §3.1
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/memory.h"
#include "base/threads.h"
#include "io/drafter_config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"
#include "model/nemotron_h.h"
#include "model/weights.h"

namespace nemo::model {

struct DraftLoadOptions {
  // The last tap (a tap on the target's last layer) after norm_f instead of before it (§9.1).
  bool tap_last_post_norm = false;
};

// The drafter's per-sequence cache: K/V of the committed context rows per layer, a ring of the
// last `window` positions for sliding-window drafters (append-only otherwise).
struct DraftContext {
  std::vector<Buffer<float>> k, v;  // per layer: [capacity, KV heads · head_dim]
  int64_t capacity = 0;
  int64_t n = 0;  // positions appended (the next anchor's position)
  size_t bytes() const;
};

class DFlashModel {
 public:
  // Loads DIR (config.json, quant config, safetensors) and validates the pair with `target`:
  // each mismatch is an error naming the field (hidden size, vocab, taps, mask id, formats).
  static std::unique_ptr<DFlashModel> load(const std::string& dir, const NemotronH& target,
                                           const DraftLoadOptions& opt = {});

  const io::DrafterConfig& config() const { return cfg_; }
  const std::string& dir() const { return store_.dir(); }
  bool dspark() const { return cfg_.kind == "dspark"; }
  std::span<const int64_t> tap_layers() const { return cfg_.target_layer_ids; }
  bool tap_last_post_norm() const { return opt_.tap_last_post_norm; }
  int64_t block_size() const { return block_; }
  // Block slot whose output is the first draft: 1 (slot 0 = the anchor), or 0 with
  // sample_from_anchor.
  int64_t first_slot() const { return cfg_.sample_from_anchor ? 0 : 1; }
  const NemotronH& target() const { return target_; }

  DraftContext new_context() const;
  // Appends n committed rows (their taps [n, n_taps · target H]) at positions ctx.n ...
  void append_context(DraftContext& ctx, const float* taps, int64_t n,
                      const ThreadConfig& tc) const;
  // Runs the block [anchor, MASK × (Q−1)] at positions ctx.n .. ctx.n+Q−1 and writes the final-
  // normed rows first_slot() .. Q−1 to out [Q − first_slot(), H].
  void block_hidden(const DraftContext& ctx, int32_t anchor, int64_t Q, float* out,
                    const ThreadConfig& tc) const;
  // DSpark: out[V] = W2 · W1[prev]. No-op for DFlash.
  bool has_markov() const { return has_markov_; }
  // Weight bytes one drafting round of k drafts reads: the block pass (every layer), the target's
  // lm_head, k Markov rows of W2 (DSpark), and the context append after the verify (fc, K/V).
  int64_t round_bytes(int64_t k) const;
  void markov_bias(int32_t prev, float* out, const ThreadConfig& tc) const;

 private:
  DFlashModel(const NemotronH& target, io::DrafterConfig cfg, io::TensorStore store,
              io::QuantConfig qc, DraftLoadOptions opt);
  struct Layer {
    std::vector<float> input_norm, post_norm, q_norm, k_norm, sink;  // sink: [heads] or empty
    Linear q, k, v, o, gate, up, down;
  };
  // cos/sin of position `pos` for the head_dim/2 frequencies (YaRN-scaled when configured).
  void rope(int64_t pos, float* cos, float* sin) const;
  void rope_rows(float* x, int64_t heads, int64_t pos) const;  // in place, NeoX rotate-half
  void head_norm(float* x, int64_t heads, const std::vector<float>& w) const;

  const NemotronH& target_;
  io::DrafterConfig cfg_;
  io::TensorStore store_;
  io::QuantConfig qc_;
  DraftLoadOptions opt_;
  int64_t block_ = 8;
  int64_t window_ = 0;  // 0 = full attention
  Linear embed_, fc_, markov_w1_, markov_w2_;
  bool own_embed_ = false, has_markov_ = false;
  std::vector<float> hidden_norm_, norm_;
  std::vector<Layer> layers_;
  std::vector<double> inv_freq_;  // [head_dim / 2]
  double mscale_ = 1.0;
};

}  // namespace nemo::model
