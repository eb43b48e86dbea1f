#include "kernels/peak.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "base/clock.h"
#include "base/memory.h"
#include "kernels/ops.h"

namespace nemo::kernels {

namespace {

constexpr int kChains = 12;

// Accumulators grow by 2^-20 per step from 1: no overflow and no subnormal for any round count
// the bench uses, so every instruction runs at its normal speed.
float run_scalar(int64_t rounds) {
  float acc[kChains];
  for (float& a : acc) a = 1.0f;
  const float x = 0x1p-10f;
  for (int64_t i = 0; i < rounds; ++i)
    for (float& a : acc) a = std::fma(x, x, a);
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
float run_avx2(int64_t rounds) {
  __m256 acc[kChains];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 x = _mm256_set1_ps(0x1p-10f);
  for (int64_t i = 0; i < rounds; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(x, x, acc[c]);
  }
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  return _mm256_cvtss_f32(s);  // lane 0 suffices to keep the work observable
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16,avx512vl")
// kChains accumulators from 1, `rounds` times acc = step(acc) on each; lane 0 of their sum.
template <class Step>
float run_zmm(int64_t rounds, Step step) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < rounds; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = step(acc[c]);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_cvtss_f32(s);  // lane 0 suffices to keep the work observable
}
float run_avx512(int64_t rounds) {
  const __m512 x = _mm512_set1_ps(0x1p-10f);
  return run_zmm(rounds, [x](__m512 a) { return _mm512_fmadd_ps(x, x, a); });
}
float run_avx512_bf16(int64_t rounds) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3A80);  // bf16 2^-10
  return run_zmm(rounds, [x](__m512 a) { return _mm512_dpbf16_ps(a, x, x); });
}
#pragma GCC pop_options

// The instruction Arith a's multi-row passes run at `isa` and its loop. Arith::Bf16 without the
// bf16 kernels runs the AVX2 kernel's f32 fused multiply-adds.
struct Path {
  DotPeak peak;
  float (*run)(int64_t rounds);
};
Path path(Arith a, Isa isa) {
  isa = std::min(isa, detected_isa());
  if (isa >= Isa::Avx512 && a == Arith::Bf16 && bf16_kernel_verified())
    return {{"VDPBF16PS zmm", 32}, run_avx512_bf16};
  if (isa >= Isa::Avx512 && a == Arith::F32) return {{"VFMADD231PS zmm", 16}, run_avx512};
  if (isa >= Isa::Avx2) return {{"VFMADD231PS ymm", 8}, run_avx2};
  return {{"scalar fma", 1}, run_scalar};
}

}  // namespace

DotPeak dot_peak_instruction(Arith a, Isa isa) {
  return path(a, isa).peak;
}

int64_t run_dot_peak(Arith a, Isa isa, int64_t rounds) {
  const Path p = path(a, isa);
  // The sum is 12 * lanes * (1 + rounds * 2^-20 * pairs) > 0: kept observable, never taken.
  if (!(p.run(rounds) > 0)) return 0;
  return kChains * rounds * p.peak.macs_per_instruction;
}

ReadProbe::ReadProbe() : buf_((size_t(1) << 30) / sizeof(float)) {
  for (size_t i = 0; i < buf_.size(); i += 1024) buf_[i] = float(i);
}

double ReadProbe::measure(const ThreadConfig& tc) {
  const size_t n = buf_.size();
  double best = 0, sink = 0;
  const int64_t blocks = int64_t(n / 4096);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> part(size_t(blocks), 0.0);
    const double t0 = now_seconds();
    parallel_for(tc, blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk)
        part[size_t(blk)] = double(dot(buf_.data() + blk * 4096, buf_.data() + blk * 4096, 4096));
    });
    const double dt = now_seconds() - t0;
    best = std::max(best, double(n * sizeof(float)) / dt / 1e9);
    sink += part[0];
  }
  if (sink < 0) std::printf(" ");  // keep the reads observable
  return best;
}

double measure_read_bandwidth(const ThreadConfig& tc) {
  return ReadProbe().measure(tc);
}

}  // namespace nemo::kernels
