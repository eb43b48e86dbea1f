#include "speculative/drafter.h"

#include <algorithm>

namespace nemo::speculative {

void NgramDrafter::begin(std::span<const int32_t> prompt, const float*, int32_t anchor) {
  seq_.assign(prompt.begin(), prompt.end());
  seq_.push_back(anchor);
}

DraftProposal NgramDrafter::propose(int max_n, const SamplingParams&, Rng&) {
  DraftProposal p;
  const int64_t n = int64_t(seq_.size());
  for (int len = max_n_; len >= min_n_ && p.tokens.empty(); --len) {
    if (len >= n) continue;
    const int32_t* suffix = seq_.data() + n - len;
    // Most recent earlier occurrence of the suffix.
    for (int64_t start = n - len - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + len, seq_.data() + start)) continue;
      for (int64_t j = start + len; j < n && int(p.tokens.size()) < max_n; ++j) p.tokens.push_back(seq_[size_t(j)]);
      break;
    }
  }
  return p;
}

void NgramDrafter::commit(std::span<const int32_t> accepted, int32_t next_anchor, const float*) {
  seq_.insert(seq_.end(), accepted.begin(), accepted.end());
  seq_.push_back(next_anchor);
}

DraftProposal ScriptedDrafter::propose(int max_n, const SamplingParams&, Rng&) {
  DraftProposal p;
  for (int64_t i = pos_; i < int64_t(script_.size()) && int(p.tokens.size()) < max_n; ++i)
    p.tokens.push_back(wrong_ ? int32_t((script_[size_t(i)] + 1) % vocab_) : script_[size_t(i)]);
  return p;
}

}  // namespace nemo::speculative
