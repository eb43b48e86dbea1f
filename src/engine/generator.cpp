#include "engine/generator.h"

#include "base/error.h"
#include "spec/mtp_drafter.h"

namespace nemo::engine {

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "auto") return SpecMode::Auto;
  if (s == "none") return SpecMode::None;
  if (s == "mtp") return SpecMode::Mtp;
  if (s == "ngram") return SpecMode::Ngram;
  fail("--spec '{}': expected auto, mtp, ngram or none", s);
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::Auto: return "auto";
    case SpecMode::None: return "none";
    case SpecMode::Mtp: return "mtp";
    case SpecMode::Ngram: return "ngram";
  }
  return "?";
}

Generator::Generator(const model::NemotronH& m, ThreadConfig tc, SpecMode mode, int draft_max)
    : m_(m), tc_(tc), mode_(mode), draft_max_(draft_max) {
  if (mode_ == SpecMode::Auto) mode_ = model::MtpHead::present(m) ? SpecMode::Mtp : SpecMode::None;
  if (mode_ != SpecMode::None && (draft_max < 1 || draft_max > spec::SpeculativeDecoder::kMaxDraft))
    fail("--draft-max {} is outside [1, {}]", draft_max, spec::SpeculativeDecoder::kMaxDraft);
  if (mode_ == SpecMode::Mtp) {
    if (!model::MtpHead::present(m))
      fail("{}: --spec mtp needs a checkpoint with an MTP module (mtp.* tensors); use --spec ngram or none",
           m.store().dir());
    drafter_ = std::make_unique<spec::MtpDrafter>(m, tc);
  } else if (mode_ == SpecMode::Ngram) {
    drafter_ = std::make_unique<spec::NgramDrafter>();
  }
}

GenerateStats Generator::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  spec::SpecRequest sr;
  sr.prompt = req.prompt;
  sr.max_tokens = req.max_tokens;
  sr.sampling = req.sampling;
  sr.stop_tokens = req.stop_tokens;
  sr.draft_max = drafter_ ? draft_max_ : 1;
  spec::SpeculativeDecoder dec(m_, tc_);
  GenerateStats g;
  g.prompt_tokens = int64_t(req.prompt.size());
  g.spec = dec.generate(sr, drafter_.get(), [&](int32_t t, std::span<const float>) { return on_token(t); });
  g.generated_tokens = g.spec.emitted;
  g.prefill_seconds = g.spec.prefill_s;
  g.decode_seconds = g.spec.total_s - g.spec.prefill_s;
  total_.add(g.spec);
  return g;
}

}  // namespace nemo::engine
