// What the decode kernels read from memory, matrix by matrix, against the engine's bandwidth probe
// (docs/PERFORMANCE.md, "Zen 5, midday: where two threads' bandwidth goes"): kernels::linear over
// each Lightning matrix of a decode step, at ROWS rows, each call on a random one of as many copies
// as a 52-layer checkpoint has (23 Mamba projections, 128 experts, ...) so that every call streams
// from memory as a decode step's do (taken in turn, the copies ran up to 1.4x faster: 24 experts'
// 67 MB are partly still in the caches when their turn comes again), and the routed experts'
// passes as moe_forward runs them (six random experts and the shared one per kernels::linear_many,
// up then down). Prints `bench --membw`'s probe first (kernels::measure_read_bandwidth), then
// each kind's mean time per call and GB/s; random weights, since every kernel reads the same bytes
// whatever their values. Needs ~3.7 GB of memory.
// Not part of the build; after a release build into build/:
//   g++ -O2 -std=c++20 -Isrc -o /tmp/probe_matrices tools/bench/probe_matrices.cpp
//       build/libnemotron_kernels.a build/libnemotron_base.a -lfmt -fopenmp   (one command)
//   /tmp/probe_matrices 2 bf16     # THREADS ARITH [REPS [ROWS [MODE [N]]]]
// Two more MODEs (docs/PERFORMANCE.md, "Zen 5, afternoon: starts, tails, and two threads at eight
// rows"), on in_proj's and the experts' copies only:
//   /tmp/probe_matrices 1 bf16 40 1 starts   # a range call's start: whole ranges against N pieces
//                                            # (in_proj 64, an expert's up 8) in order / jumping
//   /tmp/probe_matrices 2 bf16 8 8 halves 256  # two threads over in_proj: halves in one call,
//                                              # halves in N-output pieces, pieces interleaved,
//                                              # each thread half the rows over every output
// and MODE moe (docs/PERFORMANCE.md, "Intel Xeon, Emerald Rapids, evening"): only the MoE passes
// below, at ROWS rows each routed to six random experts, then the routed experts alone and the
// shared one alone:
//   /tmp/probe_matrices 2 f32 6 4 moe
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/memory.h"
#include "base/threads.h"
#include "kernels/linear.h"
#include "kernels/peak.h"

using namespace nemo;
using namespace nemo::kernels;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// n bytes, 2 MB-aligned and advised into huge pages as the engine maps its checkpoints; never
// freed (the process ends after one run).
uint8_t* arena(size_t n) {
  const size_t huge = size_t(2) << 20;
  void* p = mmap(nullptr, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(1);
  }
  auto* a = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1));
  madvise(a, n, MADV_HUGEPAGE);
  return a;
}

enum class Fmt { Fp8, Nvfp4, Bf16 };

PackedWeight make(Fmt f, int64_t rows, int64_t cols, Arith arith, std::mt19937& g) {
  PackedWeight w;
  w.rows = rows, w.cols = cols;
  const size_t n = size_t(rows * cols);
  if (f == Fmt::Fp8) {
    uint8_t* d = arena(n);
    for (size_t i = 0; i < n; ++i) {
      auto b = uint8_t(g());
      if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN codes
      if ((b & 0x78) == 0) b |= 0x20;  // exponent-0 codes are rare in real weights
      d[i] = b;
    }
    w.format = WeightFormat::FP8_E4M3, w.data = d, w.scale = 0.01f, w.arith = arith;
  } else if (f == Fmt::Nvfp4) {
    uint8_t* d = arena(n / 2 + n / 16);
    for (size_t i = 0; i < n / 2; ++i) d[i] = uint8_t(g());
    for (size_t i = 0; i < n / 16; ++i) d[n / 2 + i] = uint8_t(0x18 + g() % 32);
    w.format = WeightFormat::NVFP4, w.data = d, w.scales = d + n / 2, w.scale = 1.0f;
    w.group = 16, w.arith = arith;
  } else {
    auto* d = reinterpret_cast<uint16_t*>(arena(2 * n));
    for (size_t i = 0; i < n; ++i) d[i] = uint16_t(((0x3C + g() % 4) << 8) | (g() & 0x80FF));
    w.format = WeightFormat::BF16, w.data = d, w.arith = arith;  // as the engine's bf16 layers
  }
  return w;
}

