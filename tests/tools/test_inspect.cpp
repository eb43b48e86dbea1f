// `nemotron inspect` core: counts on the full Lightning layout (never written to disk), JSON
// fields on synthetic checkpoints of every format, and the "cannot run" reasons (missing /
// misshapen / mis-quantized tensors, --require-mtp, drafter pairing).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/temp_dir.h"
#include "base/numeric.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/state.h"
#include "tools/inspect/inspect.h"
#include "tools/synth/synth.h"

using namespace nemo;
using json = nlohmann::json;
using io::DType;

namespace {

bool mentions(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x.find(s) != std::string::npos) return true;
  return false;
}

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& x : v) r += x + "\n";
  return r;
}

uint64_t sum_values(const json& obj) {
  uint64_t s = 0;
  for (const auto& [k, v] : obj.items()) s += v.get<uint64_t>();
  return s;
}

std::vector<inspect::InspectTensor> as_inspect(const std::vector<synth::SynthTensor>& layout) {
  std::vector<inspect::InspectTensor> v;
  for (const auto& t : layout)
    v.push_back({.name = t.name,
                 .dtype = t.dtype,
                 .shape = t.shape,
                 .nbytes = 0,
                 .file = {},
                 .data = nullptr});
  return v;
}

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Writes tensors with harmless bytes: zeros, except F8 block scales = 1.0 (0x38) and F32
// scalars = 1.0 (quant scales must be > 0).
void write_tensors(const std::string& path, const std::vector<Spec>& specs) {
  io::SafetensorsWriter w(path);
  for (const auto& s : specs) w.declare(s.name, s.dtype, s.shape);
  w.begin();
  for (const auto& s : specs) {
    int64_t n = 1;
    for (auto d : s.shape) n *= d;
    std::vector<uint8_t> b(static_cast<size_t>(n * io::dtype_bits(s.dtype) / 8), 0);
    if (s.dtype == DType::F8_E4M3) std::fill(b.begin(), b.end(), uint8_t(0x38));
    if (s.dtype == DType::F32 && n == 1) {
      const float one = 1.0f;
      std::memcpy(b.data(), &one, 4);
    }
    w.write(b);
  }
  w.finish();
}

void write_json(const std::string& path, const json& j) {
  std::ofstream f(path);
  f << j.dump(2);
}

// Rewrites DIR/model.safetensors: drops `drop` and reshapes `reshape` (to `shape`, zero-filled).
void rewrite(const std::string& dir, const std::string& drop, const std::string& reshape,
             std::vector<int64_t> shape) {
  const std::string path = dir + "/model.safetensors";
  std::vector<Spec> specs;
  {
    io::TensorStore st = io::TensorStore::open_file(path);
    for (const auto& n : st.names()) {
      if (n == drop) continue;
      const auto& v = st.get(n);
      specs.push_back({n, v.dtype, n == reshape ? shape : v.shape});
    }
  }
  write_tensors(path, specs);
}

inspect::InspectReport synth_report(const std::string& preset, const test::TempDir& d, DType dt,
                                    bool mtp = true) {
  synth::SynthOptions o;
  o.dtype = dt;
  o.mtp = mtp;
  synth::write_checkpoint(synth::preset_config(preset), d.path(), o);
  return inspect::inspect_dir(d.path());
}

}  // namespace

