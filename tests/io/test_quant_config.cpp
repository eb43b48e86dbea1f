// Quantization config parsing, per-module resolution (spec/formats.md §4.5) and tensor
// cross-checks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/error_of.h"
#include "base/error.h"
#include "io/quant_config.h"

using namespace nemo;
using namespace nemo::io;
using nlohmann::json;

namespace {

// A config shaped like Lightning's hf_quant_config.json (formats.md §4.2), trimmed to a few layers:
// layer 0 Mamba (FP8 in/out_proj), layer 1 MoE (NVFP4 experts), layer 5 attention (BF16).
json lightning_hf_quant() {
  json layers = json::object();
  layers["backbone.layers.0.mixer.in_proj"] = {{"quant_algo", "FP8"}};
  layers["backbone.layers.0.mixer.out_proj"] = {{"quant_algo", "FP8"}};
  for (int e = 0; e < 4; ++e) {
    layers["backbone.layers.1.mixer.experts." + std::to_string(e) + ".down_proj"] = {
        {"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
    layers["backbone.layers.1.mixer.experts." + std::to_string(e) + ".up_proj"] = {
        {"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
  }
  layers["backbone.layers.1.mixer.shared_experts.down_proj"] = {{"quant_algo", "W4A16_NVFP4"},
                                                                {"group_size", 16}};
  layers["backbone.layers.1.mixer.shared_experts.up_proj"] = {{"quant_algo", "W4A16_NVFP4"},
                                                              {"group_size", 16}};
  layers["lm_head"] = {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}};
  return {
      {"producer", {{"name", "modelopt"}, {"version", "0.44.0rc5"}}},
      {"quantization",
       {{"quant_algo", "MIXED_PRECISION"},
        {"kv_cache_quant_algo", "FP8"},
        {"quantized_layers", layers},
        {"exclude_modules",
         {"backbone.embeddings", "backbone.layers.0.mixer.conv1d", "backbone.layers.1.mixer.gate",
          "backbone.layers.5.mixer.k_proj", "backbone.layers.5.mixer.o_proj",
          "backbone.layers.5.mixer.q_proj", "backbone.layers.5.mixer.v_proj", "mtp*"}}}}};
}

// The converted config.json form (formats.md §4.3) of the same information.
json lightning_config_json(bool with_layers = true) {
  const json q = lightning_hf_quant()["quantization"];
  json fp8_targets = json::array(), fp4_targets = json::array();
  for (const auto& [k, v] : q["quantized_layers"].items())
    (v["quant_algo"] == "FP8" ? fp8_targets : fp4_targets).push_back(k);
  json qc = {
      {"config_groups",
       {{"group_0",
         {{"input_activations", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
          {"weights", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
          {"targets", fp8_targets}}},
        {"group_1",
         {{"weights", {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
          {"targets", fp4_targets}}}}},
      {"ignore", q["exclude_modules"]},
      {"quant_algo", "MIXED_PRECISION"},
      {"kv_cache_scheme", {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}},
      {"producer", {{"name", "modelopt"}, {"version", "0.44.0rc5"}}},
      {"quant_method", "modelopt"}};
  if (with_layers) qc["quantized_layers"] = q["quantized_layers"];
  return {{"model_type", "nemotron_h"}, {"hidden_size", 2688}, {"quantization_config", qc}};
}

// A fake tensor store for check_module.
struct Store {
  std::map<std::string, TensorInfo> t;
  std::map<std::string, std::vector<uint8_t>> bytes;
  void add(const std::string& name, DType d, std::vector<int64_t> shape,
           const std::string& file = "model-00001.safetensors") {
    t[name] = TensorInfo{d, std::move(shape), file, nullptr};
  }
  void add_scalar(const std::string& name, float v,
                  const std::string& file = "model-00001.safetensors") {
    auto& b = bytes[name];
    b.resize(4);
    std::memcpy(b.data(), &v, 4);
    t[name] = TensorInfo{DType::F32, {}, file, b.data()};
  }
  void add_nvfp4(const std::string& m, int64_t out, int64_t in) {
    add(m + ".weight", DType::U8, {out, in / 2});
    auto& s = bytes[m + ".weight_scale"];
    s.assign(size_t(out * in / 16), 0x38);
    t[m + ".weight_scale"] =
        TensorInfo{DType::F8_E4M3, {out, in / 16}, "model-00002.safetensors", s.data()};
    add_scalar(m + ".weight_scale_2", 0.001f);
  }
  void add_fp8(const std::string& m, int64_t out, int64_t in) {
    add(m + ".weight", DType::F8_E4M3, {out, in});
    add_scalar(m + ".weight_scale", 0.01f);
    add_scalar(m + ".input_scale", 0.05f);
  }
  TensorLookup lookup() const {
    return [this](const std::string& n) -> std::optional<TensorInfo> {
      auto it = t.find(n);
      if (it == t.end()) return std::nullopt;
      return it->second;
    };
  }
};

using nemo::test::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(Glob, FnmatchSemantics) {
  EXPECT_TRUE(glob_match("mtp*", "mtp.layers.0.mixer.q_proj"));
  EXPECT_TRUE(glob_match("mtp*", "mtp"));
  EXPECT_FALSE(glob_match("mtp*", "backbone.mtp"));
  EXPECT_TRUE(glob_match("*.mixer.gate", "backbone.layers.1.mixer.gate"));
  EXPECT_FALSE(glob_match("*.mixer.gate", "backbone.layers.1.mixer.gate_proj"));
  EXPECT_TRUE(glob_match("*layers.?.mixer*", "backbone.layers.5.mixer.q_proj"));
  EXPECT_FALSE(glob_match("*layers.?.mixer*", "backbone.layers.12.mixer.q_proj"));
  EXPECT_TRUE(glob_match("*.[qkv]_proj", "a.k_proj"));
  EXPECT_FALSE(glob_match("*.[!qkv]_proj", "a.k_proj"));
  EXPECT_TRUE(glob_match("*.[a-c]", "x.b"));
  EXPECT_TRUE(glob_match("lm_head", "lm_head"));
  EXPECT_FALSE(glob_match("lm_head", "lm_head.x"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYbZc"));
  EXPECT_FALSE(glob_match("a*b*c", "aXXbYY"));
}

TEST(QuantConfig, LightningHfQuantConfig) {
  const json h = lightning_hf_quant();
  const QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  EXPECT_EQ(qc.format, QuantFormat::ModelOpt);
  EXPECT_EQ(qc.global_algo, "MIXED_PRECISION");
  EXPECT_EQ(qc.kv_cache_algo, "FP8");
  EXPECT_EQ(qc.producer, "modelopt 0.44.0rc5");
  EXPECT_EQ(qc.layers.size(), 13u);

  auto q = qc.resolve("backbone.layers.1.mixer.experts.3.up_proj");
  EXPECT_EQ(q.algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_TRUE(q.declared);
  EXPECT_EQ(qc.resolve("backbone.layers.0.mixer.in_proj").algo, QuantAlgo::FP8);
  EXPECT_EQ(qc.resolve("lm_head").algo, QuantAlgo::W4A16_NVFP4);
  // Siblings of FP8 modules stay unquantized (the vLLM "parent/sibling" bug, formats.md §4.5).
  for (const char* m : {"backbone.layers.0.mixer.conv1d", "backbone.layers.0.mixer.norm",
                        "backbone.layers.1.mixer.gate", "backbone.layers.5.mixer.q_proj",
                        "backbone.embeddings", "backbone.layers.1.mixer.experts",
                        "backbone.layers.1.mixer.experts.9.up_proj", "backbone.layers.0.mixer"})
    EXPECT_EQ(qc.resolve(m).algo, QuantAlgo::None) << m;
  EXPECT_TRUE(qc.resolve("backbone.layers.0.mixer.conv1d").excluded);
  EXPECT_FALSE(qc.resolve("backbone.layers.0.mixer.norm").excluded);
  // "mtp*" excludes the whole MTP block.
  EXPECT_TRUE(qc.resolve("mtp.layers.1.mixer.experts.0.up_proj").excluded);
  EXPECT_EQ(*qc.excluded_by("mtp.layers.0.eh_proj"), "mtp*");
}

TEST(QuantConfig, ConfigJsonFormAgreesAndRebuildsFromGroups) {
  const json h = lightning_hf_quant();
  for (bool with_layers : {true, false}) {
    const json c = lightning_config_json(with_layers);
    const QuantConfig only_cfg = parse_quant_config(nullptr, "", &c, "config.json");
    const QuantConfig both = parse_quant_config(&h, "hf_quant_config.json", &c, "config.json");
    const QuantConfig only_hf = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
    EXPECT_EQ(only_cfg.kv_cache_algo, "FP8");
    EXPECT_EQ(only_cfg.layers.size(), only_hf.layers.size());
    for (const auto& [k, v] : only_hf.layers) {
      EXPECT_EQ(only_cfg.resolve(k).algo, v.algo) << k;
      EXPECT_EQ(both.resolve(k).algo, v.algo) << k;
    }
    EXPECT_EQ(only_cfg.exclude, only_hf.exclude);
    EXPECT_EQ(both.exclude, only_hf.exclude);
    EXPECT_TRUE(contains(both.source, "hf_quant_config.json") &&
                contains(both.source, "config.json"));
  }
}

TEST(QuantConfig, DisagreeingFilesFail) {
  const json h = lightning_hf_quant();
  json c = lightning_config_json();
  c["quantization_config"]["quantized_layers"]["lm_head"]["quant_algo"] = "FP8";
  const std::string e =
      error_of([&] { parse_quant_config(&h, "hf_quant_config.json", &c, "config.json"); });
  EXPECT_TRUE(contains(e, "lm_head")) << e;
  c = lightning_config_json();
  c["quantization_config"]["quantized_layers"].erase("lm_head");
  EXPECT_THROW(parse_quant_config(&h, "hf_quant_config.json", &c, "config.json"), nemo::Error);
}

TEST(QuantConfig, UnknownAlgorithmsNameModuleAndFile) {
  json h = lightning_hf_quant();
  h["quantization"]["quantized_layers"]["backbone.layers.0.mixer.in_proj"]["quant_algo"] =
      "INT4_AWQ";
  const std::string e =
      error_of([&] { parse_quant_config(&h, "/ckpt/hf_quant_config.json", nullptr, ""); });
  EXPECT_TRUE(contains(e, "backbone.layers.0.mixer.in_proj")) << e;
  EXPECT_TRUE(contains(e, "/ckpt/hf_quant_config.json")) << e;
  EXPECT_TRUE(contains(e, "INT4_AWQ")) << e;
  json g = {{"quantization", {{"quant_algo", "W4A8_AWQ"}}}};
  EXPECT_TRUE(
      contains(error_of([&] { parse_quant_config(&g, "x.json", nullptr, ""); }), "W4A8_AWQ"));
  json c = {{"quantization_config", {{"quant_method", "compressed-tensors"}}}};
  EXPECT_TRUE(contains(error_of([&] { parse_quant_config(nullptr, "", &c, "config.json"); }),
                       "compressed-tensors"));
  json bad_group = lightning_hf_quant();
  bad_group["quantization"]["quantized_layers"]["lm_head"]["group_size"] = 32;
  EXPECT_TRUE(contains(error_of([&] { parse_quant_config(&bad_group, "h.json", nullptr, ""); }),
                       "lm_head"));
  json mixed_no_layers = {{"quantization", {{"quant_algo", "MIXED_PRECISION"}}}};
  EXPECT_THROW(parse_quant_config(&mixed_no_layers, "h.json", nullptr, ""), nemo::Error);
  json kv = lightning_hf_quant();
  kv["quantization"]["kv_cache_quant_algo"] = "INT8";
  EXPECT_THROW(parse_quant_config(&kv, "h.json", nullptr, ""), nemo::Error);
}

TEST(QuantConfig, ListedAndExcludedIsAnError) {
  json h = lightning_hf_quant();
  h["quantization"]["exclude_modules"].push_back("lm_*");
  const QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  const std::string e = error_of([&] { qc.resolve("lm_head"); });
  EXPECT_TRUE(contains(e, "lm_head") && contains(e, "lm_*")) << e;
}

TEST(QuantConfig, SingleAlgoDrafterStyle) {
  const json h = {{"producer", {{"name", "modelopt"}}},
                  {"quantization",
                   {{"quant_algo", "W4A16_NVFP4"},
                    {"group_size", 16},
                    {"kv_cache_quant_algo", nullptr},
                    {"exclude_modules", {"lm_head", "*norm*", "embed_tokens"}}}}};
  const QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  EXPECT_EQ(qc.kv_cache_algo, "");
  EXPECT_EQ(qc.resolve("layers.0.self_attn.q_proj").algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_FALSE(qc.resolve("layers.0.self_attn.q_proj").declared);
  EXPECT_EQ(qc.resolve("lm_head").algo, QuantAlgo::None);
  EXPECT_EQ(qc.resolve("layers.0.input_layernorm").algo, QuantAlgo::None);
  // Implied (not listed) modules are decided by their dtype: a BF16 `fc` is just unquantized.
  Store s;
  s.add("fc.weight", DType::BF16, {2688, 5376});
  s.add_nvfp4("layers.0.self_attn.q_proj", 4096, 2688);
  EXPECT_EQ(check_module(qc, "fc", s.lookup()).quant.algo, QuantAlgo::None);
  const CheckedModule m = check_module(qc, "layers.0.self_attn.q_proj", s.lookup());
  EXPECT_EQ(m.quant.algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(m.out, 4096);
  EXPECT_EQ(m.in, 2688);
  EXPECT_EQ(m.weight_scale, 0.001f);
}

TEST(QuantConfig, FusedMembersMustAgree) {
  const json h = lightning_hf_quant();
  const QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  const std::vector<std::string> qkv = {"backbone.layers.5.mixer.q_proj",
                                        "backbone.layers.5.mixer.k_proj",
                                        "backbone.layers.5.mixer.v_proj"};
  EXPECT_EQ(qc.resolve_fused(qkv).algo, QuantAlgo::None);
  std::vector<std::string> experts;
  for (int e = 0; e < 4; ++e)
    experts.push_back("backbone.layers.1.mixer.experts." + std::to_string(e) + ".up_proj");
  EXPECT_EQ(qc.resolve_fused(experts).algo, QuantAlgo::W4A16_NVFP4);
  experts.push_back("backbone.layers.1.mixer.experts.4.up_proj");  // not listed -> unquantized
  const std::string e = error_of([&] { qc.resolve_fused(experts); });
  EXPECT_TRUE(contains(e, "experts.4.up_proj")) << e;
}

TEST(QuantConfig, ChildrenOfAFusedModule) {
  json h = lightning_hf_quant();
  QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  EXPECT_EQ(qc.resolve_children("backbone.layers.1.mixer.experts").algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(qc.resolve_children("backbone.layers.1.mixer.shared_experts").algo,
            QuantAlgo::W4A16_NVFP4);
  // Nothing below the prefix: the prefix itself decides (never a sibling such as in_proj).
  EXPECT_EQ(qc.resolve_children("backbone.layers.0.mixer.conv1d").algo, QuantAlgo::None);
  EXPECT_EQ(qc.resolve_children("backbone.layers.0.mixer.in").algo, QuantAlgo::None);
  EXPECT_EQ(qc.resolve_children("backbone.layers.0.mixer.in_proj").algo, QuantAlgo::FP8);
  h["quantization"]["quantized_layers"]["backbone.layers.1.mixer.experts.2.up_proj"]["quant_algo"] =
      "FP8";
  qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  const std::string e = error_of([&] { qc.resolve_children("backbone.layers.1.mixer.experts"); });
  EXPECT_TRUE(contains(e, "experts.2.up_proj")) << e;
}

TEST(QuantConfig, CrossCheckLightningModules) {
  const json h = lightning_hf_quant();
  const QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  Store s;
  s.add_fp8("backbone.layers.0.mixer.in_proj", 10304, 2688);
  s.add_nvfp4("backbone.layers.1.mixer.experts.0.up_proj", 1856, 2688);
  s.add_nvfp4("backbone.layers.1.mixer.experts.0.down_proj", 2688, 1856);
  s.add_nvfp4("lm_head", 131072, 2688);
  s.add("backbone.layers.0.mixer.conv1d.weight", DType::BF16, {6144, 1, 4});
  s.add("backbone.layers.1.mixer.gate.weight", DType::F32, {128, 2688});
  s.add("backbone.layers.5.mixer.k_proj.weight", DType::BF16, {256, 2688});
  s.add_scalar("backbone.layers.5.mixer.k_proj.k_scale", 1.0f);
  const auto L = s.lookup();
  const CheckedModule in = check_module(qc, "backbone.layers.0.mixer.in_proj", L);
  EXPECT_EQ(in.quant.algo, QuantAlgo::FP8);
  EXPECT_EQ(in.out, 10304);
  EXPECT_EQ(in.in, 2688);
  EXPECT_EQ(in.weight_scale, 0.01f);
  ASSERT_TRUE(in.input_scale.has_value());
  EXPECT_EQ(*in.input_scale, 0.05f);
  const CheckedModule dn = check_module(qc, "backbone.layers.1.mixer.experts.0.down_proj", L);
  EXPECT_EQ(dn.quant.algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(dn.out, 2688);
  EXPECT_EQ(dn.in, 1856);
  EXPECT_EQ(check_module(qc, "lm_head", L).out, 131072);
  EXPECT_EQ(check_module(qc, "backbone.layers.0.mixer.conv1d", L).quant.algo, QuantAlgo::None);
  EXPECT_EQ(check_module(qc, "backbone.layers.1.mixer.gate", L).quant.algo, QuantAlgo::None);
  EXPECT_EQ(check_module(qc, "backbone.layers.5.mixer.k_proj", L).in, 2688);
}

TEST(QuantConfig, CrossCheckFailuresNameModuleAndFile) {
  const json h = lightning_hf_quant();
  const QuantConfig qc = parse_quant_config(&h, "hf_quant_config.json", nullptr, "");
  const std::string up = "backbone.layers.1.mixer.experts.0.up_proj";
  {  // BF16 tensor where the config says NVFP4
    Store s;
    s.add(up + ".weight", DType::BF16, {1856, 2688}, "shard-3.safetensors");
    const std::string e = error_of([&] { check_module(qc, up, s.lookup()); });
    EXPECT_TRUE(contains(e, up) && contains(e, "shard-3.safetensors") &&
                contains(e, "hf_quant_config.json"))
        << e;
  }
  {  // missing weight_scale_2
    Store s;
    s.add_nvfp4(up, 1856, 2688);
    s.t.erase(up + ".weight_scale_2");
    EXPECT_TRUE(contains(error_of([&] { check_module(qc, up, s.lookup()); }), "weight_scale_2"));
  }
  {  // mis-shaped block scales
    Store s;
    s.add_nvfp4(up, 1856, 2688);
    s.t[up + ".weight_scale"].shape = {1856, 84};
    const std::string e = error_of([&] { check_module(qc, up, s.lookup()); });
    EXPECT_TRUE(contains(e, "[1856, 168]") && contains(e, "model-00002.safetensors")) << e;
  }
  {  // NaN per-tensor scale
    Store s;
    s.add_nvfp4(up, 1856, 2688);
    s.add_scalar(up + ".weight_scale_2", NAN, "shard-7.safetensors");
    const std::string e = error_of([&] { check_module(qc, up, s.lookup()); });
    EXPECT_TRUE(contains(e, up) && contains(e, "shard-7.safetensors") && contains(e, "finite"))
        << e;
  }
  {  // NaN E4M3 block scale
    Store s;
    s.add_nvfp4(up, 1856, 2688);
    s.bytes[up + ".weight_scale"][168 * 3 + 5] = 0x7F;
    const std::string e = error_of([&] { check_module(qc, up, s.lookup()); });
    EXPECT_TRUE(contains(e, "NaN") && contains(e, "row 3")) << e;
    CheckOptions no_scan;
    no_scan.scan_block_scales = false;
    EXPECT_NO_THROW(check_module(qc, up, s.lookup(), no_scan));
  }
  {  // FP8 scale not a scalar / zero
    Store s;
    s.add_fp8("backbone.layers.0.mixer.in_proj", 10304, 2688);
    s.t["backbone.layers.0.mixer.in_proj.weight_scale"].shape = {10304};
    EXPECT_THROW(check_module(qc, "backbone.layers.0.mixer.in_proj", s.lookup()), nemo::Error);
    s.add_scalar("backbone.layers.0.mixer.in_proj.weight_scale", 0.0f);
    EXPECT_THROW(check_module(qc, "backbone.layers.0.mixer.in_proj", s.lookup()), nemo::Error);
  }
  {  // a quantized-looking tensor in a module the config leaves unquantized (never inferred)
    Store s;
    s.add_nvfp4("backbone.layers.1.mixer.experts.9.up_proj", 1856, 2688);
    const std::string e = error_of(
        [&] { check_module(qc, "backbone.layers.1.mixer.experts.9.up_proj", s.lookup()); });
    EXPECT_TRUE(contains(e, "U8") && contains(e, "unquantized")) << e;
  }
  {  // unquantized module carrying scales
    Store s;
    s.add("backbone.layers.1.mixer.gate.weight", DType::BF16, {128, 2688});
    s.add_scalar("backbone.layers.1.mixer.gate.weight_scale", 1.0f);
    EXPECT_THROW(check_module(qc, "backbone.layers.1.mixer.gate", s.lookup()), nemo::Error);
  }
  {  // missing weight
    Store s;
    EXPECT_TRUE(
        contains(error_of([&] { check_module(qc, "lm_head", s.lookup()); }), "lm_head.weight"));
  }
}

TEST(QuantConfig, MlxAffineWithOverrides) {
  const json c = {{"model_type", "nemotron_h"},
                  {"quantization",
                   {{"group_size", 64},
                    {"bits", 4},
                    {"mode", "affine"},
                    {"backbone.layers.0.mixer.in_proj", {{"group_size", 32}, {"bits", 8}}},
                    {"backbone.layers.1.mixer.gate", false}}},
                  {"quantization_config", {{"group_size", 64}, {"bits", 4}, {"mode", "affine"}}}};
  const QuantConfig qc = parse_quant_config(nullptr, "", &c, "config.json");
  EXPECT_EQ(qc.format, QuantFormat::Mlx);
  auto q = qc.resolve("backbone.layers.0.mixer.in_proj");
  EXPECT_EQ(q.algo, QuantAlgo::MlxAffine);
  EXPECT_EQ(q.bits, 8);
  EXPECT_EQ(q.group_size, 32);
  EXPECT_EQ(qc.resolve("backbone.layers.1.mixer.gate").algo, QuantAlgo::None);
  q = qc.resolve("backbone.layers.1.mixer.switch_mlp.fc1");
  EXPECT_EQ(q.bits, 4);
  EXPECT_EQ(q.group_size, 64);

  Store s;
  s.add("backbone.layers.1.mixer.switch_mlp.fc1.weight", DType::U32, {128, 1856, 336});
  s.add("backbone.layers.1.mixer.switch_mlp.fc1.scales", DType::BF16, {128, 1856, 42});
  s.add("backbone.layers.1.mixer.switch_mlp.fc1.biases", DType::BF16, {128, 1856, 42});
  s.add("backbone.layers.0.mixer.in_proj.weight", DType::U32, {10304, 672});
  s.add("backbone.layers.0.mixer.in_proj.scales", DType::BF16, {10304, 84});
  s.add("backbone.layers.0.mixer.in_proj.biases", DType::BF16, {10304, 84});
  s.add("backbone.layers.0.mixer.conv1d.weight", DType::BF16, {6144, 4, 1});
  const auto L = s.lookup();
  const CheckedModule fc1 = check_module(qc, "backbone.layers.1.mixer.switch_mlp.fc1", L);
  EXPECT_EQ(fc1.quant.algo, QuantAlgo::MlxAffine);
  EXPECT_EQ(fc1.stacked, 128);
  EXPECT_EQ(fc1.out, 1856);
  EXPECT_EQ(fc1.in, 2688);
  EXPECT_EQ(fc1.scales_dtype, DType::BF16);
  const CheckedModule in = check_module(qc, "backbone.layers.0.mixer.in_proj", L);
  EXPECT_EQ(in.in, 2688);
  EXPECT_EQ(in.quant.bits, 8);
  // No .scales -> not quantized (mlx-lm's rule), even though the global default is 4-bit.
  EXPECT_EQ(check_module(qc, "backbone.layers.0.mixer.conv1d", L).quant.algo, QuantAlgo::None);
  // Scales shaped for another group size fail.
  s.t["backbone.layers.1.mixer.switch_mlp.fc1.scales"].shape = {128, 1856, 84};
  const std::string e =
      error_of([&] { check_module(qc, "backbone.layers.1.mixer.switch_mlp.fc1", s.lookup()); });
  EXPECT_TRUE(contains(e, "switch_mlp.fc1") && contains(e, "group=64")) << e;
  // Unsupported modes / bits.
  json m = {{"quantization", {{"group_size", 16}, {"bits", 4}, {"mode", "nvfp4"}}}};
  EXPECT_TRUE(
      contains(error_of([&] { parse_quant_config(nullptr, "", &m, "config.json"); }), "nvfp4"));
  json b3 = {{"quantization", {{"group_size", 64}, {"bits", 3}}}};
  EXPECT_THROW(parse_quant_config(nullptr, "", &b3, "config.json"), nemo::Error);
  // Integer fields that are not integers in int range fail by name (the fuzzer found 2e30 cast
  // to int, which is undefined); an integral float is an integer.
  for (const json& bits : {json(2.22e30), json(4.5), json("4"), json(-4294967296LL)}) {
    json q = {{"quantization", {{"group_size", 64}, {"bits", bits}}}};
    const std::string e = error_of([&] { parse_quant_config(nullptr, "", &q, "config.json"); });
    EXPECT_TRUE(contains(e, "bits must be an integer") && contains(e, "config.json")) << e;
  }
  json f = {{"quantization", {{"group_size", 64.0}, {"bits", 8.0}}}};
  EXPECT_EQ(parse_quant_config(nullptr, "", &f, "config.json").global.bits, 8);
  json kv = lightning_hf_quant();
  kv["quantization"].erase("kv_cache_quant_algo");
  kv["quantization"]["kv_cache_scheme"] = {{"type", "float"}, {"num_bits", 1e300}};
  EXPECT_TRUE(contains(error_of([&] { parse_quant_config(&kv, "h.json", nullptr, ""); }),
                       "num_bits must be an integer"));
  // String fields of another type fail by name (the fuzzer found "type": 4, which nlohmann's
  // value() threw as an unnamed type_error); producer metadata of the wrong type is left out.
  kv["quantization"]["kv_cache_scheme"] = {{"type", 8}, {"num_bits", 8}};
  EXPECT_TRUE(contains(error_of([&] { parse_quant_config(&kv, "h.json", nullptr, ""); }),
                       "h.json: kv_cache_scheme: type must be a string, got 8"));
  json groups = {{"quantization_config",
                  {{"quant_method", "modelopt"},
                   {"quant_algo", "NVFP4"},
                   {"config_groups",
                    {{"g", {{"weights", {{"num_bits", 4}, {"type", 4}}}, {"targets", {"x"}}}}}}}}};
  EXPECT_TRUE(contains(error_of([&] { parse_quant_config(nullptr, "", &groups, "config.json"); }),
                       "config.json: config_groups.g.weights: type must be a string, got 4"));
  json prod = lightning_hf_quant();
  prod["producer"] = {{"name", 7}, {"version", "0.44"}};
  EXPECT_EQ(parse_quant_config(&prod, "h.json", nullptr, "").producer, "0.44");
}

TEST(QuantConfig, UnquantizedCheckpoint) {
  const json c = {{"model_type", "nemotron_h"}};
  const QuantConfig qc = parse_quant_config(nullptr, "", &c, "config.json");
  EXPECT_FALSE(qc.quantized());
  Store s;
  s.add("lm_head.weight", DType::BF16, {131072, 2688});
  EXPECT_EQ(check_module(qc, "lm_head", s.lookup()).quant.algo, QuantAlgo::None);
  s.add("x.weight", DType::U8, {16, 8});
  EXPECT_THROW(check_module(qc, "x", s.lookup()), nemo::Error);
}

TEST(QuantConfig, LoadFromDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "nemo_quant_config_test";
  fs::create_directories(dir);
  std::ofstream(dir / "hf_quant_config.json") << lightning_hf_quant().dump(2);
  std::ofstream(dir / "config.json") << lightning_config_json().dump(2);
  const QuantConfig qc = load_quant_config(dir.string());
  EXPECT_EQ(qc.resolve("lm_head").algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(qc.kv_cache_algo, "FP8");
  std::ofstream(dir / "hf_quant_config.json") << "{ not json";
  EXPECT_TRUE(contains(error_of([&] { load_quant_config(dir.string()); }), "hf_quant_config.json"));
  fs::remove_all(dir);
}
