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

SpecMode auto_spec_mode(const model::NemotronH& m, const model::DFlashModel* draft) {
  if (draft) return draft->dspark() ? SpecMode::DSpark : SpecMode::DFlash;
  return model::MtpHead::present(m) ? SpecMode::Mtp : SpecMode::None;
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
  const bool adaptive = mode_ == SpecMode::Auto;
  if (mode_ == SpecMode::Auto) mode_ = auto_spec_mode(m, draft);
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
  if (adaptive && drafter_) policy_.emplace(draft_max_);
}

Generator::Generator(const model::NemotronH& m, ThreadConfig tc,
                     std::unique_ptr<speculative::Drafter> drafter, int draft_max)
    : m_(m), tc_(tc), draft_max_(draft_max), drafter_(std::move(drafter)) {
  if (drafter_) check_draft_max(draft_max);
}

Generator::~Generator() = default;

void Generator::begin(GenerateRequest req, const RestoredPrefix* prefix) {
  if (req.prompt.empty()) fail("generate: the prompt is empty");
  const int64_t Q = m_.config().chunk_size;
  if (req.prefill_piece < 0 || req.prefill_piece % Q != 0)
    fail("generate: prefill_piece {} is not a multiple of the SSD chunk size {}", req.prefill_piece,
         Q);
  req_ = std::move(req);
  sampler_.emplace(req_.sampling);
  st_.emplace(m_.new_state());
  const int slots = drafter_ ? draft_max_ : 1;
  s_ = {};
  s_.proposed_at.assign(size_t(slots), 0);
  s_.accepted_at.assign(size_t(slots), 0);
  prompt_logits_ = {};
  prompt_features_.clear();
  prompt_done_ = 0;
  prefilled_ = false;
  done_ = false;
  finished_ = false;
  t_begin_ = now_seconds();
  if (prefix && prefix->rows > 0) {
    const int64_t N = int64_t(req_.prompt.size());
    // Exact only at chunk boundaries, with the rest of the prompt continuing the chunked scan
    // (which a one-piece prefill of N >= ssd_min_rows rows also uses).
    if (prefix->rows % Q != 0 || prefix->rows >= N || N < model::ForwardOptions{}.ssd_min_rows)
      fail("generate: a restored prefix of {} rows cannot continue a prompt of {} rows exactly",
           prefix->rows, N);
    if (req_.prompt_logits) fail("generate: prompt_logits needs the whole prompt prefilled");
    if (int64_t(prefix->features.size()) != prefix->rows * feature_width())
      fail("generate: the restored prefix carries features of another drafter");
    st_->restore(*prefix->state);
    prompt_features_.assign(prefix->features.begin(), prefix->features.end());
    prompt_done_ = prefix->rows;
  }
}

int64_t Generator::feature_width() const {
  if (!drafter_) return 0;
  const int64_t H = m_.config().hidden_size;
  if (drafter_->wants_hidden()) return H;
  return int64_t(drafter_->tap_layers().size()) * H;
}

std::string Generator::feature_key() const {
  if (!drafter_ || feature_width() == 0) return "";
  if (drafter_->wants_hidden()) return "hidden";
  std::string k = "taps";
  // (fmt, not ":" + std::to_string: GCC 12 warns falsely (-Wrestrict) on a literal + string&&.)
  for (auto L : drafter_->tap_layers()) k += fmt::format(":{}", L);
  return drafter_->tap_last_post_norm() ? k + ":post" : k;
}

std::span<const Emitted> Generator::step() {
  model::BatchItem item;
  if (!plan(item, true)) {
    out_.clear();
    finish();
    return {};
  }
  return complete(m_.forward(*item.st, item.tokens, item.opt, tc_));
}

bool Generator::plan(model::BatchItem& item, bool alone) {
  if (done_) return false;
  t_plan_ = now_seconds();
  // A greedy round run alone is timed, drafting to the drafter's bookkeeping, for the draft
  // length policy: any length gives the same tokens, and the forward's time is this request's.
  timed_round_ = alone && policy_ && prefilled_ && req_.sampling.greedy();
  t_round_ = t_plan_;
  const bool ok = prefilled_ ? plan_round(item) : plan_prefill(item);
  item.opt.profile = profile_;
  return ok;
}

