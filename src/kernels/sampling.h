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
  float temperature = 0.0f;  // <= 0 (or NaN) = greedy (argmax, ties to the lowest id)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;
  bool greedy() const { return !(temperature > 0.0f); }
};

// (id, probability) pairs with probability > 0. sampling_distribution returns them in descending
// logit (ties: ascending id) when top-k, top-p or min-p cut the vocabulary, else in id order (no
// sort: a sampled token over 131072 logits took 1.6-1.9 ms, two thirds of it sorting and
// std::exp).
using Distribution = std::vector<std::pair<int32_t, double>>;

// Greedy: the lowest id among the largest logits (NaNs never win; ties to the lowest id). argmax
// dispatches on the active ISA; argmax_ref is the scalar definition it must equal.
int32_t argmax(std::span<const float> logits);
int32_t argmax_ref(std::span<const float> logits);

// exp(x) for x <= 0, the sampler's own definition: x = k·ln 2 + r (k = x·log2(e) rounded to an
// integer, r by two fused multiply-adds), exp(r) by its Taylor polynomial of degree 13 in fused
// multiply-adds, 2^k added to the exponent as an integer; 0 below -708 and for NaN. Within 1 ulp
// of exp (tests/kernels/test_sampling.cpp measures it against glibc's), and only IEEE operations
// in a fixed order, so every ISA path gives the same bits.
double exp_neg(double x);

// The unnormalised weights of a softmax at temperature t over logits x whose largest is xmax:
// w[i] = exp_neg((double(x[i]) - double(xmax)) · (1 / double(t))), 0 for a NaN x[i]; returns their
// sum in the canonical order: eight partial sums, sum j taking every i with i % 8 == j in
// ascending i, combined as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). exp_weights
// dispatches on the active ISA; exp_weights_ref is the scalar definition it must equal bitwise.
double exp_weights(std::span<const float> x, float xmax, float t, double* w);
double exp_weights_ref(std::span<const float> x, float xmax, float t, double* w);

// The distribution the sampler draws from, after temperature / top-k / top-p / min-p. Greedy
// params give the one-hot distribution of the argmax. Without top-k: p[i] = w[i] / Σw
// (exp_weights), then, over the candidates in descending logit (ties by id), min-p keeps the
// prefix with p >= min_p · max p and top-p the shortest prefix whose p sum to >= top_p, and the
// kept are renormalised in that order. With top-k: the top_k largest logits, their weights
// exp_neg as above summed in that order, then min-p and top-p the same way. When the largest
// logit that is not NaN is +inf or -inf, the distribution is uniform over the ids that hold it
// (the argmax alone when every logit is NaN).
Distribution sampling_distribution(std::span<const float> logits, const SamplingParams& p);

// Inverse-CDF draw with one uniform from `rng`, in the distribution's order (the last candidate
// when rounding leaves the uniform above the total).
int32_t draw(const Distribution& d, Rng& rng);

// Probability of `id` in `d` (0 when absent).
double prob_of(const Distribution& d, int32_t id);

}  // namespace nemo::kernels
