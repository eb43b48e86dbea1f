// Linear-kernel microbenchmarks. Reported bytes/s = resident weight bytes streamed per call
// (PackedWeight::bytes()), the number that matters for decode, which is memory bound.
//   nemotron_microbench --benchmark_filter=Linear
// Args: rows (batch), threads, ISA (0 reference, 1 avx2, 2 avx512; runs only those the CPU has),
// so the paths are measured side by side in one run. Shapes are Lightning's: expert down_proj
// [2688, 1856], lm_head [131072, 2688], Mamba in_proj [10304, 2688] (FP8).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/mapped_file.h"
#include "base/memory.h"
#include "base/numeric.h"
#include "kernels/fp8.h"
#include "kernels/linear.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

struct Weights {
  std::vector<uint8_t> data, scales, biases;
  PackedWeight w;
};

Weights make(WeightFormat f, int64_t rows, int64_t cols) {
  std::mt19937_64 g(42);
  Weights m;
  auto fill = [&](std::vector<uint8_t>& v, size_t n) {
    v.resize(n);
    for (auto& b : v) b = uint8_t(g());
  };
  m.w.format = f;
  m.w.rows = rows;
  m.w.cols = cols;
  const size_t n = size_t(rows * cols);
  switch (f) {
    case WeightFormat::NVFP4:
      fill(m.data, n / 2);
      // E4M3 0.0156-0.94 (codes 0x18-0x37): the blocks' scales differ, as in a checkpoint.
      fill(m.scales, n / 16);
      for (auto& b : m.scales) b = uint8_t(0x18 + b % 32);
      m.w.scale = 0.001f;
      m.w.group = 16;
      break;
    case WeightFormat::FP8_E4M3: {  // A weight tensor as ModelOpt writes it: normal values, amax at
                                    // 448 (~5 sigma), so codes with exponent 0 (zeros and
                                    // subnormals, decoded by a rare branch in bf16) are as rare as
                                    // in a checkpoint. The f32 kernels do not depend on the values.
      std::normal_distribution<float> normal(0.0f, 90.0f);
      m.data.resize(n);
      for (auto& b : m.data) b = f32_to_e4m3(std::clamp(normal(g), -448.0f, 448.0f));
      m.w.scale = 0.01f;
    } break;
    case WeightFormat::AFFINE4:
    case WeightFormat::AFFINE8: {
      fill(m.data, f == WeightFormat::AFFINE4 ? n / 2 : n);
      m.w.group = 64;
      const uint16_t s = f32_to_bf16(0.001f), b = f32_to_bf16(-0.01f);
      m.scales.resize(2 * n / 64);
      m.biases.resize(2 * n / 64);
      for (size_t i = 0; i < n / 64; ++i) {
        std::memcpy(&m.scales[2 * i], &s, 2);
        std::memcpy(&m.biases[2 * i], &b, 2);
      }
      break;
    }
    case WeightFormat::BF16: {
      m.data.resize(2 * n);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = f32_to_bf16(float(int(g() % 2001) - 1000) * 1e-5f);
        std::memcpy(&m.data[2 * i], &v, 2);
      }
      break;
    }
    default:
      break;
  }
  m.w.data = m.data.data();
  m.w.scales = m.scales.empty() ? nullptr : m.scales.data();
  m.w.biases = m.biases.empty() ? nullptr : m.biases.data();
  return m;
}

// The kernel path a run takes: the ISA's, or for the bf16 arithmetic VDPBF16PS where verified,
// else AVX2 FMAs in the same order.
const char* path_label(Isa isa, Arith arith) {
  if (arith == Arith::F32) return isa_name(isa);
  return isa >= Isa::Avx512 && bf16_kernel_verified() ? "avx512 bf16 (vdpbf16ps)"
         : isa >= Isa::Avx2                           ? "avx2 bf16 (fma)"
                                                      : "bf16 reference";
}

