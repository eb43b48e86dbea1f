// The SSM recurrence's per-row work on Lightning's Mamba-2 state (64 heads x P = 64 x N = 128):
// S = S·dA + (B·dt) ⊗ x, then y = S·C, per head and row. Arg 0: the state update as a scalar loop
// and one dot() per state row (the model before dot_rows); arg 1: decay_outer_add + dot_rows (the
// model now; the same bits). One row step over all heads per iteration, the state L1/L2-warm as in
// a verify pass after its first row.
//   nemotron_microbench --benchmark_filter=Ops_ssm_step
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/ops.h"

namespace {

void ssm_step(benchmark::State& st) {
  constexpr int64_t NH = 64, P = 64, N = 128;
  const bool rows = st.range(0) == 1;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> S(size_t(NH * P * N)), x(size_t(NH * P)), B(N), C(N), y(size_t(NH * P));
  for (auto* v : {&S, &x, &B, &C})
    for (auto& e : *v) e = u(rng);
  const float dA = 0.995f;
  for (auto _ : st) {
    for (int64_t h = 0; h < NH; ++h) {
      float* Sh = S.data() + h * P * N;
      const float* xh = x.data() + h * P;
      float* yh = y.data() + h * P;
      if (rows) {
        nemo::kernels::decay_outer_add(Sh, P, N, dA, B.data(), xh);
        nemo::kernels::dot_rows(Sh, N, P, C.data(), N, yh);
      } else {
        for (int64_t p = 0; p < P; ++p) {
          float* s = Sh + p * N;
          for (int64_t n = 0; n < N; ++n) s[n] = s[n] * dA + B[size_t(n)] * xh[p];
          yh[p] = nemo::kernels::dot(s, C.data(), N);
        }
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

}  // namespace

BENCHMARK(ssm_step)->Name("Ops_ssm_step_64x64x128")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
