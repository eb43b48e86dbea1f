// FP8 E4M3 per-tensor (ModelOpt FP8, run as W8A16) linear kernels and the W8A8 parity mode.
//
// Kernel weight: w'[k] = E4M3(byte[k]) * 2^-8 (exact), post = weight_scale * 256 (exact).
// The 2^-8 is what the AVX2 decoder gets for free: an E4M3 byte shifted into an IEEE half
// (sign to bit 15, exponent+mantissa to bits 13..7) is the same value times 2^-8, subnormals
// included, and F16C converts it exactly. Reduction: linear_packed.h.
// NaN codes (0x7F/0xFF) decode to NaN in the reference but to 1.875 (480 * 2^-8) in AVX2;
// weights are scanned once at load instead (e4m3_has_nan), so valid data agrees bitwise.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/random.h"
#include "kernels/fp8.h"
#include "kernels/linear_packed.h"
#include "kernels/quantize.h"

namespace nemo::kernels {

namespace detail {

namespace {

const std::array<float, 256>& e4m3_scaled_table() {
  static constexpr std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = e4m3_to_f32(uint8_t(i)) * (1.0f / 256.0f);
    return a;
  }();
  return t;
}

struct Fp8Ref {
  const uint8_t* data = nullptr;
  const float* tab = nullptr;
  int64_t K = 0;
  float scale = 1.0f;
  const uint8_t* rd = nullptr;

  void init(const PackedWeight& w) {
    data = static_cast<const uint8_t*>(w.data);
    tab = e4m3_scaled_table().data();
    K = w.cols;
    scale = w.scale;
  }
  void row(int64_t o) { rd = data + o * K; }
  float at(int64_t k) const { return tab[rd[k]]; }
  float post() const { return scale * 256.0f; }
};

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

struct Fp8Avx2 : Fp8Ref {
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * K + k), _MM_HINT_T0);
  }
  void decode16(int64_t k, __m256& w0, __m256& w1) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rd + k));
    const __m128i zero = _mm_setzero_si128(), keep = _mm_set1_epi16(int16_t(0xBFFF));
    // (b << 8) >>arith 1 puts sign at bit 15 (and a copy at 14, cleared), e4m3 bits 6..0 at 13..7.
    const __m128i h0 = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(zero, b), 1), keep);
    const __m128i h1 = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(zero, b), 1), keep);
    w0 = _mm256_cvtph_ps(h0);
    w1 = _mm256_cvtph_ps(h1);
  }
};

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")

// The AVX2 decoder's half-float trick on 16 bytes at once: VPERMB places byte i in the high byte
// of word i (low bytes zeroed), the arithmetic shift and mask give sign | e4m3 << 7, and one
// VCVTPH2PS widens the 16 halves exactly.
struct Fp8Avx512 : Fp8Ref {
  // Never wide: the decode is cheap, and sweeping measured 17-50 % faster at 8-64 rows (Zen 5,
  // before the wide path's scratch was 64-byte aligned); range_fp8_avx512_wide is wide from 16.
  static constexpr int64_t kWideRows = INT64_MAX;
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * K + k), _MM_HINT_T0);
  }
  // 64 k of O rows: O lines of the next tile's rows, which are contiguous. Into L1 in one-row
  // tiles: 65536 x 2688 (176 MB), 1 thread, Zen 4: 1 row 13.3 -> 11.0 ms (best of five
  // alternating), 2 / 4 rows slower with it (14.3 / 17.9 -> 16.9 / 20.3). Into L2 in the others:
  // 41216 x 2688, 2 rows 8932-9203 -> 7759-9035 us than row by row, 4 rows equal (10543-11865 /
  // 10165-12261: FMA-bound); Zen 4, 2026-12-04.
  static constexpr int kNextTileRows = 1;
  static constexpr int kNextTileL2Rows = packed::kMaxRowsZIntel;  // every tile of 2+ rows
  template <int O, bool L2>
  void prefetch_next_tile(int64_t step) const {
    packed::prefetch_lines<O, L2>(rd + O * K, step);
  }
  __m512 decode16z(int64_t k) const {
    const __m256i hi = _mm256_setr_epi8(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7,  //
                                        0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rd + k));
    const __m256i h = _mm256_maskz_permutexvar_epi8(0xAAAAAAAAu, hi, _mm256_castsi128_si256(b));
    return _mm512_maskz_cvtph_ps(
        0xFFFF, _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(int16_t(0xBFFF))));
  }
};