// MODE starts: on this thread, each call on a random copy, one of three ways in turn: the whole
// range in one linear_range call; in `pieces` calls in order; in `pieces` calls even pieces first,
// then odd ones (each start away from where the last call read). Prints the extra microseconds
// per start of either order against the whole range.
int starts(const std::vector<PackedWeight>& in_proj, const std::vector<PackedWeight>& experts,
           const float* x, float* y, int reps, std::mt19937& g) {
  for (const auto& [mats, pieces, name] :
       {std::tuple{&in_proj, 64, "in_proj fp8"}, std::tuple{&experts, 8, "expert up nvfp4"}}) {
    double t[3] = {0, 0, 0};
    int64_t calls = 0;
    for (int r = 0; r < reps; ++r)
      for (int u = 0; u < 24; ++u)
        for (int way = 0; way < 3; ++way) {
          const PackedWeight& w = (*mats)[size_t(g() % mats->size())];
          const auto piece = [&](int p) {
            const int64_t o0 = w.rows * p / pieces / 16 * 16,
                          o1 = p + 1 == pieces ? w.rows : w.rows * (p + 1) / pieces / 16 * 16;
            linear_range(w, x, 1, w.cols, y, w.rows, o0, o1, active_isa());
          };
          const double t0 = now();
          if (way == 0) linear_range(w, x, 1, w.cols, y, w.rows, 0, w.rows, active_isa());
          for (int p = 0; way > 0 && p < pieces; ++p)
            piece(way == 1 ? p : p < pieces / 2 ? 2 * p : 2 * (p - pieces / 2) + 1);
          if (r > 0) t[way] += now() - t0, calls += way == 0;
        }
    const double per = 1e6 / double(calls);
    std::printf("%-16s whole %8.1f us/call; %d pieces: +%.2f us a start in order, +%.2f jumping\n",
                name, t[0] * per, pieces, (t[1] - t[0]) * per / (pieces - 1),
                (t[2] - t[0]) * per / (pieces - 1));
  }
  return 0;
}

