#include "spec/speculative.h"

#include <algorithm>
#include <fmt/format.h>

#include "base/clock.h"
#include "base/error.h"

namespace nemo::spec {

namespace {

double prob_of(const std::vector<std::pair<int32_t, double>>& d, int32_t id) {
  for (const auto& [i, p] : d)
    if (i == id) return p;
  return 0.0;
}

int32_t draw(const std::vector<std::pair<int32_t, double>>& d, Rng& rng) {
  const double u = rng.uniform();
  double c = 0.0;
  for (const auto& [id, p] : d) {
    c += p;
    if (u < c) return id;
  }
  return d.back().first;
}

// Sample of normalise(max(0, p − q)); q one-hot at `draft` when q is empty.
int32_t draw_residual(const std::vector<std::pair<int32_t, double>>& p,
                      const std::vector<std::pair<int32_t, double>>* q, int32_t draft, Rng& rng) {
  std::vector<std::pair<int32_t, double>> r;
  double sum = 0.0;
  for (const auto& [id, pp] : p) {
    const double qq = q ? prob_of(*q, id) : (id == draft ? 1.0 : 0.0);
    const double v = pp - qq;
    if (v > 0.0) {
      r.push_back({id, v});
      sum += v;
    }
  }
  if (r.empty() || sum <= 0.0) return draw(p, rng);  // p == q: unreachable after a rejection
  for (auto& [_, v] : r) v /= sum;
  return draw(r, rng);
}
}  // namespace

void SpecStats::add(const SpecStats& o) {
  rounds += o.rounds;
  drafted += o.drafted;
  accepted += o.accepted;
  emitted += o.emitted;
  if (proposed_at.size() < o.proposed_at.size()) {
    proposed_at.resize(o.proposed_at.size());
    accepted_at.resize(o.proposed_at.size());
  }
  for (size_t i = 0; i < o.proposed_at.size(); ++i) {
    proposed_at[i] += o.proposed_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
  prefill_s += o.prefill_s;
  draft_s += o.draft_s;
  verify_s += o.verify_s;
  rollback_s += o.rollback_s;
  total_s += o.total_s;
}

std::string SpecStats::summary() const {
  std::string s = fmt::format(
      "spec: {} verify calls, {} drafted, {} accepted ({:.1f}%), mean acceptance length {:.2f} tokens/call\n",
      rounds, drafted, accepted, 100.0 * acceptance_rate(), mean_accept_length());
  s += "spec: acceptance by draft position:";
  for (size_t i = 0; i < proposed_at.size(); ++i)
    if (proposed_at[i])
      s += fmt::format(" {}:{:.0f}%", i + 1, 100.0 * double(accepted_at[i]) / double(proposed_at[i]));
  s += fmt::format("\nspec: time prefill {:.3f}s, draft {:.3f}s, verify {:.3f}s, rollback {:.4f}s, total {:.3f}s\n",
                   prefill_s, draft_s, verify_s, rollback_s, total_s);
  return s;
}

SpecStats SpeculativeDecoder::generate(const SpecRequest& req, Drafter* drafter, const EmitFn& emit) {
  if (req.prompt.empty()) fail("generate: the prompt is empty");
  if (req.draft_max < 1 || req.draft_max > kMaxDraft)
    fail("draft-max {} is outside [1, {}]", req.draft_max, kMaxDraft);
  const int64_t V = m_.config().vocab_size;
  const bool greedy = req.sampling.temperature <= 0.0f;
  const bool hidden = drafter && drafter->wants_hidden();
  SpecStats s;
  s.proposed_at.assign(size_t(req.draft_max), 0);
  s.accepted_at.assign(size_t(req.draft_max), 0);
  Rng rng(req.sampling.seed);
  const double t_start = now_seconds();
  auto is_stop = [&](int32_t t) { return std::find(req.stop_tokens.begin(), req.stop_tokens.end(), t) != req.stop_tokens.end(); };
  auto pick = [&](std::span<const float> row) -> int32_t {
    return greedy ? argmax(row) : draw(sampling_distribution(row, req.sampling), rng);
  };

  auto st = m_.new_state();
  model::ForwardOptions pf;
  pf.all_logits = hidden;  // the MTP drafter needs every prompt row's hidden state
  pf.want_hidden = hidden;
  double t0 = now_seconds();
  auto r = m_.forward(st, req.prompt, pf, tc_);
  s.prefill_s = now_seconds() - t0;
  std::span<const float> last{r.logits.data() + (r.rows - 1) * V, size_t(V)};
  int32_t anchor = pick(last);
  bool done = !emit(anchor, last) || is_stop(anchor);
  int64_t emitted = 1;
  if (drafter && !done && emitted < req.max_tokens) {
    t0 = now_seconds();
    drafter->begin(req.prompt, hidden ? r.hidden.data() : nullptr, anchor);
    s.draft_s += now_seconds() - t0;
  }

  while (!done && emitted < req.max_tokens) {
    // Never draft past the token budget: a round emits at most k + 1 tokens.
    const int k_max = int(std::min<int64_t>(req.draft_max, req.max_tokens - emitted - 1));
    DraftProposal prop;
    if (drafter && k_max > 0) {
      t0 = now_seconds();
      prop = drafter->propose(k_max, req.sampling, rng);
      s.draft_s += now_seconds() - t0;
      if (int(prop.tokens.size()) > k_max) prop.tokens.resize(size_t(k_max));
      for (auto t : prop.tokens)
        if (t < 0 || t >= V) fail("drafter '{}' proposed token {} outside the vocabulary", drafter->name(), t);
      if (!prop.q.empty() && prop.q.size() < prop.tokens.size())
        fail("drafter '{}' returned {} draft distributions for {} tokens", drafter->name(), prop.q.size(),
             prop.tokens.size());
    }
    const int k = int(prop.tokens.size());
    std::vector<int32_t> rows{anchor};
    rows.insert(rows.end(), prop.tokens.begin(), prop.tokens.end());
    model::ForwardOptions fo;
    fo.all_logits = true;
    fo.record = k > 0;  // a lone anchor row is always kept: nothing to roll back
    fo.want_hidden = hidden;
    t0 = now_seconds();
    r = m_.forward(st, rows, fo, tc_);
    s.verify_s += now_seconds() - t0;
    ++s.rounds;
    s.drafted += k;

    // Acceptance.
    int a = 0;
    int32_t next = -1;
    for (int i = 0; i <= k; ++i) {
      std::span<const float> row{r.logits.data() + int64_t(i) * V, size_t(V)};
      if (i < k) ++s.proposed_at[size_t(i)];
      int32_t out;
      bool accepted = false;
      if (greedy) {
        out = argmax(row);
        accepted = i < k && out == prop.tokens[size_t(i)];
      } else {
        const auto p = sampling_distribution(row, req.sampling);
        if (i < k) {
          const int32_t d = prop.tokens[size_t(i)];
          const auto* q = prop.q.empty() ? nullptr : &prop.q[size_t(i)];
          const double qd = q ? prob_of(*q, d) : 1.0;
          const double pd = prob_of(p, d);
          accepted = qd > 0.0 && rng.uniform() * qd < pd;  // u < p/q, i.e. min(1, p/q)
          out = accepted ? d : draw_residual(p, q, d, rng);
        } else {
          out = draw(p, rng);
        }
      }
      if (accepted) {
        ++a;
        ++s.accepted_at[size_t(i)];
      } else {
        next = out;
      }
      ++emitted;
      if (!emit(out, row) || is_stop(out) || emitted >= req.max_tokens) {
        done = true;
        break;
      }
      if (!accepted) break;
    }
    s.accepted += a;
    if (done) break;  // the request ends here; no need to roll the state forward
    if (k > 0) {
      t0 = now_seconds();
      m_.accept(st, a + 1);
      s.rollback_s += now_seconds() - t0;
    }
    if (drafter) {
      t0 = now_seconds();
      drafter->commit(std::span<const int32_t>(prop.tokens).first(size_t(a)), next,
                      hidden ? r.hidden.data() : nullptr);
      s.draft_s += now_seconds() - t0;
    }
    anchor = next;
  }
  s.emitted = emitted;
  s.total_s = now_seconds() - t_start;
  return s;
}

}  // namespace nemo::spec