// Intel: the same values in four vector uops instead of five (VCVTPH2PS is two there). Each byte
// sign-extended to a dword and shifted left by 20 leaves the sign at bit 31, copies of it at 30-27
// (cleared) and e4m3 bits 6..0 at 26..20: an f32 of e4m3 * 2^-120 for every code (e4m3 subnormals
// become f32 subnormals), which the multiply by 2^112 turns exactly into e4m3 * 2^-8, the table's
// value (and the half-float trick's, NaN codes included: 1.875). Under a host program's
// denormals-are-zero the multiply would read the subnormals as 0, so range_fp8_avx512_wide then
// takes the half-float decode (VCVTPH2PS ignores the bit). On the Emerald Rapids Xeon
// (2026-12-06, 10304 x 2688, 2 threads, streamed, tools/bench/probe_ab): 2 / 3 / 4 / 8 rows 0.92 /
// 0.90 / 0.92 / 0.94x the time, 1 row (memory-bound) 0.99x. Unmeasured on AMD. Since 374ad33 the
// wide passes' decode, and the narrow passes' where the activations cannot take the 2^112
// (Fp8Avx512IntelScaledX below).
// The 16 bytes at p as f32s of e4m3 * 2^-120 (three vector uops). maskz forms: GCC 12's unmasked
// ones warn of an uninitialised pass-through operand.
inline __m512 e4m3_times_2m120(const uint8_t* p) {
  const __m512i d =
      _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_and_epi32(0xFFFF, _mm512_maskz_slli_epi32(0xFFFF, d, 20),
                                                    _mm512_set1_epi32(int32_t(0x87FFFFFFu))));
}

struct Fp8Avx512Intel : Fp8Avx512 {
  __m512 decode16z(int64_t k) const {
    return _mm512_maskz_mul_ps(0xFFFF, e4m3_times_2m120(rd + k), _mm512_set1_ps(0x1p112f));
  }
};

// The same 16 values in two vector uops where the CPU has GFNI: the 16 bytes broadcast into both
// halves of a ymm (a load, no ALU uop), one GF2P8AFFINEQB rearranging each byte's bits by an 8 x 8
// bit matrix per qword (low half: the sign and e4m3 bits 6..4 as an f32's top byte, s000 0bbb;
// high half: bits 3..0 as the next byte, bbbb 0000), and one VPERMB placing byte i of each half as
// bytes 3 and 2 of lane i (bytes 1 and 0 zeroed). The bits are e4m3_times_2m120's for all 256
// codes. The instruction goes through asm: as an intrinsic it needs "gfni" in the target, and
// tile_z (linear_packed.h), compiled without it, would then call the decoder instead of
// inlining it; the kernel that uses it runs only where the CPU has GFNI (cpu_has_gfni).
inline __m512 e4m3_times_2m120_gfni(const uint8_t* p) {
  // Output bit i of a byte is the parity of (input & byte 7 - i of the qword's matrix).
  const __m256i bits = _mm256_setr_epi64x(0x1020400000000080ll, 0x1020400000000080ll,
                                          0x0000000001020408ll, 0x0000000001020408ll);
  const __m256i y =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  __m256i t;
  asm("vgf2p8affineqb $0, %2, %1, %0" : "=v"(t) : "v"(y), "vm"(bits));
  const __m512i to_lanes = _mm512_set_epi8(  // lane i: bytes 3, 2 = t[i], t[16 + i]
      15, 31, 0, 0, 14, 30, 0, 0, 13, 29, 0, 0, 12, 28, 0, 0, 11, 27, 0, 0, 10, 26, 0, 0, 9, 25, 0,
      0, 8, 24, 0, 0, 7, 23, 0, 0, 6, 22, 0, 0, 5, 21, 0, 0, 4, 20, 0, 0, 3, 19, 0, 0, 2, 18, 0, 0,
      1, 17, 0, 0, 0, 16, 0, 0);
  return _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi8(0xCCCCCCCCCCCCCCCCull, to_lanes, _mm512_castsi256_si512(t)));
}

