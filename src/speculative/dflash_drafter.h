// Drafting with a DFlash or DSpark drafter (dflash_dspark.md §1.6, §1.8, §3.1, §7): one drafter
// pass over the block [anchor, MASK × k] gives k base logits rows through the target's lm_head;
// DFlash drafts each row's argmax (or a sample of it), DSpark walks the rows in order adding the
// Markov bias W2 · W1[prev] of the previous draft (the anchor for the first). The committed rows'
// taps are appended to the drafter's context after every verify; rejected rows never are.
#pragma once
#include <memory>

#include "model/dflash.h"
#include "speculative/drafter.h"

namespace nemo::speculative {

class DFlashDrafter : public Drafter {
 public:
  DFlashDrafter(const model::DFlashModel& draft, ThreadConfig tc);
  std::string name() const override { return draft_.dspark() ? "dspark" : "dflash"; }
  std::span<const int64_t> tap_layers() const override { return draft_.tap_layers(); }
  bool tap_last_post_norm() const override { return draft_.tap_last_post_norm(); }
  void begin(std::span<const int32_t> prompt, const float* taps, int32_t anchor) override;
  DraftProposal propose(int max_n, const SamplingParams& sp, Rng& rng) override;
  void commit(std::span<const int32_t> accepted, int32_t next_anchor, const float* taps) override;

  // The last proposal's rows (tests, dump): position of the anchor, block rows run, and the
  // logits before (base) and after (final = what each draft was taken from) the Markov bias.
  struct Round {
    int64_t p = 0, q_rows = 0;
    int32_t anchor = 0;
    std::vector<int32_t> drafts;
    std::vector<float> base, final;  // [drafts, V]
  };
  const Round& last_round() const { return round_; }
  int64_t proposals() const { return proposals_; }  // propose() calls that drafted something
  const model::DraftContext& context() const { return ctx_; }

 private:
  const model::DFlashModel& draft_;
  ThreadConfig tc_;
  model::DraftContext ctx_;
  int32_t anchor_ = 0;
  Round round_;
  int64_t proposals_ = 0;
};

}  // namespace nemo::speculative
