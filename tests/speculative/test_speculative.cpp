// Losslessness of speculative decoding.
//  - Greedy: for every tiny config, weight format and KV-cache dtype (tests/support/targets.h),
//    prompt, γ in 1..7 and drafter (n-gram, oracle, wrong, MTP), with 1-4 threads, the emitted
//    tokens and the logits each was decided from are bitwise the plain-decoding ones.
//  - Sampling: a chi-square test shows the distribution of the first three tokens under
//    speculation equals the target's exactly computed distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "support.h"
#include "base/error.h"
#include "engine/generator.h"
#include "model/mtp.h"
#include "model/nemotron_h.h"
#include "speculative/drafter.h"
#include "speculative/mtp_drafter.h"
#include "speculative/verify.h"
#include "tools/synth/synth.h"

using namespace nemo;
using namespace nemo::speculative;
using namespace nemo::test;

class GreedyLossless : public testing::TestWithParam<Target> {};

TEST_P(GreedyLossless, EveryDrafterEveryGamma) {
  const Target& t = GetParam();
  const auto& m = model_for(t);
  const int64_t V = m.config().vocab_size;
  int64_t ngram_drafted = 0, ngram_accepted = 0;
  for (int pk = 0; pk < 3; ++pk) {
    SpecRequest req;
    req.prompt = prompt_of(pk, V);
    req.max_tokens = 40;
    const SpecRun base = run(m, req, nullptr);
    ASSERT_EQ(base.tokens.size(), 40u);
    std::vector<int32_t> script = base.tokens;
    for (int gamma = 1; gamma <= 7; ++gamma) {
      req.draft_max = gamma;
      std::vector<std::unique_ptr<Drafter>> ds;
      ds.push_back(std::make_unique<NgramDrafter>());
      ds.push_back(std::make_unique<ScriptedDrafter>(script, false, V));
      ds.push_back(std::make_unique<ScriptedDrafter>(script, true, V));
      if (model::MtpHead::present(m)) ds.push_back(std::make_unique<MtpDrafter>(m, ThreadConfig{1}));
      for (auto& d : ds) {
        const SpecRun r = run(m, req, d.get(), 1 + gamma % 4);  // threads 2, 3, 4, 1, ...
        ASSERT_EQ(r.tokens, base.tokens) << d->name() << " gamma " << gamma << " prompt " << pk;
        ASSERT_EQ(0, std::memcmp(r.logits.data(), base.logits.data(), base.logits.size() * 4))
            << d->name() << " gamma " << gamma << " prompt " << pk << ": logits differ";
        const auto& s = r.stats;
        EXPECT_EQ(s.emitted, 40);
        if (d->name() == "oracle") {
          EXPECT_GT(s.drafted, 0);
          EXPECT_EQ(s.accepted, s.drafted) << "oracle drafts must all be accepted";
          EXPECT_EQ(s.rounds, (39 + gamma) / (gamma + 1)) << "gamma " << gamma;
        }
        if (d->name() == "wrong") {
          EXPECT_GT(s.drafted, 0);
          EXPECT_EQ(s.accepted, 0);
          EXPECT_EQ(s.rounds, 39);
        }
        if (d->name() == "ngram") {
          ngram_drafted += s.drafted;
          ngram_accepted += s.accepted;
        }
      }
    }
  }
  EXPECT_GT(ngram_drafted, 0);
  // Dense tiny-a's greedy output falls into loops the n-gram drafter can hit (a rounding KV cache
  // changes that output; the other targets' hits vary).
  if (t.preset == "tiny-a" && t.format == synth::SynthFormat::Dense &&
      t.kv == model::KvDtype::F32) {
    EXPECT_GT(ngram_accepted, 0) << "the n-gram drafter never hit: the test would pass vacuously";
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, GreedyLossless,
                         testing::Values(Target{"tiny-a"}, Target{"tiny-b"}, Target{"tiny-c"}),
                         target_name);
// The quantized formats and the rounding KV caches: the target's arithmetic changes, the
// promise does not.
INSTANTIATE_TEST_SUITE_P(Formats, GreedyLossless, testing::ValuesIn(format_targets()), target_name);

TEST(Speculative, StopTokensAndBudgetInsideAcceptedBlock) {
  const auto& m = model_for("tiny-a");
  const int64_t V = m.config().vocab_size;
  SpecRequest req;
  req.prompt = prompt_of(1, V);
  req.max_tokens = 30;
  const SpecRun base = run(m, req, nullptr);
  ScriptedDrafter oracle(base.tokens, false, V);
  // A stop token in the middle of an accepted block ends generation right after it.
  req.stop_tokens = {base.tokens[9]};
  req.draft_max = 7;
  const SpecRun r = run(m, req, &oracle);
  const auto first = std::find(base.tokens.begin(), base.tokens.end(), base.tokens[9]) - base.tokens.begin();
  EXPECT_EQ(r.tokens.size(), size_t(first + 1));
  // The token budget is honoured exactly whatever γ is.
  req.stop_tokens.clear();
  for (int64_t budget : {1, 2, 5, 13}) {
    req.max_tokens = budget;
    ScriptedDrafter o2(base.tokens, false, V);
    EXPECT_EQ(run(m, req, &o2).tokens.size(), size_t(budget));
  }
}

TEST(Speculative, BadRequests) {
  const auto& m = model_for("tiny-b");  // no MTP module
  EXPECT_THROW(engine::Generator(m, ThreadConfig{1}, engine::SpecMode::Mtp, 3), Error);
  EXPECT_NO_THROW(engine::Generator(m, ThreadConfig{1}, engine::SpecMode::Auto, 3));
  EXPECT_EQ(engine::Generator(m, ThreadConfig{1}, engine::SpecMode::Auto, 3).mode(), engine::SpecMode::None);
  EXPECT_EQ(engine::Generator(model_for("tiny-a"), ThreadConfig{1}, engine::SpecMode::Auto, 3).mode(),
            engine::SpecMode::Mtp);
  EXPECT_THROW(engine::Generator(m, ThreadConfig{1}, engine::SpecMode::Ngram, -1), Error);
  EXPECT_EQ(engine::Generator(m, ThreadConfig{1}, engine::SpecMode::Ngram, 0).draft_max(), 3);  // 0: default
  EXPECT_THROW(engine::Generator(m, ThreadConfig{1}, engine::SpecMode::Ngram, 16), Error);
  EXPECT_THROW(engine::parse_spec_mode("eagle"), Error);
  SpecRequest req;
  req.prompt = {1, 2};
  req.draft_max = 99;
  NgramDrafter d;
  EXPECT_THROW(run(m, req, &d), Error);
}

// ---- distributional losslessness --------------------------------------------------------------

namespace {

// A sampled drafter whose q differs sharply from p: 0.6 on p's least likely token, 0.3·p spread
// over p's support, 0.05 on each of two tokens p never emits. Exercises acceptance, rejection
// (including of tokens outside p's support) and the residual distribution.
Dist skew(const Dist& pd, int64_t vocab) {
  Dist q;
  for (auto [id, pr] : pd) q.push_back({id, 0.3 * pr + (id == pd.back().first ? 0.6 : 0.0)});
  for (int32_t j = 1, added = 0; added < 2; ++j) {
    const int32_t e = int32_t((pd[0].first + j) % vocab);
    bool in = false;
    for (auto [id, _] : pd) in |= id == e;
    if (!in) {
      q.push_back({e, 0.05});
      ++added;
    }
  }
  return q;
}

class SkewedDrafter : public Drafter {
 public:
  // lie_about_q: report p (the target's distribution) as the drafts' q instead of the skewed q
  // they were drawn from. The verify rule then accepts every draft p allows: a biased decoder
  // the chi-square test must reject (its power, run through the real decode loop).
  SkewedDrafter(const model::NemotronH& m, SamplingParams sp, std::map<std::vector<int32_t>, Dist>* cache,
                bool lie_about_q = false)
      : m_(m), sp_(sp), cache_(cache), lie_(lie_about_q) {}
  std::string name() const override { return "skewed"; }
  void begin(std::span<const int32_t> prompt, const float*, int32_t anchor) override {
    seq_.assign(prompt.begin(), prompt.end());
    seq_.push_back(anchor);
  }
  DraftProposal propose(int max_n, const SamplingParams&, Rng& rng) override {
    DraftProposal p;
    std::vector<int32_t> s = seq_;
    for (int j = 0; j < max_n; ++j) {
      const Dist q = skew(dist(s), m_.config().vocab_size);
      double u = rng.uniform(), c = 0;
      int32_t tok = q.back().first;
      for (auto [id, pr] : q) {
        c += pr;
        if (u < c) {
          tok = id;
          break;
        }
      }
      p.tokens.push_back(tok);
      p.q.push_back(lie_ ? dist(s) : q);
      s.push_back(tok);
    }
    return p;
  }
  void commit(std::span<const int32_t> acc, int32_t next, const float*) override {
    seq_.insert(seq_.end(), acc.begin(), acc.end());
    seq_.push_back(next);
  }

 private:
  const Dist& dist(const std::vector<int32_t>& s) {
    auto it = cache_->find(s);
    if (it == cache_->end()) it = cache_->emplace(s, target_dist(m_, s, sp_)).first;
    return it->second;
  }
  const model::NemotronH& m_;
  SamplingParams sp_;
  std::map<std::vector<int32_t>, Dist>* cache_;
  bool lie_ = false;
  std::vector<int32_t> seq_;
};

}  // namespace

TEST(SpeculativeSampling, FirstThreeTokensFollowTheTargetDistribution) {
  const auto& m = model_for("tiny-a");
  const SamplingParams sp = first_three_sampling();
  const std::vector<int32_t>& prompt = kFirstThreePrompt;
  // Exact joint distribution of (t1, t2, t3) under the target: 1 + 4 + 16 forwards.
  Joint exact;
  std::map<std::vector<int32_t>, Dist> cache;
  auto dist = [&](const std::vector<int32_t>& s) -> const Dist& {
    auto it = cache.find(s);
    if (it == cache.end()) it = cache.emplace(s, target_dist(m, s, sp)).first;
    return it->second;
  };
  for (auto [a, pa] : dist(prompt)) {
    auto s1 = prompt;
    s1.push_back(a);
    for (auto [b, pb] : dist(s1)) {
      auto s2 = s1;
      s2.push_back(b);
      for (auto [c, pc] : dist(s2)) exact[{a, b, c}] = pa * pb * pc;
    }
  }
  ASSERT_GE(exact.size(), 27u);

  const int N = 12000;
  SpecRequest req = first_three_request();
  std::map<std::vector<int32_t>, int> counts;
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < N; ++i) {
    req.sampling.seed = uint64_t(1000 + i);
    SkewedDrafter d(m, sp, &cache);
    SpecRun r = run(m, req, &d);
    ASSERT_EQ(r.tokens.size(), 3u);
    counts[r.tokens]++;
    drafted += r.stats.drafted;
    accepted += r.stats.accepted;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted) << "some drafts must be rejected for the residual path to be tested";

  // Chi-square over the joint and over each position's marginal.
  auto chi2_test = [&](int pos_mask, const char* what) {
    for (auto& [t, c] : counts) ASSERT_TRUE(exact.count(t)) << "sampled a sequence outside the target's support";
    double chi2 = 0;
    int cells = 0;
    EXPECT_GT(chi2_pvalue(exact, counts, N, pos_mask, &chi2, &cells), 0.001)
        << what << ": chi2 " << chi2 << " over " << cells << " cells";
  };
  chi2_test(1, "token 1");
  chi2_test(2, "token 2");
  chi2_test(4, "token 3");
  chi2_test(7, "joint (t1, t2, t3)");
  // Power: token 2 is the first draft. Under a biased rule that accepts every draft p allows,
  // it would follow B = q·[p>0] + (q mass outside p)·normalise(max(0, p − q)); averaged over
  // t1, the expected chi2 of that bias must be far above the rejection threshold.
  double nc = 0;
  for (auto [a, pa] : dist(prompt)) {
    auto s1 = prompt;
    s1.push_back(a);
    const Dist& p2 = dist(s1);
    const Dist q2 = skew(p2, m.config().vocab_size);
    std::map<int32_t, double> pm, qm, biased;
    for (auto [id, pr] : p2) pm[id] = pr;
    double outside = 0, resid = 0;
    for (auto [id, qq] : q2) {
      qm[id] = qq;
      if (pm.count(id)) biased[id] += qq;
      else outside += qq;
    }
    for (auto [id, pr] : p2) resid += std::max(0.0, pr - qm[id]);
    for (auto [id, pr] : p2) biased[id] += outside * std::max(0.0, pr - qm[id]) / resid;
    for (auto [id, pr] : p2) nc += pa * N * (biased[id] - pr) * (biased[id] - pr) / pr;
  }
  EXPECT_GT(nc, 200.0) << "the test would not detect a biased acceptance rule";
}

