// Instruction throughput and the NVFP4 one-row tile's block as a synthetic loop (docs/
// PERFORMANCE.md, "Zen 4: the one-row tile's accumulators on the stack"): ns per instruction for
// independent VDPBF16PS / VPERMW / VPMULTISHIFTQB (512- and 256-bit), a 512-bit dot with a 512-bit
// VPERMW against the same work in 256-bit halves, and ns per 16-weight block of the tile's core
// (scale byte -> table row, broadcast codes, VPMULTISHIFTQB, VPERMW from the row, VDPBF16PS) with
// one fixed table row or rows chosen by random scale bytes. Then pairs and triples of independent
// instructions in 12 chains (the pairs above have 6, near what VDPBF16PS's latency allows):
// ns per pair tells whether two kinds share pipes (2026-12-04, night, Zen 4: a ymm VDPBF16PS and
// a VPSRLVD 0.15 ns, and a VPERMW 0.19, and a VPMULTISHIFTQB 0.27, the sum of the two alone; a
// zmm FMA and a VPMULTISHIFTQB 0.54, an FMA, a VPSRLVD and a VPERMPS 0.41). Then (late night)
// VDPBF16PS's latency, loads and broadcasts alone and beside a dot product, Zen 4's 5-8-row
// decode before and after 248748f, and the one-row tiles' blocks with the tiles' accumulator
// chains (Zen 4: 1.64 ns a chained dot, i.e. 6 cycles; a zmm load 0.28, vbroadcasti64x4 0.27 and
// 0.36 beside a dot; merged rows 0.85 against two tables 0.57; the bf16 block 0.32, the f32 block
// 0.53; docs/PERFORMANCE.md, "Zen 4: NVFP4 bf16 pairs four apart"). Then (Zen 5, 2026-12-06) the
// FP8 decode's four instructions beside a dot product, and an 8-row FP8 chunk's mix; (12-06) the
// one-row NVFP4 chunk with each of its instructions left out.
// Best of 9 runs each.
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

