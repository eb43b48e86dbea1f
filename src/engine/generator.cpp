#include "engine/generator.h"

#include <algorithm>

#include "base/clock.h"
#include "base/error.h"
#include "speculative/dflash_drafter.h"
#include "speculative/mtp_drafter.h"

namespace nemo::engine {

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "auto") return SpecMode::Auto;
  if (s == "none") return SpecMode::None;
  if (s == "mtp") return SpecMode::Mtp;
  if (s == "ngram") return SpecMode::Ngram;
  if (s == "dflash") return SpecMode::DFlash;
  if (s == "dspark") return SpecMode::DSpark;
  fail("--spec '{}': expected auto, mtp, dflash, dspark, ngram or none", s);
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::Auto:
      return "auto";
    case SpecMode::None:
      return "none";
    case SpecMode::Mtp:
      return "mtp";
    case SpecMode::Ngram:
      return "ngram";
    case SpecMode::DFlash:
      return "dflash";
    case SpecMode::DSpark:
      return "dspark";
  }
  return "?";
}

namespace {
void check_draft_max(int draft_max) {
  if (draft_max < 1 || draft_max > Generator::kMaxDraft)
    fail("--draft-max {} is outside [1, {}]", draft_max, Generator::kMaxDraft);
}
}  // namespace

Generator::Generator(const model::NemotronH& m, ThreadConfig tc, SpecMode mode, int draft_max,
                     const model::DFlashModel* draft)
    : m_(m), tc_(tc), mode_(mode), draft_max_(draft_max) {
  if (mode_ == SpecMode::Auto)
    mode_ = draft                        ? (draft->dspark() ? SpecMode::DSpark : SpecMode::DFlash)
            : model::MtpHead::present(m) ? SpecMode::Mtp
                                         : SpecMode::None;
  const bool external = mode_ == SpecMode::DFlash || mode_ == SpecMode::DSpark;
  if (draft && !external)
    fail("--draft {} is used with --spec auto, dflash or dspark, not --spec {}", draft->dir(),
         spec_mode_name(mode_));
  if (external) {
    const std::string want = mode_ == SpecMode::DSpark ? "dspark" : "dflash";
    if (!draft) fail("--spec {} needs a drafter: --draft DIR", want);
    if (draft->config().kind != want)
      fail("--draft {} is a {} drafter; use --spec {} (or auto)", draft->dir(),
           draft->config().kind, draft->config().kind);
    // Default γ: the drafter's whole block (block_size − 1 drafts with the bonus-anchor layout).
    if (draft_max_ == 0)
      draft_max_ = int(std::min<int64_t>(kMaxDraft, draft->block_size() - draft->first_slot()));
  }
  if (draft_max_ == 0) draft_max_ = 3;
  if (mode_ != SpecMode::None) check_draft_max(draft_max_);
  if (mode_ == SpecMode::Mtp) {
    if (!model::MtpHead::present(m))
      fail(
          "{}: --spec mtp needs a checkpoint with an MTP module (mtp.* tensors); use --spec ngram "
          "or none",
          m.store().dir());
    drafter_ = std::make_unique<speculative::MtpDrafter>(m, tc);
  } else if (mode_ == SpecMode::Ngram) {
    drafter_ = std::make_unique<speculative::NgramDrafter>();
  } else if (external) {
    drafter_ = std::make_unique<speculative::DFlashDrafter>(*draft, tc);
  }
}

Generator::Generator(const model::NemotronH& m, ThreadConfig tc,
                     std::unique_ptr<speculative::Drafter> drafter, int draft_max)
    : m_(m), tc_(tc), draft_max_(draft_max), drafter_(std::move(drafter)) {
  if (drafter_) check_draft_max(draft_max);
}

Generator::~Generator() = default;

void Generator::begin(GenerateRequest req) {
  if (req.prompt.empty()) fail("generate: the prompt is empty");
  req_ = std::move(req);
  sampler_.emplace(req_.sampling);
  st_.emplace(m_.new_state());
  const int slots = drafter_ ? draft_max_ : 1;
  s_ = {};
  s_.proposed_at.assign(size_t(slots), 0);
  s_.accepted_at.assign(size_t(slots), 0);
  prompt_logits_ = {};
  prefilled_ = false;
  done_ = false;
  finished_ = false;
  t_begin_ = now_seconds();
}

std::span<const Emitted> Generator::step() {
  out_.clear();
  if (done_) {
    finish();
    return {};
  }
  if (!prefilled_)
    prefill();
  else
    round();
  if (done_) finish();
  return out_;
}

bool Generator::emit(int32_t token, std::span<const float> row) {
  out_.push_back({token, row});
  ++s_.emitted;
  const bool stop =
      std::find(req_.stop_tokens.begin(), req_.stop_tokens.end(), token) != req_.stop_tokens.end();
  if (stop || s_.emitted >= req_.max_tokens) done_ = true;
  return !done_;
}

void Generator::finish() {
  if (finished_) return;
  finished_ = true;
  s_.total_s = now_seconds() - t_begin_;
  total_.add(s_);
}