// Intel, passes of fewer rows than the wide ones: the multiply by 2^112 moves onto the
// activations, once per pass. The decode is the three uops before it (w'' = e4m3 * 2^-120 =
// w' * 2^-112, exact, subnormals included) and the pass runs on x'' = x * 2^112 (exact while
// finite: every finite |x| < 2^16 and every non-finite x; scaled_activations says whether). Each
// product w'' x'' is then the real number w' x and every fma rounds the same sum the same way, so
// the bits are the table decoder's.
struct Fp8Avx512IntelScaledX : Fp8Avx512 {
  __m512 decode16z(int64_t k) const { return e4m3_times_2m120(rd + k); }
  float at(int64_t k) const {  // the scalar tails: the same bits as a decode16z lane
    return std::bit_cast<float>((uint32_t(int32_t(int8_t(rd[k]))) << 20) & 0x87FFFFFFu);
  }
};
// The same with GFNI's two-uop decode. On the Emerald Rapids Xeon (2026-12-06,
// tools/bench/probe_ab, medians of 20-60 alternating pairs): 96 x 2688 L2-resident, 1 thread, 1 /
// 2 / 3 / 4 / 5 / 6 rows 0.78 / 0.83 / 0.85 / 0.88 / 0.89 / 0.91x the time; 10304 x 2688 streamed
// on 2 threads 1 / 2 / 4 / 6 rows 0.95 / 0.89 / 0.96 / 0.95x. At 8 rows as 8 x 3 tiles
// (Fp8GfniTiles). In the wide passes (16+ rows, decoded once) it did not pay (1.00-1.02x).
struct Fp8Avx512IntelScaledXGfni : Fp8Avx512IntelScaledX {
  __m512 decode16z(int64_t k) const { return e4m3_times_2m120_gfni(rd + k); }
};
// 8 rows as 8 x 3 tiles with the GFNI decode (its to_lanes and bits take two registers where the
// three-uop decode's mask takes one; 8 x 4 keeps more accumulators on the stack): L2-resident
// 0.97x the time of 8 x 4, streamed on 2 threads 0.99x (Emerald Rapids, tools/bench/probe_ab).
struct Fp8GfniTiles {
  static constexpr int outputs(int rows) { return rows == 8 ? 3 : 4; }
  static constexpr bool scale_bytes(int) { return false; }
};

// out = x * 2^112 for n_rows rows of K (stride xs in, K out); false if a finite |x| >= 2^16
// (its product would overflow), and out is then not to be used.
bool scaled_activations(const float* x, int64_t n_rows, int64_t xs, int64_t K, float* out) {
  uint32_t big = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * xs;
    float* o = out + r * K;
    for (int64_t k = 0; k < K; ++k) {
      const uint32_t e = (std::bit_cast<uint32_t>(xr[k]) >> 23) & 0xFFu;  // biased exponent
      big |= uint32_t(e >= 127u + 16u) & uint32_t(e != 0xFFu);
      o[k] = xr[k] * 0x1p112f;
    }
  }
  return big == 0;
}

#pragma GCC pop_options

}  // namespace

namespace {
template <bool Gfni>
void range_fp8_intel(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                     float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  constexpr int64_t kWide = 16;  // rows from which the passes decode once to f32 (range_wide_z)
  if (_mm_getcsr() & 0x40u)      // DAZ: both Intel decoders leave e4m3's subnormals f32 subnormals
    return packed::range_avx512<Fp8Avx512, kWide, packed::kMaxRowsZIntel>(w, x, n_rows, x_stride, y,
                                                                          y_stride, o_begin, o_end);
  // Below the wide passes (which decode each weight once for many rows anyway), the decode's
  // multiply goes onto the activations where that is exact: 1 / 2 / 3 / 4 / 5 / 8 rows 0.92 / 0.92
  // / 0.91 / 0.92 / 0.94 / 0.95x the time (Emerald Rapids, 10304 x 2688, 2 threads, streamed,
  // tools/bench/probe_ab).
  if (n_rows > 0 && n_rows < kWide && o_begin < o_end) {
    const auto xs = alloc_aligned64<float>(size_t(n_rows * w.cols));
    if (scaled_activations(x, n_rows, x_stride, w.cols, xs.get())) {
      if constexpr (Gfni)
        return packed::range_avx512<Fp8Avx512IntelScaledXGfni, kWide, packed::kMaxRowsZIntel,
                                    Fp8GfniTiles>(w, xs.get(), n_rows, w.cols, y, y_stride, o_begin,
                                                  o_end);
      else
        return packed::range_avx512<Fp8Avx512IntelScaledX, kWide, packed::kMaxRowsZIntel>(
            w, xs.get(), n_rows, w.cols, y, y_stride, o_begin, o_end);
    }
  }
  packed::range_avx512<Fp8Avx512Intel, kWide, packed::kMaxRowsZIntel>(w, x, n_rows, x_stride, y,
                                                                      y_stride, o_begin, o_end);
}
}  // namespace