// asm bodies of `per` independent instructions (or blocks), run 10^7 times; %0 = lines for
// memory operands (register 26 is free for a second table).
#define PROBE(name, per, ...)                                                                  \
  {                                                                                            \
    double best = 1e9;                                                                         \
    for (int t = 0; t < 9; ++t) {                                                              \
      const double t0 = now();                                                                 \
      for (long i = 0; i < 10000000; ++i)                                                      \
        asm volatile(__VA_ARGS__                                                               \
                     :                                                                         \
                     : "r"(lines)                                                              \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16",  \
                       "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", \
                       "xmm25", "xmm26", "k1", "memory");                                      \
      best = std::min(best, now() - t0);                                                       \
    }                                                                                          \
    std::printf("%-44s %.3f ns\n", name, best / 1e7 / (per)*1e9);                              \
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
#define P2Z(i) "vpermi2w %%zmm24, %%zmm25, %%zmm" #i "\n"
// The FP8 bf16 decode's four vector instructions (linear_fp8.cpp, decode32_fp8_bf16).
#define SLLW(i) "vpsllw $4, %%zmm25, %%zmm" #i "\n"
#define TERN(i) "vpternlogd $0xEA, %%zmm24, %%zmm25, %%zmm" #i "\n"
#define SXBW(i) "vpmovsxbw %%ymm25, %%zmm" #i "\n"
#define TSTB(i) "vptestnmb %%ymm24, %%ymm25, %%k1\n"
// An 8-row FP8 chunk's shape at 7 rows (registers allow 21 accumulators here): three decodes
// (sign-extend, shift, ternlog, test) and 21 dot products, ns per dot product.
#define FP8_DECODE(t)                                                 \
  "vpmovsxbw %%ymm25, %%zmm" #t "\n vpsllw $4, %%zmm" #t ", %%zmm" #t \
  "\n vpternlogd $0xEA, %%zmm24, %%zmm25, %%zmm" #t "\n vptestnmb %%ymm24, %%ymm25, %%k1\n"
#define SEVEN_DOTS(a, b, c, d, e, f, g) DZ(a) DZ(b) DZ(c) DZ(d) DZ(e) DZ(f) DZ(g)
// The same, each dot product taking the decoded vector t (as the tile's do).
#define DT(t, i) "vdpbf16ps %%zmm24, %%zmm" #t ", %%zmm" #i "\n"
#define SEVEN_ON(t, a, b, c, d, e, f, g) \
  DT(t, a) DT(t, b) DT(t, c) DT(t, d) DT(t, e) DT(t, f) DT(t, g)
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

alignas(64) float lines[16384];  // normal values (1.0): FMA chains over them never go subnormal

#define DCHAIN(i) "vdpbf16ps %%zmm24, %%zmm25, %%zmm0\n"  // one dependency chain
#define LZ(i) "vmovdqu64 " #i "*64(%0), %%zmm" #i "\n"
#define BQZ(i) "vpbroadcastq " #i "*64(%0), %%zmm" #i "\n"
#define B4Z(i) "vbroadcasti64x4 " #i "*64(%0), %%zmm" #i "\n"
#define ROLQ(i) "vprolvq %%zmm24, %%zmm25, %%zmm" #i "\n"
// Zen 4's 5-8-row decode before and after 248748f: two 256-bit broadcasts merged for VPERMW,
// against two plain loads and a two-table VPERMT2W (independent instructions, as in the tile).
#define MERGED(i) B4Z(i) "vbroadcasti64x4 " #i "*64+32(%0), %%zmm" #i "\n" PZ(i)
#define TWO_TABLES(i) \
  LZ(i) "vmovdqu64 " #i "*64+64(%0), %%zmm26\n vpermt2w %%zmm26, %%zmm25, %%zmm" #i "\n"

// The one-row tiles' blocks, 4 outputs x 8 blocks an iteration, everything in L1 (table rows
// fixed per output and block; x, codes and rows from `lines`), with the tiles' accumulator chains:
// bf16 as Zen 4's tile_bf16_y (the codes broadcast, VPSRLVD, VPERMW from the 32-byte row,
// VDPBF16PS; one accumulator per output and block parity, ymm 14-21), f32 as Zen 4's tile_z (the
// same with VPERMPS from a 64-byte row and an FMA; one zeroed accumulator per output, zmm 20-23).
#define BF16_BLOCK(o, b, acc)                               \
  "vpbroadcastq " #b "*8+" #o                               \
  "*1024(%0), %%ymm12\n vpsrlvd %%ymm9, %%ymm12, %%ymm12\n" \
  "vpermw 8192+(" #o "*8+" #b                               \
  ")*32(%0), %%ymm12, %%ymm12\n vdpbf16ps %%ymm11, %%ymm12, %%ymm" #acc "\n"
#define F32_BLOCK(o, b, acc)                                \
  "vpbroadcastq " #b "*8+" #o                               \
  "*1024(%0), %%zmm12\n vpsrlvd %%zmm9, %%zmm12, %%zmm12\n" \
  "vpermps 8192+(" #o "*8+" #b                              \
  ")*64(%0), %%zmm12, %%zmm12\n vfmadd231ps %%zmm11, %%zmm12, %%zmm2" #o "\n"
// x of block b as the tile loads it (16 bf16: a ymm; 16 f32: a zmm), then its 4 outputs; block
// b's accumulators are a0..a3.
#define FOUR(B, R, b, a0, a1, a2, a3) \
  "vmovdqu64 32768+" #b "*64(%0), %%" #R "mm11\n" B(0, b, a0) B(1, b, a1) B(2, b, a2) B(3, b, a3)
#define EIGHT(B, R)                                                                             \
  FOUR(B, R, 0, 14, 16, 18, 20)                                                                 \
  FOUR(B, R, 1, 15, 17, 19, 21) FOUR(B, R, 2, 14, 16, 18, 20) FOUR(B, R, 3, 15, 17, 19, 21)     \
      FOUR(B, R, 4, 14, 16, 18, 20) FOUR(B, R, 5, 15, 17, 19, 21) FOUR(B, R, 6, 14, 16, 18, 20) \
          FOUR(B, R, 7, 15, 17, 19, 21)
#define ZERO_ACC                                                          \
  "vxorps %%xmm20, %%xmm20, %%xmm20\n vxorps %%xmm21, %%xmm21, %%xmm21\n" \
  "vxorps %%xmm22, %%xmm22, %%xmm22\n vxorps %%xmm23, %%xmm23, %%xmm23\n"

// (Zen 5, 2026-12-06) The one-row NVFP4 chunk of Nvfp4Bf16Z (scale words), 8 independent chunks
// an iteration, everything in L1, and the same with one instruction left out or done another way
// (docs/PERFORMANCE.md, "Zen 5, 12-06 early morning"): chunk i's codes in zmm i, its accumulator
// zmm 10 + i, its two product rows in ymm 18-19 (20-21 where the rows are not loaded), x in zmm
// 24, the shifts in 25, the ternary-logic operands 26-27 (values do not matter to the timing).
#define NV_BC(i) "vbroadcasti64x2 " #i "*16(%0), %%zmm" #i "\n"
#define NV_MV(i) "vmovdqa64 %%zmm27, %%zmm" #i "\n"
#define NV_BQ(i) "vpbroadcastq " #i "*16(%0), %%zmm" #i "\n"
#define NV_SV(i) "vpsrlvd %%zmm25, %%zmm" #i ", %%zmm" #i "\n"
#define NV_TL(i) "vpternlogd $0xEA, %%zmm26, %%zmm27, %%zmm" #i "\n"
#define NV_RL(i) "vmovdqa64 " #i "*64+1024(%0), %%ymm18\n vmovdqa64 " #i "*64+1056(%0), %%ymm19\n"
#define NV_PM(i) "vpermi2w %%zmm18, %%zmm19, %%zmm" #i "\n"
#define NV_PR(i) "vpermi2w %%zmm20, %%zmm21, %%zmm" #i "\n"
#define NV_DT(i) "vdpbf16ps %%zmm24, %%zmm" #i ", %%zmm1" #i "\n"
#define NV_X8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define NV_FULL(i) NV_BC(i) NV_SV(i) NV_TL(i) NV_RL(i) NV_PM(i) NV_DT(i)
#define NV_NOBC(i) NV_MV(i) NV_SV(i) NV_TL(i) NV_RL(i) NV_PM(i) NV_DT(i)
#define NV_NOSV(i) NV_BC(i) NV_TL(i) NV_RL(i) NV_PM(i) NV_DT(i)
#define NV_NORL(i) NV_BC(i) NV_SV(i) NV_TL(i) NV_PR(i) NV_DT(i)
#define NV_NOPM(i) NV_BC(i) NV_SV(i) NV_TL(i) NV_RL(i) NV_DT(i)
#define NV_NODT(i) NV_BC(i) NV_SV(i) NV_TL(i) NV_RL(i) NV_PM(i)
#define NV_QWORD(i) NV_BQ(i) NV_SV(i) NV_TL(i) NV_RL(i) NV_PM(i) NV_DT(i)
// Four chunks' codes in one 64-byte load, each chunk's lane replicated by VSHUFI64X2.
#define NV_SH(i, c, imm)                                                                     \
  "vshufi64x2 $" #imm ", %%zmm" #c ", %%zmm" #c ", %%zmm" #i "\n" NV_SV(i) NV_TL(i) NV_RL(i) \
      NV_PM(i) NV_DT(i)
#define NV_FOUR(a, b, c, d, reg, off)                                               \
  "vmovdqu64 " #off "(%0), %%zmm" #reg "\n" NV_SH(a, reg, 0x00) NV_SH(b, reg, 0x55) \
      NV_SH(c, reg, 0xAA) NV_SH(d, reg, 0xFF)
}  // namespace

int main() {
  std::fill(std::begin(lines), std::end(lines), 1.0f);
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
  PROBE("vdpbf16ps zmm, one chain (latency)", 12, X12(DCHAIN))
  PROBE("zmm load", 12, X12(LZ))
  PROBE("vpbroadcastq zmm, m64", 12, X12(BQZ))
  PROBE("vbroadcasti64x4 zmm, m256", 12, X12(B4Z))
  PROBE("zmm dot + zmm load", 12, X12P(DZ, LZ))
  PROBE("zmm dot + vbroadcasti64x4", 12, X12P(DZ, B4Z))
  PROBE("zmm fma + vprolvq", 12, X12P(FZ, ROLQ))
  PROBE("zmm dot + 2 vbroadcasti64x4 + vpermw", 12, X12P(DZ, MERGED))
  PROBE("zmm dot + 2 zmm loads + vpermt2w", 12, X12P(DZ, TWO_TABLES))
  PROBE("zmm dot + vpsllw zmm", 12, X12P(DZ, SLLW))
  PROBE("zmm dot + vpternlogd zmm", 12, X12P(DZ, TERN))
  PROBE("zmm dot + vpmovsxbw zmm, ymm", 12, X12P(DZ, SXBW))
  PROBE("zmm dot + vptestnmb ymm", 12, X12P(DZ, TSTB))
  PROBE("7 dots + an FP8 decode, per dot", 21,
        FP8_DECODE(21) SEVEN_DOTS(0, 1, 2, 3, 4, 5, 6) FP8_DECODE(22) SEVEN_DOTS(
            7, 8, 9, 10, 11, 12, 13) FP8_DECODE(23) SEVEN_DOTS(14, 15, 16, 17, 18, 19, 20))
  PROBE("7 dots on an FP8 decode, per dot", 21,
        FP8_DECODE(21) SEVEN_ON(21, 0, 1, 2, 3, 4, 5, 6) FP8_DECODE(22) SEVEN_ON(
            22, 7, 8, 9, 10, 11, 12, 13) FP8_DECODE(23) SEVEN_ON(23, 14, 15, 16, 17, 18, 19, 20))
  PROBE("bf16 one-row block and output (srlv)", 32, EIGHT(BF16_BLOCK, y))
  PROBE("f32 one-row block and output (srlv)", 32, ZERO_ACC EIGHT(F32_BLOCK, z))
  PROBE("vdpbf16ps zmm (24 chains)", 24,
        X12(DZ) DZ(12) DZ(13) DZ(14) DZ(15) DZ(16) DZ(17) DZ(18) DZ(19) DZ(20) DZ(21) DZ(22) DZ(23))
  PROBE("vpermi2w zmm", 12, X12(P2Z))
  PROBE("vpsrlvd zmm", 12, X12(SZ))
  PROBE("vpternlogd zmm", 12, X12(TERN))
  PROBE("vbroadcasti64x2 zmm, m128", 12, X12(NV_BC))
  PROBE("zmm dot + vpermi2w", 12, X12P(DZ, P2Z))
  PROBE("zmm dot + vpsrlvd zmm", 12, X12P(DZ, SZ))
  PROBE("zmm dot + vbroadcasti64x2", 12, X12P(DZ, NV_BC))
  PROBE("vpermi2w + vpsrlvd", 12, X12P(P2Z, SZ))
  PROBE("NVFP4 one-row chunk", 8, NV_X8(NV_FULL))
  PROBE("  without the broadcast (a register copy)", 8, NV_X8(NV_NOBC))
  PROBE("  without VPSRLVD", 8, NV_X8(NV_NOSV))
  PROBE("  without the row loads", 8, NV_X8(NV_NORL))
  PROBE("  without VPERMI2W", 8, NV_X8(NV_NOPM))
  PROBE("  without the dot product", 8, NV_X8(NV_NODT))
  PROBE("  a qword broadcast (half the codes)", 8, NV_X8(NV_QWORD))
  PROBE("  one 64-byte load + VSHUFI64X2 a chunk", 8,
        NV_FOUR(0, 1, 2, 3, 8, 0) NV_FOUR(4, 5, 6, 7, 9, 64))
  std::printf("%-44s %.3f ns\n", "tile block, one fixed table row", blocks(false));
  std::printf("%-44s %.3f ns\n", "tile block, rows by random scale bytes", blocks(true));
}
