#include "tools/synth/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/numeric.h"
#include "base/random.h"
#include "base/threads.h"
#include "kernels/quantize.h"
#include "model/layout.h"
#include "text/bpe_trainer.h"

namespace nemo::synth {

namespace fs = std::filesystem;
using io::DType;
using io::LayerKind;
using json = nlohmann::json;

namespace {

// Real Lightning / Nano-30B schedule (nemotron_h.md §1.2).
constexpr const char* kLightningPattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";

std::vector<LayerKind> kinds(const std::string& p) {
  std::vector<LayerKind> v;
  for (char ch : p) {
    switch (ch) {
      case 'M': v.push_back(LayerKind::Mamba); break;
      case '*': v.push_back(LayerKind::Attention); break;
      case 'E': v.push_back(LayerKind::MoE); break;
      case '-': v.push_back(LayerKind::MLP); break;
      default: fail("pattern '{}': unknown layer character '{}' (expected M, *, E or -)", p, ch);
    }
  }
  if (v.empty()) fail("empty layer pattern");
  return v;
}

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// How a tensor's values are drawn: uniform in [lo, hi], then an optional transform.
struct Init {
  enum Kind { Uniform, LogUniformALog, DtBias } kind = Uniform;
  float lo = -1, hi = 1;
};

Init init_for(const std::string& name, const std::vector<int64_t>& shape) {
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  if (ends("A_log")) return {Init::LogUniformALog, 1.0f, 16.0f};
  if (ends("dt_bias")) return {Init::DtBias, 0.001f, 0.1f};
  if (ends(".D")) return {Init::Uniform, 0.5f, 1.5f};
  if (ends("e_score_correction_bias")) return {Init::Uniform, -0.05f, 0.05f};
  if (ends("conv1d.bias")) return {Init::Uniform, -0.1f, 0.1f};
  if (ends("conv1d.weight")) return {Init::Uniform, -0.8f, 0.8f};
  if (shape.size() == 1) return {Init::Uniform, 0.9f, 1.1f};  // norm weights
  if (ends("embeddings.weight")) return {Init::Uniform, -1.0f, 1.0f};
  // Linear [out, in]: std ≈ 1/sqrt(in) (uniform ±sqrt(3/in)); output projections half that.
  const float in = float(shape.back());
  float a = std::sqrt(3.0f / in);
  if (ends("out_proj.weight") || ends("o_proj.weight") || ends("down_proj.weight")) a *= 0.5f;
  return {Init::Uniform, -a, a};
}

float draw(const Init& in, uint64_t& rng) {
  const float u = float(splitmix64(rng) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  const float v = in.lo + (in.hi - in.lo) * u;
  switch (in.kind) {
    case Init::Uniform: return v;
    case Init::LogUniformALog: return std::log(v);
    case Init::DtBias: {
      const float dt = std::exp(std::log(in.lo) + (std::log(in.hi) - std::log(in.lo)) * u);
      return dt + std::log(-std::expm1(-dt));  // inverse softplus
    }
  }
  return v;
}

// The "dtype" / "torch_dtype" value of a Hugging Face config.json.
const char* torch_dtype_name(DType dt) {
  return dt == DType::F32 ? "float32" : dt == DType::F16 ? "float16" : "bfloat16";
}

void encode(DType dt, float v, uint8_t* out) {
  switch (dt) {
    case DType::F32: std::memcpy(out, &v, 4); break;
    case DType::BF16: {
      uint16_t b = f32_to_bf16(v);
      std::memcpy(out, &b, 2);
      break;
    }
    case DType::F16: {
      uint16_t b = f32_to_f16(v);
      std::memcpy(out, &b, 2);
      break;
    }
    default: fail("synth: dtype {} not supported for dense tensors", io::dtype_name(dt));
  }
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny-a", "tiny-b", "tiny-c", "tiny-q", "lightning"}; }

io::ModelConfig preset_config(const std::string& name, int layers, const std::string& pattern) {
  io::ModelConfig c;
  c.eos_token_ids = {2};
  c.bos_token_id = 1;
  c.pad_token_id = 0;
  c.norm_eps = 1e-5f;
  c.chunk_size = 128;
  c.conv_kernel = 4;
  c.norm_topk_prob = true;
  std::string pat;
  if (name == "tiny-a") {  // every layer kind, MTP, 2 Mamba groups
    pat = "M*EM-E";
    c.hidden_size = 64, c.vocab_size = 512;
    c.mamba_num_heads = 8, c.mamba_head_dim = 16, c.n_groups = 2, c.ssm_state_size = 16;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
    c.n_routed_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 32;
    c.n_shared_experts = 1, c.moe_shared_expert_intermediate_size = 48;
    c.intermediate_size = 96, c.routed_scaling_factor = 2.5f;
    c.num_nextn_predict_layers = 1, c.mtp_layers = {LayerKind::Attention, LayerKind::MoE};
  } else if (name == "tiny-b") {  // Lightning-like schedule slice, 4 groups, GQA 4:1, no MTP
    pat = "MEM*EM*E";
    c.hidden_size = 96, c.vocab_size = 512;
    c.mamba_num_heads = 8, c.mamba_head_dim = 8, c.n_groups = 4, c.ssm_state_size = 32;
    c.num_attention_heads = 8, c.num_key_value_heads = 2, c.head_dim = 24;
    c.n_routed_experts = 16, c.num_experts_per_tok = 4, c.moe_intermediate_size = 40;
    c.n_shared_experts = 1, c.moe_shared_expert_intermediate_size = 64;
    c.routed_scaling_factor = 2.5f;
  } else if (name == "tiny-c") {  // single group, no shared expert, widths not multiples of 16
    pat = "*-M*ME";
    c.hidden_size = 72, c.vocab_size = 700;
    c.mamba_num_heads = 4, c.mamba_head_dim = 18, c.n_groups = 1, c.ssm_state_size = 24;
    c.conv_kernel = 3;
    c.num_attention_heads = 6, c.num_key_value_heads = 3, c.head_dim = 20;
    c.n_routed_experts = 6, c.num_experts_per_tok = 3, c.moe_intermediate_size = 28;
    c.n_shared_experts = 0;
    c.intermediate_size = 50, c.routed_scaling_factor = 1.0f;
    c.norm_topk_prob = false;
    c.num_nextn_predict_layers = 1, c.mtp_layers = {LayerKind::Attention, LayerKind::MoE};
  } else if (name == "tiny-q") {  // every width a multiple of 64: quantizable by every format
    pat = "M*EM-E";
    c.hidden_size = 128, c.vocab_size = 512;
    c.mamba_num_heads = 4, c.mamba_head_dim = 32, c.n_groups = 2, c.ssm_state_size = 32;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 32;
    c.n_routed_experts = 8, c.num_experts_per_tok = 2, c.moe_intermediate_size = 64;
    c.n_shared_experts = 1, c.moe_shared_expert_intermediate_size = 128;
    c.intermediate_size = 192, c.routed_scaling_factor = 2.5f;
    c.num_nextn_predict_layers = 1, c.mtp_layers = {LayerKind::Attention, LayerKind::MoE};
  } else if (name == "lightning") {  // Nemotron 3.5 Lightning 30B-A3B dims (nemotron_h.md §1)
    pat = kLightningPattern;
    c.hidden_size = 2688, c.vocab_size = 131072;
    c.mamba_num_heads = 64, c.mamba_head_dim = 64, c.n_groups = 8, c.ssm_state_size = 128;
    c.num_attention_heads = 32, c.num_key_value_heads = 2, c.head_dim = 128;
    c.n_routed_experts = 128, c.num_experts_per_tok = 6, c.moe_intermediate_size = 1856;
    c.n_shared_experts = 1, c.moe_shared_expert_intermediate_size = 3712;
    c.intermediate_size = 1856, c.routed_scaling_factor = 2.5f;
    c.num_nextn_predict_layers = 1, c.mtp_layers = {LayerKind::Attention, LayerKind::MoE};
    c.eos_token_ids = {2, 11};
  } else {
    fail("unknown preset '{}' (known: tiny-a, tiny-b, tiny-c, tiny-q, lightning)", name);
  }
  if (!pattern.empty()) pat = pattern;
  if (layers > 0) {
    if (size_t(layers) > pat.size()) fail("preset '{}' has {} layers; --layers {} is larger", name, pat.size(), layers);
    pat = pat.substr(0, size_t(layers));
  }
  c.layers = kinds(pat);
  return c;
}

SynthTensor synth_tensor(const model::layout::TensorSpec& s, DType dtype) {
  return {s.tensor_name(), s.shape, s.f32_storage ? DType::F32 : dtype};
}

std::vector<SynthTensor> checkpoint_layout(const io::ModelConfig& c, const SynthOptions& opt) {
  using model::layout::Role;
  std::vector<SynthTensor> v;
  for (const auto& s : model::layout::target_tensors(c, {.mtp = opt.mtp})) {
    if (s.role == Role::LmHead && c.tie_word_embeddings) continue;  // tied: no lm_head tensor
    if (s.part == model::layout::Part::Mtp) {
      const io::LayerKind k = c.mtp_layers[size_t(s.layer)];
      if (k != LayerKind::Attention && k != LayerKind::MoE)
        fail("synth: MTP sub-layer kind '{}' is not supported", io::layer_kind_name(k));
    }
    v.push_back(synth_tensor(s, opt.dtype));
  }
  return v;
}

namespace {

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= uint64_t(d);
  return n;
}
uint64_t stored_bytes(DType dt, const std::vector<int64_t>& shape) {
  return numel(shape) * uint64_t(io::dtype_bits(dt)) / 8;
}
bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
std::string module_of(const std::string& weight_name) { return weight_name.substr(0, weight_name.size() - 7); }
template <typename T>
std::span<const uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}
std::span<const uint8_t> f32_bytes(const float& v) { return {reinterpret_cast<const uint8_t*>(&v), 4}; }

std::vector<uint8_t> encode_all(const std::vector<float>& vals, DType dt) {
  const int es = io::dtype_bits(dt) / 8;
  std::vector<uint8_t> out(vals.size() * size_t(es));
  for (size_t i = 0; i < vals.size(); ++i) encode(dt, vals[i], out.data() + i * size_t(es));
  return out;
}

// One or more stored tensors written back to back, produced from logical tensors.
struct Stored {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
struct Unit {
  std::vector<Stored> out;
  std::function<void(io::SafetensorsWriter&)> write;
  int shard_key = 0;           // ModelOpt: decoder layer; tensors with equal keys share a shard
  std::string module, algo;    // quantized module name and ModelOpt algo ("" = unquantized)
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& s : out) b += stored_bytes(s.dtype, s.shape);
    return b;
  }
};

int layer_of(const std::string& name, int n_layers) {
  const std::string p = "backbone.layers.";
  if (name.rfind(p, 0) == 0) return std::stoi(name.substr(p.size()));
  if (name.rfind("backbone.embeddings", 0) == 0) return 0;
  return n_layers - 1;  // norm_f, lm_head, mtp.* go with the last layer
}

// What ModelOpt's Lightning recipe quantizes (formats.md §2.8, §4.2).
std::string modelopt_algo(const std::string& name) {
  if (name.rfind("backbone.", 0) != 0 && name != "lm_head.weight") return "";  // mtp* excluded
  if (!ends_with(name, ".weight")) return "";
  if (name == "lm_head.weight" || name.find(".experts.") != std::string::npos ||
      name.find(".shared_experts.") != std::string::npos)
    return "W4A16_NVFP4";
  if (ends_with(name, "mixer.in_proj.weight") || ends_with(name, "mixer.out_proj.weight")) return "FP8";
  return "";
}
// Modules ModelOpt lists in exclude_modules: linear-like modules left in bf16.
bool modelopt_excluded(const std::string& name) {
  return name == "backbone.embeddings.weight" || ends_with(name, ".conv1d.weight") ||
         ends_with(name, ".gate.weight") || ends_with(name, "_proj.weight");
}

// What mlx-lm's nn.quantize converts: Linear, SwitchLinear and Embedding (not the router gate).
bool mlx_quantizes(const SynthTensor& t) {
  return t.shape.size() == 2 && ends_with(t.name, ".weight") && !ends_with(t.name, ".gate.weight") &&
         t.name.find("norm") == std::string::npos;
}

void require_divisible(const SynthTensor& t, int64_t by, const char* what,
                       const SynthOptions& opt) {
  if (t.shape.back() % by != 0)
    fail("{}{} needs the input width of '{}' ({}) to be a multiple of {}{}",
         opt.values ? "" : "synth: ", what, t.name, t.shape.back(), by,
         opt.values ? "" : "; use the tiny-q or lightning preset");
}

// A logical tensor's f32 values: the caller's source (a converter), else synth's own.
std::vector<float> values_of(const SynthTensor& t, const SynthOptions& opt) {
  std::vector<float> v = opt.values ? opt.values(t) : logical_values(t, opt.seed, opt.threads);
  if (v.size() != numel(t.shape))
    fail("{}: the value source gave {} values for shape {}", t.name, v.size(),
         io::shape_str(t.shape));
  return v;
}

Unit dense_unit(const SynthTensor& t, const SynthOptions& opt, std::vector<int64_t> stored_shape = {}) {
  Unit u;
  u.out.push_back({t.name, t.dtype, stored_shape.empty() ? t.shape : stored_shape});
  u.write = [t, &opt](io::SafetensorsWriter& w) {
    w.write(encode_all(values_of(t, opt), t.dtype));
  };
  return u;
}

// Row blocks quantized in parallel: NVFP4 rows are independent once weight_scale_2 (the
// tensor's amax / 2688, as the single-call quantizer computes it) is fixed, so the result is
// byte-identical to one quantize_nvfp4 call over the whole tensor.
kernels::Nvfp4Quantized quantize_nvfp4_par(const std::vector<float>& v, int64_t o, int64_t i, int threads) {
  float amax = 0.0f;
  for (float x : v) amax = std::max(amax, std::fabs(x));
  const float scale2 = amax / 2688.0f;
  if (threads <= 1 || o < 64 || !(scale2 > 0.0f)) return kernels::quantize_nvfp4(v, o, i);
  kernels::Nvfp4Quantized q;
  q.rows = o;
  q.cols = i;
  q.scale2 = scale2;
  q.packed.resize(size_t(o * i / 2));
  q.scales.resize(size_t(o * i / 16));
  parallel_for(ThreadConfig{threads}, o, 16, [&](int64_t r0, int64_t r1) {
    const auto part = kernels::quantize_nvfp4(std::span<const float>(v).subspan(size_t(r0 * i), size_t((r1 - r0) * i)),
                                              r1 - r0, i, scale2);
    std::copy(part.packed.begin(), part.packed.end(), q.packed.begin() + r0 * i / 2);
    std::copy(part.scales.begin(), part.scales.end(), q.scales.begin() + r0 * i / 16);
  });
  return q;
}

Unit nvfp4_unit(const SynthTensor& t, const SynthOptions& opt) {
  require_divisible(t, 16, "NVFP4", opt);
  const std::string m = module_of(t.name);
  const int64_t o = t.shape[0], i = t.shape[1];
  Unit u;
  u.module = m;
  u.algo = "W4A16_NVFP4";
  u.out = {{m + ".weight", DType::U8, {o, i / 2}}, {m + ".weight_scale", DType::F8_E4M3, {o, i / 16}},
           {m + ".weight_scale_2", DType::F32, {}}};
  u.write = [t, o, i, &opt](io::SafetensorsWriter& w) {
    const auto q = quantize_nvfp4_par(values_of(t, opt), o, i, opt.threads);
    w.write(q.packed);
    w.write(q.scales);
    w.write(f32_bytes(q.scale2));
  };
  return u;
}

Unit fp8_unit(const SynthTensor& t, const SynthOptions& opt) {
  const std::string m = module_of(t.name);
  const int64_t o = t.shape[0], i = t.shape[1];
  Unit u;
  u.module = m;
  u.algo = "FP8";
  u.out = {{m + ".weight", DType::F8_E4M3, {o, i}}, {m + ".weight_scale", DType::F32, {}},
           {m + ".input_scale", DType::F32, {}}};
  u.write = [t, o, i, &opt](io::SafetensorsWriter& w) {
    const auto q = kernels::quantize_fp8(values_of(t, opt), o, i);
    // Static activation scale: a calibrated amax/448 for RMS-normed inputs (|x| up to ~6).
    const float input_scale = 6.0f / 448.0f;
    w.write(q.data);
    w.write(f32_bytes(q.scale));
    w.write(f32_bytes(input_scale));
  };
  return u;
}

// MLX affine: one matrix, or E stacked experts (`members` = the per-expert logical tensors).
Unit affine_unit(const std::string& module, const std::vector<SynthTensor>& members, int bits, const SynthOptions& opt) {
  const int g = opt.mlx_group;
  for (const auto& t : members) require_divisible(t, g, "MLX affine", opt);
  const int64_t o = members[0].shape[0], i = members[0].shape[1], E = int64_t(members.size());
  const bool stacked = members.size() > 1 || members[0].name != module + ".weight";
  auto sh = [&](int64_t last) { return stacked ? std::vector<int64_t>{E, o, last} : std::vector<int64_t>{o, last}; };
  Unit u;
  u.module = module;
  u.out = {{module + ".weight", DType::U32, sh(i * bits / 32)},
           {module + ".scales", DType::BF16, sh(i / g)},
           {module + ".biases", DType::BF16, sh(i / g)}};
  u.write = [members, o, i, bits, g, &opt](io::SafetensorsWriter& w) {
    std::vector<kernels::AffineQuantized> qs;
    for (const auto& t : members)
      qs.push_back(kernels::quantize_affine(values_of(t, opt), o, i, bits, g));
    for (const auto& q : qs) w.write(as_bytes(q.words));
    for (const auto& q : qs) w.write(as_bytes(q.scales));
    for (const auto& q : qs) w.write(as_bytes(q.biases));
  };
  return u;
}

std::vector<Unit> plan(const io::ModelConfig& c, const SynthOptions& opt) {
  const auto layout = checkpoint_layout(c, opt);
  const int L = int(c.layers.size());
  std::vector<Unit> units;
  const bool mlx = opt.format == SynthFormat::Mlx4 || opt.format == SynthFormat::Mlx8;
  const int bits = opt.format == SynthFormat::Mlx8 ? 8 : 4;
  for (size_t k = 0; k < layout.size(); ++k) {
    const SynthTensor& t = layout[k];
    Unit u;
    if (opt.format == SynthFormat::ModelOpt) {
      const std::string algo = modelopt_algo(t.name);
      u = algo == "FP8" ? fp8_unit(t, opt) : algo.empty() ? dense_unit(t, opt) : nvfp4_unit(t, opt);
    } else if (mlx) {
      const size_t ex = t.name.find(".experts.");
      if (ex != std::string::npos) {
        // Stack experts into switch_mlp.fc1 (up) / fc2 (down) when the first expert appears.
        if (t.name.compare(ex, std::string::npos, ".experts.0.up_proj.weight") != 0) continue;
        const std::string base = t.name.substr(0, ex);  // ...mixer
        for (const char* proj : {"up_proj", "down_proj"}) {
          std::vector<SynthTensor> members;
          for (const auto& x : layout)
            if (x.name.rfind(base + ".experts.", 0) == 0 && ends_with(x.name, (std::string(".") + proj + ".weight").c_str()))
              members.push_back(x);
          Unit s = affine_unit(base + (proj[0] == 'u' ? ".switch_mlp.fc1" : ".switch_mlp.fc2"), members, bits, opt);
          s.shard_key = layer_of(t.name, L);
          units.push_back(std::move(s));
        }
        continue;
      }
      if (mlx_quantizes(t)) u = affine_unit(module_of(t.name), {t}, bits, opt);
      else if (ends_with(t.name, "conv1d.weight")) u = dense_unit(t, opt, {t.shape[0], t.shape[2], 1});  // MLX [C, K, 1]
      else u = dense_unit(t, opt);
    } else {
      u = dense_unit(t, opt);
    }
    u.shard_key = layer_of(t.name, L);
    units.push_back(std::move(u));
    // FP8 KV-cache scales ModelOpt writes on attention k/v projections (formats.md §3.5).
    if (opt.format == SynthFormat::ModelOpt && t.name.rfind("backbone.", 0) == 0 &&
        (ends_with(t.name, "mixer.k_proj.weight") || ends_with(t.name, "mixer.v_proj.weight"))) {
      Unit s;
      const bool isk = ends_with(t.name, "k_proj.weight");
      s.out.push_back({module_of(t.name) + (isk ? ".k_scale" : ".v_scale"), DType::F32, {}});
      s.write = [](io::SafetensorsWriter& w) {
        const float v = 8.0f / 448.0f;
        w.write(f32_bytes(v));
      };
      s.shard_key = layer_of(t.name, L);
      units.push_back(std::move(s));
    }
  }
  return units;
}

json modelopt_quant_block(const std::vector<Unit>& units, const std::vector<SynthTensor>& layout) {
  json layers = json::object();
  for (const auto& u : units)
    if (!u.algo.empty())
      layers[u.module] = u.algo == "FP8" ? json{{"quant_algo", "FP8"}} : json{{"quant_algo", u.algo}, {"group_size", 16}};
  std::vector<std::string> exclude;
  for (const auto& t : layout)
    if (t.name.rfind("mtp.", 0) != 0 && modelopt_excluded(t.name) && modelopt_algo(t.name).empty())
      exclude.push_back(module_of(t.name));
  exclude.push_back("mtp*");
  std::sort(exclude.begin(), exclude.end());
  return {{"quant_algo", "MIXED_PRECISION"},
          {"kv_cache_quant_algo", "FP8"},
          {"quantized_layers", layers},
          {"exclude_modules", exclude}};
}

json modelopt_config_json_block(const json& q) {
  // config.json's converted form (formats.md §4.3): one config group per distinct per-layer config.
  json groups = json::object();
  std::vector<std::string> fp8, nvfp4;
  for (auto it = q["quantized_layers"].begin(); it != q["quantized_layers"].end(); ++it)
    (it.value()["quant_algo"] == "FP8" ? fp8 : nvfp4).push_back(it.key());
  int gi = 0;
  if (!fp8.empty())
    groups["group_" + std::to_string(gi++)] = {
        {"input_activations", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
        {"weights", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
        {"targets", fp8}};
  if (!nvfp4.empty())
    groups["group_" + std::to_string(gi++)] = {
        {"weights", {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
        {"targets", nvfp4}};
  return {{"config_groups", groups},
          {"quantized_layers", q["quantized_layers"]},
          {"ignore", q["exclude_modules"]},
          {"quant_algo", "MIXED_PRECISION"},
          {"kv_cache_scheme", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
          {"producer", {{"name", "modelopt"}, {"version", "0.44.0rc5"}}},
          {"quant_method", "modelopt"}};
}

template <typename Json>
std::string dump_json_hf(const Json& j) {
  std::string s = j.dump(2);
  // Python's json writes float('inf') as a bare Infinity; do the same as real HF configs.
  const std::string q = "\"Infinity\"";
  for (size_t p = s.find(q); p != std::string::npos; p = s.find(q)) s.replace(p, q.size(), "Infinity");
  return s + "\n";
}

void write_text(const fs::path& p, const std::string& text) {
  write_file_atomic(p.string(), text);
}

// The tokenizer files of `from` (tokenizer.json required), copied; absent optional ones are
// removed from `dir` so an older write's files do not linger.
void copy_tokenizer(const std::string& from, const std::string& dir) {
  if (!fs::exists(fs::path(from) / "tokenizer.json")) fail("{}: no tokenizer.json to copy", from);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    const fs::path src = fs::path(from) / f, dst = fs::path(dir) / f, tmp = dst.string() + ".tmp";
    if (!fs::exists(src)) {
      fs::remove(dst);
      continue;
    }
    fs::copy_file(src, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, dst);
  }
}

// An interrupted write must not leave a directory that loads: config.json goes first (a directory
// without it is not a checkpoint) and comes back last, after every shard is complete.
void begin_checkpoint_dir(const std::string& dir) {
  fs::create_directories(dir);
  fs::remove(fs::path(dir) / "config.json");
}

// Writes units into shards (by shard_key for ModelOpt, by bytes otherwise) + the index.
void write_units(std::vector<Unit>& units, const std::string& dir, const SynthOptions& opt, bool by_layer,
                 bool aligned, const char* format_meta) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0, total = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const uint64_t b = units[i].bytes();
    const bool split = by_layer ? (!shards.back().empty() && units[shards.back().back()].shard_key != units[i].shard_key)
                                : (cur > 0 && cur + b > opt.shard_bytes);
    if (split) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += b;
    total += b;
  }
  const size_t ns = shards.size();
  json weight_map = json::object();
  uint64_t done = 0;
  for (size_t s = 0; s < ns; ++s) {
    const std::string fname =
        ns == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, ns);
    io::SafetensorsWriter w((fs::path(dir) / fname).string(), aligned);
    w.set_metadata("format", format_meta);
    for (size_t i : shards[s])
      for (const auto& t : units[i].out) {
        w.declare(t.name, t.dtype, t.shape);
        weight_map[t.name] = fname;
      }
    w.begin();
    for (size_t i : shards[s]) {
      units[i].write(w);
      done += units[i].bytes();
      if (opt.progress) opt.progress(units[i].out[0].name, done, total);
    }
    w.finish();
  }
  // Remove stale files of an earlier write with a different shard count.
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("model", 0) == 0 && n.ends_with(".safetensors") && !weight_map.empty()) {
      bool used = false;
      for (auto it = weight_map.begin(); it != weight_map.end() && !used; ++it) used = it.value() == n;
      if (!used) fs::remove(e.path());
    }
  }
  if (ns > 1) {
    json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(fs::path(dir) / "model.safetensors.index.json", idx.dump(2) + "\n");
  } else {
    fs::remove(fs::path(dir) / "model.safetensors.index.json");
  }
}

}  // namespace

