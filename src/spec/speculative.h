// The verify loop of speculative decoding (spec dflash_dspark.md §1.7–1.9, §7).
//
// Each round: the drafter proposes d_1..d_k; ONE target forward runs [anchor, d_1..d_k] with
// all logits and a Mamba journal; acceptance decides how many drafts stand:
//   greedy   — the longest prefix where d_{i+1} == argmax(row i), then the bonus argmax;
//   sampling — accept d_{i+1} with probability min(1, p(d)/q(d)); at the first rejection emit a
//              sample of normalise(max(0, p − q)); if all stand, a bonus sample of p(row k).
// then NemotronH::accept keeps exactly anchor + the accepted drafts (KV truncated, Mamba
// replayed). With greedy decoding the emitted tokens and their logits are bitwise those of plain
// decoding, because every target row is computed by batch-invariant kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/nemotron_h.h"
#include "spec/drafter.h"
#include "spec/sampler.h"

namespace nemo::spec {

struct SpecStats {
  int64_t rounds = 0;    // verify calls (target forwards after prefill)
  int64_t drafted = 0;   // draft tokens proposed
  int64_t accepted = 0;  // draft tokens accepted
  int64_t emitted = 0;   // tokens emitted (accepted + bonus/corrections + the first token)
  std::vector<int64_t> proposed_at, accepted_at;  // per draft position
  double prefill_s = 0, draft_s = 0, verify_s = 0, rollback_s = 0, total_s = 0;

  // Mean tokens emitted per verify call (accepted drafts + 1).
  double mean_accept_length() const { return rounds ? double(accepted + rounds) / double(rounds) : 0.0; }
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  void add(const SpecStats& o);  // cumulative telemetry across requests
  std::string summary() const;   // human-readable, multi-line
};

struct SpecRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;
  int draft_max = 4;  // γ
};

// Called for every emitted token with the target logits row it was decided from; return false
// to stop (e.g. a stop string matched).
using EmitFn = std::function<bool(int32_t token, std::span<const float> logits)>;

class SpeculativeDecoder {
 public:
  static constexpr int kMaxDraft = 15;  // verify width 1 + γ stays within the 16-row invariant path
  SpeculativeDecoder(const model::NemotronH& target, ThreadConfig tc) : m_(target), tc_(tc) {}
  // drafter == nullptr: plain decoding through the same loop (one row per step).
  SpecStats generate(const SpecRequest& req, Drafter* drafter, const EmitFn& emit);

 private:
  const model::NemotronH& m_;
  ThreadConfig tc_;
};

}  // namespace nemo::spec
