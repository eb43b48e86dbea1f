// How many tokens to draft in the next speculative round, chosen by what rounds have cost and
// what drafts have been accepted: the draft length k (0 = a plain decoding step, up to a cap) with
// the most expected tokens per second,
//   E(k) = 1 + sum_{i<k} a_i   (a_i: the share of drafts at position i accepted so far)
//   score(k) = E(k) / T(k)     (T(k): a round's measured seconds with k drafts, drafting,
//                               verify, rollback and the drafter's bookkeeping included)
// Speculation that does not pay on this machine and this text backs off to plain steps instead
// of slowing generation down; a round at the cap after kProbeEvery plain rounds keeps the
// acceptance and cost figures current, the interval doubling (up to kProbeMax) while plain
// steps keep winning, and likewise a plain step after kProbeEvery drafting rounds keeps T(0)
// current. A round faster than its estimate replaces it (a busy machine only ever adds time), a
// slower one moves it by kSmoothing: one plain step slowed by a neighbour had made drafting look
// cheaper than plain steps for a whole request (the README's tiny model on a noisy host: 0.52-0.55x
// plain in some runs, 0.83-0.85x in others). Any k gives the same greedy output, so the choice
// only changes speed; Generator uses it for greedy requests whose rounds it times alone (step()).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace nemo::engine {

class DraftPolicy {
 public:
  static constexpr int kProbeEvery = 16, kProbeMax = 128;  // rounds between probes
  static constexpr double kSmoothing = 0.25;  // weight of a slower round's time in T(k)

  explicit DraftPolicy(int cap);

  // The draft length for the next round, from the request's per-position counts (drafts
  // proposed and accepted at position i). The first round runs the cap and the second none, so
  // that T is known at both ends; lengths not yet timed are interpolated between timed ones.
  int next(std::span<const int64_t> proposed_at, std::span<const int64_t> accepted_at);
  // A round with k drafts took `seconds`.
  void observe(int k, double seconds);

  int cap() const { return cap_; }
  // T(k) as estimated now (seconds; 0 while neither end is timed).
  double round_seconds(int k) const;

 private:
  int cap_;
  std::vector<double> t_;  // smoothed seconds per round by draft count; 0 = not timed yet
  int plain_run_ = 0;      // plain rounds chosen since the last probe at the cap
  int probe_every_ = kProbeEvery;
  int draft_run_ = 0;  // drafting rounds chosen since the last plain probe
  int plain_probe_every_ = kProbeEvery;
};

}  // namespace nemo::engine
