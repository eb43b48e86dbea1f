#include "synth/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/numeric.h"
#include "base/threads.h"

namespace nemo::synth {

namespace fs = std::filesystem;
using io::DType;
using io::LayerKind;
using json = nlohmann::json;

namespace {

// Real Lightning / Nano-30B schedule (spec §1.2).
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

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
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

void add_linear(std::vector<SynthTensor>& v, const std::string& p, int64_t out, int64_t in, DType dt) {
  v.push_back({p + ".weight", {out, in}, dt});
}

void add_moe(std::vector<SynthTensor>& v, const std::string& p, const io::ModelConfig& c, DType dt) {
  const int64_t H = c.hidden_size;
  add_linear(v, p + ".gate", c.n_routed_experts, H, dt);
  v.push_back({p + ".gate.e_score_correction_bias", {c.n_routed_experts}, DType::F32});
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    const std::string ep = p + ".experts." + std::to_string(e);
    add_linear(v, ep + ".up_proj", c.moe_intermediate_size, H, dt);
    add_linear(v, ep + ".down_proj", H, c.moe_intermediate_size, dt);
  }
  if (c.n_shared_experts > 0) {
    const int64_t FS = c.moe_shared_expert_intermediate_size * c.n_shared_experts;
    add_linear(v, p + ".shared_experts.up_proj", FS, H, dt);
    add_linear(v, p + ".shared_experts.down_proj", H, FS, dt);
  }
}

void add_attention(std::vector<SynthTensor>& v, const std::string& p, const io::ModelConfig& c, DType dt) {
  const int64_t H = c.hidden_size, QW = c.num_attention_heads * c.head_dim, KW = c.num_key_value_heads * c.head_dim;
  add_linear(v, p + ".q_proj", QW, H, dt);
  add_linear(v, p + ".k_proj", KW, H, dt);
  add_linear(v, p + ".v_proj", KW, H, dt);
  add_linear(v, p + ".o_proj", H, QW, dt);
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny-a", "tiny-b", "tiny-c", "lightning"}; }

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
  } else if (name == "lightning") {  // Nemotron 3.5 Lightning 30B-A3B dims (spec §1)
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
    fail("unknown preset '{}' (known: tiny-a, tiny-b, tiny-c, lightning)", name);
  }
  if (!pattern.empty()) pat = pattern;
  if (layers > 0) {
    if (size_t(layers) > pat.size()) fail("preset '{}' has {} layers; --layers {} is larger", name, pat.size(), layers);
    pat = pat.substr(0, size_t(layers));
  }
  c.layers = kinds(pat);
  return c;
}

