#include "speculative/verify.h"

#include <fmt/format.h>

#include <vector>

namespace nemo::speculative {

namespace {

// A sample of normalise(max(0, p − q)); q is one-hot at `draft` when null. q is looked up in a
// dense [V] table (prob_of per id made this O(V²): ~1 s per rejected round at V = 131072).
int32_t draw_residual(const kernels::Distribution& p, const kernels::Distribution* q, int32_t draft,
                      int64_t V, Rng& rng) {
  std::vector<double> q_of;
  if (q) {
    q_of.assign(size_t(V), 0.0);
    for (auto it = q->rbegin(); it != q->rend(); ++it)  // reversed: the first entry of an id wins,
      if (it->first >= 0 && it->first < V) q_of[size_t(it->first)] = it->second;  // as in prob_of
  }
  kernels::Distribution r;
  double sum = 0.0;
  for (const auto& [id, pp] : p) {
    const double qq = q ? q_of[size_t(id)] : (id == draft ? 1.0 : 0.0);
    const double v = pp - qq;
    if (v > 0.0) {
      r.push_back({id, v});
      sum += v;
    }
  }
  if (r.empty() || sum <= 0.0)
    return kernels::draw(p, rng);  // p == q: unreachable after a rejection
  for (auto& [_, v] : r) v /= sum;
  return kernels::draw(r, rng);
}

}  // namespace

Verdict verify(std::span<const float> logits, int64_t V, const DraftProposal& prop,
               const SamplingParams& sp, Rng& rng) {
  const int k = int(prop.tokens.size());
  Verdict v;
  for (int i = 0; i <= k; ++i) {
    const std::span<const float> row = logits.subspan(size_t(i) * size_t(V), size_t(V));
    int32_t out;
    bool kept = false;
    if (sp.greedy()) {
      out = kernels::argmax(row);
      kept = i < k && out == prop.tokens[size_t(i)];
    } else {
      const auto p = kernels::sampling_distribution(row, sp);
      if (i < k) {
        const int32_t d = prop.tokens[size_t(i)];
        const auto* q = prop.q.empty() ? nullptr : &prop.q[size_t(i)];
        const double qd = q ? kernels::prob_of(*q, d) : 1.0;
        kept =
            qd > 0.0 && rng.uniform() * qd < kernels::prob_of(p, d);  // u < p/q, i.e. min(1, p/q)
        out = kept ? d : draw_residual(p, q, d, V, rng);
      } else {
        out = kernels::draw(p, rng);
      }
    }
    v.tokens.push_back(out);
    if (!kept) break;
    ++v.accepted;
  }
  return v;
}

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
      "spec: {} verify calls, {} drafted, {} accepted ({:.1f}%), mean acceptance length {:.2f} "
      "tokens/call\n",
      rounds, drafted, accepted, 100.0 * acceptance_rate(), mean_accept_length());
  s += "spec: acceptance by draft position:";
  for (size_t i = 0; i < proposed_at.size(); ++i)
    if (proposed_at[i])
      s += fmt::format(" {}:{:.0f}%", i + 1,
                       100.0 * double(accepted_at[i]) / double(proposed_at[i]));
  s += fmt::format(
      "\nspec: time prefill {:.3f}s, draft {:.3f}s, verify {:.3f}s, rollback {:.4f}s, total "
      "{:.3f}s\n",
      prefill_s, draft_s, verify_s, rollback_s, total_s);
  return s;
}

}  // namespace nemo::speculative
