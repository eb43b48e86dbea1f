#include "kernels/ops.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/linear.h"
#include "kernels/linear_impl.h"

namespace nemo::kernels {

namespace {

float dot_ref(const float* a, const float* b, int64_t n) {
  const int64_t n16 = n - n % 16;
  float acc[16] = {};
  for (int64_t k = 0; k < n16; k += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = acc[l] + acc[l + 8];
  float t = 0.0f;
  for (int64_t k = n16; k < n; ++k) t = std::fma(a[k], b[k], t);
  return detail::hsum8_fixed(v) + t;
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  const int64_t n16 = n - n % 16;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t k = 0; k < n16; k += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), a1);
  }
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(a0, a1));
  float t = 0.0f;
  for (int64_t k = n16; k < n; ++k) t = std::fma(a[k], b[k], t);
  return detail::hsum8_fixed(v) + t;
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
  return active_isa() >= Isa::Avx2 ? dot_avx2(a, b, n) : dot_ref(a, b, n);
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  const float ss = dot(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

void relu2_inplace(float* x, int64_t n) {
  using v4 = float __attribute__((vector_size(16)));
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v4 v;
    std::memcpy(&v, x + i, sizeof v);
    v = v < 0.0f ? v4{} : v;  // a lane-wise select: NaN and -0 pass, as in relu2
    v *= v;
    std::memcpy(x + i, &v, sizeof v);
  }
  for (; i < n; ++i) x[i] = relu2(x[i]);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];
}

}  // namespace nemo::kernels