std::vector<SynthTensor> checkpoint_layout(const io::ModelConfig& c, const SynthOptions& opt) {
  const DType dt = opt.dtype;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  std::vector<SynthTensor> v;
  v.push_back({"backbone.embeddings.weight", {V, H}, dt});
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const std::string lp = "backbone.layers." + std::to_string(i);
    v.push_back({lp + ".norm.weight", {H}, dt});
    const std::string mp = lp + ".mixer";
    switch (c.layers[i]) {
      case LayerKind::Mamba:
        add_linear(v, mp + ".in_proj", c.in_proj_dim(), H, dt);
        v.push_back({mp + ".conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, dt});
        if (c.use_conv_bias) v.push_back({mp + ".conv1d.bias", {c.conv_dim()}, dt});
        v.push_back({mp + ".dt_bias", {c.mamba_num_heads}, DType::F32});
        v.push_back({mp + ".A_log", {c.mamba_num_heads}, DType::F32});
        v.push_back({mp + ".D", {c.mamba_num_heads}, DType::F32});
        v.push_back({mp + ".norm.weight", {c.mamba_inner()}, dt});
        add_linear(v, mp + ".out_proj", H, c.mamba_inner(), dt);
        break;
      case LayerKind::Attention: add_attention(v, mp, c, dt); break;
      case LayerKind::MoE: add_moe(v, mp, c, dt); break;
      case LayerKind::MLP:
        add_linear(v, mp + ".up_proj", c.intermediate_size, H, dt);
        add_linear(v, mp + ".down_proj", H, c.intermediate_size, dt);
        break;
    }
  }
  v.push_back({"backbone.norm_f.weight", {H}, dt});
  if (!c.tie_word_embeddings) v.push_back({"lm_head.weight", {V, H}, dt});
  if (opt.mtp && c.num_nextn_predict_layers > 0) {
    // One MTP module flattened as mtp.layers.{0..n-1} (spec §6.1): eh_proj/enorm/hnorm on the
    // first sub-layer, final_layernorm on the last.
    const size_t n = c.mtp_layers.size();
    for (size_t s = 0; s < n; ++s) {
      const std::string lp = "mtp.layers." + std::to_string(s);
      if (s == 0) {
        v.push_back({lp + ".enorm.weight", {H}, dt});
        v.push_back({lp + ".hnorm.weight", {H}, dt});
        add_linear(v, lp + ".eh_proj", H, 2 * H, dt);
      }
      v.push_back({lp + ".norm.weight", {H}, dt});
      if (c.mtp_layers[s] == LayerKind::Attention) add_attention(v, lp + ".mixer", c, dt);
      else if (c.mtp_layers[s] == LayerKind::MoE) add_moe(v, lp + ".mixer", c, dt);
      else fail("synth: MTP sub-layer kind '{}' is not supported", io::layer_kind_name(c.mtp_layers[s]));
      if (s + 1 == n) v.push_back({lp + ".final_layernorm.weight", {H}, dt});
    }
  }
  return v;
}

namespace {

uint64_t tensor_bytes(const SynthTensor& t) {
  uint64_t n = 1;
  for (auto d : t.shape) n *= uint64_t(d);
  return n * uint64_t(io::dtype_bits(t.dtype)) / 8;
}

// Values are generated in blocks of 2^20 elements, each from its own stream seeded by
// (seed, name, block): deterministic whatever the thread count.
void fill_tensor(const SynthTensor& t, uint64_t seed, int threads, std::vector<uint8_t>& out) {
  const Init in = init_for(t.name, t.shape);
  const int64_t n = int64_t(tensor_bytes(t) * 8 / uint64_t(io::dtype_bits(t.dtype)));
  const int es = io::dtype_bits(t.dtype) / 8;
  out.resize(size_t(n) * size_t(es));
  constexpr int64_t kBlock = 1 << 20;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  const uint64_t base = hash_name(t.name, seed);
  ThreadConfig tc{threads};
  parallel_for(tc, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint64_t rng = base ^ (uint64_t(b) * 0xd1b54a32d192ed03ull);
      splitmix64(rng);
      const int64_t e = std::min(n, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < e; ++i) encode(t.dtype, draw(in, rng), out.data() + i * es);
    }
  });
}

std::string dump_config(const io::ModelConfig& c) {
  std::string s = io::model_config_to_json(c).dump(2);
  // Python's json writes float('inf') as a bare Infinity; do the same as real HF configs.
  const std::string q = "\"Infinity\"";
  for (size_t p = s.find(q); p != std::string::npos; p = s.find(q)) s.replace(p, q.size(), "Infinity");
  return s + "\n";
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) fail("{}: write failed", p.string());
}

}  // namespace

void write_checkpoint(const io::ModelConfig& c, const std::string& dir, const SynthOptions& opt) {
  fs::create_directories(dir);
  const auto layout = checkpoint_layout(c, opt);
  // Shard boundaries: greedy by bytes, tensors never split.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0, total = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const uint64_t b = tensor_bytes(layout[i]);
    if (cur > 0 && cur + b > opt.shard_bytes) {
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
  std::vector<uint8_t> buf;
  for (size_t s = 0; s < ns; ++s) {
    const std::string fname =
        ns == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, ns);
    io::SafetensorsWriter w((fs::path(dir) / fname).string());
    w.set_metadata("format", "pt");
    for (size_t i : shards[s]) {
      w.declare(layout[i].name, layout[i].dtype, layout[i].shape);
      weight_map[layout[i].name] = fname;
    }
    w.begin();
    for (size_t i : shards[s]) {
      fill_tensor(layout[i], opt.seed, opt.threads, buf);
      w.write(buf);
      done += buf.size();
      if (opt.progress) opt.progress(layout[i].name, done, total);
    }
    w.finish();
  }
  if (ns > 1) {
    json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(fs::path(dir) / "model.safetensors.index.json", idx.dump(2) + "\n");
  } else {
    fs::remove(fs::path(dir) / "model.safetensors.index.json");
  }
  write_text(fs::path(dir) / "config.json", dump_config(c));
  json gen = {{"_from_model_config", true}, {"bos_token_id", c.bos_token_id.value_or(1)}};
  if (c.eos_token_ids.size() == 1) gen["eos_token_id"] = c.eos_token_ids[0];
  else gen["eos_token_id"] = c.eos_token_ids;
  write_text(fs::path(dir) / "generation_config.json", gen.dump(2) + "\n");
}

}  // namespace nemo::synth
