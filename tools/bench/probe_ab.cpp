// Two builds of one range kernel, compared call by call (docs/PERFORMANCE.md, "Zen 5, 12-06
// early morning"). This host's speed drifts by up to 1.5x between runs seconds apart, so
// separate processes cannot tell a 5-10 % change from the drift; here variants A and B take turns
// (which goes first alternating), each call on a random one of COPIES weight copies so that it
// streams from memory as the engine's passes do, on THREADS threads (the engine's parallel_for:
// a few chunks of outputs per thread, claimed one at a time). Prints the bandwidth probe before
// and after, each variant's median and best per call and GB/s, and the median of B / A over
// adjacent pairs (below 1: B faster) with its interquartile range; fails if A and B differ in
// bits. The two kernels come from one source compiled twice (tools/bench/probe_ab.sh: the
// kernels of each object renamed apart, the one measured to probe_ab_a / probe_ab_b).
//   tools/bench/probe_ab.sh src/kernels/linear_fp8.cpp range_fp8_bf16_avx512 "-DX=0" "-DX=1"
//   /tmp/probe_ab fp8 10304 2688 1 2 23 200     # FORMAT OUTPUTS K ROWS THREADS COPIES PAIRS
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "base/memory.h"
#include "base/threads.h"
#include "kernels/linear_impl.h"
#include "kernels/peak.h"

using namespace nemo::kernels;
using detail::RangeFn;

void probe_ab_a(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                int64_t);
void probe_ab_b(const PackedWeight&, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                int64_t);

namespace {
// An anonymous mapping of 2 MB pages (madvise; the kernel may refuse and use 4 KB ones).
class HugeBytes {
 public:
  HugeBytes() = default;
  HugeBytes(const HugeBytes&) = delete;
  HugeBytes& operator=(const HugeBytes&) = delete;
  ~HugeBytes() {
    if (p_) ::munmap(p_, mapped_);
  }
  void allocate(size_t n) {
    constexpr size_t kHuge = size_t(2) << 20;
    mapped_ = (n + kHuge - 1) / kHuge * kHuge + kHuge;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    p_ = static_cast<uint8_t*>(p);
    uint8_t* aligned = p_ + (kHuge - reinterpret_cast<uintptr_t>(p_) % kHuge) % kHuge;
    ::madvise(aligned, mapped_ - size_t(aligned - p_), MADV_HUGEPAGE);
    data_ = std::span<uint8_t>(aligned, n);
  }
  std::span<uint8_t> span() const { return data_; }

