// Shared by the speculative-decoding tests: cached tiny checkpoints, a request type, and a runner
// that steps the engine's decode loop and records every token with its logits row.
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../support/targets.h"
#include "../support/temp_dir.h"
#include "engine/generator.h"
#include "model/nemotron_h.h"
#include "speculative/drafter.h"
#include "speculative/verify.h"
#include "tools/synth/synth.h"

namespace nemo::test {

using namespace nemo::speculative;

// A tiny target (seed 3) in the given storage format (tests/support/targets.h).
inline model::NemotronH& model_for(const Target& t) {
  return load_target(t, 3);
}
inline model::NemotronH& model_for(const std::string& preset,
                                   synth::SynthFormat format = synth::SynthFormat::Dense) {
  return model_for(Target{.preset = preset, .format = format});
}
// The quantized targets, and the dense tiny-a with the rounding KV caches.
inline std::vector<Target> format_targets() {
  std::vector<Target> v = quantized_targets();
  v.push_back({.preset = "tiny-a", .kv = model::KvDtype::BF16});
  v.push_back({.preset = "tiny-a", .kv = model::KvDtype::FP8});
  return v;
}

struct SpecRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  SpecStats stats;
};

// What a test asks for: a generation request plus the draft length.
struct SpecRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;
  int draft_max = 4;
};

// Lends a test-owned drafter to a Generator (which owns its drafter).
class Borrowed : public Drafter {
 public:
  explicit Borrowed(Drafter& d) : d_(d) {}
  std::string name() const override { return d_.name(); }
  bool wants_hidden() const override { return d_.wants_hidden(); }
  std::span<const int64_t> tap_layers() const override { return d_.tap_layers(); }
  bool tap_last_post_norm() const override { return d_.tap_last_post_norm(); }
  void begin(std::span<const int32_t> p, const float* h, int32_t a) override { d_.begin(p, h, a); }
  DraftProposal propose(int n, const SamplingParams& sp, Rng& rng) override {
    return d_.propose(n, sp, rng);
  }
  void commit(std::span<const int32_t> acc, int32_t next, const float* h) override {
    d_.commit(acc, next, h);
  }

 private:
  Drafter& d_;
};

// Runs the engine's one decode loop step by step, recording every token and its logits row.
inline SpecRun run(const model::NemotronH& m, const SpecRequest& req, Drafter* d, int threads = 1) {
  SpecRun r;
  engine::Generator g(m, ThreadConfig{threads}, d ? std::make_unique<Borrowed>(*d) : nullptr,
                      req.draft_max);
  g.begin({req.prompt, req.max_tokens, req.sampling, req.stop_tokens});
  while (!g.done())
    for (const engine::Emitted& e : g.step()) {
      r.tokens.push_back(e.token);
      r.logits.insert(r.logits.end(), e.logits.begin(), e.logits.end());
    }
  r.stats = g.stats();
  return r;
}

inline std::vector<int32_t> prompt_of(int kind, int64_t vocab) {
  std::vector<int32_t> p;
  if (kind == 0)  // repetitive: n-gram food
    for (int i = 0; i < 24; ++i) p.push_back(int32_t((i % 5) * 7 % vocab));
  else if (kind == 1)
    for (int i = 0; i < 9; ++i) p.push_back(int32_t((i * 131 + 17) % vocab));
  else
    p = {3};
  return p;
}

// Regularised upper incomplete gamma Q(a, x) (series for x < a+1, continued fraction otherwise).
inline double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double gln = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, del = sum, ap = a;
    for (int n = 0; n < 1000; ++n) {
      ap += 1;
      del *= x / ap;
      sum += del;
      if (std::fabs(del) < std::fabs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - gln);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - gln) * h;
}

using Dist = kernels::Distribution;

// The target's exact sampling distribution after `prefix` (prompt + generated tokens).
inline Dist target_dist(const model::NemotronH& m, const std::vector<int32_t>& seq,
                        const SamplingParams& sp) {
  auto st = m.new_state();
  auto r = m.forward(st, seq, {}, ThreadConfig{1});
  return sampling_distribution({r.logits.data(), size_t(m.config().vocab_size)}, sp);
}

using Joint = std::map<std::vector<int32_t>, double>;

// The distributional tests' setting: T 1.5, top-k 4 after a fixed prompt; three tokens, γ = 2
// (so token 2 is the first draft and token 3 the second or a bonus).
inline SamplingParams first_three_sampling() {
  SamplingParams sp;
  sp.temperature = 1.5f;
  sp.top_k = 4;
  return sp;
}
inline const std::vector<int32_t> kFirstThreePrompt = {11, 12, 13, 14};
inline SpecRequest first_three_request() {
  SpecRequest req;
  req.prompt = kFirstThreePrompt;
  req.max_tokens = 3;
  req.sampling = first_three_sampling();
  req.draft_max = 2;
  return req;
}

// Exact joint distribution of the first three sampled tokens after `prompt` under the target.
inline Joint exact_first_three(const model::NemotronH& m, const std::vector<int32_t>& prompt,
                               const SamplingParams& sp) {
  Joint exact;
  for (auto [a, pa] : target_dist(m, prompt, sp)) {
    auto s1 = prompt;
    s1.push_back(a);
    for (auto [b, pb] : target_dist(m, s1, sp)) {
      auto s2 = s1;
      s2.push_back(b);
      for (auto [c, pc] : target_dist(m, s2, sp)) exact[{a, b, c}] = pa * pb * pc;
    }
  }
  return exact;
}

// Chi-square of observed 3-token sequences (`counts` over N runs) against `exact`, restricted to
// the positions in `mask` (bit j = token j). Returns the p-value; *chi2 and *cells describe it.
inline double chi2_pvalue(const Joint& exact, const std::map<std::vector<int32_t>, int>& counts, int N, int mask,
                          double* chi2_out = nullptr, int* cells_out = nullptr) {
  std::map<std::vector<int32_t>, double> e, o;
  auto key = [&](const std::vector<int32_t>& t) {
    std::vector<int32_t> k;
    for (int j = 0; j < 3; ++j)
      if (mask & (1 << j)) k.push_back(t[size_t(j)]);
    return k;
  };
  for (auto& [t, p] : exact) e[key(t)] += p * N;
  for (auto& [t, c] : counts) o[key(t)] += c;
  double chi2 = 0;
  int cells = 0;
  for (auto& [k, ev] : e) {
    chi2 += (o[k] - ev) * (o[k] - ev) / ev;
    ++cells;
  }
  if (chi2_out) *chi2_out = chi2;
  if (cells_out) *cells_out = cells;
  return gamma_q(0.5 * (cells - 1), 0.5 * chi2);
}

}  // namespace nemo::test
