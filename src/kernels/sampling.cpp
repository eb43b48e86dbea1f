#include "kernels/sampling.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "base/error.h"
#include "base/memory.h"
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

// ---- exp_neg and the softmax weights ----

namespace {

constexpr double kLog2e = 0x1.71547652b82fep0;
constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;   // ln 2 rounded
constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;  // ln 2 - kLn2Hi
constexpr double kShift = 0x1.8p52;  // y + kShift rounds y to an integer, held in the low bits
constexpr double kExpMin = -708.0;   // exp_neg's result stays normal down to here
// 1 / n! for n = 0..13 (n! exact in a double, then one correctly rounded division each). Degree
// 13 leaves ~4e-18 relative for |r| <= ln 2 / 2.
constexpr std::array<double, 14> kInvFactorial = [] {
  std::array<double, 14> a{};
  double f = 1.0;
  for (int n = 0; n < 14; ++n) {
    if (n > 0) f *= n;
    a[size_t(n)] = 1.0 / f;
  }
  return a;
}();

inline double combine8(const double (&s)[8]) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// The scalar tail of a vector path: elements [i, n) into the partial sums, as the reference.
inline void weights_tail(std::span<const float> x, size_t i, double m, double inv, double* w,
                         double (&s)[8]) {
  for (; i < x.size(); ++i) {
    w[i] = exp_neg((double(x[i]) - m) * inv);
    s[i % 8] += w[i];
  }
}

// exp_neg on 4 lanes: the same operations in the same order (a fused multiply-add where the
// scalar calls std::fma), so the same bits.
__attribute__((target("avx2,fma"))) inline __m256d exp_neg4(__m256d x) {
  const __m256d valid = _mm256_cmp_pd(x, _mm256_set1_pd(kExpMin), _CMP_GE_OQ);  // NaN: false
  const __m256d kd =
      _mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _mm256_set1_pd(kShift));
  const __m256d k = _mm256_sub_pd(kd, _mm256_set1_pd(kShift));
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), r);
  __m256d q = _mm256_set1_pd(kInvFactorial[13]);
#pragma GCC unroll 13
  for (int n = 12; n >= 0; --n) q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(kInvFactorial[n]));
  const __m256i e =
      _mm256_add_epi64(_mm256_castpd_si256(q), _mm256_slli_epi64(_mm256_castpd_si256(kd), 52));
  return _mm256_and_pd(_mm256_castsi256_pd(e), valid);
}

__attribute__((target("avx2,fma"))) double exp_weights_avx2(std::span<const float> x, float xmax,
                                                            float t, double* w) {
  const double m = xmax, inv = 1.0 / double(t);
  const __m256d vm = _mm256_set1_pd(m), vinv = _mm256_set1_pd(inv);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // partial sums 0-3 and 4-7
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    const __m256 v = _mm256_loadu_ps(x.data() + i);
    const __m256d a = exp_neg4(
        _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vm), vinv));
    const __m256d b = exp_neg4(
        _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vm), vinv));
    _mm256_storeu_pd(w + i, a);
    _mm256_storeu_pd(w + i + 4, b);
    lo = _mm256_add_pd(lo, a);
    hi = _mm256_add_pd(hi, b);
  }
  double s[8];
  _mm256_storeu_pd(s, lo);
  _mm256_storeu_pd(s + 4, hi);
  weights_tail(x, i, m, inv, w, s);
  return combine8(s);
}

// (The maskz forms with every lane set: GCC 12's plain ones start from an "undefined" register
// and warn -Wmaybe-uninitialized.)
__attribute__((target("avx512f"))) inline __m512d exp_neg8(__m512d x) {
  const __mmask8 valid = _mm512_cmp_pd_mask(x, _mm512_set1_pd(kExpMin), _CMP_GE_OQ);
  const __m512d kd =
      _mm512_add_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)), _mm512_set1_pd(kShift));
  const __m512d k = _mm512_sub_pd(kd, _mm512_set1_pd(kShift));
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
  __m512d q = _mm512_set1_pd(kInvFactorial[13]);
#pragma GCC unroll 13
  for (int n = 12; n >= 0; --n) q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(kInvFactorial[n]));
  const __m512i e = _mm512_add_epi64(_mm512_castpd_si512(q),
                                     _mm512_maskz_slli_epi64(0xFF, _mm512_castpd_si512(kd), 52));
  return _mm512_maskz_mov_pd(valid, _mm512_castsi512_pd(e));
}

