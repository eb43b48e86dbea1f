// NVFP4 (ModelOpt W4A16) linear kernels.
//
// Kernel weight (exact in f32): w'[k] = E2M1(code[k]) * E4M3(scale[k/16]), with code 0x8 = +0
// (ModelOpt's table; the sign of a zero weight cannot change an fma chain that starts at +0 in a
// way the SIMD path would not reproduce). post = weight_scale_2. Reduction: linear_packed.h.
// The AVX2 decoder gets the same exact values as (2*E2M1 * 2^24) * (E4M3 * 2^-25): every factor
// and product has at most 6 significant bits and stays in the normal range, so all are exact.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/numeric.h"
#include "base/random.h"
#include "kernels/fp8.h"
#include "kernels/linear_packed.h"

namespace nemo::kernels::detail {

namespace {

// E2M1 as used by the kernels: ModelOpt's table (+0 for code 8).
constexpr float kE2m1Kernel[16] = {0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Row s = the 16 kernel weights E2M1(c) * E4M3(s) (exact): 16 KB, one cache line per row.
alignas(64) constexpr std::array<float, 256 * 16> kProducts = [] {
  std::array<float, 256 * 16> a{};
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 16; ++c) a[size_t(s * 16 + c)] = kE2m1Kernel[c] * e4m3_to_f32(uint8_t(s));
  return a;
}();

// The scale bytes of the 8 blocks from k (a step of 128 weights) in one load, and block b's row of
// a product table whose rows are 2^kRowShift bytes, as a byte offset: byte b times the row size in
// two BMI2 instructions (RORX, AND) instead of a byte load and a shift.
inline uint64_t scale_word(const uint8_t* scales, int64_t k) {
  uint64_t v;
  std::memcpy(&v, scales + k / 16, 8);
  return v;
}
template <int kRowShift>
inline uint64_t scale_row_offset(uint64_t sw, int b) {
  return std::rotr(sw, 8 * b - kRowShift) & (uint64_t{0xFF} << kRowShift);
}

struct Nvfp4Ref {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  const float* e4m3 = nullptr;
  int64_t K = 0;
  float s2 = 1.0f;
  const uint8_t* rd = nullptr;
  const uint8_t* rs = nullptr;

  void init(const PackedWeight& w) {
    data = static_cast<const uint8_t*>(w.data);
    scales = static_cast<const uint8_t*>(w.scales);
    e4m3 = e4m3_table().data();
    K = w.cols;
    s2 = w.scale;
  }
  void row(int64_t o) {
    rd = data + o * (K / 2);
    rs = scales + o * (K / 16);
  }
  float at(int64_t k) const {
    const uint8_t b = rd[k >> 1];
    return kE2m1Kernel[(k & 1) ? (b >> 4) : (b & 15)] * e4m3[rs[k >> 4]];
  }
  float post() const { return s2; }
};

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

// In-lane decode of 16 codes: the 8 bytes are broadcast to every 64-bit slot (a load, no ALU);
// shifting the odd slots by 4 and masking leaves, in each 128-bit lane, the 8 even-element codes
// then the 8 odd-element codes; one shuffle maps codes to int8 2*E2M1, and two more place each
// value in the top byte of its element's dword (sign included) = 2*E2M1 * 2^24 as int32, which
// converts exactly. The scale table holds E4M3 * 2^-25, so the product is E2M1 * E4M3, exact.
// Shuffle control placing source byte `s` in the top byte of a dword (other bytes zeroed).
constexpr int top(int s) {
  return int((unsigned(s) << 24) | 0xFFFFFFu);
}

struct Nvfp4Avx2 : Nvfp4Ref {
  const float* scaled = nullptr;

  static const std::array<float, 256>& e4m3_2m25_table() {
    static constexpr std::array<float, 256> t = [] {
      std::array<float, 256> a{};
      for (int i = 0; i < 256; ++i) a[i] = e4m3_to_f32(uint8_t(i)) * 0x1p-25f;
      return a;
    }();
    return t;
  }
  void init(const PackedWeight& w) {
    Nvfp4Ref::init(w);
    scaled = e4m3_2m25_table().data();
  }
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * (K / 2) + (k >> 1)), _MM_HINT_T0);
    if ((k & 1023) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(rs + ahead * (K / 16) + (k >> 4)), _MM_HINT_T0);
  }
  // The 16 codes at p as int8 2*E2M1, in each 128-bit lane: bytes 0-7 = elements 0, 2, .., 14;
  // bytes 8-15 = 1, 3, .., 15. Constants are literals (not members) so the four decoders of a
  // tile share their registers.
  static __m256i twice_e2m1(const uint8_t* p) {
    const __m256i lut =
        _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    int64_t q;
    std::memcpy(&q, p, 8);
    const __m256i b = _mm256_srlv_epi64(_mm256_set1_epi64x(q), _mm256_setr_epi64x(0, 4, 0, 4));
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(b, _mm256_set1_epi8(0x0F)));
  }
  void decode16(int64_t k, __m256& w0, __m256& w1) const {
    const __m256i place0 =
        _mm256_setr_epi32(top(0), top(8), top(1), top(9), top(2), top(10), top(3), top(11));
    const __m256i place1 =
        _mm256_setr_epi32(top(4), top(12), top(5), top(13), top(6), top(14), top(7), top(15));
    const __m256i v = twice_e2m1(rd + (k >> 1));
    const __m256 s = _mm256_broadcast_ss(scaled + rs[k >> 4]);
    w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, place0)), s);
    w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, place1)), s);
  }
};

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2")

