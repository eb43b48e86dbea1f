// One core's read rate for the one-row tile's access pattern (docs/PERFORMANCE.md, "What limits the
// NVFP4 bf16 one-row tile"): 1 GB read as one sequential stream, or as tiles of O contiguous rows
// of RB bytes read 64 bytes per row per step (as the tile reads NVFP4 codes: O = 8, RB = K / 2),
// with the next tile prefetched as the kernel does (pf 1), sequentially (2), two tiles ahead (3),
// into L2 (4), or not at all (0). Loads and an add only: the ceiling without the decode.
// Not part of the build; run it by hand:
//   g++ -O2 -std=c++20 -mavx512f -o /tmp/probe_streams tools/bench/probe_streams.cpp
//   /tmp/probe_streams 0; /tmp/probe_streams 8 1344 1
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  const size_t bytes = size_t(1) << 30;
  const int O = argc > 1 ? std::atoi(argv[1]) : 8;
  const size_t RB = argc > 2 ? size_t(std::atol(argv[2])) : 1344;
  const int pf = argc > 3 ? std::atoi(argv[3]) : 1;
  char* p = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (!p || RB < 64) return 1;
  std::memset(p, 1, bytes);
  for (int rep = 0; rep < 4; ++rep) {
    __m512i acc = _mm512_setzero_si512();
    const auto t0 = std::chrono::steady_clock::now();
    if (O == 0) {
      for (size_t i = 0; i < bytes; i += 64) acc = _mm512_add_epi32(acc, _mm512_load_si512(p + i));
    } else {
      const size_t tile = size_t(O) * RB, ntiles = bytes / tile;
      for (size_t t = 0; t < ntiles; ++t) {
        const char* base = p + t * tile;
        for (size_t k = 0; k + 64 <= RB; k += 64)
          for (int j = 0; j < O; ++j) {
            const char* next = base + tile;
            if (pf == 1 && t + 1 < ntiles) _mm_prefetch(next + j * RB + k, _MM_HINT_T0);
            if (pf == 2 && t + 1 < ntiles) _mm_prefetch(next + (k / 64 * O + j) * 64, _MM_HINT_T0);
            if (pf == 3 && t + 2 < ntiles) _mm_prefetch(next + tile + j * RB + k, _MM_HINT_T0);
            if (pf == 4 && t + 1 < ntiles) _mm_prefetch(next + j * RB + k, _MM_HINT_T1);
            acc = _mm512_add_epi32(acc, _mm512_loadu_si512(base + j * RB + k));
          }
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("O=%d RB=%zu pf=%d: %.1f GB/s (%d)\n", O, RB, pf, double(bytes) / s / 1e9,
                _mm512_reduce_add_epi32(acc) & 1);
  }
  std::free(p);
}
