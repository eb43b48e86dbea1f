// engine::DraftPolicy with round times given by the test (no clock): which draft length it
// picks for a machine where verify rows are dear and one where they are nearly free, how it
// starts, interpolates and probes.
#include <gtest/gtest.h>

#include <vector>

#include "engine/draft_policy.h"

namespace nemo::engine {
namespace {

// Per-position counts for `rounds` rounds that each proposed `cap` drafts and accepted the
// first i with the chance accept^(i+1) (the share accepted at position i).
struct Counts {
  std::vector<int64_t> proposed, accepted;
  Counts(int cap, int64_t rounds, double accept) {
    double p = 1;
    for (int i = 0; i < cap; ++i) {
      p *= accept;
      proposed.push_back(rounds);
      accepted.push_back(int64_t(double(rounds) * p + 0.5));
    }
  }
};

// Times a round of k drafts as `step * (1 + k * extra_row)`.
void feed(DraftPolicy& p, double step, double extra_row) {
  for (int k = 0; k <= p.cap(); ++k) p.observe(k, step * (1 + k * extra_row));
}

// Over 16 + 32 + 64 + 128 + 128 + 5 rounds where `chosen` keeps winning: the number of rounds
// between two probes (rounds of `probe`; any other length fails).
std::vector<int> probe_gaps(DraftPolicy& p, const Counts& c, int chosen, int probe) {
  std::vector<int> gaps;
  int run = 0;
  for (int r = 0; r < 16 + 32 + 64 + 128 + 128 + 5; ++r) {
    const int k = p.next(c.proposed, c.accepted);
    if (k == chosen) {
      ++run;
      continue;
    }
    EXPECT_EQ(k, probe);
    gaps.push_back(run);
    run = 0;
  }
  return gaps;
}

// The first two rounds: one at the cap, then a plain step, timed as given.
void start(DraftPolicy& p, const Counts& c, double cap_seconds, double plain_seconds) {
  EXPECT_EQ(p.next(c.proposed, c.accepted), p.cap());
  p.observe(p.cap(), cap_seconds);
  EXPECT_EQ(p.next(c.proposed, c.accepted), 0);
  p.observe(0, plain_seconds);
}

TEST(DraftPolicy, StartsAtTheCapThenTimesAPlainStep) {
  DraftPolicy p(3);
  start(p, Counts(3, 0, 0.0), 0.03, 0.01);
  // Untimed lengths lie on the line between the two ends.
  EXPECT_DOUBLE_EQ(p.round_seconds(1), 0.01 + 0.02 / 3);
  EXPECT_DOUBLE_EQ(p.round_seconds(2), 0.01 + 0.04 / 3);
}

TEST(DraftPolicy, BacksOffWhereVerifyRowsAreDear) {
  // The trained tiny model on this CPU: a 4-row round ~3.1 steps, 23 % of drafts accepted
  // (docs/PERFORMANCE.md): every length loses to a plain step.
  DraftPolicy p(3);
  feed(p, 0.001, 0.7);
  const Counts c(3, 40, 0.45);
  EXPECT_EQ(p.next(c.proposed, c.accepted), 0);
}

TEST(DraftPolicy, DraftsTheCapWhereRowsAreNearlyFree) {
  // An oracle drafter on a memory-bound target: a 4-row round ~1.3 steps.
  DraftPolicy p(3);
  feed(p, 0.1, 0.1);
  const Counts c(3, 40, 1.0);
  EXPECT_EQ(p.next(c.proposed, c.accepted), 3);
}

TEST(DraftPolicy, PicksTheLengthBetween) {
  // Rows cost 0.4 step each, drafts accepted 70 % then 49 %, 34 %, ...: expected tokens per
  // step 1, 1.21, 1.21, 1.15, ... for k = 0, 1, 2, 3 with this rounding: 1 or 2 drafts win.
  DraftPolicy p(7);
  feed(p, 0.01, 0.4);
  const Counts c(7, 100, 0.7);
  const int k = p.next(c.proposed, c.accepted);
  EXPECT_TRUE(k == 1 || k == 2) << k;
  std::vector<double> score;
  double e = 1;
  for (int j = 0; j <= 7; ++j) {
    if (j > 0)
      e += (double(c.accepted[size_t(j - 1)]) + 0.5) / (double(c.proposed[size_t(j - 1)]) + 1);
    score.push_back(e / p.round_seconds(j));
  }
  for (int j = 0; j <= 7; ++j) EXPECT_LE(score[size_t(j)], score[size_t(k)]) << j;
}

TEST(DraftPolicy, ProbesTheCapEverySoOften) {
  DraftPolicy p(3);
  feed(p, 0.001, 0.7);
  const Counts lose(3, 40, 0.3), win(3, 40, 1.0);
  // Plain steps keep winning: probes at the cap after 16, 32, 64, 128, 128 plain rounds.
  EXPECT_EQ(probe_gaps(p, lose, 0, 3), (std::vector<int>{16, 32, 64, 128, 128}));
  // Once drafting wins again, the next back-off starts from kProbeEvery.
  p.observe(3, 0.0011);
  EXPECT_EQ(p.next(win.proposed, win.accepted), 3);
  p.observe(3, 0.01);
  for (int r = 0; r < DraftPolicy::kProbeEvery; ++r)
    ASSERT_EQ(p.next(lose.proposed, lose.accepted), 0) << r;
  EXPECT_EQ(p.next(lose.proposed, lose.accepted), 3);
}

TEST(DraftPolicy, ProbesAPlainStepEverySoOften) {
  // Drafting keeps winning: a plain step after 16, 32, 64, 128, 128 drafting rounds.
  DraftPolicy p(3);
  feed(p, 0.1, 0.1);
  const Counts win(3, 40, 1.0);
  EXPECT_EQ(probe_gaps(p, win, 3, 0), (std::vector<int>{16, 32, 64, 128, 128}));
}

TEST(DraftPolicy, OneSlowPlainStepIsCorrectedByTheNextProbe) {
  // The README's tiny model on a noisy host: a 4-row round ~2.8 steps, 24 % of drafts accepted,
  // but the one timed plain step caught a busy neighbour (3x its cost): drafting looks better.
  DraftPolicy p(3);
  const Counts c(3, 40, 0.45);
  start(p, c, 0.0028, 0.0030);
  int drafted = 0;
  while (p.next(c.proposed, c.accepted) != 0) {
    p.observe(3, 0.0028);
    ASSERT_LE(++drafted, DraftPolicy::kProbeEvery);
  }
  EXPECT_EQ(drafted, DraftPolicy::kProbeEvery);
  p.observe(0, 0.0010);  // the probe: the step's real cost replaces the slow one
  EXPECT_DOUBLE_EQ(p.round_seconds(0), 0.0010);
  EXPECT_EQ(p.next(c.proposed, c.accepted), 0);
}

TEST(DraftPolicy, RoundTimesAreSmoothed) {
  DraftPolicy p(2);
  p.observe(1, 1.0);
  p.observe(1, 2.0);  // slower: moved toward by kSmoothing
  EXPECT_DOUBLE_EQ(p.round_seconds(1), 1.0 + DraftPolicy::kSmoothing);
  p.observe(1, 0.0);  // a clock that did not move: ignored
  p.observe(3, 5.0);  // past the cap: ignored
  EXPECT_DOUBLE_EQ(p.round_seconds(1), 1.0 + DraftPolicy::kSmoothing);
  EXPECT_DOUBLE_EQ(p.round_seconds(2), 1.0 + DraftPolicy::kSmoothing);  // one side timed
  p.observe(1, 0.5);                                                    // faster: taken as it is
  EXPECT_DOUBLE_EQ(p.round_seconds(1), 0.5);
}

}  // namespace
}  // namespace nemo::engine
