// The Mamba-2 step's small operations at Lightning width (64 heads of 64 x 128, 8 groups, 4 taps),
// layer by layer over as many states as a 52-layer checkpoint has (23), so that a one-row step
// reads its state from memory as decode does: ssm_scan_recurrent (into the journal's buffer, as a
// recorded verify round runs it) and conv1d_silu, each at T = 1, 2, 4, 8 rows; mean us
// per layer over REPS sweeps of the 23 layers. Random values: the work does not depend on them.
// Not part of the build; after a release build into build/:
//   g++ -O2 -std=c++20 -Isrc -o /tmp/probe_scan tools/bench/probe_scan.cpp
//   build/libnemotron_model.a
//       build/libnemotron_io.a build/libnemotron_kernels.a build/libnemotron_base.a -lfmt -fopenmp
//   /tmp/probe_scan 2          # THREADS [REPS [LAYERS [journal|decode]]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "model/mamba2.h"

using namespace nemo;
using namespace nemo::model;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> rnd(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int kLayers = argc > 3 ? std::atoi(argv[3]) : 23;
  const bool journal = !(argc > 4 && std::string(argv[4]) == "decode");
  Mamba2Weights w;
  Mamba2Dims& d = w.dims;
  d.H = 2688, d.NH = 64, d.P = 64, d.G = 8, d.N = 128, d.K = 4;
  d.DI = d.NH * d.P, d.CD = d.DI + 2 * d.G * d.N, d.DP = d.DI + d.CD + d.NH;
  w.conv_taps = rnd(size_t(d.CD * d.K), 1, -0.5f, 0.5f);
  w.conv_b = rnd(size_t(d.CD), 2, -0.1f, 0.1f);
  w.A = rnd(size_t(d.NH), 3, -2.0f, -0.5f);
  w.D = rnd(size_t(d.NH), 4, 0.5f, 1.5f);
  const ThreadConfig tc{threads};
  std::vector<std::vector<float>> states(kLayers), journals(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    states[size_t(l)] = rnd(size_t(d.NH * d.P * d.N), 10 + l, -0.5f, 0.5f);
    journals[size_t(l)].resize(states[size_t(l)].size());
  }
  const auto window = rnd(size_t((d.K - 1) * d.CD), 5, -1.0f, 1.0f);
  std::printf("threads %d, %d layers, us per layer (mean of %d sweeps)\n", threads, kLayers, reps);
  for (int64_t T : {1, 2, 4, 8}) {
    const auto proj = rnd(size_t(T * d.DP), 6, -1.0f, 1.0f);
    const auto xbc = rnd(size_t(T * d.CD), 7, -1.0f, 1.0f);
    const auto dt = rnd(size_t(T * d.NH), 8, 0.01f, 0.3f);
    std::vector<float> y(size_t(T * d.DI)), conv_out(size_t(T * d.CD));
    double scan = 0, conv = 0;
    for (int r = 0; r < reps + 1; ++r) {
      double ts = 0, tcv = 0;
      for (int l = 0; l < kLayers; ++l) {
        const double t0 = now();
        conv1d_silu(w, window.data(), ProjRows{proj.data(), d}, T, conv_out.data(), tc);
        const double t1 = now();
        ssm_scan_recurrent(w, XbcRows{xbc.data(), d}, dt.data(), T, states[size_t(l)].data(),
                           y.data(), tc, journal ? journals[size_t(l)].data() : nullptr);
        const double t2 = now();
        if (journal) std::swap(states[size_t(l)], journals[size_t(l)]);  // as mamba2_forward does
        tcv += t1 - t0, ts += t2 - t1;
        // The states stay bounded: decay < 1 each row.
      }
      if (r > 0) scan += ts, conv += tcv;  // the first sweep warms up
    }
    std::printf("T %lld: scan %.1f us, conv %.1f us\n", (long long)T, 1e6 * scan / (reps * kLayers),
                1e6 * conv / (reps * kLayers));
  }
  return 0;
}
