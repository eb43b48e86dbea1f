#include "speculative/mtp_drafter.h"

#include <algorithm>

namespace nemo::speculative {

MtpDrafter::MtpDrafter(const model::NemotronH& target, ThreadConfig tc)
    : target_(target), head_(model::MtpHead::load(target)), st_(head_->new_state()), tc_(tc) {
  seed_hidden_.resize(size_t(target.config().hidden_size));
  logits_.resize(size_t(target.config().vocab_size));
}

void MtpDrafter::run_committed(const float* hidden, std::span<const int32_t> next_tokens) {
  const int64_t T = int64_t(next_tokens.size()), H = target_.config().hidden_size;
  head_->truncate(st_, committed_slots_);  // drop the slots chained while drafting
  Buffer<float> out(size_t(T * H));
  head_->forward(st_, hidden, next_tokens, out.data(), tc_);
  committed_slots_ += T;
  std::copy_n(out.data() + (T - 1) * H, H, seed_hidden_.data());
  target_.logits_from_hidden(seed_hidden_.data(), 1, logits_.data(), tc_);
}

void MtpDrafter::flush() {
  if (pending_tokens_.empty()) return;
  run_committed(pending_hidden_.data(), pending_tokens_);
  pending_hidden_.clear();
  pending_tokens_.clear();
}

void MtpDrafter::begin(std::span<const int32_t> prompt, const float* hidden, int32_t anchor) {
  st_ = head_->new_state();
  committed_slots_ = 0;
  pending_hidden_.clear();
  pending_tokens_.clear();
  // Slot i pairs (h_i, t_{i+1}); the last prompt slot pairs with the anchor.
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(anchor);
  run_committed(hidden, next);
}

DraftProposal MtpDrafter::propose(int max_n, const SamplingParams& sp, Rng& rng) {
  DraftProposal p;
  if (max_n <= 0) return p;
  flush();
  const int64_t H = target_.config().hidden_size, V = target_.config().vocab_size;
  const bool sampled = !sp.greedy();
  Buffer<float> h(static_cast<size_t>(H)), lg(static_cast<size_t>(V));
  std::copy_n(seed_hidden_.data(), H, h.data());
  std::copy_n(logits_.data(), V, lg.data());
  round_ = {};
  round_.p = committed_slots_;
  for (int j = 0; j < max_n; ++j) {
    round_.logits.insert(round_.logits.end(), lg.data(), lg.data() + V);
    int32_t tok;
    if (sampled) {
      auto q = kernels::sampling_distribution({lg.data(), size_t(V)}, sp);
      tok = kernels::draw(q, rng);
      p.q.push_back(std::move(q));
    } else {
      tok = kernels::argmax({lg.data(), size_t(V)});
    }
    p.tokens.push_back(tok);
    if (j + 1 == max_n) break;
    // Chain: the module on its own output and the token it just proposed.
    const int32_t in[1] = {tok};
    Buffer<float> out(static_cast<size_t>(H));
    head_->forward(st_, h.data(), in, out.data(), tc_);
    h = std::move(out);
    target_.logits_from_hidden(h.data(), 1, lg.data(), tc_);
  }
  round_.drafts = p.tokens;
  ++proposals_;
  return p;
}

void MtpDrafter::commit(std::span<const int32_t> accepted, int32_t next_anchor,
                        const float* hidden) {
  const size_t H = size_t(target_.config().hidden_size), n = accepted.size() + 1;
  pending_hidden_.insert(pending_hidden_.end(), hidden, hidden + n * H);
  pending_tokens_.insert(pending_tokens_.end(), accepted.begin(), accepted.end());
  pending_tokens_.push_back(next_anchor);
  if (pending_tokens_.size() > kMaxPendingSlots) {
    const size_t drop = pending_tokens_.size() - kMaxPendingSlots;
    pending_tokens_.erase(pending_tokens_.begin(), pending_tokens_.begin() + ptrdiff_t(drop));
    pending_hidden_.erase(pending_hidden_.begin(), pending_hidden_.begin() + ptrdiff_t(drop * H));
  }
}

}  // namespace nemo::speculative
