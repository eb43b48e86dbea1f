// Whether this machine's last-level cache holds what one core reads (docs/PERFORMANCE.md, "Intel
// Xeon, Emerald Rapids, night"): a buffer of MB megabytes read after 1 GB of other reads (cold),
// again at once (what the caches kept), after a PREFETCHT2 sweep over it, and after a loop of FMAs
// that issues one PREFETCHT2 a line (as a compute-bound tile could stage the next matrix's
// weights). A verify pass could fill idle memory time during its compute-bound matrices only if
// the read after staging beat the cold one. GB/s, three rounds. Not part of the build:
//   g++ -O2 -march=native -o /tmp/probe_l3 tools/bench/probe_l3.cpp
//   for m in 1 4 16 64; do /tmp/probe_l3 $m; done
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

float g_sink;  // keeps the reads' sums alive

double read_gbs(const char* p, size_t n) {
  const double t = now();
  __m512 acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 64)
    acc = _mm512_add_ps(acc, _mm512_load_ps(reinterpret_cast<const float*>(p + i)));
  g_sink += _mm512_reduce_add_ps(acc);
  return double(n) / (now() - t) / 1e9;
}

void prefetch_sweep(const char* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm_prefetch(p + i, _MM_HINT_T2);
}

// 64 FMAs (8 independent chains) per line of p, and a PREFETCHT2 of the line when p is set.
double fmas_with_prefetch(const char* p, size_t n) {
  const double t = now();
  __m512 a[8];
  for (int j = 0; j < 8; ++j) a[j] = _mm512_set1_ps(1.0f + float(j) * 1e-7f);
  const __m512 m = _mm512_set1_ps(0.9999999f);
  for (size_t i = 0; i < n; i += 64) {
    if (p) _mm_prefetch(p + i, _MM_HINT_T2);
    for (int round = 0; round < 8; ++round)
      for (int j = 0; j < 8; ++j) a[j] = _mm512_fmadd_ps(a[j], m, m);
  }
  __m512 s = a[0];
  for (int j = 1; j < 8; ++j) s = _mm512_add_ps(s, a[j]);
  g_sink += _mm512_reduce_add_ps(s);
  return now() - t;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = size_t(argc > 1 ? std::atoi(argv[1]) : 16) << 20, flush = size_t(1) << 30;
  if (n == 0) return 1;
  auto* a = static_cast<char*>(std::aligned_alloc(size_t(2) << 20, n));
  auto* f = static_cast<char*>(std::aligned_alloc(size_t(2) << 20, flush));
  if (!a || !f) return 1;
  std::memset(a, 1, n);
  std::memset(f, 2, flush);
  for (int round = 0; round < 3; ++round) {
    read_gbs(f, flush);
    const double cold = read_gbs(a, n), again = read_gbs(a, n);
    read_gbs(f, flush);
    prefetch_sweep(a, n);
    const double swept = read_gbs(a, n);
    read_gbs(f, flush);
    const double t_fma = fmas_with_prefetch(nullptr, n), t_pf = fmas_with_prefetch(a, n);
    const double staged = read_gbs(a, n);
    std::printf(
        "%zu MB: cold %.1f GB/s, again %.1f, after a PREFETCHT2 sweep %.1f; FMAs %.2f ms, with "
        "PREFETCHT2 %.2f ms, then %.1f GB/s\n",
        n >> 20, cold, again, swept, t_fma * 1e3, t_pf * 1e3, staged);
  }
  return 0;
}