TEST(Inspect, LightningLayoutCounts) {
  const io::ModelConfig c = synth::preset_config("lightning");
  const auto tensors = as_inspect(synth::checkpoint_layout(c, {}));
  const inspect::InspectReport r =
      inspect::inspect_target(c, io::QuantConfig{}, tensors, "lightning-layout");
  EXPECT_TRUE(r.runnable()) << join(r.problems);
  const auto& p = r.params;
  // Spec nemotron_h.md §7: ≈31.6 B total, ≈3.2–3.6 B active depending on the embedding.
  EXPECT_NEAR(double(p.total), 31.6e9, 0.15e9);
  EXPECT_NEAR(double(p.moe_routed), 29.4e9, 0.1e9);
  EXPECT_NEAR(double(p.mamba), 0.89e9, 0.02e9);
  EXPECT_NEAR(double(p.attention), 0.14e9, 0.01e9);
  EXPECT_EQ(p.embedding, 131072LL * 2688);
  EXPECT_EQ(p.lm_head, 131072LL * 2688);
  EXPECT_GE(p.active_per_token, int64_t(3.2e9));
  EXPECT_LE(p.active_per_token_full_embedding, int64_t(3.6e9));
  EXPECT_EQ(p.active_per_token_full_embedding - p.active_per_token, p.embedding - 2688);
  EXPECT_EQ(p.moe_routed, 23LL * 128 * 2 * 1856 * 2688);
  // MTP: eh_proj + attention + a full 128-expert MoE layer + norms (≈2.67 GB in BF16).
  EXPECT_NEAR(double(p.mtp_total), 1.33e9, 0.03e9);
  EXPECT_LT(p.mtp_active_per_token, p.mtp_total / 10);
  EXPECT_TRUE(r.mtp.complete);
  EXPECT_EQ(r.mtp.sublayers, "*E");
  EXPECT_EQ(r.modules_by_format.at("bf16"), [&] {
    int64_t n = 0;
    for (const auto& t : tensors)
      n += t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    return n;
  }());
  // State: 23 Mamba layers × (3 conv rows × 6144 + 64·64·128 SSM) f32; 6 attention layers × K,V
  // 2·128 f32.
  EXPECT_EQ(r.state.mamba_conv, 23ull * 3 * 6144 * 4);
  EXPECT_EQ(r.state.mamba_ssm, 23ull * 64 * 64 * 128 * 4);
  EXPECT_EQ(r.state.kv_per_token, 6ull * 2 * 2 * 128 * 4);
  EXPECT_EQ(r.state.mtp_kv_per_token, 1ull * 2 * 2 * 128 * 4);
  EXPECT_EQ(r.tensor_bytes, r.used_bytes + r.mtp.bytes);
  EXPECT_NEAR(double(r.tensor_bytes), 2.0 * double(p.total + p.mtp_total), 1e6);
}

class InspectSynth : public testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(InspectSynth, JsonFields) {
  const auto& [preset, dt] = GetParam();
  test::TempDir d;
  const inspect::InspectReport r = synth_report(preset, d, dt);
  const io::ModelConfig c = synth::preset_config(preset);
  const json j = inspect::to_json(r, 100);
  ASSERT_EQ(j["schema_version"], inspect::kInspectSchemaVersion);
  EXPECT_EQ(j["kind"], "target");
  EXPECT_TRUE(j["runnable"].get<bool>()) << j["problems"].dump();
  EXPECT_TRUE(j["problems"].empty());
  EXPECT_EQ(j["architecture"]["pattern"], c.pattern());
  EXPECT_EQ(j["architecture"]["num_layers"], c.layers.size());
  EXPECT_EQ(j["architecture"]["layer_counts"]["mamba"], c.count(io::LayerKind::Mamba));
  EXPECT_EQ(j["architecture"]["layer_counts"]["attention"], c.count(io::LayerKind::Attention));
  EXPECT_EQ(j["architecture"]["layer_counts"]["moe"], c.count(io::LayerKind::MoE));
  EXPECT_EQ(j["architecture"]["layer_counts"]["mlp"], c.count(io::LayerKind::MLP));
  EXPECT_EQ(j["architecture"]["tensor_prefix"], "backbone.");
  EXPECT_EQ(j["quantization"]["format"], "none");

  // Bytes: by-format buckets add up to every tensor byte of the files.
  const io::TensorStore st = io::TensorStore::open_dir(d.path());
  EXPECT_EQ(j["tensors"]["bytes"].get<uint64_t>(), st.total_bytes());
  EXPECT_EQ(j["tensors"]["count"].get<size_t>(), st.names().size());
  EXPECT_EQ(sum_values(j["formats"]["bytes"]), st.total_bytes());
  EXPECT_EQ(j["tensors"]["unused_count"], 0);
  EXPECT_EQ(j["tensors"]["used_bytes"].get<uint64_t>() + j["mtp"]["bytes"].get<uint64_t>(),
            st.total_bytes());