// The forward options that give the drafter the features it reads (dflash_dspark.md §1.1, §4).
model::ForwardOptions Generator::features_options() const {
  model::ForwardOptions fo;
  if (!drafter_) return fo;
  fo.want_hidden = drafter_->wants_hidden();
  fo.all_logits = fo.want_hidden;  // hidden states come with the logits rows
  fo.taps = drafter_->tap_layers();
  fo.tap_last_post_norm = drafter_->tap_last_post_norm();
  return fo;
}

const float* Generator::features() const {
  if (!drafter_) return nullptr;
  if (drafter_->wants_hidden()) return r_.hidden.data();
  return drafter_->tap_layers().empty() ? nullptr : r_.taps.data();
}

// Prompt → first token. A drafter that reads hidden states or taps needs every prompt row's.
void Generator::prefill() {
  const int64_t V = m_.config().vocab_size;
  model::ForwardOptions fo = features_options();
  fo.all_logits = fo.all_logits || req_.prompt_logits;
  fo.profile = profile_;
  double t0 = now_seconds();
  r_ = m_.forward(*st_, req_.prompt, fo, tc_);
  s_.prefill_s = now_seconds() - t0;
  prefilled_ = true;
  if (req_.prompt_logits) prompt_logits_ = std::move(r_.logits);
  const Buffer<float>& lg = req_.prompt_logits ? prompt_logits_ : r_.logits;
  const std::span<const float> last{lg.data() + (r_.rows - 1) * V, size_t(V)};
  anchor_ = sampler_->sample(last);
  if (!emit(anchor_, last)) return;
  if (drafter_) {
    t0 = now_seconds();
    drafter_->begin(req_.prompt, features(), anchor_);
    s_.draft_s += now_seconds() - t0;
  }
}

// One target forward over [anchor, d_1..d_k]; emits the verdict's tokens and keeps exactly the
// accepted rows of the state (NemotronH::accept replays the Mamba recurrence, truncates KV).
void Generator::round() {
  const int64_t V = m_.config().vocab_size;
  // Never draft past the token budget: a round emits at most k + 1 tokens.
  const int k_max = int(std::min<int64_t>(draft_max_, req_.max_tokens - s_.emitted - 1));
  speculative::DraftProposal prop;
  double t0;
  if (drafter_ && k_max > 0) {
    t0 = now_seconds();
    prop = drafter_->propose(k_max, req_.sampling, sampler_->rng());
    s_.draft_s += now_seconds() - t0;
    if (int(prop.tokens.size()) > k_max) prop.tokens.resize(size_t(k_max));
    for (auto t : prop.tokens)
      if (t < 0 || t >= V)
        fail("drafter '{}' proposed token {} outside the vocabulary", drafter_->name(), t);
    if (!prop.q.empty() && prop.q.size() < prop.tokens.size())
      fail("drafter '{}' returned {} draft distributions for {} tokens", drafter_->name(),
           prop.q.size(), prop.tokens.size());
  }
  const int k = int(prop.tokens.size());
  std::vector<int32_t> rows{anchor_};
  rows.insert(rows.end(), prop.tokens.begin(), prop.tokens.end());
  model::ForwardOptions fo = features_options();
  fo.all_logits = true;
  fo.record = k > 0;  // a lone anchor row is always kept: nothing to roll back
  fo.profile = profile_;
  t0 = now_seconds();
  r_ = m_.forward(*st_, rows, fo, tc_);
  s_.verify_s += now_seconds() - t0;
  ++s_.rounds;
  s_.drafted += k;

  const speculative::Verdict v = speculative::verify({r_.logits.data(), r_.logits.size()}, V, prop,
                                                     req_.sampling, sampler_->rng());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const bool kept = int(i) < v.accepted;
    if (int(i) < k) ++s_.proposed_at[i];
    if (kept) {
      ++s_.accepted;
      ++s_.accepted_at[i];
    }
    if (!emit(v.tokens[i], {r_.logits.data() + int64_t(i) * V, size_t(V)}))
      return;  // ends here: no rollback
  }
  if (k > 0) {
    t0 = now_seconds();
    m_.accept(*st_, v.accepted + 1);
    s_.rollback_s += now_seconds() - t0;
  }
  anchor_ = v.tokens.back();
  if (drafter_) {
    t0 = now_seconds();
    drafter_->commit(std::span<const int32_t>(prop.tokens).first(size_t(v.accepted)), anchor_,
                     features());
    s_.draft_s += now_seconds() - t0;
  }
}

GenerateStats Generator::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  begin(req);
  while (!done()) {
    for (const Emitted& e : step())
      if (!on_token(e.token)) {
        cancel();
        break;
      }
  }
  finish();
  GenerateStats g;
  g.prompt_tokens = int64_t(req_.prompt.size());
  g.spec = s_;
  g.generated_tokens = s_.emitted;
  g.prefill_seconds = s_.prefill_s;
  g.decode_seconds = s_.total_s - s_.prefill_s;
  return g;
}

}  // namespace nemo::engine