// Two vector operations per 16 weights: the 8 code bytes are broadcast to every qword (a load, no
// ALU), a shift puts each weight's nibble in the low bits of a dword lane, and VPERMPS reads only
// those low 4 bits as an index into the block's row of kProducts (E2M1 * E4M3, exact), so no
// multiply is left. The tiles (decode16z_lanes) shift by VPSRLVD into a permuted lane order and
// read the table stepping by scale words; the wide passes (decode16z) shift by VPMULTISHIFTQB into
// canonical order. The tiles' form has served Zen 4 from the start, Zen 5 since 2026-12-05 (1-12
// rows 1.14-1.31x faster L2-resident, a one-row pass streamed from memory 1.46x) and Intel since
// 2026-12-06 (Xeon, 2 threads, streamed: 1 / 2
// rows 0.87x / 0.86x the time of E2M1 from a register table times the broadcast scale, 3-8 rows
// within 0.94-1.01x of VPMULTISHIFTQB's canonical order; 8-layer decode 1.04-1.20x faster;
// docs/PERFORMANCE.md).
struct Nvfp4Avx512 : Nvfp4Ref {
  // Decoding once to f32 pays from ~16 rows (microbench, Zen 5, 1-2 threads: 8-12 rows run
  // 10-30 % faster swept, 64 rows 25 % faster wide).
  static constexpr int64_t kWideRows = 16;
  void prefetch(int64_t k, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(rd + ahead * (K / 2) + (k >> 1)), _MM_HINT_T0);
    if ((k & 1023) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(rs + ahead * (K / 16) + (k >> 4)), _MM_HINT_T0);
  }
  // 64 k of O rows: O / 2 lines of codes, and every 4 steps O / 4 lines of scales. Every tile
  // (kNextTileRows; docs/PERFORMANCE.md); the 5-7-row tiles too: 131072 x 2688 f32, two passes at
  // once, Zen 4, 5 / 6 / 7 rows 32.9-33.4 / 39.0-39.2 / 45.5-45.6 ms against the next tile into L2
  // 34.2-36.7 / 41.2-43.0 / 48.1-49.5 (2026-12-05).
  // (O = 3: 1.5 lines of codes a step, 0.75 of scales, rounded up; O = 6: 3 and 1.5.)
  static constexpr int kNextTileRows = packed::kMaxRowsZIntel;
  template <int O, bool L2>
  void prefetch_next_tile(int64_t step) const {
    packed::prefetch_lines<(O + 1) / 2, L2>(rd + O * (K / 2), step);
    if ((step & 3) == 0) packed::prefetch_lines<(O + 3) / 4, L2>(rs + O * (K / 16), step >> 2);
  }
  static __m512i codes(const uint8_t* p) {
    const __m512i ctrl =
        _mm512_set_epi64(0x3C00000038, 0x3400000030, 0x2C00000028, 0x2400000020,  //
                         0x1C00000018, 0x1400000010, 0x0C00000008, 0x0400000000);
    int64_t q;
    std::memcpy(&q, p, 8);
    return _mm512_maskz_multishift_epi64_epi8(~__mmask64(0), ctrl, _mm512_set1_epi64(q));
  }
  // The tiles decode in a permuted lane order (linear_packed.h, PermutedLanes): the 8 code bytes
  // broadcast to every qword, dword i holds bytes 4 (i % 2) .. 4 (i % 2) + 3, and VPSRLVD by 4 (i /
  // 2) puts nibble 8 (i % 2) + i / 2 in its low bits for VPERMPS. On Zen 4 a variable shift runs
  // beside the FMAs, where VPMULTISHIFTQB takes their pipes (tools/bench/probe_ports.cpp: an FMA
  // and a VPMULTISHIFTQB 0.54 ns a pair, an FMA, a VPSRLVD and a VPERMPS 0.41 ns a triple).
  alignas(64) static constexpr std::array<int32_t, 16> kLaneElement = {0, 8,  1, 9,  2, 10, 3, 11,
                                                                       4, 12, 5, 13, 6, 14, 7, 15};
  static __m512 lanes_from_row(const uint8_t* codes, const float* row) {
    const __m512i shift =
        _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    int64_t q;
    std::memcpy(&q, codes, 8);
    return _mm512_maskz_permutexvar_ps(
        0xFFFF, _mm512_maskz_srlv_epi32(0xFFFF, _mm512_set1_epi64(q), shift), _mm512_load_ps(row));
  }
  __m512 decode16z_lanes(int64_t k) const {
    return lanes_from_row(rd + (k >> 1), kProducts.data() + 16 * rs[k >> 4]);
  }
  // Steps of 8 blocks from k (a multiple of 128): block k / 16 + b's table row (64 bytes) from
  // the step's scale word, its codes at a constant displacement.
  uint64_t scale_word(int64_t k) const { return detail::scale_word(rs, k); }
  __m512 decode16z_lanes(int64_t k, uint64_t sw, int b) const {
    return lanes_from_row(
        rd + (k >> 1) + 8 * b,
        reinterpret_cast<const float*>(reinterpret_cast<const char*>(kProducts.data()) +
                                       scale_row_offset<6>(sw, b)));
  }
  // The same table row from block k / 16 + b's scale byte: a load and a shift in place of RORX
  // and AND (tile_z's ScaleBytes; Nvfp4IntelTiles). The value of decode16z_lanes(k + 16 b), but
  // with that call GCC laid the 4 x 4 tile out otherwise, 1.03x (streamed) to 1.07x slower.
  __m512 decode16z_lanes_byte(int64_t k, int b) const {
    return lanes_from_row(
        rd + (k >> 1) + 8 * b,
        reinterpret_cast<const float*>(reinterpret_cast<const char*>(kProducts.data()) +
                                       (uint64_t(rs[(k >> 4) + b]) << 6)));
  }
  // The decode-once (wide) paths, in canonical order.
  __m512 decode16z(int64_t k) const {
    // maskz: GCC 12's unmasked form reads an "undefined" register (-Wmaybe-uninitialized).
    return _mm512_maskz_permutexvar_ps(0xFFFF, codes(rd + (k >> 1)),
                                       _mm512_load_ps(kProducts.data() + 16 * rs[k >> 4]));
  }
};

