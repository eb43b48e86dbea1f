// Linear layers over packed weights: y[r, o] = sum_k x[r, k] * W[o, k].
//
// Batch invariance: the value of y[r, o] depends only on row r of x and row o of W — never on
// how many rows are processed together, on the row tile a row lands in, or on the thread count.
// Every kernel reduces one (r, o) pair in one fixed order, and threads split the *outputs* o.
//
// Formats are read in their checkpoint layout; nothing is dequantised into a full-size copy.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/threads.h"

namespace nemo::kernels {

enum class WeightFormat : uint8_t {
  F32,
  BF16,
  F16,
  NVFP4,     // U8 E2M1 pairs (low nibble = even k), E4M3 scale per 16, f32 scale2 (issue: formats)
  FP8_E4M3,  // E4M3 bytes, per-tensor f32 scale
  AFFINE4,   // MLX affine 4-bit: U32 words, bf16 scales+biases per group
  AFFINE8,   // MLX affine 8-bit
};
const char* weight_format_name(WeightFormat f);

// The arithmetic of a product. F32: the activations as given (every format). Bf16: each
// activation rounded to bf16 first (round_activation_bf16), as GPU W4A16 / W8A16 kernels and bf16
// GEMMs take them, and the sums in the order of the formats' bf16 sections (NVFP4, FP8 and bf16
// weights only; docs/FORMATS.md §2.1).
enum class Arith : uint8_t { F32, Bf16 };
const char* arith_name(Arith a);
// "f32" | "bf16"; anything else fails naming `option` (the command-line flag).
Arith parse_arith(const std::string& s, const char* option = "--arith");

// Arith::Bf16's activation: f32 -> bf16 (round to nearest even) -> f32; |x| < 2^-100 becomes +0
// (so no product or partial sum is ever subnormal); NaN stays NaN, infinities stay.
float round_activation_bf16(float x);

// A non-owning view of one [rows = out, cols = in] weight matrix in its stored layout.
// Pointers may be unaligned (MLX safetensors files are not aligned).
struct PackedWeight {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  const void* scales = nullptr;  // NVFP4: E4M3 [rows, cols/16]; AFFINE*: bf16 [rows, cols/group]
  const void* biases = nullptr;  // AFFINE*: bf16 [rows, cols/group]
  float scale = 1.0f;            // NVFP4: weight_scale_2; FP8: weight_scale
  int64_t group = 0;             // AFFINE*: group size; NVFP4: 16
  float input_scale = 0.0f;      // FP8: > 0 emulates static W8A8 activation quantisation
  Arith arith = Arith::F32;      // Bf16: NVFP4, FP8 and BF16 only (others fail)
  int64_t bytes() const;         // resident bytes of data + scales + biases
};

// Which implementation family runs. Chosen once per process (run-time CPU detection) and
// overridable for tests. Reference = portable scalar code, the oracle for the SIMD variants.
// Avx2 = AVX2+FMA+F16C; Avx512 = F/BW/VL/DQ/VBMI as well (Ice Lake, Sapphire Rapids, Zen 4 and
// later). A format without kernels of an ISA runs its best lower one.
enum class Isa : uint8_t { Reference, Avx2, Avx512 };
Isa detected_isa();
std::vector<Isa> available_isas();  // Reference .. detected_isa(), ascending (tests cover each)
Isa active_isa();
void set_active_isa(Isa isa);  // for tests/benchmarks; clamps to what the CPU supports
const char* isa_name(Isa isa);
// AVX512_BF16 (VDPBF16PS): Arith::Bf16 runs its own kernel at Isa::Avx512 where the CPU has it
// and bf16_kernel_verified(); else the AVX2 kernel (the same fused multiply-adds in f32), else
// the scalar reference.
bool cpu_has_avx512_bf16();
// The CPU has AVX512_BF16 and the kernels built on it (NVFP4, FP8) gave the scalar reference's bits
// in a self-check run once per process (the instruction's summation order is what the kernel's
// definition rests on; a CPU that summed otherwise would fall back to AVX2, not drift).
bool bf16_kernel_verified();
// AMD Zen 4 (family 19h with AVX-512), which runs a 512-bit operation as two 256-bit halves:
// there Arith::Bf16's 1-4-row NVFP4 passes decode one scale block per ymm (the same bits, faster
// there; docs/PERFORMANCE.md). Elsewhere the other kernels run those passes.
bool cpu_splits_512bit_ops();
// An Intel CPU: there Arith::F32's FP8 passes of 16+ rows and the dense formats' of 32+ decode
// the weights to f32 once (range_fp8_avx512_wide, range_dense_avx512_wide; the same bits, faster
// on the Intel Xeons measured, where on Zen 5 sweeping in registers was), and Arith::F32's 8-row
// passes run as one tile of 8 rows (those two and range_nvfp4_avx512_8row; on AMD two of 4), and
// FP8 is decoded by integer steps (below 16 rows on activations times 2^112 where exact). On
// AMD, where 512-bit operations are whole (Zen 5), Arith::Bf16's NVFP4 passes of 1 and 3+ rows
// step by scale words (range_nvfp4_bf16_avx512_words); the same bits, faster there, unmeasured on
// Intel.
bool cpu_is_intel();
// GFNI (GF2P8AFFINEQB): Intel's FP8 passes of 1-15 rows decode in two uops with it
// (range_fp8_avx512_wide_gfni).
bool cpu_has_gfni();
// The AVX-512 wide passes' blocking (range_wide_z), from this CPU's caches as sysconf reports
// them (32 KB L1D and 1 MB L2 where it reports none): k chunks of 384 where L1D holds 48 KB
// (16 outputs' weights, 6 rows' activations and their parked accumulators: 39 KB), else 256
// (28 KB), and no chunks (kWholeRow) where 512-bit operations are split (Zen 4: 1.22-1.26x
// faster than 256 there); row blocks of activations within 3/8 of L2, at most 768 KB (measured
// on a Xeon with 2 MB of L2: 1.25 MB blocks ran no faster).
struct WideBlocking {
  int64_t k_chunk, row_bytes;
};
inline constexpr int64_t kWholeRow = int64_t(1) << 40;  // a k chunk longer than any row
WideBlocking wide_blocking();
// Tests: run the wide passes with another blocking (k_chunk rounded down to a multiple of 16);
// k_chunk <= 0 restores the caches'. Process-wide, like set_active_isa.
void set_wide_blocking(WideBlocking b);
// Which kernels Arith::Bf16's NVFP4, FP8 and bf16 products run at `isa`: "avx512_bf16" (with a
// note on Zen 4, cpu_splits_512bit_ops), "avx2" or "reference". (bf16 weights take the AVX2
// kernel where the instruction failed their own self-check, detail::dense_bf16_verified.)
const char* bf16_kernel_name(Isa isa);
// Which kernels Arith::F32's packed products run at `isa`: "avx512 (Intel tiles; FP8 by GFNI)",
// "avx512 (Intel tiles)" (cpu_is_intel, cpu_has_gfni), "avx512", "avx2" or "reference".
const char* f32_kernel_name(Isa isa);

// y[r * y_stride + o] for r < n_rows, o < w.rows. Threads split o.
void linear(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
            int64_t y_stride, const ThreadConfig& tc);

// Several independent products in ONE parallel region (the experts of a MoE layer): the outputs of
// every job are cut into blocks that the threads share, so small matrices do not each pay a
// fork/join. Each y is bitwise what linear() writes for its job alone.
struct LinearJob {
  const PackedWeight* w = nullptr;
  const float* x = nullptr;
  int64_t n_rows = 0, x_stride = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
};
void linear_many(std::span<const LinearJob> jobs, const ThreadConfig& tc);

// The same for outputs [o_begin, o_end) only, single-threaded (callers that partition work).
void linear_range(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
                  int64_t y_stride, int64_t o_begin, int64_t o_end, Isa isa);

// Row o of W as f32 (embedding lookup, tests). out has w.cols entries.
void dequantize_row(const PackedWeight& w, int64_t o, float* out);

}  // namespace nemo::kernels