__attribute__((target("avx512f"))) double exp_weights_avx512(std::span<const float> x, float xmax,
                                                             float t, double* w) {
  const double m = xmax, inv = 1.0 / double(t);
  const __m512d vm = _mm512_set1_pd(m), vinv = _mm512_set1_pd(inv);
  __m512d acc = _mm512_setzero_pd();  // partial sum j in lane j
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    const __m512d e = exp_neg8(_mm512_mul_pd(
        _mm512_sub_pd(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(x.data() + i)), vm), vinv));
    _mm512_storeu_pd(w + i, e);
    acc = _mm512_add_pd(acc, e);
  }
  double s[8];
  _mm512_storeu_pd(s, acc);
  weights_tail(x, i, m, inv, w, s);
  return combine8(s);
}

}  // namespace

double exp_neg(double x) {
  if (!(x >= kExpMin)) return 0.0;  // and NaN
  const double y = x * kLog2e;
  const double kd = y + kShift;  // two roundings (the build never contracts them)
  const double k = kd - kShift;
  double r = std::fma(-k, kLn2Hi, x);  // exact: |r| < 1/2, on the grid of x and k · kLn2Hi
  r = std::fma(-k, kLn2Lo, r);
  double q = kInvFactorial[13];
  for (int n = 12; n >= 0; --n) q = std::fma(q, r, kInvFactorial[size_t(n)]);
  // 2^k into the exponent: kd's low bits hold k (two's complement), and k >= -1021 keeps the
  // result normal.
  return std::bit_cast<double>(std::bit_cast<uint64_t>(q) + (std::bit_cast<uint64_t>(kd) << 52));
}

double exp_weights_ref(std::span<const float> x, float xmax, float t, double* w) {
  double s[8] = {};
  weights_tail(x, 0, double(xmax), 1.0 / double(t), w, s);
  return combine8(s);
}

double exp_weights(std::span<const float> x, float xmax, float t, double* w) {
  const Isa isa = active_isa();
  if (isa >= Isa::Avx512) return exp_weights_avx512(x, xmax, t, w);
  if (isa >= Isa::Avx2) return exp_weights_avx2(x, xmax, t, w);
  return exp_weights_ref(x, xmax, t, w);
}

// ---- the distribution ----

namespace {

// Candidates in descending logit, ties by ascending id, as one 64-bit key each: the logit's
// order-preserving bits (negated) above the id. Sorting plain integers is several times faster
// than an indirect comparator, and it is a total order: NaN logits sort last (a comparator with
// `>` is no strict weak order with NaNs: undefined behaviour in std::sort). -0 and +0 are one
// key, so they tie by id, as `==` says.
inline uint64_t candidate_key(float f, size_t i) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u = std::bit_cast<uint32_t>(f);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with f
  if (std::isnan(f)) u = 0;                        // below -inf: last once negated
  return (uint64_t(~u) << 32) | uint64_t(i);
}
inline int32_t key_id(uint64_t k) {
  return int32_t(k & 0xFFFFFFFFu);
}
// Every candidate's key, in id order.
std::vector<uint64_t> all_keys(std::span<const float> x) {
  std::vector<uint64_t> keys(x.size());
  for (size_t i = 0; i < x.size(); ++i) keys[i] = candidate_key(x[i], i);
  return keys;
}

// The largest logit that is not NaN (-inf when there is none).
__attribute__((target("avx2"))) float max_logit_avx2(std::span<const float> x) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8)
    m = _mm256_max_ps(_mm256_loadu_ps(x.data() + i), m);  // NaN in the first operand: keeps m
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  float r = -INFINITY;
  for (const float v : l) r = v > r ? v : r;
  for (; i < x.size(); ++i) r = x[i] > r ? x[i] : r;
  return r;
}
float max_logit(std::span<const float> x) {
  if (active_isa() >= Isa::Avx2) return max_logit_avx2(x);
  float r = -INFINITY;
  for (const float v : x) r = v > r ? v : r;
  return r;
}

// min-p then top-p over candidates in descending order (probabilities in d), as prefixes: n is
// how many stay, and `decided` is false when the candidates ran out before top-p was reached
// and more candidates (all of lower logit) exist beyond them (`complete` false).
struct Cut {
  size_t n;
  bool decided;
};
Cut cut(const Distribution& d, const SamplingParams& p, double pmax, bool complete) {
  size_t n = d.size();
  bool by_min_p = false;
  if (p.min_p > 0.0f) {
    const double thr = double(p.min_p) * pmax;
    size_t j = 0;
    while (j < d.size() && d[j].second >= thr) ++j;
    // Past the candidates every probability is below thr (the caller's margin), so the cut is
    // here whether or not d holds them all.
    n = std::max<size_t>(1, j), by_min_p = true;
  }
  if (p.top_p < 1.0f) {
    double c = 0.0;
    for (size_t j = 0; j < n; ++j) {
      c += d[j].second;
      if (c >= double(p.top_p)) return {j + 1, true};
    }
  }
  return {n, complete || by_min_p || p.top_p >= 1.0f};
}

