// The one decode loop. A Generator runs one sequence at a time: begin(request), then step()
// until done() — the first step prefills the prompt and samples the first token; every later
// step is one target forward (a plain decode row, or a verify round over [anchor, drafts] when a
// drafter is set) and returns the tokens it decided. Steps can be interleaved with other
// Generators' steps (the server), cancelled at any point, or run to the end by generate().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/draft_policy.h"
#include "engine/sampler.h"
#include "model/dflash.h"
#include "model/nemotron_h.h"
#include "speculative/drafter.h"
#include "speculative/verify.h"

namespace nemo::engine {

enum class SpecMode { Auto, None, Mtp, Ngram, DFlash, DSpark };
SpecMode parse_spec_mode(const std::string& s);  // auto | none | mtp | ngram | dflash | dspark
const char* spec_mode_name(SpecMode m);
// What Auto drafts with: the external drafter when given (its DFlash / DSpark mode), else MTP if
// the checkpoint carries it, else none.
SpecMode auto_spec_mode(const model::NemotronH& m, const model::DFlashModel* draft);

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  bool prompt_logits = false;        // keep the logits of every prompt row (prompt_logits())
  // Prompt rows per forward: 0 = the whole prompt at once. Otherwise pieces of this many rows
  // (a multiple of the SSD chunk size), each continuing the chunked scan, so the result is
  // bitwise the one-piece prefill (model test PrefillSplitAtChunkBoundaryIsExact).
  int64_t prefill_piece = 0;
};

// A prompt prefix restored from the prefix cache: the state after its rows, and the drafter's
// features of those rows (empty when the drafter reads none).
struct RestoredPrefix {
  int64_t rows = 0;  // a multiple of the SSD chunk size, below the prompt length
  const model::SequenceState* state = nullptr;
  std::span<const float> features;
};

// One token decided by a step, with the target logits row it was decided from (valid until the
// next step()).
struct Emitted {
  int32_t token;
  std::span<const float> logits;
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  speculative::SpecStats spec;
};

// Called once per generated token; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

class Generator {
 public:
  static constexpr int kMaxDraft = 15;  // verify width 1 + γ stays within the 16-row invariant path

  // Auto: the external drafter when one is given (DFlash / DSpark), else MTP if the checkpoint
  // carries it, else none (auto_spec_mode); greedy requests whose rounds run alone (step(), or
  // plan(item, true)) then draft as many tokens per round as pays (DraftPolicy: 0 to draft_max,
  // by the rounds' times and acceptance). A mode whose drafter is missing is an error.
  // draft_max 0 = the drafter's default (3 for MTP and n-gram; block size − 1 for DFlash / DSpark).
  Generator(const model::NemotronH& m, ThreadConfig tc, SpecMode mode = SpecMode::None,
            int draft_max = 0, const model::DFlashModel* draft = nullptr);
  // Any drafter (n-gram, scripted oracle, ...); null = plain decoding.
  Generator(const model::NemotronH& m, ThreadConfig tc,
            std::unique_ptr<speculative::Drafter> drafter, int draft_max);
  ~Generator();

  // Starts a request; with `prefix`, the prompt's first prefix->rows rows are not run again.
  void begin(GenerateRequest req, const RestoredPrefix* prefix = nullptr);
  // One forward: a prompt piece, a decode row or a verify round. Empty once done(). The same
  // as plan() + NemotronH::forward + complete(), which a scheduler uses to batch many
  // Generators' forwards into one pass.
  std::span<const Emitted> step();
  // The forward this step needs (drafting happens here). False once done(). alone: the forward
  // will run by itself, so its time is this request's and --spec auto's policy may use it.
  bool plan(model::BatchItem& item, bool alone = false);
  // Takes that forward's result; returns the tokens it decided (none for a non-final prompt
  // piece).
  std::span<const Emitted> complete(model::ForwardResult r);
  bool done() const { return done_; }
  void cancel() { done_ = true; }

  // begin + step until done, calling on_token for every token (false stops the request).
  GenerateStats generate(const GenerateRequest& req, const TokenCallback& on_token);

  // The current (or last) request's telemetry, and the sum over all finished requests.
  const speculative::SpecStats& stats() const { return s_; }
  const speculative::SpecStats& cumulative() const { return total_; }
  // Logits of every prompt row [prompt, V], after the first step of a request with prompt_logits.
  std::span<const float> prompt_logits() const {
    return {prompt_logits_.data(), prompt_logits_.size()};
  }
  // The adaptive draft length's estimates (--spec auto); null for a fixed draft length.
  const DraftPolicy* draft_policy() const { return policy_ ? &*policy_ : nullptr; }
  // Per-block wall time of every forward this Generator runs (for bench); null = off.
  void set_profile(model::ForwardProfile* p) { profile_ = p; }

  // The current sequence's state (after the first begin()).
  const model::SequenceState& state() const { return *st_; }
  // Prompt rows already in the state (the prompt length once prefilled), and the drafter
  // features of those rows (what the prefix cache stores beside a snapshot).
  int64_t prompt_rows_done() const { return prompt_done_; }
  bool prefilling() const { return !prefilled_; }
  std::span<const float> prompt_features() const { return prompt_features_; }
  // Width of one row of drafter features (0: the drafter reads none), and a key naming their kind.
  int64_t feature_width() const;
  std::string feature_key() const;
  SpecMode mode() const { return mode_; }
  int draft_max() const { return draft_max_; }
  const speculative::Drafter* drafter() const { return drafter_.get(); }

 private:
  bool plan_prefill(model::BatchItem& item);
  void complete_prefill(model::ForwardResult& r);
  bool plan_round(model::BatchItem& item);
  void complete_round(model::ForwardResult& r);
  model::ForwardOptions features_options() const;
  const float* features() const;
  // Emits `token` (decided from `row`); false once the request has ended.
  bool emit(int32_t token, std::span<const float> row);
  void finish();

  const model::NemotronH& m_;
  ThreadConfig tc_;
  SpecMode mode_ = SpecMode::None;
  int draft_max_ = 1;
  std::unique_ptr<speculative::Drafter> drafter_;
  std::optional<DraftPolicy> policy_;  // --spec auto with a drafter
  bool timed_round_ = false;           // the planned round runs alone and is timed
  double t_round_ = 0;
  model::ForwardProfile* profile_ = nullptr;

  // Per request.
  GenerateRequest req_;
  std::optional<Sampler> sampler_;
  std::optional<model::SequenceState> st_;
  model::ForwardResult r_;
  std::vector<Emitted> out_;
  Buffer<float> prompt_logits_;
  int32_t anchor_ = -1;
  bool prefilled_ = false, done_ = true, finished_ = true;
  int64_t prompt_done_ = 0;             // prompt rows in the state
  std::vector<float> prompt_features_;  // drafter features of those rows
  std::vector<int32_t> rows_;           // the planned forward's tokens
  speculative::DraftProposal prop_;     // the planned round's drafts
  double t_plan_ = 0;
  double t_begin_ = 0;
  speculative::SpecStats s_, total_;
};

}  // namespace nemo::engine
