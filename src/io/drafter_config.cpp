#include "io/drafter_config.h"

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

namespace nemo::io {

using json = nlohmann::json;

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::optional<int64_t> opt_int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}
int64_t int_or(const json& j, const char* key, int64_t def) {
  return opt_int(j, key).value_or(def);
}
bool bool_or(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}
std::string str_or(const json& j, const char* key, std::string def) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}
std::vector<int64_t> int_list(const json& j, const char* key) {
  std::vector<int64_t> v;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return v;
  for (const auto& e : *it)
    if (e.is_number_integer()) v.push_back(e.get<int64_t>());
  return v;
}

}  // namespace

std::string architecture_of(const json& cfg) {
  if (!cfg.is_object()) return "";
  auto it = cfg.find("architectures");
  if (it != cfg.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    return (*it)[0].get<std::string>();
  return "";
}

std::string drafter_kind(const json& cfg) {
  if (!cfg.is_object()) return "";
  const std::string arch = lower(architecture_of(cfg));
  const auto non_null = [&](const char* k) { return cfg.contains(k) && !cfg[k].is_null(); };
  if (arch.find("dspark") != std::string::npos || non_null("dspark_markov_rank") ||
      non_null("markov_rank") || non_null("dspark_fixup_head_type"))
    return "dspark";
  if (arch.find("dflash") != std::string::npos || non_null("dflash_config")) return "dflash";
  return "";
}

DrafterConfig parse_drafter_config(const json& cfg) {
  DrafterConfig d;
  d.kind = drafter_kind(cfg);
  d.architecture = architecture_of(cfg);
  d.model_type = str_or(cfg, "model_type", "");
  const json empty = json::object();
  const json& dc = cfg.contains("dflash_config") && cfg["dflash_config"].is_object()
                       ? cfg["dflash_config"]
                       : empty;
  d.layers = int_or(cfg, "num_hidden_layers", 0);
  d.hidden_size = int_or(cfg, "hidden_size", 0);
  d.vocab_size = int_or(cfg, "vocab_size", 0);
  d.num_attention_heads = int_or(cfg, "num_attention_heads", 0);
  d.num_key_value_heads = int_or(cfg, "num_key_value_heads", d.num_attention_heads);
  d.head_dim = int_or(cfg, "head_dim",
                      d.num_attention_heads > 0 ? d.hidden_size / d.num_attention_heads : 0);
  d.intermediate_size = int_or(cfg, "intermediate_size", 0);
  d.target_hidden_size = opt_int(cfg, "target_hidden_size");
  d.num_target_layers = opt_int(cfg, "num_target_layers");
  d.block_size = opt_int(cfg, "block_size");
  d.mask_token_id = opt_int(dc, "mask_token_id");
  if (!d.mask_token_id) d.mask_token_id = opt_int(cfg, "mask_token_id");
  d.sliding_window = opt_int(dc, "swa_window_size");
  if (!d.sliding_window) d.sliding_window = opt_int(cfg, "sliding_window");
  d.markov_rank = opt_int(cfg, "dspark_markov_rank");
  if (!d.markov_rank) d.markov_rank = opt_int(cfg, "markov_rank");
  d.causal = bool_or(dc, "causal", bool_or(cfg, "is_causal", false));
  d.use_swa = bool_or(dc, "use_swa", false);
  d.attention_sink_bias =
      bool_or(dc, "attention_sink_bias", bool_or(cfg, "attention_sink_bias", false));
  d.has_embed_tokens = bool_or(cfg, "has_embed_tokens", true);
  d.has_lm_head = bool_or(cfg, "has_lm_head", false);
  d.sample_from_anchor = bool_or(dc, "sample_from_anchor", bool_or(cfg, "sample_from_anchor", false));
  if (auto it = cfg.find("rms_norm_eps"); it != cfg.end() && it->is_number()) d.rms_norm_eps = it->get<double>();
  if (auto it = cfg.find("rope_theta"); it != cfg.end() && it->is_number()) d.rope_theta = it->get<double>();
  // YaRN from rope_parameters (new HF) or rope_scaling (old HF); null means plain RoPE.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || !it->is_object()) continue;
    const json& r = *it;
    if (auto t = r.find("rope_theta"); t != r.end() && t->is_number()) d.rope_theta = t->get<double>();
    const std::string type = str_or(r, "rope_type", str_or(r, "type", "default"));
    if (type == "yarn") {
      d.rope_yarn = true;
      if (auto f = r.find("factor"); f != r.end() && f->is_number()) d.yarn_factor = f->get<double>();
      if (auto o = r.find("original_max_position_embeddings"); o != r.end() && o->is_number())
        d.yarn_original_max = o->get<double>();
      if (auto b = r.find("beta_fast"); b != r.end() && b->is_number()) d.yarn_beta_fast = b->get<double>();
      if (auto b = r.find("beta_slow"); b != r.end() && b->is_number()) d.yarn_beta_slow = b->get<double>();
    }
    break;
  }
  // Taps, 0-based "output of block L"; eagle_aux ids are the same taps + 1 (dflash_dspark.md §1.1).
  if (auto v = int_list(dc, "target_layer_ids"); !v.empty()) {
    d.target_layer_ids = v, d.target_layer_ids_source = "dflash_config.target_layer_ids";
  } else if (auto v2 = int_list(cfg, "target_layer_ids"); !v2.empty()) {
    d.target_layer_ids = v2, d.target_layer_ids_source = "target_layer_ids";
  } else if (auto v3 = int_list(cfg, "eagle_aux_hidden_state_layer_ids"); !v3.empty()) {
    for (auto x : v3) d.target_layer_ids.push_back(x > 0 ? x - 1 : -1);  // -1: refused later
    d.target_layer_ids_source = "eagle_aux_hidden_state_layer_ids - 1";
  } else if (d.num_target_layers && *d.num_target_layers >= 4 && d.layers > 1 &&
             d.layers <= 1024) {  // z-lab default build_target_layer_ids
    for (int64_t i = 0; i < d.layers; ++i)
      d.target_layer_ids.push_back(int64_t(std::llround(
          1.0 + double(i) * double(*d.num_target_layers - 3 - 1) / double(d.layers - 1))));
    d.target_layer_ids_source = "default from num_target_layers";
  }
  return d;
}

}  // namespace nemo::io