 private:
  uint8_t* p_ = nullptr;
  size_t mapped_ = 0;
  std::span<uint8_t> data_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s nvfp4|fp8|bf16 OUTPUTS K ROWS THREADS COPIES PAIRS\n", argv[0]);
    return 2;
  }
  const bool nvfp4 = !std::strcmp(argv[1], "nvfp4"), bf16 = !std::strcmp(argv[1], "bf16");
  const int64_t outputs = std::atoll(argv[2]), K = std::atoll(argv[3]), rows = std::atoll(argv[4]);
  const int threads = std::atoi(argv[5]), copies = std::atoi(argv[6]), pairs = std::atoi(argv[7]);
  if (outputs < 1 || K < 32 || rows < 1 || threads < 1 || copies < 1 || pairs < 1 ||
      (nvfp4 && K % 16 != 0)) {
    std::fprintf(stderr,
                 "probe_ab: every count must be positive, K >= 32 (NVFP4: a multiple of 16)\n");
    return 2;
  }
  const size_t bytes = size_t(outputs * K * (bf16 ? 2 : 1) / (nvfp4 ? 2 : 1));
  std::mt19937 g(1);
  // Weights on 2 MB pages where the kernel gives them, as the engine's mapped checkpoint is
  // (MappedFile's MADV_HUGEPAGE); the scales (an eighth of the codes) on plain pages.
  std::vector<HugeBytes> data(static_cast<size_t>(copies));
  std::vector<std::vector<uint8_t>> scales(data.size());
  std::vector<PackedWeight> ws(data.size());
  for (int c = 0; c < copies; ++c) {
    auto& d = data[size_t(c)];
    d.allocate(bytes);
    for (auto& b : d.span()) {
      b = uint8_t(g());
      if (!nvfp4 && !bf16 && (b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
      if (!nvfp4 && !bf16 && (b & 0x78) == 0) b |= 0x20;  // exponent-0 codes are rare
    }
    PackedWeight& w = ws[size_t(c)];
    w.rows = outputs, w.cols = K, w.data = d.span().data(), w.arith = Arith::Bf16;
    if (bf16) {
      for (size_t i = 1; i < bytes; i += 2) d.span()[i] = uint8_t(0x3C + g() % 4);
      w.format = WeightFormat::BF16;
    } else if (nvfp4) {
      scales[size_t(c)].resize(size_t(outputs * K / 16));
      for (auto& s : scales[size_t(c)]) s = uint8_t(0x18 + g() % 32);
      w.format = WeightFormat::NVFP4, w.scales = scales[size_t(c)].data(), w.scale = 1.0f,
      w.group = 16;
    } else {
      w.format = WeightFormat::FP8_E4M3, w.scale = 0.01f;
    }
  }
  const auto xb = nemo::alloc_aligned64<float>(size_t(rows * K));
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < rows * K; ++i) xb.get()[i] = nd(g);
  std::vector<float> ya(size_t(rows * outputs)), yb(ya.size());
  const nemo::ThreadConfig tc{threads};
  const double bw_before = nemo::kernels::measure_read_bandwidth(tc);
  const auto pass = [&](RangeFn fn, const PackedWeight& w, float* y) {
    const auto t0 = std::chrono::steady_clock::now();
    nemo::parallel_for(tc, outputs, 8, [&](int64_t o0, int64_t o1) {
      fn(w, xb.get(), rows, K, y, outputs, o0, o1);
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::uniform_int_distribution<int> pick(0, copies - 1);
  for (int i = 0; i < 4; ++i) pass(probe_ab_a, ws[size_t(pick(g))], ya.data());  // warm up
  std::vector<double> ta, tb, ratio;
  for (int p = 0; p < pairs; ++p) {
    const PackedWeight& wa = ws[size_t(pick(g))];
    const PackedWeight& wb = ws[size_t(pick(g))];
    double a, b;
    if (p % 2 == 0) {
      a = pass(probe_ab_a, wa, ya.data());
      b = pass(probe_ab_b, wb, yb.data());
    } else {
      b = pass(probe_ab_b, wb, yb.data());
      a = pass(probe_ab_a, wa, ya.data());
    }
    ta.push_back(a), tb.push_back(b), ratio.push_back(b / a);
  }
  // Same weights, same bits: the variants must agree (a timing of a wrong kernel is no timing).
  pass(probe_ab_a, ws[0], ya.data());
  pass(probe_ab_b, ws[0], yb.data());
  const bool same = std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)) == 0;
  const double gb = double(bytes + (nvfp4 ? bytes / 8 : 0)) / 1e9,  // NVFP4: codes and scales
      bw_after = nemo::kernels::measure_read_bandwidth(tc);
  std::printf(
      "%s %lld x %lld, %lld rows, %d threads, %d copies, %d pairs; membw %.1f / %.1f GB/s"
      " before / after%s\n",
      argv[1], (long long)outputs, (long long)K, (long long)rows, threads, copies, pairs, bw_before,
      bw_after, same ? "" : "  (A and B DIFFER in bits)");
  for (int v = 0; v < 2; ++v) {
    const auto& t = v ? tb : ta;
    const double m = median(t), best = *std::min_element(t.begin(), t.end());
    std::printf("  %c: median %.1f us (%.1f GB/s), best %.1f us (%.1f GB/s)\n", "AB"[v], m * 1e6,
                gb / m, best * 1e6, gb / best);
  }
  std::printf("  B / A: median %.3f, quartiles %.3f-%.3f\n", median(ratio), quantile(ratio, 0.25),
              quantile(ratio, 0.75));
  return same ? 0 : 1;
}
