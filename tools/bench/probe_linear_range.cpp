// One kernels::linear_range call on a random NVFP4 or FP8 matrix, single-threaded, at the ISA the
// CPU has: the best of 15 rounds of repeated calls (docs/PERFORMANCE.md, "Zen 4: the one-row
// tile's accumulators on the stack"). Small matrices (64 x 2688 NVFP4, 86 KB) stay in L2, where a
// tile is compute-bound and a noisy host disturbs the time least; large ones (65536 x 2688 FP8,
// 176 MB) stream from memory. Prints microseconds per call.
// Optional (docs/PERFORMANCE.md, "Zen 4: the GEMM-blocked wide passes, measured at last"): MODE =
// auto (linear_range), swept / wide (FP8 or bf16 through range_*_avx512 or range_*_avx512_wide),
// chunkN (linear_range on N rows at a time: NVFP4 swept below 16 rows); then the wide passes' k
// chunk and row-block bytes (set_wide_blocking). avx2 / by_hand (docs/PERFORMANCE.md, "Zen 5,
// evening"): the AVX2 kernels, the second the bf16-weight one that flushes by hand. bound
// (docs/PERFORMANCE.md, "the tiles against the FMA rate of the same moment"): linear_range, each
// round beside a loop of 20 independent zmm FMAs (two a cycle on ports 0 and 5 at whatever clock
// the AVX-512 license gives then), and the call against (ROWS + D) vector uops per 16 weights
// and output at that rate, D the decode's (argument 7; NVFP4 2: VPSRLVD, VPERMPS; FP8 3 as
// Intel's scaled-activation decode: VPMOVSXBD, VPSLLD, VPANDD; bf16 2).
// Not part of the build; after a release build into build/:
//   g++ -O2 -std=c++20 -Isrc -o /tmp/probe_linear_range tools/bench/probe_linear_range.cpp \
//       build/libnemotron_kernels.a build/libnemotron_base.a -lfmt -fopenmp
//   /tmp/probe_linear_range nvfp4 64 2688 1 bf16     # FORMAT OUTPUTS K ROWS ARITH
//   /tmp/probe_linear_range fp8 65536 2688 1 f32
//   /tmp/probe_linear_range nvfp4 1856 2688 24 f32 auto 2688 786432  # MODE K_CHUNK ROW_BYTES
//   /tmp/probe_linear_range nvfp4 1856 2688 24 f32 chunk12
//   /tmp/probe_linear_range nvfp4 64 5376 4 f32 bound     # [D]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "base/memory.h"
#include "kernels/linear.h"
#include "kernels/linear_impl.h"

using namespace nemo::kernels;

