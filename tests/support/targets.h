// Test helper: the targets the exactness tests run on. A target is a synthetic preset in one
// storage format, loaded with one KV-cache dtype; each checkpoint is written once per process and
// each way of loading it loaded once.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "model/nemotron_h.h"
#include "temp_dir.h"
#include "tools/synth/synth.h"

namespace nemo::test {

struct Target {
  std::string preset;
  synth::SynthFormat format = synth::SynthFormat::Dense;
  io::DType dtype = io::DType::BF16;  // Dense: every tensor's dtype
  model::KvDtype kv = model::KvDtype::F32;
  bool w8a8 = false;  // ModelOpt: FP8 layers quantize their inputs with the static input_scale
  kernels::Arith arith = kernels::Arith::F32;  // NVFP4 / FP8 layers' arithmetic (--arith)
};

// e.g. tiny_a_F32, tiny_q_modelopt_w8a8_kvfp8 (a gtest name).
inline std::string target_id(const Target& t) {
  std::string s = t.preset + "_" +
                  (t.format == synth::SynthFormat::Dense ? io::dtype_name(t.dtype)
                                                         : synth::synth_format_name(t.format));
  if (t.w8a8) s += "_w8a8";
  if (t.arith != kernels::Arith::F32) s += std::string("_act") + kernels::arith_name(t.arith);
  if (t.kv != model::KvDtype::F32) s += std::string("_kv") + model::kv_dtype_name(t.kv);
  for (auto& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}
inline void PrintTo(const Target& t, std::ostream* os) {
  *os << target_id(t);
}
inline std::string target_name(const testing::TestParamInfo<Target>& i) {
  return target_id(i.param);
}

// The target's model, its checkpoint written with `seed`.
inline model::NemotronH& load_target(const Target& t, uint64_t seed) {
  static std::map<std::string, std::unique_ptr<TempDir>> dirs;
  static std::map<std::string, std::unique_ptr<model::NemotronH>> models;
  const std::string seeded = std::to_string(seed) + "/";
  auto& m = models[seeded + target_id(t)];
  if (!m) {
    auto& d = dirs[seeded + target_id({t.preset, t.format, t.dtype})];
    if (!d) {
      d = std::make_unique<TempDir>();
      synth::SynthOptions o;
      o.seed = seed;
      o.format = t.format;
      o.dtype = t.dtype;
      synth::write_checkpoint(synth::preset_config(t.preset), d->path(), o);
    }
    m = model::NemotronH::load(
        d->path(), {.fp8_static_activations = t.w8a8, .kv_dtype = t.kv, .packed_arith = t.arith});
  }
  return *m;
}

// tiny-q (every width a multiple of 64) in every quantized format — ModelOpt NVFP4 + FP8, the
// same with W8A8 static activations, MLX 4- and 8-bit — with every KV-cache dtype; and ModelOpt
// with bf16 activations in its NVFP4, FP8 and bf16 layers (--arith bf16), alone and with W8A8
// (whose FP8 layers keep f32 arithmetic) and an FP8 cache.
inline std::vector<Target> quantized_targets() {
  using F = synth::SynthFormat;
  std::vector<Target> v;
  for (auto kv : {model::KvDtype::F32, model::KvDtype::BF16, model::KvDtype::FP8}) {
    v.push_back({.preset = "tiny-q", .format = F::ModelOpt, .kv = kv});
    v.push_back({.preset = "tiny-q", .format = F::ModelOpt, .kv = kv, .w8a8 = true});
    v.push_back({.preset = "tiny-q", .format = F::Mlx4, .kv = kv});
    v.push_back({.preset = "tiny-q", .format = F::Mlx8, .kv = kv});
  }
  v.push_back({.preset = "tiny-q", .format = F::ModelOpt, .arith = kernels::Arith::Bf16});
  v.push_back({.preset = "tiny-q",
               .format = F::ModelOpt,
               .kv = model::KvDtype::FP8,
               .w8a8 = true,
               .arith = kernels::Arith::Bf16});
  return v;
}

}  // namespace nemo::test
