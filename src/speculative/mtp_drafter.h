// Drafting with the checkpoint's own MTP head (spec dflash_dspark.md §4): the first draft comes
// from the MTP slot of the last committed position; further drafts chain the single module on
// its own output (post-final_layernorm hidden, previous draft token).
#pragma once
#include <memory>

#include "model/mtp.h"
#include "speculative/drafter.h"

namespace nemo::speculative {

class MtpDrafter : public Drafter {
 public:
  MtpDrafter(const model::NemotronH& target, ThreadConfig tc);
  std::string name() const override { return "mtp"; }
  bool wants_hidden() const override { return true; }
  void begin(std::span<const int32_t> prompt, const float* hidden, int32_t anchor) override;
  DraftProposal propose(int max_n, const SamplingParams& sp, Rng& rng) override;
  void commit(std::span<const int32_t> accepted, int32_t next_anchor, const float* hidden) override;
  // Draft logits of the next proposal's first token (tests compare them with the reference).
  std::span<const float> next_logits() {
    flush();
    return {logits_.data(), logits_.size()};
  }

  // The last proposal (tests, dump): the anchor's position p (= committed MTP slots), the drafts
  // and the logits each was taken from: row 0 from slot p−1, row j from the j-th chained slot.
  struct Round {
    int64_t p = 0;
    std::vector<int32_t> drafts;
    std::vector<float> logits;  // [drafts, V]
  };
  const Round& last_round() const { return round_; }
  int64_t proposals() const { return proposals_; }  // propose() calls that drafted something

 private:
  // Runs MTP slots for (hidden rows, next tokens) after the committed slots; keeps the last
  // row's output hidden and logits as the seed of the next proposal.
  void run_committed(const float* hidden, std::span<const int32_t> next_tokens);
  // Runs the slots committed since the last proposal (one forward for all of them).
  void flush();
  const model::NemotronH& target_;
  std::unique_ptr<model::MtpHead> head_;
  model::MtpState st_;
  ThreadConfig tc_;
  int64_t committed_slots_ = 0;
  Buffer<float> seed_hidden_, logits_;  // [H], [V]
  Round round_;
  int64_t proposals_ = 0;
  // Slots committed but not run yet (hidden rows [n, H] and next tokens): a round that drafts
  // nothing (engine::DraftPolicy chose a plain step) then costs no MTP work; the next proposal
  // runs them at once, with the same bits (the head's rows do not depend on the batch). Only the
  // last kMaxPendingSlots are kept: after a long run of plain steps the head's attention (NoPE,
  // nemotron_h.md §4) sees a shorter context, which can change its drafts but never the output
  // (verification decides), and a probe costs at most this many rows rather than one per step
  // (models/tiny-code, whose MTP module is ~17 % of its active weights, decoded 0.80-0.85x plain
  // while drafting in 3-10 of 95-998 rounds). 16 rows hold any round's commits (γ <= 15).
  static constexpr size_t kMaxPendingSlots = 16;
  std::vector<float> pending_hidden_;
  std::vector<int32_t> pending_tokens_;
};

}  // namespace nemo::speculative