std::span<const Emitted> Generator::complete(model::ForwardResult r) {
  out_.clear();
  r_ = std::move(r);
  if (!prefilled_)
    complete_prefill(r_);
  else
    complete_round(r_);
  if (timed_round_) policy_->observe(int(prop_.tokens.size()), now_seconds() - t_round_);
  timed_round_ = false;
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

// The next prompt piece. A drafter that reads hidden states or taps needs every prompt row's.
bool Generator::plan_prefill(model::BatchItem& item) {
  const int64_t N = int64_t(req_.prompt.size());
  const int64_t piece = req_.prefill_piece > 0 ? req_.prefill_piece : N;
  int64_t n = std::min(piece, N - prompt_done_);
  // In pieces, one also ends at the last chunk boundary before the prompt's end: the snapshot
  // there is the one a continuation of this prompt (the next chat turn) can resume from.
  const int64_t Q = m_.config().chunk_size, last_boundary = (N - 1) / Q * Q;
  if (req_.prefill_piece > 0 && prompt_done_ < last_boundary && prompt_done_ + n > last_boundary)
    n = last_boundary - prompt_done_;
  item.st = &*st_;
  item.tokens = std::span<const int32_t>(req_.prompt).subspan(size_t(prompt_done_), size_t(n));
  item.opt = features_options();
  item.opt.all_logits = item.opt.all_logits || req_.prompt_logits;
  // A prompt that takes the chunked scan in one piece takes it in every piece (exactness).
  if (N >= model::ForwardOptions{}.ssd_min_rows) item.opt.ssd_min_rows = 1;
  return true;
}

void Generator::complete_prefill(model::ForwardResult& r) {
  const int64_t V = m_.config().vocab_size, N = int64_t(req_.prompt.size());
  const int64_t n = st_->n_past() - prompt_done_;
  s_.prefill_s += now_seconds() - t_plan_;
  if (const float* f = features()) {
    const int64_t w = feature_width();
    prompt_features_.insert(prompt_features_.end(), f, f + n * w);
  }
  if (req_.prompt_logits) {
    Buffer<float> all(prompt_logits_.size() + r.logits.size());
    std::copy_n(prompt_logits_.data(), prompt_logits_.size(), all.data());
    std::copy_n(r.logits.data(), r.logits.size(), all.data() + prompt_logits_.size());
    prompt_logits_ = std::move(all);
  }
  prompt_done_ += n;
  if (prompt_done_ < N) return;  // more pieces to go
  prefilled_ = true;
  const std::span<const float> last{r.logits.data() + (r.rows - 1) * V, size_t(V)};
  anchor_ = sampler_->sample(last);
  if (!emit(anchor_, last)) return;
  if (drafter_) {
    const double t0 = now_seconds();
    drafter_->begin(req_.prompt, prompt_features_.empty() ? nullptr : prompt_features_.data(),
                    anchor_);
    s_.draft_s += now_seconds() - t0;
  }
}

// One target forward over [anchor, d_1..d_k]; emits the verdict's tokens and keeps exactly the
// accepted rows of the state (NemotronH::accept replays the Mamba recurrence, truncates KV).
bool Generator::plan_round(model::BatchItem& item) {
  const int64_t V = m_.config().vocab_size;
  // Never draft past the token budget: a round emits at most k + 1 tokens.
  const int want = timed_round_ ? policy_->next(s_.proposed_at, s_.accepted_at) : draft_max_;
  const int k_max = int(std::min<int64_t>(want, req_.max_tokens - s_.emitted - 1));
  prop_ = {};
  if (drafter_ && k_max > 0) {
    const double t0 = now_seconds();
    prop_ = drafter_->propose(k_max, req_.sampling, sampler_->rng());
    s_.draft_s += now_seconds() - t0;
    if (int(prop_.tokens.size()) > k_max) prop_.tokens.resize(size_t(k_max));
    for (auto t : prop_.tokens)
      if (t < 0 || t >= V)
        fail("drafter '{}' proposed token {} outside the vocabulary", drafter_->name(), t);
    if (!prop_.q.empty() && prop_.q.size() < prop_.tokens.size())
      fail("drafter '{}' returned {} draft distributions for {} tokens", drafter_->name(),
           prop_.q.size(), prop_.tokens.size());
  }
  rows_.assign(1, anchor_);
  rows_.insert(rows_.end(), prop_.tokens.begin(), prop_.tokens.end());
  item.st = &*st_;
  item.tokens = rows_;
  item.opt = features_options();
  item.opt.all_logits = true;
  item.opt.record = !prop_.tokens.empty();  // a lone anchor row is always kept
  t_plan_ = now_seconds();
  return true;
}

void Generator::complete_round(model::ForwardResult& r) {
  const int64_t V = m_.config().vocab_size;
  const int k = int(prop_.tokens.size());
  s_.verify_s += now_seconds() - t_plan_;
  ++s_.rounds;
  s_.drafted += k;

  const speculative::Verdict v = speculative::verify({r.logits.data(), r.logits.size()}, V, prop_,
                                                     req_.sampling, sampler_->rng());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const bool kept = int(i) < v.accepted;
    if (int(i) < k) ++s_.proposed_at[i];
    if (kept) {
      ++s_.accepted;
      ++s_.accepted_at[i];
    }
    if (!emit(v.tokens[i], {r.logits.data() + int64_t(i) * V, size_t(V)}))
      return;  // ends here: no rollback
  }
  if (k > 0) {
    const double t0 = now_seconds();
    m_.accept(*st_, v.accepted + 1, tc_);
    s_.rollback_s += now_seconds() - t0;
  }
  anchor_ = v.tokens.back();
  if (drafter_) {
    const double t0 = now_seconds();
    drafter_->commit(std::span<const int32_t>(prop_.tokens).first(size_t(v.accepted)), anchor_,
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