SynthFormat parse_synth_format(const std::string& s) {
  if (s == "dense") return SynthFormat::Dense;
  if (s == "modelopt" || s == "nvfp4") return SynthFormat::ModelOpt;
  if (s == "mlx4") return SynthFormat::Mlx4;
  if (s == "mlx8") return SynthFormat::Mlx8;
  fail("--format '{}': expected dense, modelopt, mlx4 or mlx8", s);
}
const char* synth_format_name(SynthFormat f) {
  switch (f) {
    case SynthFormat::Dense: return "dense";
    case SynthFormat::ModelOpt: return "modelopt";
    case SynthFormat::Mlx4: return "mlx4";
    case SynthFormat::Mlx8: return "mlx8";
  }
  return "?";
}

io::DType parse_dense_dtype(const std::string& s) {
  if (s == "bf16") return DType::BF16;
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  fail("--dtype '{}': expected bf16, f16 or f32", s);
}

std::vector<float> logical_values(const SynthTensor& t, uint64_t seed, int threads) {
  // Values are generated in blocks of 2^20 elements, each from its own stream seeded by
  // (seed, name, block): deterministic whatever the thread count.
  const Init in = init_for(t.name, t.shape);
  const int64_t n = int64_t(numel(t.shape));
  std::vector<float> out(static_cast<size_t>(n));
  constexpr int64_t kBlock = 1 << 20;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  const uint64_t base = hash_name(t.name, seed);
  ThreadConfig tc{threads};
  parallel_for(tc, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint64_t rng = base ^ (uint64_t(b) * 0xd1b54a32d192ed03ull);
      splitmix64(rng);
      const int64_t e = std::min(n, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < e; ++i) out[size_t(i)] = draw(in, rng);
    }
  });
  return out;
}

