// FP8 f32 passes of many rows: swept in registers (range_fp8_avx512, the AMD machines' kernel) or
// decoded to f32 once (range_fp8_avx512_wide, Intel's), the same bits (checked), 64-byte aligned
// activations as the engine's; best of 9 alternating rounds (docs/PERFORMANCE.md, "Intel Xeon with
// full-width AVX-512 and AMX"). Prints microseconds per call.
// Not part of the build; after a release build into build/:
//   g++ -O2 -std=c++20 -Isrc -o /tmp/probe_fp8_wide tools/bench/probe_fp8_wide.cpp
//       build/libnemotron_kernels.a build/libnemotron_base.a -lfmt -fopenmp   (one line)
//   /tmp/probe_fp8_wide 1024 2688 64     # OUTPUTS K ROWS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/memory.h"
#include "kernels/linear_impl.h"

using namespace nemo::kernels;

int main(int argc, char** argv) {
  if (argc != 4 || detected_isa() < Isa::Avx512) {
    std::fprintf(stderr, "usage: %s OUTPUTS K ROWS (on a CPU with AVX-512)\n", argv[0]);
    return 2;
  }
  const int64_t outputs = std::atoll(argv[1]), K = std::atoll(argv[2]), rows = std::atoll(argv[3]);
  std::mt19937 g(1);
  std::vector<uint8_t> data(size_t(outputs * K));
  for (auto& b : data) {
    b = uint8_t(g());
    if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
    if ((b & 0x78) == 0) b |= 0x20;  // exponent-0 codes are rare in real weights
  }
  PackedWeight w;
  w.rows = outputs, w.cols = K, w.data = data.data(), w.format = WeightFormat::FP8_E4M3;
  w.scale = 0.01f;
  nemo::Buffer<float> x(size_t(rows * K));
  std::normal_distribution<float> nd;
  for (auto& v : x.span()) v = nd(g);
  std::vector<float> y(size_t(rows * outputs)), y2(y.size());
  const detail::RangeFn kernels[2] = {detail::range_fp8_avx512, detail::range_fp8_avx512_wide};
  kernels[0](w, x.data(), rows, K, y.data(), outputs, 0, outputs);
  kernels[1](w, x.data(), rows, K, y2.data(), outputs, 0, outputs);
  if (std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "the two kernels disagree\n");
    return 1;
  }
  const int reps = int(std::max<int64_t>(1, 200000000 / (outputs * K * rows)));
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 9; ++round)
    for (int v = 0; v < 2; ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i)
        kernels[v](w, x.data(), rows, K, y.data(), outputs, 0, outputs);
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      best[v] = std::min(best[v], dt.count() / reps);
    }
  std::printf("fp8 %lld x %lld, %lld rows: swept %.1f us, wide %.1f us\n", (long long)outputs,
              (long long)K, (long long)rows, best[0] * 1e6, best[1] * 1e6);
}
