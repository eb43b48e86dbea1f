#include "kernels/linear.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/linear_impl.h"
#include "kernels/quantize.h"

namespace nemo::kernels {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32:
      return "f32";
    case WeightFormat::BF16:
      return "bf16";
    case WeightFormat::F16:
      return "f16";
    case WeightFormat::NVFP4:
      return "nvfp4";
    case WeightFormat::FP8_E4M3:
      return "fp8_e4m3";
    case WeightFormat::AFFINE4:
      return "affine4";
    case WeightFormat::AFFINE8:
      return "affine8";
  }
  return "?";
}

int64_t PackedWeight::bytes() const {
  const int64_t n = rows * cols;
  switch (format) {
    case WeightFormat::F32:
      return n * 4;
    case WeightFormat::BF16:
    case WeightFormat::F16:
      return n * 2;
    case WeightFormat::FP8_E4M3:
      return n;
    case WeightFormat::NVFP4:
      return n / 2 + n / 16;
    case WeightFormat::AFFINE4:
      return n / 2 + 4 * (group ? n / group : 0);
    case WeightFormat::AFFINE8:
      return n + 4 * (group ? n / group : 0);
  }
  return 0;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Reference:
      return "reference";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

const char* arith_name(Arith a) {
  return a == Arith::Bf16 ? "bf16" : "f32";
}

Arith parse_arith(const std::string& s, const char* option) {
  if (s == "f32") return Arith::F32;
  if (s == "bf16") return Arith::Bf16;
  fail("{} '{}': expected f32 or bf16", option, s);
}

float round_activation_bf16(float x) {
  if (std::fabs(x) < 0x1p-100f) return 0.0f;
  return bf16_to_f32(f32_to_bf16(x));
}

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return detected_isa() == Isa::Avx512 && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

bool bf16_kernel_verified() {
  static const bool ok = cpu_has_avx512_bf16() && detail::nvfp4_bf16_kernel_self_check() &&
                         detail::fp8_bf16_kernel_self_check();
  return ok;
}

namespace detail {
// Apart from bf16_kernel_verified: the dense kernel also rests on the instruction's handling of
// tiny values (linear_dense.cpp), which another CPU might not share; the NVFP4 and FP8 kernels
// never meet them, so they keep the instruction either way.
bool dense_bf16_verified() {
  static const bool ok = bf16_kernel_verified() && dense_bf16_kernel_self_check();
  return ok;
}
bool dense_bf16_avx2_verified() {
  static const bool ok = detected_isa() >= Isa::Avx2 && dense_bf16_avx2_self_check();
  return ok;
}
}  // namespace detail

bool cpu_splits_512bit_ops() {
  static const bool split = [] {
    __builtin_cpu_init();
    return detected_isa() == Isa::Avx512 && __builtin_cpu_is("amdfam19h");
  }();
  return split;
}

bool cpu_is_intel() {
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel");
  }();
  return intel;
}

bool cpu_has_gfni() {
  static const bool gfni = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("gfni");
  }();
  return gfni;
}

namespace {
WideBlocking cache_blocking() {
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const int64_t l1d = l1 > 0 ? l1 : 32 << 10, l2c = l2 > 0 ? l2 : 1 << 20;
  // Where 512-bit FMAs issue at half rate (Zen 4), tiles stream whole rows from L2 faster than
  // they park accumulators between chunks (docs/PERFORMANCE.md, 2026-12-04).
  const int64_t k_chunk = cpu_splits_512bit_ops() ? kWholeRow : l1d >= (48 << 10) ? 384 : 256;
  return WideBlocking{k_chunk, std::clamp<int64_t>(l2c / 8 * 3, 128 << 10, 768 << 10)};
}
// The blocking in use: the caches', or a test's (set_wide_blocking).
std::atomic<int64_t>& wide_slot(bool k) {
  static const WideBlocking caches = cache_blocking();
  static std::atomic<int64_t> k_chunk{caches.k_chunk}, row_bytes{caches.row_bytes};
  return k ? k_chunk : row_bytes;
}
}  // namespace

WideBlocking wide_blocking() {
  return {wide_slot(true).load(std::memory_order_relaxed),
          wide_slot(false).load(std::memory_order_relaxed)};
}
void set_wide_blocking(WideBlocking b) {
  if (b.k_chunk <= 0) b = cache_blocking();
  wide_slot(true).store(std::max<int64_t>(16, b.k_chunk / 16 * 16));
  wide_slot(false).store(std::max<int64_t>(1, b.row_bytes));
}