namespace {

// Seconds per zmm FMA over n rounds of 20 independent chains (latency 4, so the two FMA ports
// never wait on a chain): half the time a vector uop on ports 0 and 5 takes now.
[[gnu::target("avx512f"), gnu::noinline]] double zmm_fma_seconds(long n) {
  const auto t0 = std::chrono::steady_clock::now();
  asm volatile(
      "vxorps %%xmm0, %%xmm0, %%xmm0\n"
      ".irp r,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21\n"
      "vmovaps %%zmm0, %%zmm\\r\n"
      ".endr\n"
      "1:\n"
      ".irp a,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19\n"
      "vfmadd231ps %%zmm20, %%zmm21, %%zmm\\a\n"
      ".endr\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",
        "xmm21", "cc");
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return dt.count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s nvfp4|fp8|bf16 OUTPUTS K ROWS f32|bf16 [MODE [K_CHUNK [ROW_BYTES]]]\n",
                 argv[0]);
    return 2;
  }
  const bool nvfp4 = std::strcmp(argv[1], "nvfp4") == 0, bf16 = std::strcmp(argv[1], "bf16") == 0;
  const int64_t outputs = std::atoll(argv[2]), K = std::atoll(argv[3]), rows = std::atoll(argv[4]);
  std::mt19937 g(1);
  std::vector<uint8_t> data(size_t(outputs * K * (bf16 ? 2 : 1) / (nvfp4 ? 2 : 1))), scales;
  for (auto& b : data) {
    b = uint8_t(g());
    if (bf16) continue;
    if (!nvfp4 && (b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
    if (!nvfp4 && (b & 0x78) == 0) b |= 0x20;  // exponent-0 codes are rare in real weights
  }
  PackedWeight w;
  w.rows = outputs, w.cols = K, w.data = data.data(), w.arith = parse_arith(argv[5], "ARITH");
  if (bf16) {
    for (size_t i = 1; i < data.size(); i += 2) data[i] = uint8_t(0x3C + g() % 4);  // |w| ~ 1e-2
    w.format = WeightFormat::BF16;
  } else if (nvfp4) {
    scales.resize(size_t(outputs * K / 16));
    for (auto& s : scales) s = uint8_t(0x18 + g() % 32);  // E4M3 scales that differ per block
    w.format = WeightFormat::NVFP4, w.scales = scales.data(), w.scale = 1.0f, w.group = 16;
  } else {
    w.format = WeightFormat::FP8_E4M3, w.scale = 0.01f;
  }
  // 64-byte aligned, as the engine's activations are (a split line per 512-bit load costs
  // 1.3-1.6x on Intel).
  const auto xb = nemo::alloc_aligned64<float>(size_t(rows * K));
  const std::span<float> x(xb.get(), size_t(rows * K));
  std::vector<float> y(size_t(rows * outputs));
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  const int reps = int(std::max<int64_t>(1, 20000000 / (outputs * K)));
  const char* mode = argc > 6 ? argv[6] : "auto";
  if (argc > 7) set_wide_blocking({std::atoll(argv[7]), argc > 8 ? std::atoll(argv[8]) : 786432});
  const bool direct = !std::strcmp(mode, "wide") || !std::strcmp(mode, "swept");
  // avx2: linear_range at Isa::Avx2 (what a CPU without AVX-512 runs); by_hand: bf16 weights
  // with bf16 arithmetic through the AVX2 kernel that flushes by hand (the MXCSR one's fallback).
  const bool by_hand = !std::strcmp(mode, "by_hand");
  const Isa isa = by_hand || !std::strcmp(mode, "avx2") ? Isa::Avx2 : detected_isa();
  if (by_hand && !(bf16 && w.arith == Arith::Bf16)) {
    std::fprintf(stderr, "MODE by_hand: bf16 weights with bf16 arithmetic only\n");
    return 2;
  }
  if (direct && nvfp4) {
    std::fprintf(stderr, "MODE %s: FP8 and bf16 only (NVFP4: auto or chunkN)\n", mode);
    return 2;
  }
  auto fn = [&]() -> nemo::kernels::detail::RangeFn {
    using namespace nemo::kernels::detail;
    if (!std::strcmp(mode, "wide")) return bf16 ? range_dense_avx512_wide : range_fp8_avx512_wide;
    if (!std::strcmp(mode, "swept")) return bf16 ? range_dense_avx512 : range_fp8_avx512;
    if (!std::strcmp(mode, "by_hand") && bf16) return range_dense_bf16_avx2_by_hand;
    return nullptr;
  }();
  const bool bound = !std::strcmp(mode, "bound");
  if (bound && detected_isa() < Isa::Avx512) {
    std::fprintf(stderr, "MODE bound: needs AVX-512\n");
    return 2;
  }
  const long fma_rounds = 2000000;
  double best = 1e30, best_fma = 1e30;
  for (int round = 0; round < 15; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      if (fn)
        fn(w, x.data(), rows, K, y.data(), outputs, 0, outputs);
      else if (!std::strncmp(mode, "chunk", 5)) {
        const int64_t c = std::atoll(mode + 5);
        for (int64_t r = 0; r < rows; r += c)
          linear_range(w, x.data() + r * K, std::min(c, rows - r), K, y.data() + r * outputs,
                       outputs, 0, outputs, isa);
      } else
        linear_range(w, x.data(), rows, K, y.data(), outputs, 0, outputs, isa);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count() / reps);
    if (bound) best_fma = std::min(best_fma, zmm_fma_seconds(fma_rounds) / (20.0 * fma_rounds));
  }
  std::printf("%s %lld x %lld, %lld rows, %s, %s, %s: %.2f us\n", argv[1], (long long)outputs,
              (long long)K, (long long)rows, argv[5],
              isa_name(fn && !by_hand ? detected_isa() : isa), mode, best * 1e6);
  if (bound) {
    const double d = argc > 7 ? std::atof(argv[7]) : nvfp4 ? 2.0 : bf16 ? 2.0 : 3.0;
    // A 16-weight block and one output; its (rows + d) vector uops at two a cycle take (rows + d)
    // FMA times.
    const double per_block = best / (double(outputs) * double(K / 16));
    const double limit = (double(rows) + d) * best_fma;
    std::printf(
        "  %.3f ns per 16 weights and output; zmm FMA %.4f ns; bound (%lld + %g) x that = "
        "%.3f ns: %.2fx\n",
        per_block * 1e9, best_fma * 1e9, (long long)rows, d, limit * 1e9, per_block / limit);
  }
}
