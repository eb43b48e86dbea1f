// Internal: per-format kernels behind kernels/linear.h. Each format provides a scalar reference
// and optionally SIMD variants with the signature below; all must be batch invariant.
#pragma once
#include "kernels/linear.h"

namespace nemo::kernels::detail {

using RangeFn = void (*)(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride,
                         float* y, int64_t y_stride, int64_t o_begin, int64_t o_end);

// Dense formats (linear_dense.cpp)
void range_dense_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                     int64_t);
void range_dense_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                      int64_t);
void range_dense_avx512(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                        int64_t, int64_t);
// The same bits, passes of 32+ rows decoding the weights to f32 once (range_wide_z): on an Intel
// Xeon (bf16 4096 x 2688) 1.13x faster at 32 rows, 1.25x at 64, 1.6x at 512 (docs/PERFORMANCE.md);
// and 8-row passes as one tile (packed::kMaxRowsZIntel).
void range_dense_avx512_wide(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                             int64_t, int64_t);
void dequantize_row_dense(const PackedWeight& w, int64_t o, float* out);
// bf16 weights with Arith::Bf16 (VDPBF16PS's order and its handling of tiny values).
void range_dense_bf16_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                          int64_t, int64_t);
void range_dense_bf16_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                           int64_t, int64_t);  // the rules by MXCSR (dense_bf16_avx2_verified)
void range_dense_bf16_avx2_by_hand(const PackedWeight&, const float*, int64_t, int64_t, float*,
                                   int64_t, int64_t, int64_t);
void range_dense_bf16_avx512(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                             int64_t, int64_t);
// The AVX512_BF16 kernel gave the reference's bits (run once per process: dense_bf16_verified).
bool dense_bf16_kernel_self_check();
bool dense_bf16_verified();  // bf16_kernel_verified() and dense_bf16_kernel_self_check(), once
bool dense_bf16_avx2_self_check();  // range_dense_bf16_avx2 gave the reference's bits
bool dense_bf16_avx2_verified();    // the CPU has AVX2 and that self-check passed, once

// Packed formats (linear_nvfp4.cpp, linear_fp8.cpp, linear_affine.cpp; canonical order in
// linear_packed.h). AFFINE covers AFFINE4 and AFFINE8.
void range_nvfp4_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                     int64_t);
void range_nvfp4_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                      int64_t);
void range_nvfp4_avx512(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                        int64_t, int64_t);
// The same bits, 8-row passes as one tile (packed::kMaxRowsZIntel; faster on Intel).
void range_nvfp4_avx512_8row(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                             int64_t, int64_t);
void dequantize_row_nvfp4(const PackedWeight& w, int64_t o, float* out);
void range_nvfp4_bf16_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                          int64_t, int64_t);
void range_nvfp4_bf16_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                           int64_t, int64_t);
void range_nvfp4_bf16_avx512(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                             int64_t, int64_t);
// The same bits, passes of 1 and 3+ rows stepping by scale words, one-row tiles of 4 outputs (AMD
// CPUs that run 512-bit operations whole: Zen 5).
void range_nvfp4_bf16_avx512_words(const PackedWeight&, const float*, int64_t, int64_t, float*,
                                   int64_t, int64_t, int64_t);
// The same bits, 1-4 rows one scale block per ymm (faster where 512-bit operations are split).
void range_nvfp4_bf16_avx512_halves(const PackedWeight&, const float*, int64_t, int64_t, float*,
                                    int64_t, int64_t, int64_t);
// Does range_nvfp4_bf16_avx512 give the reference's bits on this CPU? (Call only where
// cpu_has_avx512_bf16(); kernels/linear.h bf16_kernel_verified() runs it once.)
bool nvfp4_bf16_kernel_self_check();
void range_fp8_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                   int64_t);
void range_fp8_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                    int64_t);
void range_fp8_avx512(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                      int64_t);
// The same bits, passes of 16+ rows decoding the weights to f32 once (range_wide_z): on an Intel
// Xeon 1.06x faster at 16 rows, 1.2-1.4x at 64-256 (docs/PERFORMANCE.md); and 8-row passes as one
// tile (packed::kMaxRowsZIntel).
void range_fp8_avx512_wide(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                           int64_t, int64_t);
// The same bits, its passes of 1-15 rows decoding FP8 by GFNI in two uops instead of three (call
// only where cpu_has_gfni()).
void range_fp8_avx512_wide_gfni(const PackedWeight&, const float*, int64_t, int64_t, float*,
                                int64_t, int64_t, int64_t);
void dequantize_row_fp8(const PackedWeight& w, int64_t o, float* out);
void range_fp8_bf16_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                        int64_t, int64_t);
void range_fp8_bf16_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                         int64_t, int64_t);
void range_fp8_bf16_avx512(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                           int64_t, int64_t);
bool fp8_bf16_kernel_self_check();  // as nvfp4_bf16_kernel_self_check
void range_affine_ref(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                      int64_t);
void range_affine_avx2(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t,
                       int64_t, int64_t);
void dequantize_row_affine(const PackedWeight& w, int64_t o, float* out);

// Returns the kernel for (format, isa), falling back to the best available lower ISA.
RangeFn select_range_fn(WeightFormat f, Isa isa);
// The same for a weight, honouring its arithmetic (w.arith).
RangeFn select_range_fn(const PackedWeight& w, Isa isa);

// Fixed-order horizontal sum of 8 floats (lane 0..7): ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
// Both the reference and SIMD code use this order so results agree where the math is exact.
inline float hsum8_fixed(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

}  // namespace nemo::kernels::detail