// MODE halves: two threads over in_proj's copies in turn, `rows` rows: each thread half the
// outputs in one call; each half in `block`-output calls; the threads taking alternate
// `block`-output calls (both reading the same region); or each thread half the rows over every
// output in one call (each reads the whole matrix, the other's reads warming the shared cache).
// Prints GB/s of the matrix's bytes for each.
int halves(const std::vector<PackedWeight>& in_proj, const float* x, int64_t rows, float* y,
           int reps, int64_t block) {
  const int64_t outs = in_proj[0].rows, K = in_proj[0].cols, nb = (outs + block - 1) / block;
  double t[4] = {0, 0, 0, 0}, bytes = 0;
  for (int r = 0; r < reps; ++r)
    for (int way = 0; way < 4; ++way) {
      const double t0 = now();
      for (const PackedWeight& w : in_proj) {
        struct Ctx {
          const PackedWeight* w;
          const float* x;
          float* y;
          int64_t rows, block, nb;
          int way;
        } ctx{&w, x, y, rows, block, nb, way};
        ThreadPool::instance().run(
            2, 2,
            [](void* p, int64_t half) {
              const Ctx& c = *static_cast<const Ctx*>(p);
              const int64_t O = c.w->rows, mid = c.nb / 2 * c.block;
              const auto call = [&](int64_t o0, int64_t o1) {
                linear_range(*c.w, c.x, c.rows, c.w->cols, c.y, O, o0, std::min(O, o1),
                             active_isa());
              };
              if (c.way == 0) return half == 0 ? call(0, mid) : call(mid, O);
              if (c.way == 3) {  // each thread half the rows, every output
                const int64_t r0 = half == 0 ? 0 : c.rows / 2, r1 = half == 0 ? c.rows / 2 : c.rows;
                return linear_range(*c.w, c.x + r0 * c.w->cols, r1 - r0, c.w->cols, c.y + r0 * O, O,
                                    0, O, active_isa());
              }
              for (int64_t b = 0; b < c.nb; ++b)
                if (c.way == 1 ? (b < c.nb / 2) == (half == 0) : b % 2 == half)
                  call(b * c.block, (b + 1) * c.block);
            },
            &ctx);
      }
      if (r > 0) t[way] += now() - t0, bytes += way == 0 ? double(in_proj.size() * outs * K) : 0;
    }
  std::printf(
      "%lld rows, %lld-output pieces: halves %.1f GB/s, halves in pieces %.1f GB/s, "
      "interleaved pieces %.1f GB/s, half the rows each %.1f GB/s\n",
      (long long)rows, (long long)block, bytes / t[0] / 1e9, bytes / t[1] / 1e9, bytes / t[2] / 1e9,
      bytes / t[3] / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s THREADS f32|bf16 [REPS [ROWS]]\n", argv[0]);
    return 2;
  }
  const ThreadConfig tc{std::max(1, std::atoi(argv[1]))};
  const Arith arith = parse_arith(argv[2], "ARITH");
  const int reps = argc > 3 ? std::max(2, std::atoi(argv[3])) : 6;
  const int64_t rows = argc > 4 ? std::clamp<int64_t>(std::atoll(argv[4]), 1, 16) : 1;
  const std::string mode = argc > 5 ? argv[5] : "matrices";
  if (mode != "matrices" && mode != "moe" && mode != "starts" && mode != "halves") {
    std::fprintf(stderr, "MODE: matrices, moe, starts or halves, not '%s'\n", mode.c_str());
    return 2;
  }
  std::mt19937 g(1);
  struct Kind {
    const char* name;
    Fmt fmt;
    int64_t out, in;
    int copies;
  };
  const std::vector<Kind> kinds = {
      {"mamba in_proj fp8", Fmt::Fp8, 10304, 2688, 23},
      {"mamba out_proj fp8", Fmt::Fp8, 2688, 4096, 23},
      {"attention qkv bf16", Fmt::Bf16, 4608, 2688, 6},
      {"attention o bf16", Fmt::Bf16, 2688, 4096, 6},
      {"lm_head nvfp4", Fmt::Nvfp4, 131072, 2688, 3},
      {"expert up nvfp4", Fmt::Nvfp4, 1856, 2688, 128},
      {"expert down nvfp4", Fmt::Nvfp4, 2688, 1856, 128},
      {"shared up nvfp4", Fmt::Nvfp4, 3712, 2688, 23},
      {"shared down nvfp4", Fmt::Nvfp4, 2688, 3712, 23},
  };
  std::vector<std::vector<PackedWeight>> mats;
  constexpr size_t kInProj = 0, kExpertUp = 5;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const Kind& k = kinds[i];
    std::vector<PackedWeight> v;
    // matrices: every kind; moe: the experts' and shared experts'; starts, halves: in_proj's and
    // the experts' up projections.
    const bool used =
        mode == "matrices" || (mode == "moe" ? i >= kExpertUp : i == kInProj || i == kExpertUp);
    if (used)
      for (int c = 0; c < k.copies; ++c) v.push_back(make(k.fmt, k.out, k.in, arith, g));
    mats.push_back(std::move(v));
  }
  Buffer<float> x(size_t(rows * 4096)), y(size_t(rows * 131072));
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(g);
  std::printf("threads %d, %s, %lld row(s), %s kernels: membw %.1f GB/s\n", tc.n_threads,
              arith_name(arith), (long long)rows, isa_name(active_isa()),
              measure_read_bandwidth(tc));
  if (mode == "starts") return starts(mats[kInProj], mats[kExpertUp], x.data(), y.data(), reps, g);
  if (mode == "halves")
    return halves(mats[kInProj], x.data(), rows, y.data(), reps,
                  argc > 6 ? std::max<int64_t>(16, std::atoll(argv[6])) : 256);
  // Each kind: `reps` rounds of up to 24 calls, each on a random copy other than the last one;
  // the first round is not counted.
  for (size_t i = 0; i < kinds.size() && mode == "matrices"; ++i) {
    const Kind& k = kinds[i];
    const size_t n = mats[i].size(), calls_per_round = std::min<size_t>(n, 24);
    double t = 0, bytes = 0;
    int64_t calls = 0;
    size_t c = 0;
    for (int r = 0; r < reps; ++r)
      for (size_t u = 0; u < calls_per_round; ++u) {
        c = (c + 1 + size_t(g() % (n - 1))) % n;
        const double t0 = now();
        linear(mats[i][c], x.data(), rows, k.in, y.data(), k.out, tc);
        if (r == 0) continue;
        t += now() - t0, bytes += double(mats[i][c].bytes()), ++calls;
      }
    std::printf("%-22s %9.1f us/call %6.1f GB/s\n", k.name, t / double(calls) * 1e6,
                bytes / t / 1e9);
  }
  // moe_forward's decode and verify passes: each of the `rows` rows takes six random experts;
  // the union (ascending), each expert on its rows, and the shared one on every row, each
  // projection one linear_many; layer l takes shared copy l % 23. Then the same routed experts
  // without the shared one, and the shared one alone, so the three rates can be set side by side.
  std::uniform_int_distribution<int> pick(0, 127);
  Buffer<float> h(size_t(6 * rows * 1856 + rows * 3712)), out(size_t((6 + 1) * rows * 2688));
  for (int part = 0; part < 3; ++part) {  // routed + shared, routed, shared
    double t_up = 0, t_down = 0, b_up = 0, b_down = 0, n_matrices = 0;
    int64_t calls = 0;
    for (int r = 0; r < reps * 23; ++r) {
      std::vector<int64_t> m(128, 0);  // rows per expert
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<int> e;
        while (e.size() < 6)
          if (const int c = pick(g); std::find(e.begin(), e.end(), c) == e.end()) e.push_back(c);
        for (int c : e) ++m[size_t(c)];
      }
      std::vector<LinearJob> up, down;
      int64_t hoff = 0, ooff = 0;
      for (size_t e = 0; e < 128 && part < 2; ++e) {
        if (m[e] == 0) continue;
        up.push_back({&mats[5][e], x.data(), m[e], 4096, h.data() + hoff, 1856});
        down.push_back({&mats[6][e], h.data() + hoff, m[e], 1856, out.data() + ooff, 2688});
        hoff += m[e] * 1856, ooff += m[e] * 2688;
      }
      const size_t s = size_t(r % 23);
      if (part != 1) {
        up.push_back({&mats[7][s], x.data(), rows, 4096, h.data() + hoff, 3712});
        down.push_back({&mats[8][s], h.data() + hoff, rows, 3712, out.data() + ooff, 2688});
      }
      const double t0 = now();
      linear_many(up, tc);
      const double t1 = now();
      linear_many(down, tc);
      const double t2 = now();
      if (r < 23) continue;
      t_up += t1 - t0, t_down += t2 - t1, ++calls;
      n_matrices += double(up.size());
      for (const auto& j : up) b_up += double(j.w->bytes());
      for (const auto& j : down) b_down += double(j.w->bytes());
    }
    const char* name = part == 0 ? "moe" : part == 1 ? "routed" : "shared";
    std::printf("%-6s up   (linear_many) %9.1f us/call %6.1f GB/s, %.1f matrices a call\n", name,
                t_up / double(calls) * 1e6, b_up / t_up / 1e9, n_matrices / double(calls));
    std::printf("%-6s down (linear_many) %9.1f us/call %6.1f GB/s\n", name,
                t_down / double(calls) * 1e6, b_down / t_down / 1e9);
  }
}
