// Every float through each vector SiLU path (kernels::silu_inplace, src/kernels/silu.cpp) against
// the scalar silu() of kernels/ops.h, bit for bit (NaN payloads included): the exhaustive form of
// the sampled check the paths pass before they are used (silu_vector_verified) and of
// tests/kernels/test_silu.cpp. ~30 s on two threads. Not part of the build; after a release build:
//   g++ -O2 -std=c++20 -Isrc -o /tmp/check_silu_exp tools/check/silu_exp.cpp \
//       build/libnemotron_kernels.a build/libnemotron_base.a -lfmt -fopenmp && /tmp/check_silu_exp
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/linear.h"
#include "kernels/ops.h"

using namespace nemo::kernels;

int main() {
  int failed = 0;
  for (const Isa isa : {Isa::Avx512, Isa::Avx2}) {
    if (isa > detected_isa()) continue;
    set_active_isa(isa);
    if (!silu_vector_verified(isa)) {
      std::printf("%s: the vector path failed its sampled check (the scalar loop runs)\n",
                  isa_name(isa));
      failed = 1;
      continue;
    }
    std::atomic<uint64_t> bad{0};
    const auto sweep = [&](uint64_t lo, uint64_t hi) {
      constexpr int kBlock = 4096;
      std::vector<float> got(kBlock), want(kBlock);
      uint64_t b = 0;
      for (uint64_t u = lo; u < hi; u += kBlock) {
        for (int i = 0; i < kBlock; ++i) {
          const uint32_t bits = uint32_t(u + uint64_t(i));
          std::memcpy(&got[size_t(i)], &bits, sizeof bits);
          want[size_t(i)] = silu(got[size_t(i)]);
        }
        silu_inplace(got.data(), kBlock);
        for (int i = 0; i < kBlock; ++i)
          if (std::memcmp(&got[size_t(i)], &want[size_t(i)], sizeof(float)) != 0 && b++ < 5)
            std::printf("  %s: input 0x%08x differs\n", isa_name(isa), unsigned(u + uint64_t(i)));
      }
      bad += b;
    };
    const uint64_t all = uint64_t(1) << 32;
    std::thread half(sweep, 0, all / 2);
    sweep(all / 2, all);
    half.join();
    std::printf("%s: %llu of 2^32 inputs differ\n", isa_name(isa), (unsigned long long)bad.load());
    failed |= bad.load() != 0;
  }
  return failed;
}