void range_fp8_avx512_wide(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                           float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  range_fp8_intel<false>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}
void range_fp8_avx512_wide_gfni(const PackedWeight& w, const float* x, int64_t n_rows,
                                int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                                int64_t o_end) {
  range_fp8_intel<true>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}
void range_fp8_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                      float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx512<Fp8Avx512>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_fp8_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                   float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_ref<Fp8Ref>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_fp8_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                    float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx2<Fp8Avx2>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

// ---- bf16 activations (Arith::Bf16) ----
// The order, shared by the scalar reference and both kernels (docs/FORMATS.md §2.1):
//   x~[k] = round_activation_bf16(x[k]); w'[k] = E4M3(byte[k]) * 2^-8 as above (exact in bf16).
//   Each 32-weight chunk k0 < K32 = K - K % 32 is taken in k order: lane l (0..15) does
//     acc[l] = fma(w'[k0 + 2l + 1], x~[k0 + 2l + 1], acc[l]);
//     acc[l] = fma(w'[k0 + 2l],     x~[k0 + 2l],     acc[l]);
//   which is VDPBF16PS on words in k order (the odd product first, each sum rounded once). Then
//   v[l] = acc[l] + acc[l + 8], s = hsum8_fixed(v), t = an fma chain over [K32, K), and
//   y = (s + t) * weight_scale * 256.
// |w'| >= 2^-17 and x~ is 0 or a multiple of 2^-107 (8 significant bits, |x~| >= 2^-100), so
// every product and partial sum is 0 or a multiple of 2^-124: normal, and the instruction's
// flushing of subnormals never applies.
void range_fp8_bf16_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                        float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_bf16_ref<Fp8Ref, packed::k_order_element>(w, x, n_rows, x_stride, y, y_stride,
                                                          o_begin, o_end);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")

namespace {

// The 32 weights at p as bf16 words in k order. A sign-extended byte b shifted left by 4 holds
// the sign in bits 15..11 and e4m3's exponent and mantissa in bits 10..4; masking and adding 112
// to the exponent field gives bf16(E4M3 * 2^-8) for every normal code. The mask clears bits
// 14..11, so the addition is an OR and the two are one VPTERNLOGD; the exponent test reads the
// bytes before widening (a 256-bit test, not a 512-bit one). Zeros and subnormals (exponent 0:
// m * 2^-17) are rare in real weights, so they are patched from a table only in the chunks that
// have one (a predictable branch instead of three instructions per chunk).
// BiasInMemory: the exponent bias as a broadcast memory operand, not a register. With three
// constants in registers the 8-row tile (24 accumulators) kept one accumulator on the stack, a
// store and a reload on its chain every chunk (in_proj 63 x 2688, 8 rows, L2: 10.5-11.1 -> 9.4-
// 10.0 us); the one-row tile, which has registers to spare, is ~5 % slower with the extra loads
// (128 x 2688: 7.05-7.12 -> 7.42-7.57 us), so it keeps the register.
template <bool BiasInMemory>
inline __m512i decode32_fp8_bf16(const uint8_t* p) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512i h = _mm512_cvtepi8_epi16(b);
  const __m512i keep = _mm512_set1_epi16(int16_t(0x87F0));
  __m512i n = _mm512_slli_epi16(h, 4);
  if constexpr (BiasInMemory) {
    alignas(4) static constexpr uint32_t kBias = (112u << 7) * 0x10001u;
    asm("vpternlogd $0xEA, %[bias]%{1to16%}, %[keep], %[n]"  // (n & keep) | bias
        : [n] "+v"(n)
        : [keep] "v"(keep), [bias] "m"(kBias));
  } else {
    n = _mm512_ternarylogic_epi32(n, keep, _mm512_set1_epi16(112 << 7), 0xEA);  // (a & b) | c
  }
  const __mmask32 low = _mm256_testn_epi8_mask(b, _mm256_set1_epi8(0x78));
  if (low == 0) [[likely]]
    return n;
  // bf16 of E4M3(m) * 2^-8 = m * 2^-17 for m = 0..7 (the index's exponent bits are 0 here).
  alignas(64) static constexpr std::array<uint16_t, 32> sub = [] {
    std::array<uint16_t, 32> a{};
    for (int m = 0; m < 8; ++m)
      a[size_t(m)] = uint16_t(std::bit_cast<uint32_t>(e4m3_to_f32(uint8_t(m)) * 0x1p-8f) >> 16);
    return a;
  }();
  const __m512i mag = _mm512_permutexvar_epi16(h, _mm512_load_si512(sub.data()));
  // sign | magnitude: (a | (b & c)) with b = h (bit 15 = the sign), c = 0x8000.
  const __m512i patched =
      _mm512_ternarylogic_epi32(mag, h, _mm512_set1_epi16(int16_t(0x8000)), 0xF8);
  return _mm512_mask_mov_epi16(n, low, patched);
}