  // Params: dense, so every element of every tensor is a parameter.
  int64_t backbone = 0, mtp = 0;
  for (const auto& n : st.names()) (n.rfind("mtp.", 0) == 0 ? mtp : backbone) += st.get(n).numel();
  EXPECT_EQ(j["parameters"]["total"].get<int64_t>(), backbone);
  EXPECT_EQ(j["parameters"]["mtp_total"].get<int64_t>(), mtp);
  EXPECT_EQ(sum_values(j["parameters"]["by_group"]), uint64_t(backbone));
  EXPECT_LT(j["parameters"]["active_per_token"].get<int64_t>(), backbone);

  const bool has_mtp = c.num_nextn_predict_layers > 0;
  EXPECT_EQ(j["mtp"]["present"].get<bool>(), has_mtp);
  EXPECT_EQ(j["mtp"]["complete"].get<bool>(), has_mtp);
  EXPECT_EQ(j["mtp"]["declared_modules"], c.num_nextn_predict_layers);

  // State matches what the runtime allocates.
  const model::SequenceState s(c);
  EXPECT_EQ(j["state"]["fixed_bytes"].get<size_t>(), s.fixed_bytes());
  EXPECT_EQ(j["state"]["kv_bytes_per_token"].get<size_t>(), s.kv_bytes_per_token());
  EXPECT_EQ(
      j["memory"]["resident_bytes"].get<uint64_t>(),
      j["tensors"]["used_bytes"].get<uint64_t>() + s.fixed_bytes() + 100 * s.kv_bytes_per_token());
  EXPECT_FALSE(inspect::to_text(r).empty());
}

INSTANTIATE_TEST_SUITE_P(Presets, InspectSynth,
                         testing::Combine(testing::Values("tiny-a", "tiny-b", "tiny-c"),
                                          testing::Values(DType::BF16, DType::F32)));

TEST(Inspect, MissingAndMisshapenTensors) {
  test::TempDir d;
  synth_report("tiny-a", d, DType::BF16);
  const io::ModelConfig c = synth::preset_config("tiny-a");
  rewrite(d.path(), "backbone.layers.0.mixer.out_proj.weight",
          "backbone.layers.1.mixer.k_proj.weight",
          {c.num_key_value_heads * c.head_dim + 1, c.hidden_size});
  const inspect::InspectReport r = inspect::inspect_dir(d.path());
  EXPECT_FALSE(r.runnable());
  EXPECT_TRUE(mentions(r.problems, "missing tensor backbone.layers.0.mixer.out_proj.weight"))
      << join(r.problems);
  EXPECT_TRUE(mentions(r.problems, "backbone.layers.1.mixer.k_proj")) << join(r.problems);
  const json j = inspect::to_json(r);
  EXPECT_FALSE(j["runnable"].get<bool>());
  EXPECT_EQ(j["problems"].size(), 2u);
}

TEST(Inspect, RequireMtp) {
  {
    test::TempDir d;
    inspect::InspectReport r = synth_report("tiny-b", d, DType::BF16);
    EXPECT_TRUE(r.runnable());
    inspect::apply_requirements(r, {.mtp = true});
    EXPECT_FALSE(r.runnable());
    EXPECT_TRUE(mentions(r.problems, "--require-mtp")) << join(r.problems);
  }
  {
    test::TempDir d;
    inspect::InspectReport r = synth_report("tiny-a", d, DType::BF16);
    inspect::apply_requirements(r, {.mtp = true});
    EXPECT_TRUE(r.runnable()) << join(r.problems);
  }
  {  // declared but dropped (as MLX conversions do): runnable, but no MTP
    test::TempDir d;
    inspect::InspectReport r = synth_report("tiny-a", d, DType::BF16, /*mtp=*/false);
    EXPECT_TRUE(r.runnable()) << join(r.problems);
    EXPECT_FALSE(r.mtp.complete);
    inspect::apply_requirements(r, {.mtp = true});
    EXPECT_TRUE(mentions(r.problems, "no mtp.* tensors")) << join(r.problems);
  }
  {  // partially present: names the missing tensor
    test::TempDir d;
    synth_report("tiny-a", d, DType::BF16);
    rewrite(d.path(), "mtp.layers.0.eh_proj.weight", "", {});
    inspect::InspectReport r = inspect::inspect_dir(d.path());
    EXPECT_TRUE(r.runnable());
    inspect::apply_requirements(r, {.mtp = true});
    EXPECT_TRUE(mentions(r.problems, "mtp.layers.0.eh_proj.weight")) << join(r.problems);
  }
}

