#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"

using namespace nemo::engine;
using nemo::kernels::argmax;
using nemo::kernels::sampling_distribution;

TEST(Sampler, GreedyTiesToLowestId) {
  std::vector<float> l = {0.1f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(argmax(l), 1);
  Sampler s({});
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, DistributionFilters) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.temperature = 1.0f;
  auto d = sampling_distribution(l, p);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_NEAR(d[0].second, 0.5, 1e-6);
  p.top_k = 2;
  d = sampling_distribution(l, p);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0].second, 0.625, 1e-6);
  p.top_k = 0;
  p.top_p = 0.75f;
  d = sampling_distribution(l, p);
  ASSERT_EQ(d.size(), 2u);  // 0.5 + 0.3 reaches 0.75 (the smallest set whose mass is >= top_p)
  p.top_p = 1.0f;
  p.min_p = 0.2f;  // keep p >= 0.1
  d = sampling_distribution(l, p);
  ASSERT_EQ(d.size(), 3u);
  p.min_p = 0.0f;
  p.temperature = 0.5f;  // sharpen: p ∝ p^2
  d = sampling_distribution(l, p);
  EXPECT_NEAR(d[0].second, 0.25 / (0.25 + 0.09 + 0.0225 + 0.0025), 1e-6);
}

TEST(Sampler, SeededFrequenciesMatchDistribution) {
  std::vector<float> l = {1.0f, 0.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 123;
  Sampler s(p);
  std::map<int, int> counts;
  const int N = 200000;
  for (int i = 0; i < N; ++i) counts[s.sample(l)]++;
  auto d = sampling_distribution(l, p);
  double chi2 = 0;
  for (auto [id, pr] : d) {
    const double e = pr * N;
    chi2 += (counts[id] - e) * (counts[id] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // 3 dof, p = 0.001
  // Same seed → same sequence.
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.sample(l), b.sample(l));
}