// Up to 8 rows: one pass, as NVFP4. Since the tiles of 2+ rows prefetch into L2, one pass beat
// 4-row groups (Zen 4, 1 thread, 2026-12-04: in_proj 10304 x 2688 6 / 8 rows 2220-2324 /
// 2518-2583 -> 1831-1894 / 2269-2344 us, 41216 x 2688 8 rows 1.1x); with the row-by-row prefetch
// into L1 one 8-row pass had been 1.4-1.6x slower (in_proj 3.6-3.9 vs 2.2-2.7 ms). More rows go in
// groups of 8 while 8 rows of activations fit in half of L1, else of 4.
template <bool BiasInMemory>
struct Fp8Bf16Z {
  using Ref = Fp8Ref;
  static constexpr int64_t kPrefetchK = 64;  // a cache line of codes
  // Zen 4, 1 thread (docs/PERFORMANCE.md): one row, the next tile into L2 ran 1.25x faster than
  // rows into L1 in one loop (in_proj 1.35-1.41 -> 1.07-1.10 ms, a busy host). 2-8 rows streamed
  // from memory, on a quiet host (2026-12-04): the next tile into L2 1.1-1.6x faster than rows
  // into L1 (41216 x 2688, 4 rows 10.1-10.3 -> 6.3-7.8 ms) and than the next tile into L1 (12.5-
  // 15.3 ms): 4 rows of activations (21.5 KB at K = 2688) leave L1 no room for a tile in flight.
  static constexpr auto kPrefetchOneRow = packed::TilePrefetch::kNextTileL2;
  static constexpr auto kPrefetchRows = packed::TilePrefetch::kNextTileL2;
  // Staged finish (tile_bf16_z): from the accumulators it measured mixed (0.97-1.2x, busy host).
  static constexpr bool kFinishInRegisters = false;
  struct Cursor {
    const uint8_t* codes;
    int64_t K;
    void init(const PackedWeight& w, int64_t o) {
      K = w.cols;
      codes = static_cast<const uint8_t*>(w.data) + o * K;
    }
    __m512i decode(int64_t k0) const { return decode32_fp8_bf16<BiasInMemory>(codes + k0); }
    template <int O, bool L2>
    void prefetch_next_tile(int64_t step) const {
      packed::prefetch_lines<O, L2>(codes + O * K, step);
    }
  };
  static void round_row(const float* x, int64_t K, uint16_t* words, float* tail) {
    packed::round_row_bf16_kord(x, K, words, tail);
  }
};

}  // namespace

void range_fp8_bf16_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                           float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  // Groups of 8 rows run the 24-accumulator tile (decode32_fp8_bf16); more rows at a wide K go in
  // groups of 4, whose tiles have registers to spare.
  if (n_rows >= 8 && packed::bf16_row_group(n_rows, w.cols) == 8)
    packed::range_bf16_z<Fp8Bf16Z<true>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
  else
    packed::range_bf16_z<Fp8Bf16Z<false>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

#pragma GCC pop_options

// ---- bf16 activations on AVX2 (no VDPBF16PS): the same fused multiply-adds in f32 ----
// Lanes 0-7 of the order are the pairs of elements 0..15 of a chunk, lanes 8-15 those of 16..31,
// so a ymm of 8 lanes takes one half: its odd elements' weights, then its even ones', each
// decoded by the half-float trick of Fp8Avx2 after one byte shuffle that puts the odd bytes
// first; the activations come laid out to match (packed::lay_row_bf16_pairs).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {

inline void half_fp8_bf16_avx2(const uint8_t* p, __m256& w_odd, __m256& w_even) {
  const __m128i odd_first = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14);
  const __m128i b =
      _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), odd_first);
  const __m128i zero = _mm_setzero_si128(), keep = _mm_set1_epi16(int16_t(0xBFFF));
  w_odd = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(zero, b), 1), keep));
  w_even = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(zero, b), 1), keep));
}

