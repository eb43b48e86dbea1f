// The drafter interface every speculative-decoding proposer implements (MTP, n-gram, and next
// DFlash/DSpark). A drafter proposes up to γ tokens continuing the committed sequence, is told
// what the target accepted, and keeps its own caches consistent. Nothing a drafter does can
// change the target's output: the verify rule (speculative/verify.h) decides every emitted token.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "kernels/sampling.h"

namespace nemo::speculative {

using kernels::SamplingParams;

struct DraftProposal {
  std::vector<int32_t> tokens;
  // For sampled drafts: the distribution each token was drawn from, as (id, prob) pairs.
  // Empty = deterministic drafts (a one-hot q), the common case for greedy drafting.
  std::vector<kernels::Distribution> q;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // The target features begin()/commit() receive as `hidden`: the post-norm_f hidden states
  // [rows, H] (wants_hidden), or the residual-stream taps after these target layers
  // [rows, taps · H] (tap_layers, dflash_dspark.md §1.1), or nothing (null).
  virtual bool wants_hidden() const { return false; }
  virtual std::span<const int64_t> tap_layers() const { return {}; }
  virtual bool tap_last_post_norm() const { return false; }
  // A sequence starts: the target has run `prompt` (hidden: its features, or null) and sampled
  // `anchor`, which the target has not consumed yet.
  virtual void begin(std::span<const int32_t> prompt, const float* hidden, int32_t anchor) = 0;
  // Up to max_n tokens that should follow [committed…, anchor]. May return fewer, or none.
  // `sp` and `rng` are the request's sampling settings: greedy drafters may ignore them.
  virtual DraftProposal propose(int max_n, const SamplingParams& sp, Rng& rng) = 0;
  // The target verified [anchor, d_1..d_k] and kept d_1..d_accepted, then produced
  // `next_anchor`. hidden: the target features of rows anchor, d_1..d_accepted (accepted + 1 rows).
  virtual void commit(std::span<const int32_t> accepted, int32_t next_anchor, const float* hidden) = 0;
};

// Prompt-lookup / n-gram drafter: finds the most recent earlier occurrence of the longest suffix
// (up to max_ngram tokens) of the sequence and proposes the tokens that followed it. Model-free.
class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(int max_ngram = 3, int min_ngram = 1) : max_n_(max_ngram), min_n_(min_ngram) {}
  std::string name() const override { return "ngram"; }
  void begin(std::span<const int32_t> prompt, const float*, int32_t anchor) override;
  DraftProposal propose(int max_n, const SamplingParams&, Rng&) override;
  void commit(std::span<const int32_t> accepted, int32_t next_anchor, const float*) override;

 private:
  int max_n_, min_n_;
  std::vector<int32_t> seq_;  // prompt + committed tokens + anchor
};

// Proposes a fixed script (e.g. the target's own future greedy tokens: an "oracle" drafter whose
// acceptance must be 100%), optionally corrupted to a deliberately wrong token (acceptance 0%).
// Used by tests and by `bench` to measure the speedup ceiling.
class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> script, bool wrong, int64_t vocab)
      : script_(std::move(script)), wrong_(wrong), vocab_(vocab) {}
  std::string name() const override { return wrong_ ? "wrong" : "oracle"; }
  void begin(std::span<const int32_t>, const float*, int32_t) override { pos_ = 1; }
  DraftProposal propose(int max_n, const SamplingParams&, Rng&) override;
  void commit(std::span<const int32_t> accepted, int32_t, const float*) override {
    pos_ += int64_t(accepted.size()) + 1;
  }

 private:
  std::vector<int32_t> script_;  // tokens after the prompt; script_[0] is the first anchor
  bool wrong_;
  int64_t vocab_;
  int64_t pos_ = 1;  // index in script_ of the token after the current anchor
};

}  // namespace nemo::speculative