#pragma GCC pop_options

// Intel's tile widths (Xeon, Emerald Rapids; tools/bench/probe_ab against 4 outputs, B / A
// medians: 96 x 2688 L2-resident on 1 thread, 32760 x 2688 streamed on 2; docs/PERFORMANCE.md,
// 2026-12-06 evening): 2 rows x 8 outputs 0.873-0.878x / 0.959-0.960x the time, 3 x 6
// 0.898-0.899x / 0.928-0.944x, 8 x 3 0.79-0.91x / 0.936-0.955x (24 accumulators in place of 32,
// of which 8 x 4 stored 60 vector registers a step). Not taken: 4 x 6 (0.927x / 0.974x, 19 vector
// stores a step), 5 x 5 (1.02-1.03x slower), 7 x 3 (1.00x).
// The 4 x 4 tile takes each block's table row by its scale byte (a load and a shift) rather than
// from the step's scale words (RORX and AND, whose ALU uops can take ports 0 and 5 from the vector
// ones): 96 x 2688 L2-resident 0.944x the time, 32760 x 2688 streamed 0.948x (2026-12-06, night);
// at 1 row 0.976x L2-resident but 0.989-1.002x streamed (1-2 threads), at 2, 3 and 5-8 rows
// 1.00-1.02x.
struct Nvfp4IntelTiles {
  static constexpr int outputs(int rows) {
    return rows == 2 ? 8 : rows == 3 ? 6 : rows == 8 ? 3 : 4;
  }
  static constexpr bool scale_bytes(int rows) { return rows == 4; }
};

}  // namespace

