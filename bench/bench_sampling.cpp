// Sampler microbenchmarks over a Lightning-sized vocabulary (131072 logits, normal random):
// greedy argmax and the full sampling distribution (temperature only, with top-k 40, with top-p
// 0.95 and with min-p 0.05), and a whole sampled token (the distribution and its draw).
//   nemotron_microbench --benchmark_filter=Sampling
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/sampling.h"

namespace {

const std::vector<float>& logits() {
  static const std::vector<float> v = [] {
    std::vector<float> x(131072);
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 3.0f);
    for (auto& f : x) f = d(rng);
    return x;
  }();
  return v;
}

void argmax(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(nemo::kernels::argmax(logits()));
}

void distribution(benchmark::State& st) {
  nemo::kernels::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = int(st.range(0));
  for (auto _ : st) benchmark::DoNotOptimize(nemo::kernels::sampling_distribution(logits(), p));
}

// Top-p (permille) and min-p (permille) cuts, without top-k.
void distribution_cut(benchmark::State& st) {
  nemo::kernels::SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = float(st.range(0)) / 1000.0f;
  p.min_p = float(st.range(1)) / 1000.0f;
  for (auto _ : st) benchmark::DoNotOptimize(nemo::kernels::sampling_distribution(logits(), p));
}

// A whole sampled token: the distribution and the draw.
void sample(benchmark::State& st) {
  nemo::kernels::SamplingParams p;
  p.temperature = 1.0f;
  nemo::Rng rng(1);
  for (auto _ : st)
    benchmark::DoNotOptimize(
        nemo::kernels::draw(nemo::kernels::sampling_distribution(logits(), p), rng));
}

}  // namespace

BENCHMARK(argmax)->Name("Sampling_argmax_131072")->Unit(benchmark::kMicrosecond);
BENCHMARK(distribution)
    ->Name("Sampling_distribution_131072")
    ->Arg(0)
    ->Arg(40)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(distribution_cut)
    ->Name("Sampling_distribution_cut_131072")
    ->Args({950, 0})
    ->Args({1000, 50})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(sample)->Name("Sampling_token_131072")->Unit(benchmark::kMicrosecond);
