#include "engine/draft_policy.h"

#include <algorithm>

#include "base/error.h"

namespace nemo::engine {

DraftPolicy::DraftPolicy(int cap) : cap_(cap), t_(size_t(std::max(cap, 0)) + 1, 0.0) {
  NEMO_CHECK(cap >= 1, "DraftPolicy: cap {} is below 1", cap);
}

void DraftPolicy::observe(int k, double seconds) {
  if (k < 0 || k > cap_ || !(seconds > 0)) return;  // a clock that did not move says nothing
  double& t = t_[size_t(k)];
  t = t == 0 || seconds < t ? seconds : (1 - kSmoothing) * t + kSmoothing * seconds;
}

double DraftPolicy::round_seconds(int k) const {
  if (t_[size_t(k)] > 0) return t_[size_t(k)];
  int lo = k, hi = k;
  while (lo > 0 && t_[size_t(lo)] == 0) --lo;
  while (hi < cap_ && t_[size_t(hi)] == 0) ++hi;
  const double tl = t_[size_t(lo)], th = t_[size_t(hi)];
  if (tl == 0 || th == 0) return tl + th;  // one side timed (or none): take it
  return tl + (th - tl) * double(k - lo) / double(hi - lo);
}

int DraftPolicy::next(std::span<const int64_t> proposed_at, std::span<const int64_t> accepted_at) {
  if (t_[size_t(cap_)] == 0) return cap_;
  if (t_[0] == 0) return 0;
  int best = 0;
  double expected = 1.0, best_score = expected / round_seconds(0);
  for (int k = 1; k <= cap_; ++k) {
    const size_t i = size_t(k - 1);
    const double proposed = i < proposed_at.size() ? double(proposed_at[i]) : 0.0;
    const double accepted = i < accepted_at.size() ? double(accepted_at[i]) : 0.0;
    expected += (accepted + 0.5) / (proposed + 1.0);  // no rounds yet: a_i = 1/2
    const double score = expected / round_seconds(k);
    if (score > best_score) best = k, best_score = score;
  }
  if (best > 0) {
    plain_run_ = 0, probe_every_ = kProbeEvery;
    if (++draft_run_ > plain_probe_every_) {
      draft_run_ = 0, plain_probe_every_ = std::min(2 * plain_probe_every_, kProbeMax);
      return 0;
    }
    return best;
  }
  draft_run_ = 0, plain_probe_every_ = kProbeEvery;
  if (++plain_run_ > probe_every_) {
    plain_run_ = 0, probe_every_ = std::min(2 * probe_every_, kProbeMax);
    return cap_;
  }
  return 0;
}

}  // namespace nemo::engine
