// The serving scheduler: continuous batching never changes a request's output (bitwise), the
// prefix cache is exact, and the queue, cancellation and drain behave.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "../support/temp_dir.h"
#include "base/random.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "model/nemotron_h.h"
#include "tools/synth/synth.h"

using namespace nemo;
using namespace nemo::engine;

namespace {

struct Fixture {
  test::TempDir dir;
  std::unique_ptr<model::NemotronH> m;
};
// tiny-a (with its MTP head), written once per process.
model::NemotronH& tiny() {
  static std::unique_ptr<Fixture> f;
  if (!f) {
    f = std::make_unique<Fixture>();
    synth::SynthOptions o;
    o.seed = 5;
    synth::write_checkpoint(synth::preset_config("tiny-a"), f->dir.path(), o);
    f->m = model::NemotronH::load(f->dir.path());
  }
  return *f->m;
}

std::vector<int32_t> tokens(int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = int32_t(r.next() % uint64_t(tiny().config().vocab_size));
  return v;
}

struct Output {
  std::vector<TokenOut> toks;
  RequestSummary sum;
};
Output collect(const std::shared_ptr<RequestStream>& s) {
  Output o;
  while (!s->finished()) s->wait(o.toks, std::chrono::milliseconds(50));
  s->wait(o.toks, std::chrono::milliseconds(0));
  o.sum = s->summary();
  return o;
}

// Tokens and logprobs (chosen + top 5) must be the same bits.
void expect_same(const Output& a, const Output& b) {
  ASSERT_EQ(a.toks.size(), b.toks.size());
  for (size_t i = 0; i < a.toks.size(); ++i) {
    EXPECT_EQ(a.toks[i].token, b.toks[i].token) << "token " << i;
    EXPECT_EQ(std::memcmp(&a.toks[i].logprob, &b.toks[i].logprob, sizeof(float)), 0) << i;
    ASSERT_EQ(a.toks[i].top.size(), b.toks[i].top.size());
    for (size_t k = 0; k < a.toks[i].top.size(); ++k) {
      EXPECT_EQ(a.toks[i].top[k].first, b.toks[i].top[k].first);
      EXPECT_EQ(std::memcmp(&a.toks[i].top[k].second, &b.toks[i].top[k].second, sizeof(float)), 0);
    }
  }
}

RequestOptions probe(SpecMode spec, float temp) {
  RequestOptions r;
  r.prompt = tokens(23, 1);
  r.max_tokens = 24;
  r.sampling.temperature = temp;
  r.sampling.top_k = 40;
  r.sampling.seed = 7;
  r.top_logprobs = 5;
  r.spec = spec;
  return r;
}

}  // namespace

// The promise: two identical seeded requests give identical output whether they run alone
// or among 15 others (prefilling, decoding, verifying drafts of other lengths at the same time).
TEST(Scheduler, RequestOutputIndependentOfTheBatch) {
  model::NemotronH& m = tiny();
  for (SpecMode spec : {SpecMode::None, SpecMode::Mtp, SpecMode::Ngram}) {
    for (float temp : {0.0f, 0.8f}) {
      SCOPED_TRACE(std::string(spec_mode_name(spec)) + " temp " + std::to_string(temp));
      Output alone;
      {
        Scheduler s(m, {.threads = {2}, .max_active = 16});
        alone = collect(s.submit(probe(spec, temp)));
      }
      ASSERT_EQ(alone.toks.size(), 24u);
      Scheduler s(m, {.threads = {2}, .max_active = 16, .prefill_piece = 128});
      std::vector<std::shared_ptr<RequestStream>> others;
      for (int i = 0; i < 15; ++i) {
        RequestOptions r;
        r.prompt = tokens(1 + (i * 37) % 300, 100 + uint64_t(i));  // some take several pieces
        r.max_tokens = 4 + i * 3;
        r.sampling.temperature = i % 2 ? 0.7f : 0.0f;
        r.sampling.seed = uint64_t(i);
        r.spec = i % 3 == 0 ? SpecMode::Mtp : i % 3 == 1 ? SpecMode::Ngram : SpecMode::None;
        others.push_back(s.submit(r));
        ASSERT_TRUE(others.back());
      }
      const Output among = collect(s.submit(probe(spec, temp)));
      for (auto& o : others) EXPECT_NE(collect(o).sum.finish, FinishReason::Error);
      expect_same(alone, among);
      EXPECT_EQ(among.sum.completion_tokens, 24);
      const SchedulerMetrics mt = s.metrics();
      // The batching really happened: fewer passes than the rows they ran.
      EXPECT_LT(mt.forward_passes * 2, mt.forward_rows);
    }
  }
}