// Keeps the first n candidates and renormalises them in order; drops those of probability 0.
void keep_renormalised(Distribution& d, size_t n) {
  d.resize(n);
  while (d.size() > 1 && !(d.back().second > 0.0)) d.pop_back();
  double s = 0.0;
  for (const auto& [_, pr] : d) s += pr;
  for (auto& [_, pr] : d) pr /= s;
}

// Stable LSD radix sort by the keys' high 32 bits (4 passes of 8 bits): the ids below them are
// ascending already, so this is the same order as sorting whole keys, in O(V) (the full
// 131072-logit sort dominated a sampled token: 8.9 ms with std::sort). The four digits' counts
// come from one read of the keys, and a digit that all keys share is no pass at all (the top
// byte of logits within a few powers of two of each other).
void sort_by_high32(std::vector<uint64_t>& k) {
  if (k.empty()) return;
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
  const float xmax = max_logit(logits);
  if (!std::isfinite(xmax)) {  // +inf, or nothing above -inf: uniform over the ids that hold it
    Distribution d;
    for (size_t i = 0; i < V; ++i)
      if (logits[i] == xmax) d.push_back({int32_t(i), 0.0});
    if (d.empty()) return {{argmax(logits), 1.0}};  // every logit NaN
    for (auto& [_, pr] : d) pr = 1.0 / double(d.size());
    return d;
  }
  if (p.top_k > 0 && size_t(p.top_k) < V) {
    // The top_k largest, their weights summed in descending order.
    const size_t keep = size_t(p.top_k);
    std::vector<uint64_t> keys = all_keys(logits);
    std::partial_sort(keys.begin(), keys.begin() + ptrdiff_t(keep), keys.end());
    Distribution d(keep);
    const double inv = 1.0 / double(p.temperature);
    double sum = 0.0;
    for (size_t j = 0; j < keep; ++j) {
      const int32_t i = key_id(keys[j]);
      d[j] = {i, exp_neg((double(logits[size_t(i)]) - double(xmax)) * inv)};
      sum += d[j].second;
    }
    for (auto& [_, pr] : d) pr /= sum;
    keep_renormalised(d, cut(d, p, d[0].second, true).n);
    return d;
  }
  const auto w = alloc_aligned64<double>(V);  // every element written below: no zeroing
  const double S = exp_weights(logits, xmax, p.temperature, w.get());
  for (size_t i = 0; i < V; ++i) w[i] /= S;
  if (p.min_p <= 0.0f && p.top_p >= 1.0f) {  // no cut: id order, no sort
    Distribution d;
    d.reserve(V);
    for (size_t i = 0; i < V; ++i)
      if (w[i] > 0.0) d.push_back({int32_t(i), w[i]});
    return d;
  }
  // The cuts need only the most probable candidates in order: those whose logit is at least
  // the smallest logit among probabilities >= tau, with tau at half of both cuts' thresholds, so
  // that every candidate left out is below min-p's threshold and all of them together hold less
  // than 1 - top_p. That set is a prefix of the full order; when top-p is not reached inside it
  // (rounding), the full order decides.
  const double pmax = 1.0 / S;  // w = 1 at the largest logit
  double tau = 1.0;
  if (p.min_p > 0.0f) tau = std::min(tau, 0.5 * double(p.min_p) * pmax);
  if (p.top_p < 1.0f) tau = std::min(tau, 0.5 * (1.0 - double(p.top_p)) / double(V));
  // Without branches: on flat logits half of them are taken (top-p 0.95 over 131072 normal
  // logits 1.75 -> 0.5 ms). Eight running minima side by side: min is exact, so they give the
  // same value in any grouping (w >= tau leaves out NaN logits).
  float lm[8];
  std::fill_n(lm, 8, xmax);
  const auto take = [&](size_t i, float& m) {
    const float v = w[i] >= tau ? logits[i] : xmax;
    m = v < m ? v : m;
  };
  size_t i8 = 0;
  for (; i8 + 8 <= V; i8 += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) take(i8 + size_t(j), lm[j]);
  for (; i8 < V; ++i8) take(i8, lm[0]);
  const float lmin = *std::min_element(lm, lm + 8);
  std::vector<uint64_t> keys(V);
  size_t n_keys = 0;
  for (size_t i = 0; i < V; ++i) {
    keys[n_keys] = candidate_key(logits[i], i);
    n_keys += logits[i] >= lmin;
  }
  keys.resize(n_keys);
  const auto ordered = [&] {
    sort_by_high32(keys);
    Distribution d;
    d.reserve(keys.size());
    for (const uint64_t k : keys) d.push_back({key_id(k), w[size_t(key_id(k))]});
    return d;
  };
  Distribution d = ordered();
  Cut c = cut(d, p, pmax, keys.size() == V);
  if (!c.decided) {
    keys = all_keys(logits);
    d = ordered();
    c = cut(d, p, pmax, true);
  }
  keep_renormalised(d, c.n);
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
