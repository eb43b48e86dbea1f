#include "speculative/dflash_drafter.h"

#include <algorithm>

#include "base/error.h"
#include "base/memory.h"

namespace nemo::speculative {

DFlashDrafter::DFlashDrafter(const model::DFlashModel& draft, ThreadConfig tc)
    : draft_(draft), tc_(tc) {}

void DFlashDrafter::begin(std::span<const int32_t> prompt, const float* taps, int32_t anchor) {
  if (!taps) fail("drafter '{}': begin() without the target's taps (tap_layers)", name());
  ctx_ = draft_.new_context();
  draft_.append_context(ctx_, taps, int64_t(prompt.size()), tc_);
  anchor_ = anchor;
}

DraftProposal DFlashDrafter::propose(int max_n, const SamplingParams& sp, Rng& rng) {
  DraftProposal prop;
  const int64_t first = draft_.first_slot();
  const int64_t k = std::min<int64_t>(max_n, draft_.block_size() - first);
  round_ = {};
  if (k <= 0) return prop;
  const auto& target = draft_.target();
  const int64_t H = target.config().hidden_size, V = target.config().vocab_size, Q = k + first;
  Buffer<float> z(size_t(k * H));
  draft_.block_hidden(ctx_, anchor_, Q, z.data(), tc_);
  round_.p = ctx_.n, round_.q_rows = Q, round_.anchor = anchor_;
  round_.base.resize(size_t(k * V));
  target.logits_from_hidden(z.data(), k, round_.base.data(), tc_);
  round_.final = round_.base;
  std::vector<float> bias(draft_.has_markov() ? size_t(V) : 0);
  int32_t prev = anchor_;
  for (int64_t i = 0; i < k; ++i) {
    const std::span<float> row(round_.final.data() + i * V, size_t(V));
    if (draft_.has_markov()) {  // the walk conditions on the previous draft, as drafted
      draft_.markov_bias(prev, bias.data(), tc_);
      for (int64_t t = 0; t < V; ++t) row[size_t(t)] = row[size_t(t)] + bias[size_t(t)];
    }
    int32_t d;
    if (sp.greedy()) {
      d = kernels::argmax(row);
    } else {  // sampled drafts carry their distribution q for the rejection rule (§7)
      prop.q.push_back(kernels::sampling_distribution(row, sp));
      d = kernels::draw(prop.q.back(), rng);
    }
    prop.tokens.push_back(d);
    prev = d;
  }
  round_.drafts = prop.tokens;
  ++proposals_;
  return prop;
}

void DFlashDrafter::commit(std::span<const int32_t> accepted, int32_t next_anchor,
                           const float* taps) {
  if (!taps) fail("drafter '{}': commit() without the target's taps (tap_layers)", name());
  // Rows anchor, d_1..d_a are now committed: their taps extend the context (§1.8).
  draft_.append_context(ctx_, taps, int64_t(accepted.size()) + 1, tc_);
  anchor_ = next_anchor;
}

}  // namespace nemo::speculative