// The same test through the real decode loop with a deliberately biased acceptance (the drafter
// reports q = p, so every draft p allows is accepted): the chi-square must reject it.
TEST(SpeculativeSampling, ChiSquareRejectsABiasedDecoder) {
  const auto& m = model_for("tiny-a");
  const SamplingParams sp = first_three_sampling();
  const std::vector<int32_t>& prompt = kFirstThreePrompt;
  const Joint exact = exact_first_three(m, prompt, sp);
  std::map<std::vector<int32_t>, Dist> cache;
  const int N = 4000;
  SpecRequest req = first_three_request();
  std::map<std::vector<int32_t>, int> counts;
  for (int i = 0; i < N; ++i) {
    req.sampling.seed = uint64_t(1000 + i);
    SkewedDrafter d(m, sp, &cache, /*lie_about_q=*/true);
    counts[run(m, req, &d).tokens]++;
  }
  double chi2 = 0;
  int cells = 0;
  // Token 2 is the first draft: the biased rule distorts its marginal.
  const double p2 = chi2_pvalue(exact, counts, N, 2, &chi2, &cells);
  std::printf("biased decoder: token 2 chi2 %.1f over %d cells, p = %.3g\n", chi2, cells, p2);
  EXPECT_LT(p2, 1e-6) << "the chi-square test did not detect a biased decoder: chi2 " << chi2 << " over " << cells;
}

