// How this CPU's AMX tile unit rounds TDPBF16PS (C[m][n] += the 32 products of A row m and B
// column n), against candidate IEEE sequences: the record behind docs/PERFORMANCE.md's "Intel AMX
// for verify passes: tried, not kept". Crafted sums first (is a pair, or the whole instruction,
// summed before it is added to C?), then random bf16 data, counting the sums each model misses.
// Not part of the build; needs a CPU with AMX-BF16 and Linux >= 5.16:
//   g++ -O2 -std=c++20 -Isrc -mamx-tile -mamx-bf16 -o /tmp/probe_amx_rounding
//       tools/bench/probe_amx_rounding.cpp   (one command)
//   /tmp/probe_amx_rounding
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "base/numeric.h"

namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// C (16 x 16 f32) += A (16 x 32 bf16) . B (16 pairs x 16 columns, VNNI layout).
void tdpbf16ps(const uint16_t* a, const uint16_t* b, float* c) {
  TileConfig cfg;
  for (int t = 0; t < 3; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  _tile_loadd(0, c, 64);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
}

// C[0][0] after one instruction from c0 and the products a[k] * 1 (k < 32).
float one_sum(float c0, const std::vector<float>& a) {
  alignas(64) uint16_t A[512] = {}, B[512] = {};
  alignas(64) float C[256] = {};
  C[0] = c0;
  for (size_t k = 0; k < a.size(); ++k)
    A[k] = nemo::f32_to_bf16(a[k]), B[(k / 2) * 32 + k % 2] = nemo::f32_to_bf16(1.0f);
  tdpbf16ps(A, B, C);
  return C[0];
}

float tree(const float* p, int n) {
  return n == 1 ? p[0] : tree(p, n / 2) + tree(p + n / 2, n / 2);
}

}  // namespace

int main() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (!__builtin_cpu_supports("amx-bf16") ||
      syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::fprintf(stderr, "no AMX-BF16 tiles on this CPU / kernel\n");
    return 1;
  }
  const float h = std::ldexp(1.0f, -24);  // half an ulp of 1
  std::printf(
      "crafted sums, h = 2^-24 (half an ulp of 1); a sequence of IEEE adds in k order gives "
      "the first column:\n");
  const struct {
    const char* what;
    float c0;
    std::vector<float> a;
    float sequential;
  } cases[] = {
      {"1 + h (k0)", 1, {h}, 1.0f},
      {"1 + h (k0) + h (k1)", 1, {h, h}, 1.0f},
      {"1 + h (k0) + h (k2)", 1, {h, 0, h}, 1.0f},
      {"1 + h (k0) - 1 (k2)", 1, {h, 0, -1}, 0.0f},
      {"1 - 1 (k0) + h (k2)", 1, {-1, 0, h}, h},
  };
  for (const auto& c : cases)
    std::printf("  %-22s sequential %-16a tile unit %a\n", c.what, c.sequential,
                one_sum(c.c0, c.a));

  // Random data: how many of the 256 sums per instruction each model reproduces bit for bit.
  std::vector<std::pair<const char*, std::function<float(float, const float*)>>> models = {
      {"C, then the 32 products in k order",
       [](float c, const float* p) {
         for (int i = 0; i < 32; ++i) c += p[i];
         return c;
       }},
      {"products in k order, then C",
       [](float c, const float* p) {
         float s = 0;
         for (int i = 0; i < 32; ++i) s += p[i];
         return c + s;
       }},
      {"pairs, then in k order, then C",
       [](float c, const float* p) {
         float s = 0;
         for (int i = 0; i < 16; ++i) s += p[2 * i] + p[2 * i + 1];
         return c + s;
       }},
      {"pairwise tree of 32, then C", [](float c, const float* p) { return c + tree(p, 32); }},
      {"even / odd trees of 16, then C",
       [](float c, const float* p) {
         float e[16], o[16];
         for (int i = 0; i < 16; ++i) e[i] = p[2 * i], o[i] = p[2 * i + 1];
         return c + (tree(e, 16) + tree(o, 16));
       }},
      {"the 32 summed in double, then C",
       [](float c, const float* p) {
         double s = 0;
         for (int i = 0; i < 32; ++i) s += p[i];
         return c + float(s);
       }},
      {"C and the 32 summed in double",
       [](float c, const float* p) {
         double s = c;
         for (int i = 0; i < 32; ++i) s += p[i];
         return float(s);
       }},
  };
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  alignas(64) uint16_t A[512], B[512];
  alignas(64) float C[256], C0[256];
  std::vector<long> miss(models.size(), 0);
  long total = 0;
  for (int it = 0; it < 300; ++it) {
    for (auto& a : A) a = nemo::f32_to_bf16(nd(g) * std::ldexp(1.0f, int(g() % 16) - 8));
    for (auto& b : B) b = nemo::f32_to_bf16(nd(g));
    for (auto& c : C0) c = nd(g);
    std::memcpy(C, C0, sizeof C);
    tdpbf16ps(A, B, C);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float p[32];  // bf16 x bf16 is exact in f32
        for (int k = 0; k < 32; ++k)
          p[k] =
              nemo::bf16_to_f32(A[m * 32 + k]) * nemo::bf16_to_f32(B[(k / 2) * 32 + n * 2 + k % 2]);
        for (size_t i = 0; i < models.size(); ++i)
          if (models[i].second(C0[m * 16 + n], p) != C[m * 16 + n]) ++miss[i];
        ++total;
      }
  }
  std::printf("random sums: sums the model misses (of %ld)\n", total);
  for (size_t i = 0; i < models.size(); ++i)
    std::printf("  %-36s %6ld (%.0f %%)\n", models[i].first, miss[i], 100.0 * miss[i] / total);
  return 0;
}
