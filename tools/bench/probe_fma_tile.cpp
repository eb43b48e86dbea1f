// What one core's FMA units give a tile_f32z-shaped loop (docs/PERFORMANCE.md, "Intel Xeon with
// full-width AVX-512 and AMX"): the zmm FMA's latency (a dependent chain: 4 cycles, so the clock)
// and throughput (8 independent chains), then an R x O tile of FMAs over L1-resident weights (O x
// K) and activations (R x K) in k chunks of k1 as range_wide_z runs it, with the operands 64-byte
// aligned or 16 bytes off (a split cache line per 512-bit load). ns per FMA, best of 15. The loop
// is its own copy of tile_f32z's as it was when these were measured (4 rows x 4 outputs over k
// chunks of 256, operands at stride K), with unaligned loads so that the misaligned cases can run
// (the engine's tile loads aligned, and would fault on them); since 1f40e39 the engine runs 6 x 4
// over chunk-major copies in chunks of 384 (docs/PERFORMANCE.md, "wide passes blocked like a
// GEMM").
// Not part of the build:
//   g++ -O2 -std=c++20 -mavx512f -mfma -o /tmp/probe_fma_tile tools/bench/probe_fma_tile.cpp &&
//   /tmp/probe_fma_tile
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fma_latency_and_throughput() {
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-8f);
  __m512 a = _mm512_set1_ps(1.0f), b[8];
  for (int i = 0; i < 8; ++i) b[i] = _mm512_set1_ps(1.0f + float(i));
  const long n = 100000000;
  double lat = 1e9, thr = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) a = _mm512_fmadd_ps(a, m, c);
    lat = std::min(lat, seconds_since(t0) / double(n));
    t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) b[j] = _mm512_fmadd_ps(b[j], m, c);
    thr = std::min(thr, seconds_since(t0) / double(8 * n));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, a);
  float s = lanes[0];
  for (int j = 0; j < 8; ++j) _mm512_store_ps(lanes, b[j]), s += lanes[0];
  std::printf("zmm fma latency %.3f ns (4 cycles: %.2f GHz), throughput %.3f ns (%g)\n", lat * 1e9,
              4 / (lat * 1e9), thr * 1e9, double(s));
}

template <int R, int O>
[[gnu::noinline]] void tile(const float* wr, long K, const float* x, float* acc, long k1) {
  __m512 a[R][O];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) a[r][j] = _mm512_loadu_ps(acc + (r * O + j) * 16);
  for (long k = 0; k < k1; k += 16) {
    __m512 wv[O];
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) wv[j] = _mm512_loadu_ps(wr + j * K + k);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * K + k);
#pragma GCC unroll 16
      for (int j = 0; j < O; ++j) a[r][j] = _mm512_fmadd_ps(wv[j], xv, a[r][j]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) _mm512_storeu_ps(acc + (r * O + j) * 16, a[r][j]);
}

// K = k1: one chunk's weights and activations, as range_wide_z keeps them in L1.
template <int R, int O>
void tile_run(long k1, int offset_floats) {
  const long K = k1;
  float* w = static_cast<float*>(std::aligned_alloc(64, size_t(O * K + 64) * 4));
  float* x = static_cast<float*>(std::aligned_alloc(64, size_t(R * K + 64) * 4));
  float* acc = static_cast<float*>(std::aligned_alloc(64, size_t(R * O * 16) * 4));
  for (long i = 0; i < O * K + 64; ++i) w[i] = 1e-3f;
  for (long i = 0; i < R * K + 64; ++i) x[i] = 1e-3f;
  for (int i = 0; i < R * O * 16; ++i) acc[i] = 0.0f;
  const long calls = 4000000 / k1;
  double best = 1e9;
  for (int rep = 0; rep < 15; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) tile<R, O>(w + offset_floats, K, x + offset_floats, acc, k1);
    best = std::min(best, seconds_since(t0));
  }
  std::printf("tile %d x %d, k1 = %4ld, operands %2d bytes off: %.3f ns per FMA (%g)\n", R, O, k1,
              4 * offset_floats, best / (double(calls) * R * O * (k1 / 16)) * 1e9, double(acc[0]));
  std::free(w), std::free(x), std::free(acc);
}

}  // namespace

int main() {
  fma_latency_and_throughput();
  tile_run<4, 4>(256, 0);
  tile_run<4, 4>(256, 4);
  tile_run<4, 4>(256, 8);
  tile_run<4, 4>(1024, 0);
  tile_run<4, 6>(256, 0);
  tile_run<6, 4>(256, 0);
  tile_run<4, 6>(1024, 0);
  tile_run<6, 4>(1024, 0);
  tile_run<2, 8>(256, 0);
  tile_run<8, 2>(256, 0);
}
