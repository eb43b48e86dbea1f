#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/model_config.h"

using namespace nemo;
using namespace nemo::io;
using json = nlohmann::json;

namespace {
json lightning_like() {
  return json::parse(R"({
    "model_type": "nemotron_h", "hidden_size": 2688, "vocab_size": 131072,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_hidden_layers": 52, "layer_norm_epsilon": 1e-5,
    "mamba_num_heads": 64, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128,
    "conv_kernel": 4, "chunk_size": 128, "use_conv_bias": true, "mamba_hidden_act": "silu",
    "time_step_limit": [0.0, "Infinity"],
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
    "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712,
    "routed_scaling_factor": 2.5, "norm_topk_prob": true, "mlp_hidden_act": "relu2",
    "num_nextn_predict_layers": 1, "mtp_layers_block_type": ["attention", "moe"],
    "eos_token_id": [2, 11], "sliding_window": null, "moe_latent_size": null
  })");
}
std::string error_of(const json& j) {
  try {
    parse_model_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ModelConfig, LightningPattern) {
  auto c = parse_model_config(lightning_like(), "config.json");
  EXPECT_EQ(c.layers.size(), 52u);
  EXPECT_EQ(c.count(LayerKind::Mamba), 23);
  EXPECT_EQ(c.count(LayerKind::Attention), 6);
  EXPECT_EQ(c.count(LayerKind::MoE), 23);
  EXPECT_EQ(c.layers[5], LayerKind::Attention);
  EXPECT_EQ(c.mamba_inner(), 4096);
  EXPECT_EQ(c.conv_dim(), 6144);
  EXPECT_EQ(c.in_proj_dim(), 10304);
  EXPECT_TRUE(std::isinf(c.dt_limit_max));
  EXPECT_EQ(c.dt_limit_min, 0.0f);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 11}));
  EXPECT_EQ(c.mtp_layers.size(), 2u);
}

TEST(ModelConfig, ListFormsAndAliases) {
  json j = lightning_like();
  j.erase("hybrid_override_pattern");
  std::vector<std::string> names;
  for (char ch : std::string("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"))
    names.push_back(ch == 'M' ? "linear_attention" : ch == '*' ? "full_attention" : "moe");
  j["layers_block_type"] = names;  // newest HF names
  j["mamba_n_groups"] = j["n_groups"];
  j.erase("n_groups");
  j["mamba_d_conv"] = 4;
  j.erase("conv_kernel");
  auto c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.pattern(), "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME");
  EXPECT_EQ(c.n_groups, 8);
  // Legacy and list forms must agree when both are present.
  j["hybrid_override_pattern"] = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEMM";
  EXPECT_NE(error_of(j).find("disagree"), std::string::npos);
}

TEST(ModelConfig, ClearErrors) {
  auto bad = [](auto mutate) {
    json j = lightning_like();
    mutate(j);
    return error_of(j);
  };
  EXPECT_NE(bad([](json& j) { j.erase("head_dim"); }).find("head_dim"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["hybrid_override_pattern"] = "MEX"; }).find("unknown layer kind 'X'"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["num_hidden_layers"] = 50; }).find("num_hidden_layers"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["hidden_size"] = "big"; }).find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["mamba_num_heads"] = 60; }).find("multiple of n_groups"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["num_key_value_heads"] = 3; }).find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["model_type"] = "llama"; }).find("not supported"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j.erase("hidden_size"); }).find("missing required field 'hidden_size'"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["num_experts_per_tok"] = 200; }).find("num_experts_per_tok"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["mlp_hidden_act"] = "silu"; }).find("relu2"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["hybrid_override_pattern"] = "M-"; j.erase("num_hidden_layers"); }).find("intermediate_size"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j["time_step_limit"] = json::array({0.1, 0.01}); }).find("min > max"), std::string::npos);
  EXPECT_NE(bad([](json& j) { j = json::array(); }).find("not a JSON object"), std::string::npos);
  // Grouped routing: whole groups, at most n_group kept, enough experts in the kept groups for
  // top-k.
  EXPECT_NE(bad([](json& j) { j["n_group"] = 5; }).find("multiple of n_group"), std::string::npos);
  EXPECT_NE(
      bad([](json& j) { j["n_group"] = 8, j["topk_group"] = 9; }).find("topk_group (9) > n_group"),
      std::string::npos);
  EXPECT_NE(bad([](json& j) {
              j["n_group"] = 128, j["topk_group"] = 5;
            }).find("num_experts_per_tok (6) >"),
            std::string::npos);
}

TEST(ModelConfig, GroupedRouting) {
  json j = lightning_like();
  j["n_group"] = 8, j["topk_group"] = 4;
  const auto c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(model_config_to_json(c)["n_group"], 8);
  EXPECT_EQ(model_config_to_json(c)["topk_group"], 4);
}

TEST(ModelConfig, BareInfinityLiteral) {
  const std::string text = R"({"a": [0.0, Infinity], "s": "Infinity \" NaN", "b": -Infinity})";
  auto j = json::parse(quote_nonfinite_literals(text));
  EXPECT_EQ(j["a"][1], "Infinity");
  EXPECT_EQ(j["s"], "Infinity \" NaN");
  EXPECT_EQ(j["b"], "-Infinity");
}

TEST(ModelConfig, JsonRoundTrip) {
  auto c = parse_model_config(lightning_like(), "config.json");
  auto j = model_config_to_json(c);
  auto c2 = parse_model_config(json::parse(quote_nonfinite_literals(j.dump())), "rt");
  EXPECT_EQ(c2.pattern(), c.pattern());
  EXPECT_EQ(c2.in_proj_dim(), c.in_proj_dim());
  EXPECT_EQ(c2.routed_scaling_factor, c.routed_scaling_factor);
}
