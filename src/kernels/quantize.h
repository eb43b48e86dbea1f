// Quantizers that produce the checkpoint formats (to write synthetic checkpoints and test the
// kernels), activation fake-quantisation for FP8 parity, and packed-weight validation.
// Layouts and rounding rules: docs/FORMATS.md and spec/formats.md §2, §3, §5.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "base/threads.h"
#include "kernels/linear.h"

namespace nemo::kernels {

// ModelOpt NVFP4, dynamic "max" path. weight U8 [rows, cols/2] (low nibble = even k),
// weight_scale E4M3 [rows, cols/16], weight_scale_2 f32 (multiplied on decode).
struct Nvfp4Quantized {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> packed;  // rows * cols / 2
  std::vector<uint8_t> scales;  // rows * cols / 16, E4M3 bytes
  float scale2 = 0.0f;
  PackedWeight view() const;
};
// w: row-major [rows, cols], cols % 16 == 0. scale2 <= 0 means "compute amax(w)/(6*448)".
Nvfp4Quantized quantize_nvfp4(std::span<const float> w, int64_t rows, int64_t cols,
                              float scale2 = 0.0f);

// ModelOpt FP8 per-tensor: weight E4M3 [rows, cols], weight_scale = amax/448 (f32).
struct Fp8Quantized {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data;
  float scale = 0.0f;
  PackedWeight view() const;
};
// scale <= 0 means "compute amax(w)/448" (1.0 for an all-zero tensor).
Fp8Quantized quantize_fp8(std::span<const float> w, int64_t rows, int64_t cols, float scale = 0.0f);

// MLX affine (CPU algorithm): weight U32 [rows, cols*bits/32] (element k at bits k*bits of its
// word), scales/biases bf16 [rows, cols/group], w = scale*q + bias. bits 4 or 8; group 32/64/128.
struct AffineQuantized {
  int64_t rows = 0, cols = 0;
  int bits = 4, group = 64;
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales, biases;  // bf16 bits
  PackedWeight view() const;
};
AffineQuantized quantize_affine(std::span<const float> w, int64_t rows, int64_t cols, int bits,
                                int group);

// One MLX group: q codes (0..2^bits-1), f32 scale/bias as used for q, as MLX computes them.
void affine_quantize_group(const float* w, int n, int bits, uint8_t* q, float* scale, float* bias);

// ---- FP8 static activation quantisation (parity with GPU W8A8 engines, formats.md §3.3) ----
// out[i] = E4M3(clamp(x[i] / input_scale, +-448)) as f32 (the unscaled code value).
void fp8_quantize_activations(const float* x, int64_t n, float input_scale, float* out);
// out[i] = E4M3(clamp(x[i] / input_scale)) * input_scale ("fake quant").
void fp8_fake_quant(const float* x, int64_t n, float input_scale, float* out);
// W8A8 static: y = (x_q . W_q) * (input_scale * weight_scale), x_q per fp8_quantize_activations.
// w must be FP8_E4M3. Batch invariant like linear().
void linear_fp8_static(const PackedWeight& w, float input_scale, const float* x, int64_t n_rows,
                       int64_t x_stride, float* y, int64_t y_stride, const ThreadConfig& tc);

// ---- Validation (load time; kernels do not check per element) ----
// Throws nemo::Error naming `what` if the view is inconsistent (shape vs format, group size,
// missing pointers, non-finite or non-positive per-tensor scale).
void validate_packed_weight(const PackedWeight& w, const std::string& what);
// True if any byte is an E4M3 NaN code (0x7F / 0xFF). The SIMD FP8 decoder maps those to 480
// rather than NaN, so FP8 weights should be scanned once at load.
bool e4m3_has_nan(std::span<const uint8_t> bytes);

}  // namespace nemo::kernels