void write_checkpoint(const io::ModelConfig& c, const std::string& dir, const SynthOptions& opt) {
  begin_checkpoint_dir(dir);
  auto units = plan(c, opt);
  const bool mlx = opt.format == SynthFormat::Mlx4 || opt.format == SynthFormat::Mlx8;
  // MLX's writer leaves tensors unaligned; ModelOpt's exporter writes one shard per layer.
  write_units(units, dir, opt, opt.format == SynthFormat::ModelOpt, !mlx, mlx ? "mlx" : "pt");
  json cfg = io::model_config_to_json(c);
  if (opt.format == SynthFormat::ModelOpt) {
    const json q = modelopt_quant_block(units, checkpoint_layout(c, opt));
    json hfq = {{"producer", {{"name", "modelopt"}, {"version", "0.44.0rc5"}}}, {"quantization", q}};
    write_text(fs::path(dir) / "hf_quant_config.json", hfq.dump(2) + "\n");
    cfg["quantization_config"] = modelopt_config_json_block(q);
  } else {
    fs::remove(fs::path(dir) / "hf_quant_config.json");
  }
  if (mlx) {
    const json q = {{"group_size", opt.mlx_group}, {"bits", opt.format == SynthFormat::Mlx8 ? 8 : 4}, {"mode", "affine"}};
    cfg["quantization"] = q;
    cfg["quantization_config"] = q;
  }
  if (opt.tokenizer && !opt.tokenizer_dir.empty()) {
    copy_tokenizer(opt.tokenizer_dir, dir);
  } else if (opt.tokenizer) {
    // A real byte-level BPE tokenizer with the model's vocabulary size (Nemotron's special-token
    // ids: <s> 1, </s> 2, <|im_start|> 10, <|im_end|> 11), and the Lightning chat template.
    text::write_tokenizer_dir(dir, text::train_byte_level_bpe(training_corpus(), int(c.vocab_size),
                                                              text::nemotron_special_tokens()));
  }
  json gen = {{"_from_model_config", true}, {"bos_token_id", c.bos_token_id.value_or(1)}};
  if (c.eos_token_ids.size() == 1) gen["eos_token_id"] = c.eos_token_ids[0];
  else gen["eos_token_id"] = c.eos_token_ids;
  write_text(fs::path(dir) / "generation_config.json", gen.dump(2) + "\n");
  write_text(fs::path(dir) / "config.json", dump_json_hf(cfg));  // last: the directory now loads
}

