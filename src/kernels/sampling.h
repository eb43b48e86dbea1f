// Logits → the distribution a token is drawn from (temperature, top-k, top-p, min-p), and the
// draw itself. One definition shared by the engine's sampler and the speculative verify rule,
// so a drafted token is accepted against exactly the distribution plain decoding samples from.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/random.h"

namespace nemo::kernels {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// (id, probability) pairs; sampling_distribution returns them in descending probability (ties:
// ascending id).
using Distribution = std::vector<std::pair<int32_t, double>>;

// Greedy: the lowest id among the largest logits (NaNs never win; ties to the lowest id). argmax
// dispatches on the active ISA; argmax_ref is the scalar definition it must equal.
int32_t argmax(std::span<const float> logits);
int32_t argmax_ref(std::span<const float> logits);

// The distribution the sampler draws from, after temperature / top-k / top-p / min-p. Greedy
// params give the one-hot distribution of the argmax.
Distribution sampling_distribution(std::span<const float> logits, const SamplingParams& p);

// Inverse-CDF draw with one uniform from `rng`, in the distribution's order.
int32_t draw(const Distribution& d, Rng& rng);

// Probability of `id` in `d` (0 when absent).
double prob_of(const Distribution& d, int32_t id);

}  // namespace nemo::kernels