// MTP drafts through the real decode loop, sampled: the first three tokens still follow the
// target's distribution exactly. On the trained family (models/tiny-code), whose MTP head predicts,
// so drafts are accepted and rejected (on random weights its drafts are never accepted and the
// residual path would go untested).
TEST(SpeculativeSampling, MtpDraftsKeepTheTargetDistribution) {
  static const auto m = model::NemotronH::load(std::string(NEMOTRON_SOURCE_DIR) + "/models/tiny-code");
  ASSERT_TRUE(model::MtpHead::present(*m));
  const SamplingParams sp = first_three_sampling();
  // "class Queue:\n    def __init__(self" in the family's tokenizer.
  const std::vector<int32_t> prompt = {533, 50, 99, 354, 354, 289, 276, 368, 544, 690, 589, 295};
  const Joint exact = exact_first_three(*m, prompt, sp);
  const int N = 3000;
  SpecRequest req = first_three_request();
  req.prompt = prompt;
  std::map<std::vector<int32_t>, int> counts;
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < N; ++i) {
    req.sampling.seed = uint64_t(5000 + i);
    MtpDrafter d(*m, ThreadConfig{1});
    SpecRun r = run(*m, req, &d);
    ASSERT_EQ(r.tokens.size(), 3u);
    counts[r.tokens]++;
    drafted += r.stats.drafted;
    accepted += r.stats.accepted;
  }
  std::printf("mtp drafts: %lld drafted, %lld accepted\n", (long long)drafted, (long long)accepted);
  EXPECT_GT(accepted, drafted / 10) << "the trained MTP head's drafts must be accepted often";
  EXPECT_LT(accepted, drafted) << "some drafts must be rejected for the residual path to be tested";
  for (auto [mask, what] : {std::pair{1, "token 1"}, {2, "token 2"}, {4, "token 3"}, {7, "joint"}}) {
    for (auto& [t, c] : counts) ASSERT_TRUE(exact.count(t)) << "sampled a sequence outside the target's support";
    double chi2 = 0;
    int cells = 0;
    const double pv = chi2_pvalue(exact, counts, N, mask, &chi2, &cells);
    std::printf("mtp drafts, %s: chi2 %.1f over %d cells, p = %.3g\n", what, chi2, cells, pv);
    EXPECT_GT(pv, 0.001) << what << ": chi2 " << chi2 << " over " << cells << " cells";
  }
}