// ---- drafters -------------------------------------------------------------------------------

DrafterKind parse_drafter_kind(const std::string& s) {
  if (s == "dflash") return DrafterKind::DFlash;
  if (s == "dspark") return DrafterKind::DSpark;
  fail("drafter kind '{}': expected dflash or dspark", s);
}

DrafterShape drafter_shape(DrafterKind kind, const io::ModelConfig& t) {
  const bool spark = kind == DrafterKind::DSpark;
  const int64_t H = t.hidden_size, V = t.vocab_size;
  const bool full = H == 2688;
  const int64_t heads = t.num_attention_heads ? t.num_attention_heads : 4;
  const int64_t kvh = t.num_key_value_heads ? t.num_key_value_heads : 2;
  const int64_t hd = t.head_dim ? t.head_dim : H / heads;
  const int64_t inter = full ? 6144 : 2 * H;
  const int n_layers = full ? 6 : 2;
  const int64_t L = int64_t(t.layers.size());
  // Tap layers: Lightning's [1,5,19,29,41,51] when the target is deep enough, else spread evenly.
  std::vector<int64_t> taps = {1, 5, 19, 29, 41, 51};
  if (L < 52) {
    taps.clear();
    const int64_t n = std::min<int64_t>(full ? 6 : 3, L);
    for (int64_t i = 0; i < n; ++i) taps.push_back(std::min<int64_t>(L - 1, 1 + (i * L) / n));
    std::sort(taps.begin(), taps.end());
    taps.erase(std::unique(taps.begin(), taps.end()), taps.end());
  }
  const int64_t ntaps = int64_t(taps.size());
  const int64_t rank = full ? 512 : 32;
  io::DrafterConfig dc;
  dc.kind = spark ? "dspark" : "dflash";
  dc.layers = n_layers, dc.hidden_size = H, dc.vocab_size = V;
  dc.num_attention_heads = heads, dc.num_key_value_heads = kvh, dc.head_dim = hd, dc.intermediate_size = inter;
  dc.target_layer_ids = taps;
  dc.attention_sink_bias = spark;
  if (spark) dc.markov_rank = rank;
  json dcfg = {{"mask_token_id", 990 % V},
               {"target_layer_ids", taps},
               {"causal", spark},
               {"use_swa", spark},
               {"attention_sink_bias", spark},
               {"sample_from_anchor", false}};
  if (spark) dcfg["swa_window_size"] = 1024;
  std::vector<std::string> ltypes(size_t(n_layers), spark ? "sliding_attention" : "full_attention");
  std::vector<int64_t> eagle;
  for (auto x : taps) eagle.push_back(x + 1);
  json cfg = {{"architectures", {spark ? "Qwen3DSparkModel" : "DFlashDraftModel"}},
              {"model_type", "qwen3"},
              {"dtype", "bfloat16"},
              {"hidden_size", H},
              {"num_hidden_layers", n_layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", kvh},
              {"head_dim", hd},
              {"intermediate_size", inter},
              {"hidden_act", "silu"},
              {"rms_norm_eps", 1e-6},
              {"attention_bias", false},
              {"vocab_size", V},
              {"max_position_embeddings", 1048576},
              {"rope_theta", 10000},
              {"layer_types", ltypes},
              {"sliding_window", spark ? json(1024) : json(nullptr)},
              {"attention_sink_bias", spark},
              {"dflash_config", dcfg},
              {"target_layer_ids", taps},
              {"eagle_aux_hidden_state_layer_ids", eagle},
              {"num_aux_layers", ntaps},
              {"num_target_layers", L},
              {"mask_token_id", 990 % V},
              {"has_embed_tokens", true},
              {"has_lm_head", false},
              {"train_embed_tokens", false},
              {"draft_vocab_size", nullptr},
              {"sample_from_anchor", false}};
  if (spark) {
    cfg["block_size"] = 8;
    cfg["dspark_fixup_head_type"] = "markov";
    cfg["dspark_markov_rank"] = rank;
    cfg["markov_head_type"] = "vanilla";
    cfg["markov_rank"] = rank;
  } else {
    cfg["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 128.0}, {"original_max_position_embeddings", 8192},
                              {"rope_theta", 10000}};
  }
  // The keys stay sorted, as the release configs synth imitates were written.
  return {dc, nlohmann::ordered_json::parse(cfg.dump())};
}

std::vector<SynthTensor> drafter_layout(const io::DrafterConfig& d, const SynthOptions& opt) {
  std::vector<SynthTensor> v;
  for (const auto& s : model::layout::drafter_tensors(d))
    v.push_back(synth_tensor(s, opt.dense_drafter ? opt.dtype : DType::BF16));
  return v;
}

void write_drafter(const DrafterShape& shape, const std::string& dir, const SynthOptions& opt) {
  begin_checkpoint_dir(dir);
  const bool dense = opt.dense_drafter;
  const std::vector<SynthTensor> lay = drafter_layout(shape.config, opt);
  std::vector<Unit> units;
  std::vector<std::string> exclude;
  for (const auto& x : lay) {
    const bool q = !dense && (x.name == "fc.weight" || x.name.find(".mlp.") != std::string::npos ||
                              x.name == "markov_head.markov_w2.weight");
    units.push_back(q ? nvfp4_unit(x, opt) : dense_unit(x, opt));
    if (!q && x.shape.size() == 2) exclude.push_back(module_of(x.name));
  }
  exclude.push_back("lm_head");
  std::sort(exclude.begin(), exclude.end());
  write_units(units, dir, opt, false, true, "pt");
  nlohmann::ordered_json cfg = shape.config_json;
  cfg["dtype"] = dense ? torch_dtype_name(opt.dtype) : "bfloat16";
  if (cfg.contains("torch_dtype")) cfg["torch_dtype"] = cfg["dtype"];
  if (dense) {
    fs::remove(fs::path(dir) / "hf_quant_config.json");
  } else {
    json hfq = {{"producer", {{"name", "modelopt"}, {"version", "0.44.0rc5"}}},
                {"quantization",
                 {{"quant_algo", "W4A16_NVFP4"},
                  {"group_size", 16},
                  {"kv_cache_quant_algo", nullptr},
                  {"exclude_modules", exclude}}}};
    write_text(fs::path(dir) / "hf_quant_config.json", hfq.dump(2) + "\n");
  }
  write_text(fs::path(dir) / "config.json", dump_json_hf(cfg));  // last: the directory now loads
}

void write_drafter_checkpoint(DrafterKind kind, const io::ModelConfig& target,
                              const std::string& dir, const SynthOptions& opt) {
  write_drafter(drafter_shape(kind, target), dir, opt);
}

}  // namespace nemo::synth
