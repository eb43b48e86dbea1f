// Instruction throughput and the NVFP4 one-row tile's block as a synthetic loop (docs/
// PERFORMANCE.md, "Zen 4: the one-row tile's accumulators on the stack"): ns per instruction for
// independent VDPBF16PS / VPERMW / VPMULTISHIFTQB (512- and 256-bit), a 512-bit dot with a 512-bit
// VPERMW against the same work in 256-bit halves, and ns per 16-weight block of the tile's core
// (scale byte -> table row, broadcast codes, VPMULTISHIFTQB, VPERMW from the row, VDPBF16PS) with
// one fixed table row or rows chosen by random scale bytes. Then pairs and triples of independent
// instructions in 12 chains (the pairs above have 6, near what VDPBF16PS's latency allows):
// ns per pair tells whether two kinds share pipes (2026-12-04, night, Zen 4: a ymm VDPBF16PS and
// a VPSRLVD 0.15 ns, and a VPERMW 0.19, and a VPMULTISHIFTQB 0.27, the sum of the two alone; a
// zmm FMA and a VPMULTISHIFTQB 0.54, an FMA, a VPSRLVD and a VPERMPS 0.41). Best of 9 runs each.
// Not part of the build; run it by hand on a CPU with AVX512_BF16 and VBMI:
//   g++ -O2 -std=c++20 -mavx512f -o /tmp/probe_ports tools/bench/probe_ports.cpp &&
//   /tmp/probe_ports
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// asm bodies of `per` independent instructions (or blocks), run 10^7 times.
#define PROBE(name, per, ...)                                                                      \
  {                                                                                                \
    double best = 1e9;                                                                             \
    for (int t = 0; t < 9; ++t) {                                                                  \
      const double t0 = now();                                                                     \
      for (long i = 0; i < 10000000; ++i)                                                          \
        asm volatile(__VA_ARGS__::                                                                 \
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                           "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16",  \
                           "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", \
                           "xmm25");                                                               \
      best = std::min(best, now() - t0);                                                           \
    }                                                                                              \
    std::printf("%-44s %.3f ns\n", name, best / 1e7 / (per)*1e9);                                  \
  }
#define DZ(i) "vdpbf16ps %%zmm24, %%zmm25, %%zmm" #i "\n"
#define DY(i) "vdpbf16ps %%ymm24, %%ymm25, %%ymm" #i "\n"
#define PZ(i) "vpermw %%zmm24, %%zmm25, %%zmm" #i "\n"
#define PY(i) "vpermw %%ymm24, %%ymm25, %%ymm" #i "\n"
#define MZ(i) "vpmultishiftqb %%zmm24, %%zmm25, %%zmm" #i "\n"
#define MY(i) "vpmultishiftqb %%ymm24, %%ymm25, %%ymm" #i "\n"
#define X12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define FZ(i) "vfmadd231ps %%zmm24, %%zmm25, %%zmm" #i "\n"
#define SY(i) "vpsrlvd %%ymm24, %%ymm25, %%ymm" #i "\n"
#define SZ(i) "vpsrlvd %%zmm24, %%zmm25, %%zmm" #i "\n"
#define VZ(i) "vpermps %%zmm24, %%zmm25, %%zmm" #i "\n"
// 12 chains of accumulators (0-11), the other kind into 12-23.
#define X12P(A, B)                                                                              \
  A(0)                                                                                          \
  B(12) A(1) B(13) A(2) B(14) A(3) B(15) A(4) B(16) A(5) B(17) A(6) B(18) A(7) B(19) A(8) B(20) \
      A(9) B(21) A(10) B(22) A(11) B(23)
#define FSV(i) SZ(i) VZ(i)
#define FMV(i) MZ(i) VZ(i)
#define ZPAIR(a, b) DZ(a) PZ(b)
#define YPAIR(a, b, c, d) DY(a) DY(b) PY(c) PY(d)

alignas(64) uint16_t table[256 * 16];
alignas(64) uint8_t scales[4096];
alignas(64) uint8_t codes[32768];

// One block as the tile runs it: the scale byte's table row is VPERMW's memory operand.
#define BLOCK(acc, r, off)                                                                        \
  "movzbl " #off "(%1,%2), %%eax\n shl $5, %%eax\n vpbroadcastq " #off "*8(%3,%2,8), %%ymm" #r    \
  "\n vpmultishiftqb %%ymm" #r ", %%ymm8, %%ymm" #r "\n vpermw (%0,%%rax), %%ymm" #r ", %%ymm" #r \
  "\n vdpbf16ps %%ymm11, %%ymm" #r ", %%ymm" #acc "\n"

double blocks(bool random_scales) {
  std::mt19937 g(1);
  for (auto& s : scales) s = random_scales ? uint8_t(g()) : 0x30;
  double best = 1e9;
  for (int t = 0; t < 9; ++t) {
    const double t0 = now();
    for (int rep = 0; rep < 4000; ++rep)
      for (long j = 0; j < 4096 - 8; j += 8)
        asm volatile(BLOCK(16, 0, 0) BLOCK(17, 1, 1) BLOCK(18, 2, 2) BLOCK(19, 3, 3) BLOCK(20, 4, 4)
                         BLOCK(21, 5, 5) BLOCK(22, 6, 6) BLOCK(23, 7, 7)
                     :
                     : "r"(table), "r"(scales), "r"(j), "r"(codes)
                     : "rax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",
                       "memory");
    best = std::min(best, now() - t0);
  }
  return best / (4000.0 * 4088) * 1e9;
}

}  // namespace

int main() {
  PROBE("vdpbf16ps zmm (12 chains)", 12, X12(DZ))
  PROBE("vdpbf16ps ymm (12 chains)", 12, X12(DY))
  PROBE("vpermw zmm", 12, X12(PZ))
  PROBE("vpermw ymm", 12, X12(PY))
  PROBE("vpmultishiftqb zmm", 12, X12(MZ))
  PROBE("vpmultishiftqb ymm", 12, X12(MY))
  PROBE("zmm dot + zmm vpermw (a pair)", 6,
        ZPAIR(0, 16) ZPAIR(1, 17) ZPAIR(2, 18) ZPAIR(3, 19) ZPAIR(4, 20) ZPAIR(5, 21))
  PROBE("2 ymm dots + 2 ymm vpermw (the same work)", 6,
        YPAIR(0, 1, 16, 17) YPAIR(2, 3, 18, 19) YPAIR(4, 5, 20, 21) YPAIR(6, 7, 22, 23)
            YPAIR(8, 9, 16, 17) YPAIR(10, 11, 18, 19))
  PROBE("ymm dot + ymm vpermw (12 chains)", 12, X12P(DY, PY))
  PROBE("ymm dot + ymm vpmultishiftqb", 12, X12P(DY, MY))
  PROBE("ymm dot + ymm vpsrlvd", 12, X12P(DY, SY))
  PROBE("zmm fma (12 chains)", 12, X12(FZ))
  PROBE("zmm fma + zmm vpmultishiftqb", 12, X12P(FZ, MZ))
  PROBE("zmm fma + vpmultishiftqb + vpermps", 12, X12P(FZ, FMV))
  PROBE("zmm fma + vpsrlvd + vpermps", 12, X12P(FZ, FSV))
  std::printf("%-44s %.3f ns\n", "tile block, one fixed table row", blocks(false));
  std::printf("%-44s %.3f ns\n", "tile block, rows by random scale bytes", blocks(true));
}
