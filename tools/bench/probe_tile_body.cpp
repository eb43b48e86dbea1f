// The 8 x 3 FP8 GFNI tile's loop body (tile_z<Fp8Avx512IntelScaledXGfni, 8, 3>, as GCC emits it) as
// a synthetic asm loop, against 30 independent zmm FMAs (the body's 30 vector uops on ports 0
// and 5): the body at one address (L1), the FMAs and loads alone, and the body walking 2688 k
// over eight 2688-float activation rows (from L2) and 1024 k (docs/PERFORMANCE.md, "Intel Xeon,
// Emerald Rapids, 12-07"). Zeroed data: the timing does not depend on the values. ns per step.
// Not part of the build; on a CPU with AVX-512 VBMI and GFNI:
//   g++ -O2 -std=c++20 -mavx512f -mavx512bw -mavx512vbmi -mgfni -mavx512vl
//       -o /tmp/probe_tile_body tools/bench/probe_tile_body.cpp   (one command)
//   /tmp/probe_tile_body
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
alignas(64) static float act[8][2688];
alignas(64) static uint8_t wts[3][2688];
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define FMAS24                                                                    \
  "vmovups (%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm29\n vfmadd231ps "      \
  "%%zmm1,%%zmm3,%%zmm28\n vfmadd231ps %%zmm0,%%zmm3,%%zmm27\n"                   \
  "vmovups 10752(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm26\n vfmadd231ps " \
  "%%zmm1,%%zmm3,%%zmm25\n vfmadd231ps %%zmm0,%%zmm3,%%zmm24\n"                   \
  "vmovups 21504(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm23\n vfmadd231ps " \
  "%%zmm1,%%zmm3,%%zmm22\n vfmadd231ps %%zmm0,%%zmm3,%%zmm21\n"                   \
  "vmovups 32256(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm20\n vfmadd231ps " \
  "%%zmm1,%%zmm3,%%zmm19\n vfmadd231ps %%zmm0,%%zmm3,%%zmm18\n"                   \
  "vmovups 43008(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm17\n vfmadd231ps " \
  "%%zmm1,%%zmm3,%%zmm16\n vfmadd231ps %%zmm0,%%zmm3,%%zmm15\n"                   \
  "vmovups 53760(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm14\n vfmadd231ps " \
  "%%zmm1,%%zmm3,%%zmm13\n vfmadd231ps %%zmm0,%%zmm3,%%zmm12\n"                   \
  "vmovups 64512(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm11\n vfmadd231ps " \
  "%%zmm1,%%zmm3,%%zmm10\n vfmadd231ps %%zmm0,%%zmm3,%%zmm9\n"                    \
  "vmovups 75264(%[a]),%%zmm3\n vfmadd231ps %%zmm2,%%zmm3,%%zmm8\n vfmadd231ps "  \
  "%%zmm1,%%zmm3,%%zmm7\n vfmadd231ps %%zmm0,%%zmm3,%%zmm6\n"
#define DECODE3                                                                                   \
  "vbroadcasti128 (%[w]),%%ymm0\n vbroadcasti128 2688(%[w]),%%ymm3\n vgf2p8affineqb "             \
  "$0,%%ymm5,%%ymm0,%%ymm0\n vgf2p8affineqb $0,%%ymm5,%%ymm3,%%ymm3\n"                            \
  "vpermb %%zmm0,%%zmm4,%%zmm2%{%%k1%}%{z%}\n vbroadcasti128 5376(%[w]),%%ymm0\n vgf2p8affineqb " \
  "$0,%%ymm5,%%ymm0,%%ymm0\n vpermb %%zmm0,%%zmm4,%%zmm1%{%%k1%}%{z%}\n vpermb "                  \
  "%%zmm3,%%zmm4,%%zmm0%{%%k1%}%{z%}\n"
#define CLOB                                                                                    \
  "zmm0", "zmm1", "zmm2", "zmm3", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12",    \
      "zmm13", "zmm14", "zmm15", "zmm16", "zmm17", "zmm18", "zmm19", "zmm20", "zmm21", "zmm22", \
      "zmm23", "zmm24", "zmm25", "zmm26", "zmm27", "zmm28", "zmm29", "memory"