void range_nvfp4_avx512(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                        float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx512<Nvfp4Avx512>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_avx512_8row(const PackedWeight& w, const float* x, int64_t n_rows,
                             int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                             int64_t o_end) {
  packed::range_avx512<Nvfp4Avx512, Nvfp4Avx512::kWideRows, packed::kMaxRowsZIntel,
                       Nvfp4IntelTiles>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                     float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_ref<Nvfp4Ref>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                      float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_avx2<Nvfp4Avx2>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

// ---- bf16 activations (Arith::Bf16) ----
// The order, shared by the scalar reference and the AVX512_BF16 kernel:
//   x~[k] = round_activation_bf16(x[k]); w'[k] = E2M1 * E4M3 as above (exact in bf16 as well).
//   Each 32-weight chunk k0 < K32 = K - K % 32 (two scale blocks) is taken in the decoder's word
//   order: word i (0..31) is element e(i) = 16 * ((i >> 2) & 1) + 8 * ((i >> 1) & 1) +
//   4 * (i & 1) + (i >> 3), so lane l (0..15) holds words 2l and 2l + 1, two elements 4 apart in
//   block (l >> 1) & 1: the pairs a variable shift of the broadcast codes indexes
//   (decode16_bf16_row), where the two nibbles of one byte would take a byte-granular select
//   (VPMULTISHIFTQB, which shares the dot-product pipes on Zen 4). Per chunk, lane l does
//     acc[l] = fma(w'[k0 + e(2l+1)], x~[k0 + e(2l+1)], acc[l]);
//     acc[l] = fma(w'[k0 + e(2l)],   x~[k0 + e(2l)],   acc[l]);
//   which is VDPBF16PS (the odd product first, each sum rounded once, tools/bench/probe_dpbf16):
//   bf16 x bf16 products are exact in f32, so one fused multiply-add is one half-step. Then
//   v[l] = acc[l] + acc[l + 8], s = hsum8_fixed(v), t = an fma chain over [K32, K), and
//   y = (s + t) * weight_scale_2.
// |w'| >= 2^-10 and |x~| >= 2^-100 (or 0), so every product and partial sum is a multiple of
// 2^-123: normal or zero, and the instruction's flushing of subnormals never applies.
namespace {
constexpr int bf16_word_element(int i) {
  return 16 * ((i >> 2) & 1) + 8 * ((i >> 1) & 1) + 4 * (i & 1) + (i >> 3);
}
static_assert([] {
  uint32_t seen = 0;
  for (int i = 0; i < 32; ++i) seen |= uint32_t(1) << bf16_word_element(i);
  return seen == ~uint32_t(0);
}());
// The lane of that order that lane m (0..7) of block h's 256-bit accumulator holds (tile_bf16_y
// and the AVX2 kernel keep each block's 8 lanes in one ymm).
constexpr int order_lane(int h, int m) {
  return 4 * (m / 2) + 2 * h + m % 2;
}
static_assert([] {
  for (int l = 0; l < 16; ++l)
    if (bf16_word_element(2 * l + 1) != bf16_word_element(2 * l) + 4) return false;
  return true;
}());
}  // namespace

void range_nvfp4_bf16_ref(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                          float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_bf16_ref<Nvfp4Ref, bf16_word_element>(w, x, n_rows, x_stride, y, y_stride, o_begin,
                                                      o_end);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c,bmi2")

namespace {

// Row s = the 16 kernel weights of kProducts as bf16 (exact): 8 KB, two rows per 64-byte line.
alignas(64) constexpr std::array<uint16_t, 256 * 16> kProductsBf16 = [] {
  std::array<uint16_t, 256 * 16> a{};
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = uint16_t(std::bit_cast<uint32_t>(kProducts[i]) >> 16);
  return a;
}();

// The 32 weights of the chunk at k0 of one output row, in word order: the 16 code bytes are
// broadcast per 128 bits, so qword j holds block j & 1, and word i of qword j takes nibble
// 4 * i + (j >> 1) into its low bits. With Shift (Zen 4) one VPSRLVD by 4 * (j >> 1) per dword
// does that (a dword holds words 2m and 2m + 1: nibbles 8m + ..); else VPMULTISHIFTQB selects it
// into the word's low byte (the other CPUs' decoder as measured before, only its selectors new).
// VPTERNLOGD keeps the 4 index bits and marks the odd qwords' words as block 1's. With Shift,
// VPERMI2W takes them from two tables, each block's 32-byte row loaded alone (bit 5 picks the
// table, bit 4 is clear); else VPERMW from the two rows merged into one zmm (bit 4). Zen 4 runs
// the merge's two 256-bit broadcasts as loads with a shuffle each: a dot product, two such
// broadcasts and a VPERMW 0.82 ns in independent chains against 0.56 with two plain loads and a
// two-table permute (5 / 6 / 8-row passes 64 x 2688 12.0 / 13.7 / 16.2 -> 10.0 / 12.5 / 15.7 us).
template <bool Shift>
inline __m512i decode32_bf16_rows(const uint8_t* codes, const char* row0, const char* row1) {
  const __m512i q =
      _mm512_maskz_broadcast_i64x2(0xFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  __m512i nibbles;
  if constexpr (Shift) {
    nibbles = _mm512_maskz_srlv_epi32(
        0xFFFF, q, _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
  } else {
    const __m512i ctrl = _mm512_set_epi64(
        0x003C002C001C000C, 0x003C002C001C000C, 0x0038002800180008, 0x0038002800180008,
        0x0034002400140004, 0x0034002400140004, 0x0030002000100000, 0x0030002000100000);
    nibbles = _mm512_maskz_multishift_epi64_epi8(~__mmask64(0), ctrl, q);
  }
  constexpr int64_t kBlock1 = Shift ? 0x0020002000200020 : 0x0010001000100010;  // bit 5 or 4
  const __m512i idx =
      _mm512_ternarylogic_epi32(nibbles, _mm512_set1_epi16(0x0F),
                                _mm512_set_epi64(kBlock1, 0, kBlock1, 0, kBlock1, 0, kBlock1, 0),
                                0xEA);  // (a & b) | c
  const __m256i r0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(row0)),
                r1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(row1));
  if constexpr (Shift) {
    // A row zero-extended by a masked insert: GCC 12's _mm512_zextsi256_si512 inserts into an
    // "undefined" register (-Wmaybe-uninitialized), and a cast let it add a move per row (5-row
    // pass 10.0 -> 10.5 us); this one compiles to the plain 256-bit load.
    return _mm512_permutex2var_epi16(_mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), r0, 0),
                                     idx,
                                     _mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), r1, 0));
  } else {
    const __m512i table =
        _mm512_mask_broadcast_i64x4(_mm512_maskz_broadcast_i64x4(0xFF, r0), 0xF0, r1);
    return _mm512_permutexvar_epi16(idx, table);
  }
}
inline const char* product_row_bf16(uint8_t scale) {
  return reinterpret_cast<const char*>(kProductsBf16.data() + 16 * size_t(scale));
}
template <bool Shift>
inline __m512i decode32_bf16(const uint8_t* codes, const uint8_t* scales) {
  return decode32_bf16_rows<Shift>(codes, product_row_bf16(scales[0]), product_row_bf16(scales[1]));
}