struct Fp8Bf16Avx2 {
  using Ref = Fp8Ref;
  static constexpr int64_t kWeightBytes = 1;
  static void half(const uint8_t* row, int64_t k, __m256& w_odd, __m256& w_even) {
    half_fp8_bf16_avx2(row + k, w_odd, w_even);
  }
  static __m256 step(__m256 w, __m256 x, __m256 acc) { return _mm256_fmadd_ps(w, x, acc); }
};

}  // namespace

void range_fp8_bf16_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                         float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_bf16_pairs<packed::KordBf16Pairs<Fp8Bf16Avx2>>(w, x, n_rows, x_stride, y, y_stride,
                                                               o_begin, o_end);
}

#pragma GCC pop_options

// The AVX512_BF16 kernel against the reference on random data (48 outputs x 96 columns, 1-9
// rows, every code but NaN, zeros and subnormals included; activations over 2^-20..2^20 with
// ties and flushed values): as nvfp4_bf16_kernel_self_check, for this decoder's word order.
bool fp8_bf16_kernel_self_check() {
  constexpr int64_t kOut = 48, kCols = 96, kRows = 9;
  Rng rng(0xf8);
  std::vector<uint8_t> codes(size_t(kOut * kCols));
  for (size_t i = 0; i < codes.size(); ++i) {
    const uint8_t c = uint8_t(rng.next());
    codes[i] = (c & 0x7F) == 0x7F ? uint8_t(c ^ 1) : i % 23 == 4 ? uint8_t(c & 0x87) : c;
  }
  PackedWeight w{.format = WeightFormat::FP8_E4M3,
                 .rows = kOut,
                 .cols = kCols,
                 .data = codes.data(),
                 .scale = 0.75f,
                 .arith = Arith::Bf16};
  std::vector<float> x(size_t(kRows * kCols));
  packed::self_check_activations([&] { return rng.next(); }, x.data(), int64_t(x.size()));
  return packed::self_check_rows(w, x.data(), kRows, range_fp8_bf16_ref, range_fp8_bf16_avx512);
}

// Spec order: W = E4M3 * weight_scale (one f32 multiply).
void dequantize_row_fp8(const PackedWeight& w, int64_t o, float* out) {
  const auto& t = e4m3_table();
  const uint8_t* rd = static_cast<const uint8_t*>(w.data) + o * w.cols;
  for (int64_t k = 0; k < w.cols; ++k) out[k] = t[rd[k]] * w.scale;
}

}  // namespace detail

void fp8_quantize_activations(const float* x, int64_t n, float input_scale, float* out) {
  const auto& t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[f32_to_e4m3(x[i] / input_scale)];
}

void fp8_fake_quant(const float* x, int64_t n, float input_scale, float* out) {
  const auto& t = e4m3_table();
  for (int64_t i = 0; i < n; ++i) out[i] = t[f32_to_e4m3(x[i] / input_scale)] * input_scale;
}

void linear_fp8_static(const PackedWeight& w, float input_scale, const float* x, int64_t n_rows,
                       int64_t x_stride, float* y, int64_t y_stride, const ThreadConfig& tc) {
  NEMO_CHECK(w.format == WeightFormat::FP8_E4M3,
             "linear_fp8_static: weight format is {}, expected fp8_e4m3",
             weight_format_name(w.format));
  NEMO_CHECK(w.arith == Arith::F32,
             "linear_fp8_static: bf16 activations are not implemented for fp8");
  NEMO_CHECK(std::isfinite(input_scale) && input_scale > 0.0f,
             "linear_fp8_static: bad input_scale {}", input_scale);
  // Quantised activations are exact E4M3 values; the combined scale is one f32 product, as on GPU.
  std::vector<float> xq(static_cast<size_t>(n_rows * w.cols));
  for (int64_t r = 0; r < n_rows; ++r)
    fp8_quantize_activations(x + r * x_stride, w.cols, input_scale, xq.data() + r * w.cols);
  PackedWeight wq = w;
  wq.scale = input_scale * w.scale;
  // Straight to the range kernel (not linear()), so a dispatch on an activation-scale field in
  // linear() can never route back here.
  const detail::RangeFn fn = detail::select_range_fn(wq.format, active_isa());
  const int64_t grain =
      std::max<int64_t>(16, (int64_t(1) << 18) / std::max<int64_t>(1, w.cols * n_rows));
  parallel_for(tc, w.rows, grain,
               [&](int64_t b, int64_t e) { fn(wq, xq.data(), n_rows, w.cols, y, y_stride, b, e); });
}

}  // namespace nemo::kernels
