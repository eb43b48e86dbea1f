// Nemotron-H: embedding → per layer (RMSNorm → one mixer → residual add) → norm_f → lm_head.
// nemotron_h.md §2. All activations f32 (see docs/ARCHITECTURE.md "Numerics").
#pragma once
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/memory.h"
#include "base/threads.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/layer.h"
#include "model/state.h"

namespace nemo::model {

struct ForwardOptions {
  // Which rows get logits: all rows, or only the last one (prefill).
  bool all_logits = false;
  // Journal Mamba inputs so accept() can keep any prefix of these rows (speculative verify).
  bool record = false;
  // Row counts >= this use the chunked SSD scan (prefill); smaller ones the exact recurrence.
  int64_t ssd_min_rows = 17;
  // Also return the post-norm_f hidden states of the logits rows (MTP input).
  bool want_hidden = false;
  // Residual stream after these layers (0-based), for every row, as a drafter's features
  // (dflash_dspark.md §1.1): pre-norm; with tap_last_post_norm, a tap on the last layer is taken
  // after norm_f instead (the HF output_hidden_states reading, §9.1).
  std::span<const int64_t> taps;
  bool tap_last_post_norm = false;
  ForwardProfile* profile = nullptr;
};

struct ForwardResult {
  Buffer<float> logits;   // [rows, V]
  Buffer<float> hidden;   // [rows, H] if want_hidden
  Buffer<float> taps;     // [T, taps.size() * H] if taps were asked for (every row of the call)
  int64_t rows = 0;       // number of logits rows
  int64_t first_row = 0;  // index (within the call) of the first logits row
};

// One sequence of a batched forward: run `tokens` after its state's rows, with its own options
// (opt.profile is ignored here: forward_batch takes one profile for the pass).
struct BatchItem {
  SequenceState* st = nullptr;
  std::span<const int32_t> tokens;
  ForwardOptions opt;
};

class NemotronH {
 public:
  // Loads config.json + safetensors from `dir`; weights stay memory-mapped.
  static std::unique_ptr<NemotronH> load(const std::string& dir, const LoadOptions& opt = {});

  const io::ModelConfig& config() const { return cfg_; }
  const io::TensorStore& store() const { return store_; }
  const io::QuantConfig& quant() const { return qc_; }
  const LoadOptions& load_options() const { return opt_; }
  SequenceState new_state() const { return SequenceState(cfg_, opt_.kv_dtype); }
  const std::string& tensor_prefix() const { return prefix_; }

  // Runs `tokens` after the state's current rows and advances the state.
  ForwardResult forward(SequenceState& st, std::span<const int32_t> tokens,
                        const ForwardOptions& opt, const ThreadConfig& tc) const;
  // Several sequences in ONE pass over the weights (continuous batching): results[i] is bitwise
  // what forward(*items[i].st, items[i].tokens, items[i].opt) returns alone. Each state appears
  // at most once.
  std::vector<ForwardResult> forward_batch(std::span<const BatchItem> items, const ThreadConfig& tc,
                                           ForwardProfile* profile = nullptr) const;
  // After a recorded forward of T rows: keep the first `keep` (1..T) rows, exactly.
  void accept(SequenceState& st, int64_t keep, const ThreadConfig& tc) const;

  // Post-norm_f hidden → logits for `n` rows (shared lm_head; used by MTP too).
  void logits_from_hidden(const float* hidden, int64_t n, float* logits,
                          const ThreadConfig& tc) const;
  void embed(int32_t token, float* out) const;
  int64_t weight_bytes() const;  // bytes of all mapped tensors
  int64_t lm_head_bytes() const { return lm_head_.bytes(); }
  // One matrix product of a pass: the weight bytes it reads, the multiply-adds it does per
  // row, and the part of ForwardProfile whose timer holds it. The routed experts of an MoE layer
  // are one entry: the bytes of the experts the rows routed to (each once), top-k average-size
  // experts' multiply-adds per row.
  enum class CostPart : uint8_t { Mamba, Attention, MoE, Mlp, LmHead };  // LmHead last (a count)
  struct MatmulCost {
    int64_t bytes = 0, macs_per_row = 0;
    CostPart part = CostPart::Mamba;
  };
  // Every product of a pass whose rows routed to `experts_used` ([layer][expert], as
  // ForwardProfile fills it); an empty outer vector stands for a decode step (top-k experts of
  // average size). The SSM's and attention's own arithmetic is not in it (small beside these).
  std::vector<MatmulCost> matmul_costs(const std::vector<std::vector<uint8_t>>& experts_used) const;
  // Weight bytes one pass reads: the products' (every shared matrix once, each routed expert
  // once, whatever the number of rows), one embedding row and the norms. The byte floor of a
  // verify pass.
  int64_t bytes_read(const std::vector<std::vector<uint8_t>>& experts_used) const;
  // Weight bytes one decode step reads (bytes_read({})). Used for rooflines.
  int64_t decode_bytes_per_token() const;
  // Multiply-adds of one row's matrix products (of matmul_costs): a pass of w rows does w times
  // this, its compute floor beside the byte floor (nemotron bench --verify-curve).
  int64_t matmul_macs_per_row() const;

 private:
  NemotronH(io::ModelConfig cfg, io::TensorStore store, io::QuantConfig qc, LoadOptions opt);
  io::ModelConfig cfg_;
  io::TensorStore store_;
  io::QuantConfig qc_;
  LoadOptions opt_;
  std::string prefix_;  // "backbone." or "model." (layout::backbone_prefix)
  Linear embeddings_, lm_head_;
  std::vector<float> norm_f_;
  std::vector<Layer> layers_;
};

}  // namespace nemo::model