// x~ of one row (round_activation_bf16 of each element): the chunks as bf16 with word i of each
// = element Element(i) (k order, then one VPERMW per chunk), then the tail as f32 in k order.
template <int (*Element)(int)>
inline void round_row_bf16_avx512(const float* x, int64_t K, uint16_t* words, float* tail) {
  alignas(64) static constexpr std::array<uint16_t, 32> order = [] {
    std::array<uint16_t, 32> a{};
    for (int i = 0; i < 32; ++i) a[size_t(i)] = uint16_t(Element(i));
    return a;
  }();
  packed::round_row_bf16_kord(x, K, words, tail);
  const __m512i perm = _mm512_load_si512(order.data());
  for (int64_t k0 = 0; k0 + 32 <= K; k0 += 32)
    _mm512_storeu_si512(words + k0, _mm512_permutexvar_epi16(perm, _mm512_loadu_si512(words + k0)));
}

// tile_bf16_y's activations: block h's 16 words, word 2m + odd of order_lane(h, m); within the
// block that is element 4 * (w % 4) + w / 4 of word w, as decode16_bf16_row gives the weights.
constexpr int halves_word_element(int i) {
  return bf16_word_element(2 * order_lane(i >> 4, (i & 15) >> 1) + (i & 1));
}
static_assert([] {
  for (int w = 0; w < 16; ++w)
    if (halves_word_element(w) != 4 * (w % 4) + w / 4) return false;
  return true;
}());

// One scale block's 16 weights as bf16 for tile_bf16_y, word w = element 4 * (w % 4) + w / 4 of
// the block (the word order's lanes of that block, packed): the 8 code bytes broadcast to every
// qword, VPSRLVD by 4 * j in qword j puts that nibble in the low bits of each word, and VPERMW
// (which reads 4 index bits at this width) looks it up in the block's product row. The shift runs
// beside the dot products on Zen 4, where VPMULTISHIFTQB takes their pipes
// (tools/bench/probe_ports.cpp).
inline __m256i decode16_bf16_row(const uint8_t* codes, const char* row) {
  int64_t q;
  std::memcpy(&q, codes, 8);
  return _mm256_permutexvar_epi16(
      _mm256_maskz_srlv_epi32(0xFF, _mm256_set1_epi64x(q),
                              _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12)),
      _mm256_load_si256(reinterpret_cast<const __m256i*>(row)));
}
inline __m256i decode16_bf16(const uint8_t* codes, uint8_t scale) {
  return decode16_bf16_row(codes, product_row_bf16(scale));
}