const char* f32_kernel_name(Isa isa) {
  if (isa >= Isa::Avx512 && cpu_is_intel())
    return cpu_has_gfni() ? "avx512 (Intel tiles; FP8 by GFNI)" : "avx512 (Intel tiles)";
  return isa_name(isa);
}

const char* bf16_kernel_name(Isa isa) {
  if (isa >= Isa::Avx512 && bf16_kernel_verified() && !detail::dense_bf16_verified())
    return "avx512_bf16 (bf16 weights: avx2)";
  if (isa >= Isa::Avx512 && bf16_kernel_verified())
    return cpu_splits_512bit_ops() ? "avx512_bf16 (NVFP4 1-4 rows in 256-bit blocks)"
           : cpu_is_intel()        ? "avx512_bf16"
                                   : "avx512_bf16 (NVFP4 by scale words)";
  return isa >= Isa::Avx2 ? "avx2" : "reference";
}

Isa detected_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("bmi2"))
      return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
      return Isa::Avx2;
    return Isa::Reference;
  }();
  return isa;
}

std::vector<Isa> available_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(detected_isa()); ++i) v.push_back(Isa(i));
  return v;
}

namespace {
// Process-wide choice of implementation family; a constant of the CPU unless a test overrides it.
std::atomic<int>& active_isa_slot() {
  static std::atomic<int> slot{int(detected_isa())};
  return slot;
}
}  // namespace

Isa active_isa() {
  return Isa(active_isa_slot().load(std::memory_order_relaxed));
}
void set_active_isa(Isa isa) {
  if (int(isa) > int(detected_isa())) isa = detected_isa();
  active_isa_slot().store(int(isa));
}

void linear_range(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
                  int64_t y_stride, int64_t o_begin, int64_t o_end, Isa isa) {
  detail::select_range_fn(w, isa)(w, x, n_rows, x_stride, y, y_stride, o_begin, o_end);
}

namespace {
// Outputs per parallel chunk: at least ~256K multiply-adds per thread, so small matrices stay on
// one thread (a fork/join costs far more than the work when the machine is oversubscribed).
int64_t output_grain(const PackedWeight& w, int64_t n_rows) {
  return std::max<int64_t>(16, (int64_t(1) << 18) / std::max<int64_t>(1, w.cols * n_rows));
}
}  // namespace

void linear(const PackedWeight& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
            int64_t y_stride, const ThreadConfig& tc) {
  if (w.format == WeightFormat::FP8_E4M3 && w.input_scale > 0.0f)
    return linear_fp8_static(w, w.input_scale, x, n_rows, x_stride, y, y_stride, tc);
  const detail::RangeFn fn = detail::select_range_fn(w, active_isa());
  parallel_for(tc, w.rows, output_grain(w, n_rows),
               [&](int64_t b, int64_t e) { fn(w, x, n_rows, x_stride, y, y_stride, b, e); });
}

