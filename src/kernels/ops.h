// Element-wise and reduction ops on f32 activations. Every reduction has one canonical order
// (the same 16-lane scheme as the linear kernels), so a row's result never depends on batch
// shape, thread count or ISA.
#pragma once
#include <cmath>
#include <cstdint>

namespace nemo::kernels {

// Σ a[i]·b[i] in the canonical order (16 fma lanes, fixed combine, sequential tail).
float dot(const float* a, const float* b, int64_t n);
// out[r] = dot(a + r·a_stride, b, n) for r < rows, each bitwise dot()'s: several rows' chains run
// side by side, so the FMA latency of one short dot does not bound the loop (the SSM readout).
void dot_rows(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t n,
              float* out);

// S[r][k] = S[r][k]·decay + b[k]·x[r] for r < rows, k < n (row stride n): a multiply, a
// multiply and an add per element, never fused, so every path gives the same bits (the SSM's
// state update).
void decay_outer_add(float* S, int64_t rows, int64_t n, float decay, const float* b,
                     const float* x);
// T steps of the SSM's update and readout; step t: decay_outer_add(S, rows, n, decay[t], b + t·bs,
// x + t·xs), then out[t·os + r] = dot(S + r·n, c + t·cs, n) for r < rows.
struct DecaySteps {
  int64_t T;
  const float* decay;
  const float* b;
  int64_t bs;
  const float* x;
  int64_t xs;
  const float* c;
  int64_t cs;
  float* out;
  int64_t os;
};
// The same bits as the T calls on S = a copy of `from`, with each state row read from `from` and
// written to S once for all T steps (held in registers across them where n is 64 or 128): the SSM
// scan of a verify pass's rows. `from` may be S; else the two do not overlap.
void decay_outer_add_dot_steps(const float* from, float* S, int64_t rows, int64_t n,
                               const DecaySteps& steps);

// out = (x · 1/sqrt(mean(x²) + eps)) · w   (w may be null = ones). out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);

inline float silu(float v) {
  return v / (1.0f + std::exp(-v));
}
// The same values over arrays, bitwise silu()'s per element:
// x[i] = silu(x[i]); y[i] = y[i] · silu(z[i]) (Mamba-2's gate); g[i] = silu(g[i]) · u[i] (a SwiGLU
// MLP's). The AVX-512 and AVX2 paths compute glibc's expf in vectors of doubles (silu.cpp); each
// is used once a check against silu() on a sample of inputs has passed (silu_vector_verified),
// else the scalar loop runs.
void silu_inplace(float* x, int64_t n);
void mul_silu(float* y, const float* z, int64_t n);
void silu_mul(float* g, const float* u, int64_t n);
enum class Isa : uint8_t;
bool silu_vector_verified(Isa isa);
inline float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}
// softplus with the threshold used by every reference (vLLM, ggml): identity above 20.
inline float softplus(float v) {
  return v > 20.0f ? v : std::log1p(std::exp(v));
}
// relu(v)^2. NaN stays NaN, as torch.relu keeps it.
inline float relu2(float v) {
  const float r = v < 0.0f ? 0.0f : v;
  return r * r;
}
// x[i] = relu2(x[i]), the same values, four lanes per step without a branch (GCC keeps a compare
// and a branch per element in the scalar loop: mispredicted on half of them, ~5 ns each).
void relu2_inplace(float* x, int64_t n);

// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);

// The index of the first NaN or infinity among x[0, n), or -1. Blocks of 1024 are tested by their
// exponent bits without a branch (vectorized; a loop of std::isfinite with an early exit ran
// ~2.5x slower over a verify pass's 8 x 131072 logits), and only a block that has one is searched.
int64_t first_non_finite(const float* x, int64_t n);

// m axpys in turn, y[i] += a[j] * X[j][i] for j = 0..m-1 (rows X + j * x_stride): each product
// rounded, then added, in j order, so the bits are those of the m axpy calls; y stays in
// registers across them (the SSD chunk's sums, attention's weighted values).
void axpy_rows(const float* a, int64_t m, const float* X, int64_t x_stride, float* y, int64_t n);

}  // namespace nemo::kernels