// Up to 8 rows: one pass (one decode feeds every row, so a 5-8-row pass decodes each weight
// once). More: groups of 8 while their activations (8 * K * 2 bytes) fit in half of L1 beside the
// streamed weights, else of 4 (K = 2688: 8-row groups measured ~10 % slower at 12 and 64 rows;
// K = 1856: 4-row groups ~5 % slower at 64 rows). Shift: decode32_bf16's variable shift (Zen 4).
// Words (Zen 5's passes of 1 and 3+ rows): tile_bf16_z steps 128 weights at a time, each output's
// 8 scale bytes in one load and its product rows found from that word (no load and sign extension
// per block), one-row tiles of 4 outputs, the tile after next prefetched. On Zen 5 the one-row
// tile was bound by the per-block scale loads and the merged table rows (a scratch build that
// fetched one row per chunk ran 1.24x faster, wrong as it was); this one, 1 thread, L2-resident
// 64 x 2688 3.59 -> 2.88 us, 1856 x 2688 99 -> 78 us; streamed 131072 x 2688 (198 MB) 7.66 ->
// 6.54 ms with the tile after next prefetched (7.3-8.3 with the next one: four outputs are too
// short a lead from memory). 1856 x 2688, 3 / 4 / 6 / 8 rows 148 / 160 / 211 / 269 -> 115 / 126 /
// 169 / 220 us (streamed: 4 rows even, 8 rows 1.14x); 2 rows keep VPMULTISHIFTQB (streamed 1.25x
// slower this way, 131072 x 2688 8.9 -> 11.2 ms, though 1.09x faster from L3).
template <bool Shift, bool Words = false>
struct Nvfp4Bf16Z {
  using Ref = Nvfp4Ref;
  static constexpr int64_t kPrefetchK = 128;  // a cache line of codes
  static constexpr bool kScaleWords = Words;
  static constexpr int kOneRowOutputs = Words ? 4 : 8;
  static constexpr int64_t kPrefetchTilesAhead = Words ? 2 : 1;
  // Zen 4, 1 thread, best of five alternating runs on a busy host (docs/PERFORMANCE.md): one row,
  // the next tile into L1 (into L2: 1.0-1.1x slower); 2-8 rows, any prefetch 1.2-1.5x faster than
  // none, rows into L1 and the next tile into L2 within noise (lm_head 4 rows 35.3 / 25.2 / 25.6
  // ms). Later (2026-12-04, night, two 1-thread passes at once so that they share the memory as
  // the engine's two threads do), the next tile into L1 against L2, 131072 x 2688 streamed: 4 rows
  // (now 256-bit blocks) 24.3 -> 22.4 ms, 5 rows 28.4 -> 26.4, 8 rows 38.3 -> 35.4; a tile is 2.7-
  // 5.4 KB of codes, small beside L1 even with the rows' activations.
  static constexpr auto kPrefetchOneRow = packed::TilePrefetch::kNextTile;
  static constexpr auto kPrefetchRows = packed::TilePrefetch::kNextTile;
  // tile_bf16_z finishes from its accumulators rather than through a staged copy: 4 rows 1.06x
  // (lm_head 24.9 -> 23.5 ms streamed, Zen 4; docs/PERFORMANCE.md, 2026-12-04).
  static constexpr bool kFinishInRegisters = true;
  struct Cursor {
    const uint8_t* codes;
    const uint8_t* scales;
    int64_t row_bytes;
    void init(const PackedWeight& w, int64_t o) {
      row_bytes = w.cols / 2;
      codes = static_cast<const uint8_t*>(w.data) + o * row_bytes;
      scales = static_cast<const uint8_t*>(w.scales) + o * (w.cols / 16);
    }
    __m512i decode(int64_t k0) const {
      return decode32_bf16<Shift>(codes + k0 / 2, scales + k0 / 16);
    }
    // The scale bytes of the 8 blocks from k0 (an unrolled step of 128 weights) in one load, and
    // block b's product row (32 bytes) from them.
    uint64_t scale_word(int64_t k0) const { return detail::scale_word(scales, k0); }
    static const char* row(uint64_t sw, int b) {
      return reinterpret_cast<const char*>(kProductsBf16.data()) + scale_row_offset<5>(sw, b);
    }
    // The chunk at k0 + dk from the step's scale word (kScaleWords).
    __m512i decode(int64_t k0, int dk, uint64_t sw) const {
      return decode32_bf16_rows<Shift>(codes + k0 / 2 + dk / 2, row(sw, dk / 16),
                                       row(sw, dk / 16 + 1));
    }
    void decode_halves(int64_t k0, int dk, uint64_t sw, __m256i& lo, __m256i& hi) const {
      lo = decode16_bf16_row(codes + k0 / 2 + dk / 2, row(sw, dk / 16));
      hi = decode16_bf16_row(codes + k0 / 2 + dk / 2 + 8, row(sw, dk / 16 + 1));
    }
    // The chunk at k0 + dk (dk a multiple of 32 known at compile time: one k0 / 2 and k0 / 16 for
    // all of an unrolled step's chunks, each at a constant displacement).
    void decode_halves(int64_t k0, int dk, __m256i& lo, __m256i& hi) const {
      lo = decode16_bf16(codes + k0 / 2 + dk / 2, scales[k0 / 16 + dk / 16]);
      hi = decode16_bf16(codes + k0 / 2 + dk / 2 + 8, scales[k0 / 16 + dk / 16 + 1]);
    }
    // The next O rows' codes (kPrefetchTilesAhead tiles on), O lines per step, and their scales
    // (an eighth of the bytes), one line per step (past them for O < 8: harmless).
    template <int O, bool L2>
    void prefetch_next_tile(int64_t step) const {
      constexpr int64_t ahead = O * kPrefetchTilesAhead;
      packed::prefetch_lines<O, L2>(codes + ahead * row_bytes, step);
      packed::prefetch_lines<1, L2>(scales + ahead * (row_bytes / 8), step);
    }
  };
  static void round_row(const float* x, int64_t K, uint16_t* words, float* tail) {
    round_row_bf16_avx512<bf16_word_element>(x, K, words, tail);
  }
  static void round_row_halves(const float* x, int64_t K, uint16_t* words, float* tail) {
    round_row_bf16_avx512<halves_word_element>(x, K, words, tail);
  }
};

}  // namespace