namespace {

// Two MTP drafters begun on the same prompt of models/tiny-code, with the target decoding greedily
// after it: step() runs one token and leaves its hidden row in r.
struct TwoMtpDrafters {
  static const model::NemotronH& target() {
    static const auto m =
        model::NemotronH::load(std::string(NEMOTRON_SOURCE_DIR) + "/models/tiny-code");
    return *m;
  }
  const model::NemotronH& m = target();
  const int64_t V = m.config().vocab_size, H = m.config().hidden_size;
  const std::vector<int32_t> prompt = {533, 50, 99, 354, 354, 289, 276, 368, 544, 690, 589, 295};
  model::ForwardOptions fo = [] {
    model::ForwardOptions o;
    o.want_hidden = o.all_logits = true;
    return o;
  }();
  model::SequenceState st = m.new_state();
  model::ForwardResult r = m.forward(st, prompt, fo, ThreadConfig{1});
  int32_t anchor = kernels::argmax({r.logits.data() + (r.rows - 1) * V, size_t(V)});
  MtpDrafter a{m, ThreadConfig{1}}, b{m, ThreadConfig{1}};
  TwoMtpDrafters() {
    a.begin(prompt, r.hidden.data(), anchor);
    b.begin(prompt, r.hidden.data(), anchor);
  }
  void step() {
    const int32_t in[1] = {anchor};
    r = m.forward(st, in, fo, ThreadConfig{1});
    anchor = kernels::argmax({r.logits.data(), size_t(V)});
    ASSERT_EQ(r.hidden.size(), size_t(H));
  }
  // a's and b's next proposals of 3 greedy drafts, bitwise the same.
  void expect_same_proposals(const char* where) {
    Rng rng(1);
    const DraftProposal pa = a.propose(3, {}, rng), pb = b.propose(3, {}, rng);
    EXPECT_EQ(pa.tokens, pb.tokens) << where;
    ASSERT_EQ(a.last_round().p, b.last_round().p) << where;
    ASSERT_EQ(a.last_round().logits.size(), size_t(3 * V)) << where;
    ASSERT_EQ(b.last_round().logits.size(), size_t(3 * V)) << where;
    EXPECT_EQ(0, std::memcmp(a.last_round().logits.data(), b.last_round().logits.data(),
                             a.last_round().logits.size() * sizeof(float)))
        << where;
  }
};

}  // namespace

