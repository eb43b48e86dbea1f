// The branch-free E2M1 cast equals ModelOpt's decision chain on every bound, tie and range.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/fp8.h"

namespace {
uint8_t chain(float x) {  // ModelOpt `_cast_fp4` decision chain, written out
  const uint8_t sign = x < 0.0f ? 8 : 0;
  const float a = std::fabs(x);
  if (std::isnan(a)) return 7;
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  return sign | c;
}
}  // namespace

TEST(E2M1Cast, MatchesDecisionChain) {
  std::vector<float> xs = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-30f, 6.0f, 7.0f, 1e30f};
  for (float b : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float v : {b, std::nextafter(b, 0.0f), std::nextafter(b, 10.0f)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int i = 0; i < 1000000; ++i) xs.push_back(u(g));
  for (float x : xs) ASSERT_EQ(nemo::kernels::f32_to_e2m1(x), chain(x)) << x;
}