void run(benchmark::State& st, WeightFormat f, int64_t rows, int64_t cols,
         Arith arith = Arith::F32) {
  Weights m = make(f, rows, cols);
  m.w.arith = arith;
  const int64_t n = st.range(0);
  const ThreadConfig tc{int(st.range(1))};
  const Isa isa = Isa(st.range(2));
  if (isa > detected_isa()) return st.SkipWithError("ISA not available on this CPU");
  set_active_isa(isa);
  st.SetLabel(path_label(isa, arith));
  // Activations and outputs 64-byte aligned, as the engine's buffers are (a std::vector's 16-byte
  // alignment splits every 64-byte activation load across two cache lines).
  nemo::Buffer<float> x(size_t(n * cols)), y(size_t(n * rows));
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (auto& v : x.span()) v = nd(g);
  for (auto _ : st) {
    linear(m.w, x.data(), n, cols, y.data(), rows, tc);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * m.w.bytes());
  st.counters["GFLOP/s"] =
      benchmark::Counter(double(2 * n * rows * cols) * double(st.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Decode through cold experts: 96 distinct [2688, 1856] NVFP4 matrices (270 MB, far beyond the
// caches), one per call in turn, as MoE decode meets them; compare its bytes/s with the single
// large lm_head matrix to see what short per-expert streams cost.
constexpr int kExperts = 96;
constexpr int64_t kExpertOut = 2688, kExpertIn = 1856;

void run_rotating(benchmark::State& st, const std::vector<PackedWeight>& ex) {
  const Isa isa = Isa(st.range(2));
  if (isa > detected_isa()) return st.SkipWithError("ISA not available on this CPU");
  set_active_isa(isa);
  st.SetLabel(path_label(isa, ex[0].arith));
  const ThreadConfig tc{int(st.range(1))};
  const int64_t n = st.range(0);
  nemo::Buffer<float> x(size_t(n * kExpertIn)), y(size_t(n * kExpertOut));
  std::fill_n(x.data(), x.size(), 0.5f);
  size_t i = 0;
  for (auto _ : st) {
    linear(ex[i++ % ex.size()], x.data(), n, kExpertIn, y.data(), kExpertOut, tc);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * ex[0].bytes());
}

// From anonymous memory.
void experts_cold(benchmark::State& st, Arith arith) {
  static const std::vector<Weights> ex = [] {
    std::vector<Weights> v;
    for (int i = 0; i < kExperts; ++i)
      v.push_back(make(WeightFormat::NVFP4, kExpertOut, kExpertIn));
    return v;
  }();
  std::vector<PackedWeight> views;
  for (const auto& m : ex) {
    views.push_back(m.w);
    views.back().arith = arith;
  }
  run_rotating(st, views);
}

// The same experts written to a file and mapped: 4 KB page-cache pages (a checkpoint just
// written or copied, base/MappedFile), or, `huge`, then read into anonymous memory in 2 MB pages
// (MappedFile::make_resident: what --no-mmap does and what ext4's large folios give the mapping
// of a checkpoint read from disk). Every page is mapped before timing.
MappedFile write_experts(const Weights& m, bool huge) {
  char path[] = "/tmp/nemo_experts_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) std::abort();
  for (int i = 0; i < kExperts; ++i)
    if (write(fd, m.data.data(), m.data.size()) != ssize_t(m.data.size()) ||
        write(fd, m.scales.data(), m.scales.size()) != ssize_t(m.scales.size()))
      std::abort();
  close(fd);
  MappedFile f(path);
  if (huge) f.make_resident();
  unlink(path);  // the mapping keeps the data
  f.touch_pages();
  return f;
}

void experts_file(benchmark::State& st, bool huge, Arith arith) {
  static const Weights m = make(WeightFormat::NVFP4, kExpertOut, kExpertIn);
  // Each written on first use only (270 MB each).
  const auto small = [&]() -> const MappedFile& {
    static const MappedFile f = write_experts(m, false);
    return f;
  };
  const auto large = [&]() -> const MappedFile& {
    static const MappedFile f = write_experts(m, true);
    return f;
  };
  const MappedFile& file = huge ? large() : small();
  const size_t per = m.data.size() + m.scales.size();
  std::vector<PackedWeight> views;
  for (int i = 0; i < kExperts; ++i) {
    PackedWeight w = m.w;
    w.data = file.data() + i * per;
    w.scales = file.data() + i * per + m.data.size();
    w.arith = arith;
    views.push_back(w);
  }
  run_rotating(st, views);
}

void args(benchmark::internal::Benchmark* b) {
  for (int rows : {1, 2, 3, 4, 5, 6, 8, 12, 64})
    for (int threads : {1, 2})
      for (int isa : {1, 2}) b->Args({rows, threads, isa});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// Arith::Bf16's kernels (AVX2, AVX512_BF16).
void args_bf16(benchmark::internal::Benchmark* b) {
  for (int rows : {1, 2, 3, 4, 5, 6, 7, 8, 12, 64})
    for (int threads : {1, 2})
      for (int isa : {1, 2}) b->Args({rows, threads, isa});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace

BENCHMARK_CAPTURE(run, Linear_nvfp4_bf16_131072x2688, WeightFormat::NVFP4, 131072, 2688,
                  Arith::Bf16)
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(run, Linear_nvfp4_bf16_2688x1856, WeightFormat::NVFP4, 2688, 1856, Arith::Bf16)
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(run, Linear_nvfp4_bf16_256x1856_L2, WeightFormat::NVFP4, 256, 1856, Arith::Bf16)
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(run, Linear_nvfp4_2688x1856, WeightFormat::NVFP4, 2688, 1856)->Apply(args);
BENCHMARK_CAPTURE(run, Linear_nvfp4_131072x2688, WeightFormat::NVFP4, 131072, 2688)->Apply(args);
BENCHMARK_CAPTURE(run, Linear_fp8_10304x2688, WeightFormat::FP8_E4M3, 10304, 2688)->Apply(args);
BENCHMARK_CAPTURE(run, Linear_fp8_bf16_10304x2688, WeightFormat::FP8_E4M3, 10304, 2688, Arith::Bf16)
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(run, Linear_fp8_bf16_2688x4096, WeightFormat::FP8_E4M3, 2688, 4096, Arith::Bf16)
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(run, Linear_fp8_2688x4096, WeightFormat::FP8_E4M3, 2688, 4096)->Apply(args);
BENCHMARK_CAPTURE(run, Linear_affine4_2688x1856, WeightFormat::AFFINE4, 2688, 1856)->Apply(args);
BENCHMARK_CAPTURE(run, Linear_affine4_131072x2688, WeightFormat::AFFINE4, 131072, 2688)
    ->Apply(args);
BENCHMARK_CAPTURE(run, Linear_affine8_10304x2688, WeightFormat::AFFINE8, 10304, 2688)->Apply(args);
BENCHMARK_CAPTURE(run, Linear_bf16_10304x2688, WeightFormat::BF16, 10304, 2688)->Apply(args);
BENCHMARK_CAPTURE(experts_cold, , Arith::F32)
    ->Name("Linear_nvfp4_2688x1856_96_experts_cold")
    ->Apply(args);
BENCHMARK_CAPTURE(experts_cold, , Arith::Bf16)
    ->Name("Linear_nvfp4_bf16_2688x1856_96_experts_cold")
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(experts_file, , false, Arith::F32)
    ->Name("Linear_nvfp4_2688x1856_96_experts_file")
    ->Apply(args);
BENCHMARK_CAPTURE(experts_file, , true, Arith::F32)
    ->Name("Linear_nvfp4_2688x1856_96_experts_huge")
    ->Apply(args);
BENCHMARK_CAPTURE(experts_file, , true, Arith::Bf16)
    ->Name("Linear_nvfp4_bf16_2688x1856_96_experts_huge")
    ->Apply(args_bf16);
BENCHMARK_CAPTURE(run, Linear_nvfp4_256x1856_L2, WeightFormat::NVFP4, 256, 1856)->Apply(args);