void linear_many(std::span<const LinearJob> jobs, const ThreadConfig& tc) {
  if (jobs.size() == 1) {  // nothing to share a region with
    const LinearJob& J = jobs[0];
    return linear(*J.w, J.x, J.n_rows, J.x_stride, J.y, J.y_stride, tc);
  }
  // Blocks of outputs per job with linear()'s grain, rounded to 16 outputs so the 4-output tiles
  // stay whole (Intel's NVFP4 tiles of 3, 6 and 8 outputs finish a block with 4- and 1-output
  // ones); start[j] = the first block of job j.
  std::vector<int64_t> start(jobs.size() + 1, 0), block(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& J = jobs[j];
    if (J.w->format == WeightFormat::FP8_E4M3 && J.w->input_scale > 0.0f) {
      // Static W8A8 quantises the activations first: its own parallel pass.
      linear(*J.w, J.x, J.n_rows, J.x_stride, J.y, J.y_stride, tc);
      block[j] = 1, start[j + 1] = start[j];
      continue;
    }
    block[j] = (output_grain(*J.w, J.n_rows) + 15) / 16 * 16;
    start[j + 1] = start[j] + (J.n_rows > 0 ? (J.w->rows + block[j] - 1) / block[j] : 0);
  }
  const Isa isa = active_isa();
  // A thread's consecutive blocks of one job run as one range: each call of a range kernel pays
  // for preparing its activations and for its first tile's weights arriving unprefetched.
  parallel_for(tc, start.back(), 1, [&](int64_t b, int64_t e) {
    size_t j = size_t(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
    for (int64_t u = b; u < e;) {
      while (u >= start[j + 1]) ++j;
      const LinearJob& J = jobs[j];
      const int64_t u1 = std::min(e, start[j + 1]);
      const int64_t o0 = (u - start[j]) * block[j],
                    o1 = std::min(J.w->rows, (u1 - start[j]) * block[j]);
      detail::select_range_fn(*J.w, isa)(*J.w, J.x, J.n_rows, J.x_stride, J.y, J.y_stride, o0, o1);
      u = u1;
    }
  });
}

void dequantize_row(const PackedWeight& w, int64_t o, float* out) {
  switch (w.format) {
    case WeightFormat::F32:
    case WeightFormat::BF16:
    case WeightFormat::F16:
      detail::dequantize_row_dense(w, o, out);
      return;
    case WeightFormat::NVFP4:
      detail::dequantize_row_nvfp4(w, o, out);
      return;
    case WeightFormat::FP8_E4M3:
      detail::dequantize_row_fp8(w, o, out);
      return;
    case WeightFormat::AFFINE4:
    case WeightFormat::AFFINE8:
      detail::dequantize_row_affine(w, o, out);
      return;
    default:
      fail("dequantize_row: format {} not supported", weight_format_name(w.format));
  }
}

namespace detail {
RangeFn select_range_fn(WeightFormat f, Isa isa) {
  switch (f) {
    case WeightFormat::F32:
    case WeightFormat::BF16:
    case WeightFormat::F16:
      if (isa >= Isa::Avx512) return cpu_is_intel() ? range_dense_avx512_wide : range_dense_avx512;
      return isa >= Isa::Avx2 ? range_dense_avx2 : range_dense_ref;
    case WeightFormat::NVFP4:
      if (isa >= Isa::Avx512) return cpu_is_intel() ? range_nvfp4_avx512_8row : range_nvfp4_avx512;
      return isa >= Isa::Avx2 ? range_nvfp4_avx2 : range_nvfp4_ref;
    case WeightFormat::FP8_E4M3:
      if (isa >= Isa::Avx512)
        return !cpu_is_intel()  ? range_fp8_avx512
               : cpu_has_gfni() ? range_fp8_avx512_wide_gfni
                                : range_fp8_avx512_wide;
      return isa >= Isa::Avx2 ? range_fp8_avx2 : range_fp8_ref;
    case WeightFormat::AFFINE4:
    case WeightFormat::AFFINE8:
      return isa >= Isa::Avx2 ? range_affine_avx2 : range_affine_ref;
    default:
      fail("linear: weight format {} has no kernel", weight_format_name(f));
  }
}

RangeFn select_range_fn(const PackedWeight& w, Isa isa) {  // (bf16_kernel_name follows it)
  if (w.arith == Arith::F32) return select_range_fn(w.format, isa);
  const bool avx512_bf16 = isa >= Isa::Avx512 && bf16_kernel_verified();
  switch (w.format) {
    case WeightFormat::NVFP4:
      if (avx512_bf16 && cpu_splits_512bit_ops()) return range_nvfp4_bf16_avx512_halves;
      if (avx512_bf16 && !cpu_is_intel()) return range_nvfp4_bf16_avx512_words;
      return avx512_bf16        ? range_nvfp4_bf16_avx512
             : isa >= Isa::Avx2 ? range_nvfp4_bf16_avx2
                                : range_nvfp4_bf16_ref;
    case WeightFormat::FP8_E4M3:
      return avx512_bf16        ? range_fp8_bf16_avx512
             : isa >= Isa::Avx2 ? range_fp8_bf16_avx2
                                : range_fp8_bf16_ref;
    case WeightFormat::BF16:
      if (avx512_bf16 && dense_bf16_verified()) return range_dense_bf16_avx512;
      if (isa >= Isa::Avx2)
        return dense_bf16_avx2_verified() ? range_dense_bf16_avx2 : range_dense_bf16_avx2_by_hand;
      return range_dense_bf16_ref;
    default:
      fail("linear: bf16 activations are implemented for nvfp4, fp8 and bf16 weights only, not {}",
           weight_format_name(w.format));
  }
}
}  // namespace detail

}  // namespace nemo::kernels