TEST(Inspect, NotACheckpoint) {
  test::TempDir d;
  inspect::InspectReport r = inspect::inspect_dir(d.path());
  EXPECT_FALSE(r.runnable());
  EXPECT_TRUE(mentions(r.problems, "config.json")) << join(r.problems);
  write_json(d.file("config.json"),
             {{"model_type", "llama"}, {"architectures", {"LlamaForCausalLM"}}});
  r = inspect::inspect_dir(d.path());
  EXPECT_TRUE(mentions(r.problems, "unrecognised checkpoint")) << join(r.problems);
  EXPECT_EQ(inspect::to_json(r)["kind"], "unknown");
}

// ---- Hand-built quantized checkpoints (independent of the synth writer's formats) ----

namespace {

// A one-layer "E" model of tiny-a widths: H 64, 8 experts × F 32, shared 48.
io::ModelConfig e_config() {
  io::ModelConfig c = synth::preset_config("tiny-a", 0, "E");
  c.num_nextn_predict_layers = 0;
  c.mtp_layers.clear();
  return c;
}

void write_config(const std::string& dir, const io::ModelConfig& c,
                  const json& extra = json::object()) {
  json j = io::model_config_to_json(c);
  for (const auto& [k, v] : extra.items()) j[k] = v;
  write_json(dir + "/config.json", j);
}

// NVFP4 W4A16 experts (per expert, ModelOpt names), everything else bf16.
void write_nvfp4_e(const std::string& dir, bool drop_scale2) {
  const io::ModelConfig c = e_config();
  std::vector<Spec> specs;
  json layers = json::object();
  synth::SynthOptions o;
  o.mtp = false;
  for (const auto& t : synth::checkpoint_layout(c, o)) {
    const bool expert = t.name.find(".experts.") != std::string::npos;
    if (!expert) {
      specs.push_back({t.name, t.dtype, t.shape});
      continue;
    }
    const std::string m = t.name.substr(0, t.name.size() - 7);
    const int64_t out = t.shape[0], in = t.shape[1];
    specs.push_back({m + ".weight", DType::U8, {out, in / 2}});
    specs.push_back({m + ".weight_scale", DType::F8_E4M3, {out, in / 16}});
    if (!(drop_scale2 && m == "backbone.layers.0.mixer.experts.3.down_proj"))
      specs.push_back({m + ".weight_scale_2", DType::F32, {}});
    layers[m] = {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
  }
  write_tensors(dir + "/model.safetensors", specs);
  write_config(dir, c);
  write_json(dir + "/hf_quant_config.json",
             {{"producer", {{"name", "modelopt"}, {"version", "test"}}},
              {"quantization",
               {{"quant_algo", "MIXED_PRECISION"},
                {"quantized_layers", layers},
                {"exclude_modules", {"backbone.embeddings", "mtp*"}}}}});
}

}  // namespace

TEST(Inspect, HandBuiltNvfp4) {
  test::TempDir d;
  write_nvfp4_e(d.path(), false);
  const io::ModelConfig c = e_config();
  const inspect::InspectReport r = inspect::inspect_dir(d.path());
  ASSERT_TRUE(r.runnable()) << join(r.problems);
  EXPECT_EQ(r.modules_by_format.at("nvfp4"), 2 * c.n_routed_experts);
  const json j = inspect::to_json(r);
  EXPECT_EQ(j["quantization"]["format"], "modelopt");
  EXPECT_EQ(j["quantization"]["algo"], "MIXED_PRECISION");
  // Logical params equal the dense layout's; packed bytes are 4.5 bits per routed weight.
  synth::SynthOptions o;
  o.mtp = false;
  int64_t dense = 0;
  for (const auto& t : synth::checkpoint_layout(c, o)) {
    int64_t n = 1;
    for (auto s : t.shape) n *= s;
    dense += n;
  }
  EXPECT_EQ(r.params.total, dense);
  const uint64_t routed =
      uint64_t(c.n_routed_experts * 2 * c.moe_intermediate_size * c.hidden_size);
  EXPECT_EQ(r.bytes_by_format.at("nvfp4"),
            routed / 2 + routed / 16 + uint64_t(2 * c.n_routed_experts) * 4);
  EXPECT_EQ(sum_values(j["formats"]["bytes"]), io::TensorStore::open_dir(d.path()).total_bytes());
}

TEST(Inspect, HandBuiltNvfp4MissingScaleNamesModule) {
  test::TempDir d;
  write_nvfp4_e(d.path(), true);
  const inspect::InspectReport r = inspect::inspect_dir(d.path());
  EXPECT_FALSE(r.runnable());
  EXPECT_TRUE(mentions(r.problems, "backbone.layers.0.mixer.experts.3.down_proj.weight_scale_2"))
      << join(r.problems);
}

TEST(Inspect, HandBuiltMlxSwitchMlp) {
  test::TempDir d;
  const io::ModelConfig c = e_config();
  const int64_t H = c.hidden_size, F = c.moe_intermediate_size, E = c.n_routed_experts, g = 32;
  std::vector<Spec> specs;
  synth::SynthOptions o;
  o.mtp = false;
  for (const auto& t : synth::checkpoint_layout(c, o))
    if (t.name.find(".experts.") == std::string::npos) specs.push_back({t.name, t.dtype, t.shape});
  const std::string p = "backbone.layers.0.mixer.switch_mlp.";
  for (const auto& [m, out, in] : {std::tuple{p + "fc1", F, H}, {p + "fc2", H, F}}) {
    specs.push_back({m + ".weight", DType::U32, {E, out, in * 4 / 32}});
    specs.push_back({m + ".scales", DType::BF16, {E, out, in / g}});
    specs.push_back({m + ".biases", DType::BF16, {E, out, in / g}});
  }
  write_tensors(d.file("model.safetensors"), specs);
  write_config(d.path(), c,
               {{"quantization", {{"group_size", g}, {"bits", 4}, {"mode", "affine"}}}});
  const inspect::InspectReport r = inspect::inspect_dir(d.path());
  ASSERT_TRUE(r.runnable()) << join(r.problems);
  EXPECT_EQ(r.modules_by_format.at("affine4"), 2);
  EXPECT_EQ(r.params.moe_routed, 2 * E * F * H);
  EXPECT_EQ(r.params.active_per_token - r.params.moe_routed / E * c.num_experts_per_tok,
            r.params.total - r.params.moe_routed - r.params.embedding + H);
  EXPECT_EQ(inspect::to_json(r)["quantization"]["format"], "mlx");

  // Stacked experts with the wrong expert count are named.
  specs.erase(
      std::remove_if(specs.begin(), specs.end(),
                     [&](const Spec& s) { return s.name.find("fc2") != std::string::npos; }),
      specs.end());
  for (const char* s : {".weight", ".scales", ".biases"})
    specs.push_back({p + "fc2" + s,
                     s[1] == 'w' ? DType::U32 : DType::BF16,
                     {E - 1, H, s[1] == 'w' ? F * 4 / 32 : F / g}});
  write_tensors(d.file("model.safetensors"), specs);
  const inspect::InspectReport bad = inspect::inspect_dir(d.path());
  EXPECT_FALSE(bad.runnable());
  EXPECT_TRUE(mentions(bad.problems, "switch_mlp.fc2")) << join(bad.problems);
}

// ---- Drafters ----

namespace {

json dflash_config(const io::ModelConfig& t, std::vector<int64_t> taps) {
  return {{"architectures", {"DFlashDraftModel"}},
          {"model_type", "qwen3"},
          {"hidden_size", t.hidden_size},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"intermediate_size", 96},
          {"vocab_size", t.vocab_size},
          {"has_embed_tokens", true},
          {"has_lm_head", false},
          {"dflash_config", {{"mask_token_id", 5}, {"target_layer_ids", taps}, {"causal", false}}}};
}

void write_dflash(const std::string& dir, const io::ModelConfig& t, std::vector<int64_t> taps) {
  const int64_t H = t.hidden_size, V = t.vocab_size, I = 96;
  std::vector<Spec> s = {{"embed_tokens.weight", DType::BF16, {V, H}},
                         {"fc.weight", DType::BF16, {H, int64_t(taps.size()) * H}},
                         {"hidden_norm.weight", DType::BF16, {H}},
                         {"norm.weight", DType::BF16, {H}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm"})
      s.push_back({p + n + ".weight", DType::BF16, {H}});
    s.push_back({p + "self_attn.q_proj.weight", DType::BF16, {64, H}});
    s.push_back({p + "self_attn.k_proj.weight", DType::BF16, {32, H}});
    s.push_back({p + "self_attn.v_proj.weight", DType::BF16, {32, H}});
    s.push_back({p + "self_attn.o_proj.weight", DType::BF16, {H, 64}});
    s.push_back({p + "self_attn.q_norm.weight", DType::BF16, {16}});
    s.push_back({p + "self_attn.k_norm.weight", DType::BF16, {16}});
    s.push_back({p + "mlp.gate_proj.weight", DType::BF16, {I, H}});
    s.push_back({p + "mlp.up_proj.weight", DType::BF16, {I, H}});
    s.push_back({p + "mlp.down_proj.weight", DType::BF16, {H, I}});
  }
  write_tensors(dir + "/model.safetensors", s);
  write_json(dir + "/config.json", dflash_config(t, taps));
}

}  // namespace

TEST(Inspect, HandBuiltDrafterPairing) {
  test::TempDir target, good, bad_taps;
  synth_report("tiny-a", target, DType::BF16);
  const io::ModelConfig c = synth::preset_config("tiny-a");
  write_dflash(good.path(), c, {1, 3, 5});
  write_dflash(bad_taps.path(), c, {1, 6});

  const inspect::InspectReport dr = inspect::inspect_dir(good.path());
  ASSERT_TRUE(dr.runnable()) << join(dr.problems);
  ASSERT_TRUE(dr.drafter.has_value());
  EXPECT_EQ(dr.drafter->kind, "dflash");
  EXPECT_EQ(dr.drafter->target_layer_ids, (std::vector<int64_t>{1, 3, 5}));
  const json dj = inspect::to_json(dr);
  EXPECT_EQ(dj["kind"], "drafter");
  EXPECT_EQ(dj["drafter"]["num_layers"], 2);
  EXPECT_EQ(dj["drafter"]["mask_token_id"], 5);
  EXPECT_TRUE(dj["architecture"].is_null());
  EXPECT_EQ(sum_values(dj["formats"]["bytes"]),
            io::TensorStore::open_dir(good.path()).total_bytes());

  inspect::InspectReport t = inspect::inspect_dir(target.path());
  inspect::pair_drafter(t, inspect::inspect_dir(good.path()));
  EXPECT_TRUE(t.runnable()) << join(t.problems);
  json j = inspect::to_json(t);
  EXPECT_TRUE(j["pairing"]["ok"].get<bool>());
  EXPECT_EQ(j["draft"]["kind"], "drafter");

  inspect::InspectReport t2 = inspect::inspect_dir(target.path());
  inspect::pair_drafter(t2, inspect::inspect_dir(bad_taps.path()));
  EXPECT_FALSE(t2.runnable());
  EXPECT_TRUE(mentions(t2.problems, "out of range: [6]")) << join(t2.problems);
  EXPECT_FALSE(inspect::to_json(t2)["pairing"]["ok"].get<bool>());

  // Hidden-size mismatch (target tiny-b: hidden 96).
  test::TempDir tb;
  synth_report("tiny-b", tb, DType::BF16);
  inspect::InspectReport t3 = inspect::inspect_dir(tb.path());
  inspect::pair_drafter(t3, inspect::inspect_dir(good.path()));
  EXPECT_TRUE(mentions(t3.problems, "hidden_size")) << join(t3.problems);

  // A target passed as --draft, and an unknown drafter config.
  inspect::InspectReport t4 = inspect::inspect_dir(target.path());
  inspect::pair_drafter(t4, inspect::inspect_dir(target.path()));
  EXPECT_TRUE(mentions(t4.problems, "not a recognised drafter")) << join(t4.problems);
  json unk = dflash_config(c, {1});
  unk.erase("dflash_config");
  unk["architectures"] = {"MysteryDraftModel"};
  write_json(good.file("config.json"), unk);
  EXPECT_TRUE(mentions(inspect::inspect_dir(good.path()).problems, "unrecognised")) << "";
}

// ---- The synth writer's quantized formats and drafters ----

TEST(Inspect, SynthFormatsAndDrafters) {
  const io::ModelConfig c = synth::preset_config("tiny-q");
  test::TempDir dense;
  synth::SynthOptions o;
  synth::write_checkpoint(c, dense.path(), o);
  const inspect::InspectReport base = inspect::inspect_dir(dense.path());
  ASSERT_TRUE(base.runnable()) << join(base.problems);
  for (const auto& [fmt, bucket, algo] : {std::tuple{"modelopt", "nvfp4", "modelopt"},
                                          {"mlx4", "affine4", "mlx"},
                                          {"mlx8", "affine8", "mlx"}}) {
    SCOPED_TRACE(fmt);
    test::TempDir d;
    synth::SynthOptions q;
    q.format = synth::parse_synth_format(fmt);
    synth::write_checkpoint(c, d.path(), q);
    const inspect::InspectReport r = inspect::inspect_dir(d.path());
    EXPECT_TRUE(r.runnable()) << join(r.problems);
    const json j = inspect::to_json(r);
    EXPECT_EQ(j["quantization"]["format"], algo);
    EXPECT_GT(r.modules_by_format.count(bucket) ? r.modules_by_format.at(bucket) : 0, 0);
    EXPECT_EQ(sum_values(j["formats"]["bytes"]), io::TensorStore::open_dir(d.path()).total_bytes());
    // Same model, other storage: the logical parameter counts do not change.
    EXPECT_EQ(r.params.total, base.params.total);
    EXPECT_EQ(r.params.active_per_token, base.params.active_per_token);
    if (r.mtp.tensors > 0) {
      EXPECT_EQ(r.params.mtp_total, base.params.mtp_total);
    }
    EXPECT_EQ(r.state.fixed(), base.state.fixed());
    // The text names the kernels this CPU runs, and --arith bf16's only where NVFP4, FP8 or bf16
    // layers exist (ModelOpt's: all three; MLX here: affine and f32 only).
    const std::string text = inspect::to_text(r);
    EXPECT_NE(text.find(std::string("kernels      ") + kernels::isa_name(kernels::active_isa())),
              std::string::npos);
    const auto count = [&](const char* f) {
      return r.modules_by_format.count(f) ? r.modules_by_format.at(f) : 0;
    };
    EXPECT_EQ(text.find("NVFP4/FP8/bf16 with --arith bf16: ") != std::string::npos,
              count("nvfp4") + count("fp8") + count("bf16") > 0)
        << text;
    EXPECT_EQ(std::string(bucket) == "nvfp4", count("nvfp4") > 0);
  }
  EXPECT_EQ(inspect::to_text(base).find("--arith bf16") != std::string::npos,
            base.modules_by_format.count("bf16") > 0);
  for (const char* kind : {"dflash", "dspark"}) {
    SCOPED_TRACE(kind);
    test::TempDir d;
    synth::write_drafter_checkpoint(synth::parse_drafter_kind(kind), c, d.path(), o);
    inspect::InspectReport t = inspect::inspect_dir(dense.path());
    inspect::pair_drafter(t, inspect::inspect_dir(d.path()));
    EXPECT_TRUE(t.runnable()) << join(t.problems);
    const json j = inspect::to_json(t);
    EXPECT_TRUE(j["pairing"]["ok"].get<bool>());
    EXPECT_EQ(j["draft"]["drafter"]["kind"], kind);
    EXPECT_GT(j["draft"]["formats"]["modules"]["nvfp4"].get<int64_t>(), 0);
  }
}