// One step of variant V: 0 the tile's body, 1 its FMAs and activation loads alone (the decoded
// weights a register copy), 2 the body and two more FMAs.
template <int V>
[[gnu::always_inline]] inline void step(const float* a, const uint8_t* w) {
  if constexpr (V == 0) asm volatile(DECODE3 FMAS24 ::[a] "r"(a), [w] "r"(w) : CLOB);
  if constexpr (V == 1)
    asm volatile(
        "vmovaps %%zmm4,%%zmm0\n vmovaps %%zmm4,%%zmm1\n vmovaps %%zmm4,%%zmm2\n" FMAS24 ::[a] "r"(
            a),
        [w] "r"(w)
        : CLOB);
  if constexpr (V == 2)
    asm volatile(
        DECODE3 FMAS24
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm29\n vfmadd231ps %%zmm2,%%zmm3,%%zmm28\n" ::[a] "r"(a),
        [w] "r"(w)
        : CLOB);
}
// ns per step over n steps: at one address (K = 0), or walking K / 16 steps of 16 k in turn.
template <int V>
double run(long n, int K = 0) {
  asm volatile(
      "vpxord %%zmm4,%%zmm4,%%zmm4\n vpxord %%zmm5,%%zmm5,%%zmm5\n kxnorw %%k1,%%k1,%%k1\n" ::
          : "zmm4", "zmm5", "k1");
  const long steps = K > 0 ? K / 16 : 1, outer = n / steps, stride = K > 0 ? 16 : 0;
  double t0 = now();
  for (long o = 0; o < outer; ++o)
    for (long s = 0; s < steps; ++s) step<V>(&act[0][0] + stride * s, &wts[0][0] + stride * s);
  return (now() - t0) / double(outer * steps) * 1e9;
}
// 30 independent FMAs: the port bound of V=0 (30 vector uops on ports 0 and 5)
double fma30(long n) {
  double t0 = now();
  for (long i = 0; i < n; ++i)
    asm volatile(
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm6\n vfmadd231ps %%zmm2,%%zmm3,%%zmm7\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm8\n vfmadd231ps %%zmm2,%%zmm3,%%zmm9\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm10\n"
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm11\n vfmadd231ps %%zmm2,%%zmm3,%%zmm12\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm13\n vfmadd231ps %%zmm2,%%zmm3,%%zmm14\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm15\n"
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm16\n vfmadd231ps %%zmm2,%%zmm3,%%zmm17\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm18\n vfmadd231ps %%zmm2,%%zmm3,%%zmm19\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm20\n"
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm21\n vfmadd231ps %%zmm2,%%zmm3,%%zmm22\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm23\n vfmadd231ps %%zmm2,%%zmm3,%%zmm24\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm25\n"
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm26\n vfmadd231ps %%zmm2,%%zmm3,%%zmm27\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm28\n vfmadd231ps %%zmm2,%%zmm3,%%zmm29\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm6\n"
        "vfmadd231ps %%zmm2,%%zmm3,%%zmm7\n vfmadd231ps %%zmm2,%%zmm3,%%zmm8\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm9\n vfmadd231ps %%zmm2,%%zmm3,%%zmm10\n vfmadd231ps "
        "%%zmm2,%%zmm3,%%zmm11\n" ::
            : CLOB);
  return (now() - t0) / n * 1e9;
}
int main() {
  const long n = 2000000;
  for (int rep = 0; rep < 5; ++rep) {
    double f = fma30(n), a = run<0>(n), b = run<1>(n), c = run<2>(n);
    double k1 = run<0>(n, 2688), k2 = run<0>(n, 1024), k3 = run<1>(n, 2688);
    std::printf(
        "K: body over 2688 %.3f (%.2fx), over 1024 %.3f (%.2fx), FMA+loads over 2688 %.3f (%.2fx "
        "of 24/30)\n",
        k1, k1 / f, k2, k2 / f, k3, k3 / f / 0.8);
    std::printf(
        "30 FMAs %.3f ns | tile body (6 decode + 24 FMA + 11 loads) %.3f (%.2fx) | 24 FMA + 8 "
        "loads %.3f (%.2fx of 24/30) | body + 2 FMA %.3f\n",
        f, a, a / f, b, b / f / 0.8, c);
  }
}
