// The sampler: picks the next token from a logits row (greedy, or a seeded draw from the
// temperature / top-k / top-p / min-p distribution of kernels/sampling.h). Deterministic for a
// given seed and sequence of rows.
#pragma once
#include <span>

#include "base/random.h"
#include "kernels/sampling.h"

namespace nemo::engine {

using kernels::SamplingParams;

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}
  int32_t sample(std::span<const float> logits) {
    return p_.greedy() ? kernels::argmax(logits)
                       : kernels::draw(kernels::sampling_distribution(logits, p_), rng_);
  }
  const SamplingParams& params() const { return p_; }
  // The request's one random stream: drafting and verification draw from it too.
  Rng& rng() { return rng_; }

 private:
  SamplingParams p_;
  Rng rng_;
};

}  // namespace nemo::engine
