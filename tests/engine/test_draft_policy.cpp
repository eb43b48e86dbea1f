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

TEST(DraftPolicy, StartsAtTheCapThenTimesAPlainStep) {
  DraftPolicy p(3);
  const Counts c(3, 0, 0.0);
  EXPECT_EQ(p.next(c.proposed, c.accepted), 3);
  p.observe(3, 0.03);
  EXPECT_EQ(p.next(c.proposed, c.accepted), 0);
  p.observe(0, 0.01);
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
  // Plain steps keep winning: probes after 16, 32, 64, 128, 128 plain rounds.
  std::vector<int> gaps;
  int plain = 0;
  for (int r = 0; r < 16 + 32 + 64 + 128 + 128 + 5; ++r) {
    const int k = p.next(lose.proposed, lose.accepted);
    if (k == 0) {
      ++plain;
      continue;
    }
    EXPECT_EQ(k, 3);
    gaps.push_back(plain);
    plain = 0;
  }
  EXPECT_EQ(gaps, (std::vector<int>{16, 32, 64, 128, 128}));
  // Once drafting wins again, the next back-off starts from kProbeEvery.
  p.observe(3, 0.0011);
  EXPECT_EQ(p.next(win.proposed, win.accepted), 3);
  p.observe(3, 0.01);
  for (int r = 0; r < DraftPolicy::kProbeEvery; ++r)
    ASSERT_EQ(p.next(lose.proposed, lose.accepted), 0) << r;
  EXPECT_EQ(p.next(lose.proposed, lose.accepted), 3);
}

TEST(DraftPolicy, RoundTimesAreSmoothed) {
  DraftPolicy p(2);
  p.observe(1, 1.0);
  p.observe(1, 2.0);
  EXPECT_DOUBLE_EQ(p.round_seconds(1), 1.0 + DraftPolicy::kSmoothing);
  p.observe(1, 0.0);  // a clock that did not move: ignored
  p.observe(3, 5.0);  // past the cap: ignored
  EXPECT_DOUBLE_EQ(p.round_seconds(1), 1.0 + DraftPolicy::kSmoothing);
  EXPECT_DOUBLE_EQ(p.round_seconds(2), 1.0 + DraftPolicy::kSmoothing);  // one side timed
}

}  // namespace
}  // namespace nemo::engine