// A server started with --spec auto: a greedy request alone in its passes adapts its draft length
// (the first round drafts the cap, the second none), its tokens the plain ones; a request naming
// mtp, or one submitted as auto to a server started with mtp, drafts every round (tiny-a's random
// MTP head is never right, so a lone adaptive request mostly takes plain steps).
TEST(Scheduler, DefaultAutoAdaptsALoneGreedyRequest) {
  model::NemotronH& m = tiny();
  const auto run = [&](SpecMode server, std::optional<SpecMode> req) {
    Scheduler s(m, {.threads = {2}, .spec = server});
    RequestOptions r = probe(SpecMode::None, 0.0f);
    r.spec = req;
    return collect(s.submit(r));
  };
  const Output plain = run(SpecMode::None, std::nullopt);
  ASSERT_EQ(plain.toks.size(), 24u);
  struct Case {
    SpecMode server;
    std::optional<SpecMode> req;
    bool adaptive;
  };
  int checked = 0;
  for (const Case& c : {Case{SpecMode::Auto, std::nullopt, true},
                        {SpecMode::Auto, SpecMode::Auto, true},
                        {SpecMode::Auto, SpecMode::Mtp, false},
                        {SpecMode::Mtp, SpecMode::Auto, false}}) {
    const Output o = run(c.server, c.req);
    expect_same(plain, o);
    ASSERT_FALSE(o.sum.spec.proposed_at.empty());
    const int64_t drafted_rounds = o.sum.spec.proposed_at[0], rounds = o.sum.spec.rounds;
    if (c.adaptive) {
      EXPECT_GE(drafted_rounds, 1);
      EXPECT_LT(drafted_rounds, rounds - 1);  // rounds without drafts
    } else {
      // Every round drafts but a last one the token budget leaves no room for.
      EXPECT_GE(drafted_rounds, rounds - 1);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// A Generator resumed from a snapshot at a chunk boundary emits bitwise the same logits rows as
// one that prefilled the whole prompt, with and without a drafter that reads prompt features.
TEST(PrefixCache, ResumedPrefillIsBitwiseTheFullOne) {
  model::NemotronH& m = tiny();
  const int64_t Q = m.config().chunk_size, V = m.config().vocab_size;
  const auto shared = tokens(2 * Q + 9, 3);  // the "system prompt + first turn"
  for (SpecMode spec : {SpecMode::None, SpecMode::Mtp}) {
    // Turn 1 fills the cache at chunk boundaries.
    Generator g1(m, {2}, spec);
    GenerateRequest r1;
    r1.prompt = shared;
    r1.max_tokens = 3;
    r1.prefill_piece = Q;
    g1.begin(r1);
    PrefixCache cache(1ll << 30);
    while (!g1.done()) {
      const bool pre = g1.prefilling();
      g1.step();
      if (pre && g1.prompt_rows_done() % Q == 0)
        cache.insert(shared, g1.feature_key(), g1.state(), g1.prompt_features());
    }
    ASSERT_EQ(cache.entries(), 2);
    // Turn 2 extends the prompt.
    auto prompt = shared;
    for (int32_t t : tokens(40, 4)) prompt.push_back(t);
    const PrefixCache::Entry* e = cache.find(prompt, g1.feature_key(), int64_t(prompt.size()) - 1);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(int64_t(e->tokens.size()), 2 * Q);
    GenerateRequest r2;
    r2.prompt = prompt;
    r2.max_tokens = 12;
    Generator full(m, {2}, spec), resumed(m, {1}, spec);
    full.begin(r2);
    const RestoredPrefix pre{int64_t(e->tokens.size()), &e->state, e->features};
    resumed.begin(r2, &pre);
    std::vector<float> a, b;
    std::vector<int32_t> ta, tb;
    while (!full.done())
      for (const Emitted& x : full.step()) {
        ta.push_back(x.token);
        a.insert(a.end(), x.logits.begin(), x.logits.end());
      }
    while (!resumed.done())
      for (const Emitted& x : resumed.step()) {
        tb.push_back(x.token);
        b.insert(b.end(), x.logits.begin(), x.logits.end());
      }
    EXPECT_EQ(ta, tb);
    ASSERT_EQ(a.size(), size_t(12 * V));
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << spec_mode_name(spec);
  }
}

// A served conversation: turn 2 resumes from turn 1's snapshot and gives the same bits as a
// scheduler without a cache.
TEST(PrefixCache, ConversationServedWithCacheEqualsWithout) {
  model::NemotronH& m = tiny();
  const int64_t Q = m.config().chunk_size;
  auto turn1 = tokens(Q + 30, 11);
  Scheduler cached(m, {.threads = {2}, .prefill_piece = Q});
  Scheduler plain(m, {.threads = {2}, .prefix_cache_bytes = 0});
  RequestOptions r;
  r.prompt = turn1;
  r.max_tokens = 10;
  r.top_logprobs = 3;
  const Output c1 = collect(cached.submit(r)), p1 = collect(plain.submit(r));
  expect_same(c1, p1);
  EXPECT_EQ(c1.sum.cached_tokens, 0);
  // Turn 2 = turn 1 + its reply + a new message.
  for (const auto& t : c1.toks) r.prompt.push_back(t.token);
  for (int32_t t : tokens(17, 12)) r.prompt.push_back(t);
  const Output c2 = collect(cached.submit(r)), p2 = collect(plain.submit(r));
  EXPECT_EQ(c2.sum.cached_tokens, Q);
  EXPECT_EQ(p2.sum.cached_tokens, 0);
  expect_same(c2, p2);
  EXPECT_EQ(cached.metrics().prefix_cache_hits, 1);
  EXPECT_EQ(cached.metrics().cached_prompt_tokens, Q);
}

TEST(Scheduler, QueueLimitCancellationAndDrain) {
  model::NemotronH& m = tiny();
  Scheduler s(m, {.threads = {1}, .max_active = 1, .max_queue = 1});
  RequestOptions longer;
  longer.prompt = tokens(8, 1);
  longer.max_tokens = 100000;
  auto a = s.submit(longer);
  ASSERT_TRUE(a);
  // Wait until `a` is admitted, then fill the one queue slot; the next is refused.
  std::vector<TokenOut> got;
  while (got.empty()) a->wait(got, std::chrono::milliseconds(100));
  auto b = s.submit(longer);
  ASSERT_TRUE(b);
  Scheduler::Refusal why = Scheduler::Refusal::None;
  std::string msg;
  EXPECT_FALSE(s.submit(longer, &msg, &why));
  EXPECT_EQ(why, Scheduler::Refusal::QueueFull);
  EXPECT_NE(msg.find("queue"), std::string::npos) << msg;
  a->cancel();
  b->cancel();
  EXPECT_EQ(collect(a).sum.finish, FinishReason::Cancelled);
  EXPECT_EQ(collect(b).sum.finish, FinishReason::Cancelled);
  EXPECT_GT(collect(a).sum.completion_tokens, 0);
  // Invalid requests are refused up front, naming the problem.
  RequestOptions bad = longer;
  bad.prompt = {int32_t(m.config().vocab_size)};
  EXPECT_FALSE(s.submit(bad, &msg, &why));
  EXPECT_EQ(why, Scheduler::Refusal::Invalid);
  EXPECT_NE(msg.find("vocabulary"), std::string::npos) << msg;
  bad = longer;
  bad.top_logprobs = 99;
  EXPECT_FALSE(s.submit(bad, &msg, &why));
  // Drain: a running request finishes; afterwards new ones are refused.
  RequestOptions shortr = longer;
  shortr.max_tokens = 5;
  auto c = s.submit(shortr);
  ASSERT_TRUE(c);
  s.drain();
  const Output oc = collect(c);
  EXPECT_EQ(oc.sum.finish, FinishReason::Length);
  EXPECT_EQ(oc.toks.size(), 5u);
  EXPECT_FALSE(s.submit(shortr, &msg, &why));
  EXPECT_EQ(why, Scheduler::Refusal::Draining);
  const SchedulerMetrics mt = s.metrics();
  EXPECT_EQ(mt.requests_cancelled, 2);
  EXPECT_EQ(mt.requests_finished, 3);
  EXPECT_EQ(mt.queued + mt.active, 0);
}

// Stop tokens end a request with finish "stop"; logprobs are log-softmax values (<= 0, sorted).
TEST(Scheduler, StopTokensAndLogprobs) {
  model::NemotronH& m = tiny();
  Scheduler s(m, {.threads = {2}});
  RequestOptions r;
  r.prompt = tokens(6, 2);
  r.max_tokens = 12;
  r.top_logprobs = 4;
  const Output free_run = collect(s.submit(r));
  ASSERT_EQ(free_run.toks.size(), 12u);
  for (const auto& t : free_run.toks) {
    ASSERT_EQ(t.top.size(), 4u);
    EXPECT_EQ(t.top[0].first, t.token);  // greedy: the chosen token is the most likely
    EXPECT_LE(t.logprob, 0.0f);
    for (size_t k = 1; k < t.top.size(); ++k) EXPECT_LE(t.top[k].second, t.top[k - 1].second);
  }
  r.stop_tokens = {free_run.toks[4].token};
  const Output stopped = collect(s.submit(r));
  EXPECT_EQ(stopped.sum.finish, FinishReason::Stop);
  ASSERT_LE(stopped.toks.size(), 5u);
  EXPECT_EQ(stopped.toks.back().token, free_run.toks[4].token);
  EXPECT_EQ(free_run.sum.finish, FinishReason::Length);
}

// DFlash / DSpark drafters read taps of every row, including a cached prefix's (stored beside the
// snapshot): served among other requests and resumed from the cache, the output is unchanged.
TEST(Scheduler, ExternalDraftersBatchedAndResumedExactly) {
  model::NemotronH& m = tiny();
  const int64_t Q = m.config().chunk_size;
  for (auto kind : {synth::DrafterKind::DFlash, synth::DrafterKind::DSpark}) {
    test::TempDir dir;
    synth::write_drafter_checkpoint(kind, synth::preset_config("tiny-a"), dir.path(), {});
    const auto d = model::DFlashModel::load(dir.path(), m);
    const SpecMode mode = kind == synth::DrafterKind::DSpark ? SpecMode::DSpark : SpecMode::DFlash;
    SCOPED_TRACE(spec_mode_name(mode));
    RequestOptions r;
    r.prompt = tokens(Q + 20, 21);
    r.max_tokens = 20;
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 3;
    r.top_logprobs = 2;
    Output alone;
    {
      Scheduler s(m, {.threads = {2}, .spec = mode, .drafter = d.get(), .prefix_cache_bytes = 0});
      alone = collect(s.submit(r));
    }
    ASSERT_EQ(alone.toks.size(), 20u);
    EXPECT_GT(alone.sum.spec.drafted, 0);
    Scheduler s(m, {.threads = {2}, .spec = mode, .drafter = d.get(), .prefill_piece = Q});
    // Fill the cache with the prompt's prefix, then run it among neighbours.
    RequestOptions warm = r;
    warm.max_tokens = 1;
    warm.prompt.resize(size_t(Q + 3));
    collect(s.submit(warm));
    std::vector<std::shared_ptr<RequestStream>> others;
    for (int i = 0; i < 5; ++i) {
      RequestOptions o;
      o.prompt = tokens(5 + 30 * i, 40 + uint64_t(i));
      o.max_tokens = 9;
      o.spec = i % 2 ? SpecMode::None : mode;
      others.push_back(s.submit(o));
    }
    const Output among = collect(s.submit(r));
    for (auto& o : others) EXPECT_EQ(collect(o).sum.finish, FinishReason::Length);
    EXPECT_EQ(among.sum.cached_tokens, Q);
    expect_same(alone, among);
  }
}