void range_nvfp4_bf16_avx512(const PackedWeight& w, const float* x, int64_t n_rows,
                             int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                             int64_t o_end) {
  packed::range_bf16_z<Nvfp4Bf16Z<false>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_bf16_avx512_words(const PackedWeight& w, const float* x, int64_t n_rows,
                                   int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                                   int64_t o_end) {
  if (n_rows != 2)
    packed::range_bf16_z<Nvfp4Bf16Z<true, true>>(w, x, n_rows, x_stride, y, y_stride, o_begin,
                                                 o_end);
  else
    packed::range_bf16_z<Nvfp4Bf16Z<false>>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

void range_nvfp4_bf16_avx512_halves(const PackedWeight& w, const float* x, int64_t n_rows,
                                    int64_t x_stride, float* y, int64_t y_stride, int64_t o_begin,
                                    int64_t o_end) {
  packed::range_bf16_z<Nvfp4Bf16Z<true>, 4>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

#pragma GCC pop_options

// ---- bf16 activations on AVX2 (no VDPBF16PS): the same fused multiply-adds in f32 ----
// Lane l of the order above takes elements e(2l + 1) = e(2l) + 4 and e(2l) of block (l >> 1) & 1:
// the odd element first, then the even one. Here a ymm holds the 8 lanes of one scale block
// (A = block 0, B = block 1), lane m = pair (pair_even(m) + 4, pair_even(m)) of the block, as
// tile_bf16_y's lane m; a block's 8 E2M1 magnitudes times its scale (exact) make one VPERMPS
// table, and the sign is the nibble's bit 3. The activations are laid out once per row as
// [odd A, even A, odd B, even B] x 8 per chunk; the lanes go back to the order's positions only in
// the finish.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {
constexpr int pair_even(int m) {
  return bf16_word_element(2 * order_lane(0, m));
}
static_assert([] {  // block 1's pairs are block 0's, 16 on
  for (int m = 0; m < 8; ++m)
    if (bf16_word_element(2 * order_lane(1, m)) != 16 + pair_even(m)) return false;
  return true;
}());
// The ymm lane (8 * block + m) of the order's lane l.
constexpr std::array<int, 16> kLaneAcc = [] {
  std::array<int, 16> a{};
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 8; ++m) a[size_t(order_lane(h, m))] = 8 * h + m;
  return a;
}();
// twice_e2m1's byte of element e of a block, at the top of a dword.
constexpr int top_of_element(int e) {
  return top(8 * (e % 2) + e / 2);
}

// One block's 8 lanes: w'(odd) then w'(even) of each pair into acc, for R rows. The decode is
// Nvfp4Avx2::decode16's (2*E2M1 as int8 in the top byte of a dword, converted exactly, times
// E4M3 * 2^-25), with the placing shuffles picking the pairs' even and odd elements instead.
template <int R>
inline void block_bf16_avx2(const uint8_t* codes, const float* scale_2m25, const float* const* xr,
                            int64_t off, __m256* acc) {
  const __m256i even = _mm256_setr_epi32(
      top_of_element(pair_even(0)), top_of_element(pair_even(1)), top_of_element(pair_even(2)),
      top_of_element(pair_even(3)), top_of_element(pair_even(4)), top_of_element(pair_even(5)),
      top_of_element(pair_even(6)), top_of_element(pair_even(7)));
  const __m256i odd =
      _mm256_setr_epi32(top_of_element(pair_even(0) + 4), top_of_element(pair_even(1) + 4),
                        top_of_element(pair_even(2) + 4), top_of_element(pair_even(3) + 4),
                        top_of_element(pair_even(4) + 4), top_of_element(pair_even(5) + 4),
                        top_of_element(pair_even(6) + 4), top_of_element(pair_even(7) + 4));
  const __m256i v = Nvfp4Avx2::twice_e2m1(codes);
  const __m256 s = _mm256_broadcast_ss(scale_2m25);
  const __m256 w_odd = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, odd)), s);
  const __m256 w_even = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, even)), s);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_fmadd_ps(w_odd, _mm256_loadu_ps(xr[r] + off), acc[r]);
    acc[r] = _mm256_fmadd_ps(w_even, _mm256_loadu_ps(xr[r] + off + 8), acc[r]);
  }
}

