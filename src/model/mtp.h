// The MTP head of Nemotron 3.5 Lightning (DeepSeek-style, nemotron_h.md §6): one module of
// sub-layers (attention, then MoE) that maps (target hidden h_i, next token t_{i+1}) to a hidden
// state whose logits predict t_{i+2}. Shares the target's embedding and lm_head.
#pragma once
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "model/layer.h"
#include "model/nemotron_h.h"

namespace nemo::model {

// The MTP module's own cache: a KV cache per attention sub-layer, indexed by sequence slot.
struct MtpState {
  std::vector<KvCache> kv;
  int64_t n_past = 0;  // slots filled
  size_t bytes() const;
};

class MtpHead {
 public:
  // Binds mtp.layers.* of `target`'s checkpoint; throws naming what is missing.
  static std::unique_ptr<MtpHead> load(const NemotronH& target);
  static bool present(const NemotronH& target);  // config + tensors say there is an MTP module

  MtpState new_state() const;
  // Runs slots n_past.. n_past+T-1 with inputs (hidden[t], next_tokens[t]); `hidden` rows are
  // post-norm_f target states (or a previous MTP output when chaining). Writes the post-
  // final_layernorm outputs to out_hidden [T, H]; logits via target.logits_from_hidden.
  void forward(MtpState& st, const float* hidden, std::span<const int32_t> next_tokens, float* out_hidden,
               const ThreadConfig& tc) const;
  // Forget slots >= n (drafted slots that were not committed).
  void truncate(MtpState& st, int64_t n) const;
  const NemotronH& target() const { return target_; }

 private:
  explicit MtpHead(const NemotronH& t) : target_(t) {}
  const NemotronH& target_;
  std::vector<float> enorm_, hnorm_, final_norm_;
  Linear eh_proj_;  // [H, 2H]: columns 0..H-1 act on enorm(e), H..2H-1 on hnorm(h)
  std::vector<Layer> layers_;  // the module's sub-layers, run by the backbone's layer loop
  int n_attn_ = 0;
};

}  // namespace nemo::model
