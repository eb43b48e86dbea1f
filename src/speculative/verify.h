// Verification: which drafted tokens the target keeps (dflash_dspark.md §1.7–1.9, §7), and the
// telemetry of speculative decoding. The loop that drafts, runs the target and rolls back is
// engine::Generator; this file is only the decision rule, so it can be read (and tested) alone.
//
// Given the target's logits rows for [anchor, d_1..d_k]:
//   greedy   — keep the longest prefix where d_{i+1} == argmax(row i), then the bonus argmax;
//   sampling — keep d_{i+1} with probability min(1, p(d)/q(d)); at the first rejection emit a
//              sample of normalise(max(0, p − q)); if all stand, a bonus sample of p(row k).
// With greedy decoding the result is bitwise plain decoding, because every target row is
// computed by batch-invariant kernels; with sampling the emitted distribution is the target's.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "speculative/drafter.h"

namespace nemo::speculative {

struct Verdict {
  std::vector<int32_t> tokens;  // tokens[i] is decided from logits row i; accepted + 1 of them
  int accepted = 0;             // drafts kept: tokens[0..accepted) are d_1..d_accepted
};

// logits: rows [anchor, d_1..d_k] of width V (k = proposal.tokens.size()). Consumes `rng` in row
// order: one uniform per examined draft, one draw for the correction or bonus token.
Verdict verify(std::span<const float> logits, int64_t V, const DraftProposal& proposal,
               const SamplingParams& sp, Rng& rng);

struct SpecStats {
  int64_t rounds = 0;    // verify calls (target forwards after prefill)
  int64_t drafted = 0;   // draft tokens proposed
  int64_t accepted = 0;  // draft tokens accepted
  int64_t emitted = 0;   // tokens emitted (accepted + bonus/corrections + the first token)
  std::vector<int64_t> proposed_at, accepted_at;  // per draft position
  double prefill_s = 0, draft_s = 0, verify_s = 0, rollback_s = 0, total_s = 0;

  // Mean tokens emitted per verify call (accepted drafts + 1).
  double mean_accept_length() const {
    return rounds ? double(accepted + rounds) / double(rounds) : 0.0;
  }
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  void add(const SpecStats& o);  // cumulative telemetry across requests
  std::string summary() const;   // human-readable, multi-line
};

}  // namespace nemo::speculative
