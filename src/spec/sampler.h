// Token sampling: greedy, temperature, top-k, top-p, min-p, seeded RNG. Deterministic for a
// given seed and logits row.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace nemo::spec {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;
};

// xoshiro256** seeded by splitmix64: small, fast, reproducible across platforms.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits
 private:
  uint64_t s_[4];
};

int32_t argmax(std::span<const float> logits);

// The distribution the sampler draws from, after temperature / top-k / top-p / min-p.
// Returned as (id, probability) pairs in descending probability (ties: ascending id).
std::vector<std::pair<int32_t, double>> sampling_distribution(std::span<const float> logits,
                                                              const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return p_; }
  Rng& rng() { return rng_; }

 private:
  SamplingParams p_;
  Rng rng_;
};

}  // namespace nemo::spec