// The MTP drafter runs the slots a round commits only when it next proposes (a round that drafts
// nothing, DraftPolicy's plain step, costs no MTP work). Its proposal is then bitwise the one it
// gives when it proposes (and chains, and truncates) every round: commits of several rounds run
// as one forward of the head, whose rows do not depend on the batch.
TEST(MtpDrafter, CommitsRunLateGiveTheSameDrafts) {
  TwoMtpDrafters d;  // a proposes every round, b after 4 commits
  Rng rng(1);
  int compared = 0;
  for (int round = 0; round < 9; ++round) {
    d.a.propose(3, {}, rng);  // chained slots that the next commit truncates
    d.step();
    d.a.commit({}, d.anchor, d.r.hidden.data());
    d.b.commit({}, d.anchor, d.r.hidden.data());
    if (round % 4 != 3) continue;
    d.expect_same_proposals(("round " + std::to_string(round)).c_str());
    ++compared;
  }
  EXPECT_EQ(compared, 2);
}

// After a long run of plain steps the MTP drafter keeps only the last 16 deferred slots: its
// proposal is bitwise that of a drafter given only those commits (the older slots never reach the
// head's KV cache), and the run costs the head 16 rows, not one per step.
TEST(MtpDrafter, LongPlainRunsKeepOnlyTheLastSlots) {
  TwoMtpDrafters d;  // a gets all 40 commits, b the last 16
  constexpr int kSteps = 40, kKept = 16;
  std::vector<int32_t> anchors;
  std::vector<float> hidden;
  for (int step = 0; step < kSteps; ++step) {
    d.step();
    d.a.commit({}, d.anchor, d.r.hidden.data());
    anchors.push_back(d.anchor);
    hidden.insert(hidden.end(), d.r.hidden.data(), d.r.hidden.data() + d.H);
  }
  for (int step = kSteps - kKept; step < kSteps; ++step)
    d.b.commit({}, anchors[size_t(step)], hidden.data() + int64_t(step) * d.H);
  d.expect_same_proposals("after 40 plain steps");
  EXPECT_EQ(d.a.last_round().p, int64_t(d.prompt.size()) + kKept);
}