// R rows (laid out by packed::lay_row_bf16_pairs<Nvfp4Bf16Pairs>, stride K) x O outputs [o, o + O).
// Each chunk is two dependent FMAs per accumulator, so 1-2 rows take two outputs to keep enough
// chains in flight.
template <int R, int O>
[[gnu::noinline]] void tile_bf16_avx2(const PackedWeight& w, const float* xl, float* y, int64_t ys,
                                      int64_t o) {
  const int64_t K = w.cols, K32 = K - K % 32;
  Nvfp4Avx2 d[O];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j) {
    d[j].init(w);
    d[j].row(o + j);
  }
  const float* xr[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xr[r] = xl + r * K;
  __m256 a[O][R], b[O][R];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) a[j][r] = b[j][r] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < K32; k0 += 32) {
#pragma GCC unroll 16
    for (int j = 0; j < O; ++j) {
      if ((k0 & 127) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(d[j].rd + O * (K / 2) + k0 / 2), _MM_HINT_T0);
      block_bf16_avx2<R>(d[j].rd + k0 / 2, d[j].scaled + d[j].rs[k0 / 16], xr, k0, a[j]);
      block_bf16_avx2<R>(d[j].rd + k0 / 2 + 8, d[j].scaled + d[j].rs[k0 / 16 + 1], xr, k0 + 16,
                         b[j]);
    }
  }
  alignas(32) float by_lane[O][R][16];
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      _mm256_store_ps(by_lane[j][r], a[j][r]);
      _mm256_store_ps(by_lane[j][r] + 8, b[j][r]);
    }
#pragma GCC unroll 16
  for (int j = 0; j < O; ++j)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float v[8];
      for (int l = 0; l < 8; ++l)
        v[l] = by_lane[j][r][kLaneAcc[size_t(l)]] + by_lane[j][r][kLaneAcc[size_t(l + 8)]];
      float t = 0.0f;
      for (int64_t k = K32; k < K; ++k) t = std::fma(d[j].at(k), xr[r][k], t);
      y[r * ys + o + j] = (hsum8_fixed(v) + t) * d[j].post();
    }
}

struct Nvfp4Bf16Pairs {
  static constexpr int pair_even(int m) { return detail::pair_even(m); }
  static constexpr int kPairApart = 4;
  template <int R, int O>
  static void tile(const PackedWeight& w, const float* xl, float* y, int64_t ys, int64_t o) {
    tile_bf16_avx2<R, O>(w, xl, y, ys, o);
  }
};
}  // namespace

void range_nvfp4_bf16_avx2(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                           float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  packed::range_bf16_pairs<Nvfp4Bf16Pairs>(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

#pragma GCC pop_options

// The AVX512_BF16 kernels against the reference on random data (64 outputs x 224 columns: a
// scale-word step and three chunks; 1-5 rows, activations over 2^-20..2^20 with ties and values
// below the flush threshold). Random data changes the rounding of nearly every output if
// VDPBF16PS summed in another order (even product first, both products at once, or in a wider
// accumulator), so a mismatch means the instruction on this CPU is not the one
// docs/FORMATS.md §2.1 defines.
bool nvfp4_bf16_kernel_self_check() {
  constexpr int64_t kOut = 64, kCols = 224, kRows = 5;
  Rng rng(0x5eed);
  std::vector<uint8_t> codes(size_t(kOut * kCols / 2)), scales(size_t(kOut * kCols / 16));
  for (auto& c : codes) c = uint8_t(rng.next());
  for (auto& s : scales) s = uint8_t(0x20 + rng.next() % 0x30);  // E4M3 2^-5 .. 2^1, never NaN
  PackedWeight w{.format = WeightFormat::NVFP4,
                 .rows = kOut,
                 .cols = kCols,
                 .data = codes.data(),
                 .scales = scales.data(),
                 .scale = 0.75f,
                 .group = 16,
                 .arith = Arith::Bf16};
  std::vector<float> x(size_t(kRows * kCols));
  packed::self_check_activations([&] { return rng.next(); }, x.data(), int64_t(x.size()));
  return packed::self_check_rows(w, x.data(), kRows, range_nvfp4_bf16_ref,
                                 range_nvfp4_bf16_avx512) &&
         packed::self_check_rows(w, x.data(), kRows, range_nvfp4_bf16_ref,
                                 range_nvfp4_bf16_avx512_words) &&
         packed::self_check_rows(w, x.data(), kRows, range_nvfp4_bf16_ref,
                                 range_nvfp4_bf16_avx512_halves);
}

// Spec order (ModelOpt / vLLM): s = E4M3 * weight_scale_2 (one f32 rounding), w = E2M1 * s.
void dequantize_row_nvfp4(const PackedWeight& w, int64_t o, float* out) {
  const auto& e4m3 = e4m3_table();
  const int64_t K = w.cols;
  const uint8_t* rd = static_cast<const uint8_t*>(w.data) + o * (K / 2);
  const uint8_t* rs = static_cast<const uint8_t*>(w.scales) + o * (K / 16);
  for (int64_t k = 0; k < K; ++k) {
    const float s = e4m3[rs[k >> 4]] * w.scale;
    const uint8_t b = rd[k >> 1];
    out[k] = kE2m1Kernel[(k & 1) ? (b >> 4) : (b & 15)] * s;
  }
}

}  // namespace nemo::kernels::detail
