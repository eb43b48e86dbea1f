// The array forms of SiLU (kernels/silu.cpp: glibc's expf in vectors of doubles) against the
// scalar silu() they must equal bit for bit on every ISA path, at every length and offset; and the
// vector paths in use on this machine (their sampled check passed), so that the comparison is not
// the scalar loop against itself. tools/check/silu_exp.cpp runs all 2^32 inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/linear.h"
#include "kernels/ops.h"

using namespace nemo::kernels;

namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Every 4099th bit pattern (every exponent, both signs, NaNs with payloads), then the edges of
// expf's special cases (overflow above 0x1.62e42ep6, +0 below -0x1.9fe368p6, |x| >= 88) and of
// the subnormals, each with its neighbours, in both signs.
std::vector<float> inputs() {
  std::vector<float> in;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const uint32_t b = uint32_t(u);
    float f;
    std::memcpy(&f, &b, sizeof f);
    in.push_back(f);
  }
  for (const float e : {0x1.62e42ep6f, 0x1.9fe368p6f, 88.0f, 87.5f, 103.5f, 0x1p-126f, 0x1p-149f,
                        1.0f, 0.0f, INFINITY, NAN, 20.0f, 17.0f})
    for (const float f : {e, std::nextafter(e, -INFINITY), std::nextafter(e, INFINITY)})
      in.push_back(f), in.push_back(-f);
  return in;
}

}  // namespace

TEST(Silu, VectorPathsPassTheirCheckOnThisMachine) {
  // Debian's glibc: its expf is what the vector paths compute. Were a check to fail, the engine
  // would still be exact (the scalar loop runs), but the test below would compare that loop with
  // itself.
  if (detected_isa() >= Isa::Avx2) {
    EXPECT_TRUE(silu_vector_verified(Isa::Avx2));
  }
  if (detected_isa() >= Isa::Avx512) {
    EXPECT_TRUE(silu_vector_verified(Isa::Avx512));
  }
  EXPECT_FALSE(silu_vector_verified(Isa::Reference));
}

TEST(Silu, EveryIsaEqualsTheScalarDefinition) {
  IsaGuard guard;
  const std::vector<float> in = inputs();
  // The other operand of the gates: ordinary values, with an infinity, a NaN and zeros among them.
  std::vector<float> other(in.size());
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (size_t i = 0; i < other.size(); ++i)
    other[i] = i % 997 == 0 ? NAN : i % 991 == 0 ? -INFINITY : i % 983 == 0 ? 0.0f : nd(g);
  const int64_t n = int64_t(in.size());
  int64_t compared = 0;
  for (const Isa isa : available_isas()) {
    set_active_isa(isa);
    // Whole arrays, then short ones at every offset and length up to 40 (blocks and tails).
    std::vector<std::pair<int64_t, int64_t>> spans = {{0, n}};
    for (int64_t off = 0; off < 17; ++off)
      for (int64_t len = 0; len <= 40; ++len) spans.push_back({off * 61, len});
    for (const auto& [off, len] : spans) {
      std::vector<float> a(in.begin() + off, in.begin() + off + len), b = a;
      const float* o = other.data() + off;
      silu_inplace(a.data(), len);
      mul_silu(b.data(), o, len);
      std::vector<float> z(o, o + len);
      silu_mul(z.data(), in.data() + off, len);  // g = the normal values, u = the sweep
      for (int64_t i = 0; i < len; ++i) {
        const float x = in[size_t(off + i)];
        ASSERT_TRUE(same_bits(a[size_t(i)], silu(x)))
            << isa_name(isa) << " silu_inplace, input " << std::hexfloat << x;
        ASSERT_TRUE(same_bits(b[size_t(i)], x * silu(o[i])))
            << isa_name(isa) << " mul_silu, " << std::hexfloat << x << " * silu(" << o[i] << ")";
        ASSERT_TRUE(same_bits(z[size_t(i)], silu(o[i]) * x))
            << isa_name(isa) << " silu_mul, silu(" << std::hexfloat << o[i] << ") * " << x;
        ++compared;
      }
    }
  }
  // Every path saw the whole sweep and the short spans.
  EXPECT_EQ(compared, int64_t(available_isas().size()) * (n + 17 * (40 * 41 / 2)));
}