// --spec auto: a greedy request's draft length adapts (DraftPolicy), its tokens stay the plain
// ones; a sampled request drafts --draft-max every round, so a seed gives what --spec mtp gives.
TEST(SpeculativeAuto, AdaptsGreedyOnlyAndKeepsTheTokens) {
  static const auto m = model::NemotronH::load(std::string(NEMOTRON_SOURCE_DIR) + "/models/tiny-code");
  engine::GenerateRequest req;
  req.prompt = {533, 50, 99, 354, 354, 289, 276, 368, 544, 690, 589, 295};
  req.max_tokens = 48;
  const auto tokens = [&](engine::SpecMode mode, const engine::GenerateRequest& r,
                          speculative::SpecStats* st = nullptr) {
    engine::Generator g(*m, ThreadConfig{1}, mode, 3);
    std::vector<int32_t> out;
    g.generate(r, [&](int32_t t) {
      out.push_back(t);
      return true;
    });
    if (st) *st = g.stats();
    EXPECT_EQ(g.draft_policy() != nullptr, mode == engine::SpecMode::Auto);
    return out;
  };
  speculative::SpecStats st;
  const auto plain = tokens(engine::SpecMode::None, req);
  EXPECT_EQ(tokens(engine::SpecMode::Auto, req, &st), plain);
  ASSERT_EQ(plain.size(), 48u);
  // The policy ran: the first round drafts the cap, the second none (then as measured).
  ASSERT_FALSE(st.proposed_at.empty());
  EXPECT_GE(st.proposed_at[0], 1);
  EXPECT_LT(st.proposed_at[0], st.rounds);
  req.sampling.temperature = 0.8f;
  for (uint64_t seed : {3u, 4u, 5u}) {
    req.sampling.seed = seed;
    speculative::SpecStats sa, sm;
    EXPECT_EQ(tokens(engine::SpecMode::Auto, req, &sa), tokens(engine::SpecMode::Mtp, req, &sm))
        << "seed " << seed;
    EXPECT_EQ(sa.drafted, sm.drafted) << "seed " << seed;
    EXPECT_EQ(sa.rounds, sm.rounds) << "seed " << seed;
  }
}
