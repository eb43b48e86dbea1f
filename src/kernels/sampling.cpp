#include "kernels/sampling.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/error.h"
#include "kernels/linear.h"

namespace nemo::kernels {

namespace {

// The rule itself, over x[i, end): a logit that beats the best so far under `>` replaces it.
inline void scan(std::span<const float> x, size_t i, size_t end, int32_t& best, float& bv) {
  for (; i < end; ++i)
    if (x[i] > bv) bv = x[i], best = int32_t(i);
}

}  // namespace

// The first index whose logit beats every earlier one under `>` (ties to the lowest id; a NaN
// never wins, and a NaN at index 0 is never beaten). The best value is kept in a register: a
// loop that re-reads logits[best] makes the compiler's cmov a load-to-load dependency chain
// (~4 ns per logit, 0.56 ms for 131072).
int32_t argmax_ref(std::span<const float> x) {
  if (x.empty()) return 0;
  int32_t best = 0;
  float bv = x[0];
  scan(x, 1, x.size(), best, bv);
  return best;
}

namespace {

// The same result: a block of 8 where nothing beats the best so far cannot change it (one
// vector compare); a block where something does is rescanned in order by the scalar rule.
__attribute__((target("avx2"))) int32_t argmax_avx2(std::span<const float> x) {
  if (x.empty()) return 0;
  const size_t n = x.size();
  int32_t best = 0;
  float bv = x[0];
  size_t i = 1;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x.data() + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(bv), _CMP_GT_OQ)) != 0)
      scan(x, i, i + 8, best, bv);
  }
  scan(x, i, n, best, bv);
  return best;
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  return active_isa() >= Isa::Avx2 ? argmax_avx2(logits) : argmax_ref(logits);
}

namespace {

// Stable LSD radix sort by the keys' high 32 bits (4 passes of 8 bits): the ids below them are
// ascending already, so this is the same order as sorting whole keys, in O(V) (the full
// 131072-logit sort dominated a sampled token: 8.9 ms with std::sort). The four digits' counts
// come from one read of the keys, and a digit that all keys share is no pass at all (the top
// byte of logits within a few powers of two of each other).
void sort_by_high32(std::vector<uint64_t>& k) {
  std::vector<uint64_t> tmp(k.size());
  size_t count[4][256] = {};
  for (const uint64_t v : k)
    for (int d = 0; d < 4; ++d) ++count[d][(v >> (32 + 8 * d)) & 255];
  for (int d = 0; d < 4; ++d) {
    const int shift = 32 + 8 * d;
    if (count[d][(k[0] >> shift) & 255] == k.size()) continue;  // one bucket: already in order
    size_t start[256];
    for (size_t b = 0, at = 0; b < 256; ++b) start[b] = at, at += count[d][b];
    for (const uint64_t v : k) tmp[start[(v >> shift) & 255]++] = v;
    k.swap(tmp);
  }
}
}  // namespace

Distribution sampling_distribution(std::span<const float> logits, const SamplingParams& p) {
  const size_t V = logits.size();
  if (V == 0) fail("sampling: empty logits");
  if (p.greedy()) return {{argmax(logits), 1.0}};
  // Candidates in descending logit, ties by ascending id, as one 64-bit key each: the logit's
  // order-preserving bits (negated) above the id. Sorting plain integers is several times faster
  // than an indirect comparator over 131072 logits, and it is a total order: NaN logits sort
  // last (a comparator with `>` is no strict weak order with NaNs: undefined behaviour in
  // std::sort). -0 and +0 are one key, so they tie by id, as `==` says.
  std::vector<uint64_t> keys(V);
  for (size_t i = 0; i < V; ++i) {
    const float f = logits[i] == 0.0f ? 0.0f : logits[i];
    uint32_t u = std::bit_cast<uint32_t>(f);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with f
    if (std::isnan(f)) u = 0;                        // below -inf: last once negated
    keys[i] = (uint64_t(~u) << 32) | uint64_t(i);
  }
  size_t keep = V;
  if (p.top_k > 0 && size_t(p.top_k) < V) {
    keep = size_t(p.top_k);
    std::partial_sort(keys.begin(), keys.begin() + keep, keys.end());
  } else {
    sort_by_high32(keys);
  }
  // Softmax in double over the kept candidates (largest first, so no overflow).
  Distribution d(keep);
  const double mx = double(logits[keys[0] & 0xFFFFFFFFu]) / p.temperature;
  double sum = 0.0;
  for (size_t j = 0; j < keep; ++j) {
    const auto i = int32_t(keys[j] & 0xFFFFFFFFu);
    const double e = std::exp(double(logits[size_t(i)]) / p.temperature - mx);
    d[j] = {i, e};
    sum += e;
  }
  for (auto& [_, pr] : d) pr /= sum;
  if (p.min_p > 0.0f) {
    const double thr = double(p.min_p) * d[0].second;
    size_t n = 0;
    while (n < d.size() && d[n].second >= thr) ++n;
    d.resize(std::max<size_t>(1, n));
  }
  if (p.top_p < 1.0f) {
    double c = 0.0;
    size_t n = 0;
    while (n < d.size()) {
      c += d[n].second;
      ++n;
      if (c >= double(p.top_p)) break;
    }
    d.resize(std::max<size_t>(1, n));
  }
  double s2 = 0.0;
  for (auto& [_, pr] : d) s2 += pr;
  for (auto& [_, pr] : d) pr /= s2;
  return d;
}

int32_t draw(const Distribution& d, Rng& rng) {
  const double u = rng.uniform();
  double c = 0.0;
  for (const auto& [id, p] : d) {
    c += p;
    if (u < c) return id;
  }
  return d.back().first;
}

double prob_of(const Distribution& d, int32_t id) {
  for (const auto& [i, p] : d)
    if (i == id) return p;
  return 0.0;
}

}  // namespace nemo::kernels
