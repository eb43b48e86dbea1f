// argmax: every ISA path returns what the scalar definition (argmax_ref) does, including ties,
// NaNs, signed zeros, infinities and every tail length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/linear.h"
#include "kernels/sampling.h"

using namespace nemo::kernels;

namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

// The definition written out independently: a NaN first logit is never beaten; otherwise the
// first index holding the largest non-NaN value (-0 == +0, so the earlier zero wins).
int32_t naive(const std::vector<float>& x) {
  if (x.empty() || std::isnan(x[0])) return 0;
  float m = -INFINITY;
  for (float v : x)
    if (!std::isnan(v)) m = std::max(m, v);
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] == m) return int32_t(i);
  return 0;
}

}  // namespace

TEST(Argmax, EveryIsaEqualsTheScalarDefinition) {
  IsaGuard guard;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  std::mt19937 rng(7);
  std::vector<std::vector<float>> cases = {{},
                                           {nan},
                                           {nan, 1.0f, 2.0f},
                                           {1.0f, nan, 2.0f, nan},
                                           {-0.0f, 0.0f},
                                           {0.0f, -0.0f},
                                           {3.0f, 3.0f, 3.0f},
                                           {-inf, -inf},
                                           {1.0f, inf, inf, 2.0f}};
  for (size_t n : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 33u, 1000u, 131072u}) {
    std::vector<float> x(n);
    std::normal_distribution<float> d;
    for (auto& v : x) v = d(rng);
    cases.push_back(x);
    for (auto& v : x) v = float(int(rng() % 5));  // many ties
    cases.push_back(x);
    x.back() = 1e30f;  // the maximum in the tail
    cases.push_back(x);
    std::vector<float> asc(n);
    for (size_t i = 0; i < n; ++i)
      asc[i] = float(i) * ((i % 3 == 1) ? nan : 1.0f);  // NaNs mixed in
    cases.push_back(asc);
  }
  int checked = 0;
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512}) {
    if (isa > detected_isa()) continue;
    set_active_isa(isa);
    for (const auto& x : cases) {
      const int32_t want = argmax_ref(x);
      ASSERT_EQ(want, naive(x)) << "n " << x.size();
      ASSERT_EQ(argmax(x), want) << "isa " << int(isa) << ", n " << x.size();
      ++checked;
    }
  }
  EXPECT_GE(checked, int(cases.size()));
}

// The candidates of a sampling distribution come in descending logit, ties (including -0 / +0)
// by ascending id: the order of the comparator `a != b ? a > b : id_a < id_b`, which the keyed
// sort replaced. NaN logits come last instead of breaking std::sort.
TEST(SamplingDistribution, CandidateOrderIsLogitDescendingThenId) {
  std::mt19937 rng(11);
  for (int top_k : {0, 1, 40, 1000})
    for (bool one_binade : {false, true}) {
      std::vector<float> x(5000);
      std::normal_distribution<float> nd(0.0f, 4.0f);
      for (size_t i = 0; i < x.size(); ++i)  // every bit of the logit matters, and many ties
        x[i] = i % 2 ? nd(rng) : float(int(rng() % 200) - 100) * 0.25f;
      x[10] = -0.0f, x[11] = 0.0f, x[12] = -0.0f, x[13] = INFINITY, x[14] = -INFINITY;
      // Logits in [1, 2): the keys share their top bytes, which the sort then passes over.
      if (one_binade)
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = 1.0f + float(i % 2 ? rng() % (1u << 23) : rng() % 64) * 0x1p-23f;
      std::vector<int32_t> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = int32_t(i);
      std::sort(want.begin(), want.end(),
                [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
      if (top_k > 0) want.resize(size_t(top_k));
      SamplingParams p;
      p.temperature = 4.0f;  // keeps every candidate's probability above 0
      p.top_k = top_k;
      const Distribution d = sampling_distribution(x, p);
      ASSERT_EQ(d.size(), want.size()) << "top_k " << top_k;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(d[i].first, want[i]) << "rank " << i << (one_binade ? ", one binade" : "");
    }
  std::vector<float> y = {1.0f, NAN, 3.0f, NAN, 2.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  const Distribution d = sampling_distribution(y, p);
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].first, 2);
  EXPECT_EQ(d[1].first, 4);
  EXPECT_EQ(d[2].first, 0);
  EXPECT_TRUE((d[3].first == 1 && d[4].first == 3)) << d[3].first << " " << d[4].first;
}
