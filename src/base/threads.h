// Thread fan-out. Work is always split over *independent outputs* (never over a reduction),
// so results are bitwise independent of the thread count.
#pragma once
#include <omp.h>

#include <cstdint>

namespace nemo {

struct ThreadConfig {
  int n_threads = 1;
};

int default_thread_count();  // physical cores available to this process

// Calls fn(begin, end) on contiguous blocks of [0, n); blocks are at least `grain` long.
template <typename Fn>
void parallel_for(const ThreadConfig& tc, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int nt = tc.n_threads < 1 ? 1 : tc.n_threads;
  if (grain < 1) grain = 1;
  int64_t max_blocks = (n + grain - 1) / grain;
  if (nt > max_blocks) nt = int(max_blocks);
  if (nt <= 1) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    const int T = omp_get_num_threads();
    const int64_t b = n * t / T, e = n * (t + 1) / T;
    if (b < e) fn(b, e);
  }
}

}  // namespace nemo
