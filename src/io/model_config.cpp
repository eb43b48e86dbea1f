#include "io/model_config.h"

#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"

namespace nemo::io {

using json = nlohmann::json;

char layer_kind_char(LayerKind k) {
  switch (k) {
    case LayerKind::Mamba:
      return 'M';
    case LayerKind::Attention:
      return '*';
    case LayerKind::MoE:
      return 'E';
    case LayerKind::MLP:
      return '-';
  }
  return '?';
}
const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Mamba:
      return "mamba";
    case LayerKind::Attention:
      return "attention";
    case LayerKind::MoE:
      return "moe";
    case LayerKind::MLP:
      return "mlp";
  }
  return "?";
}

int64_t ModelConfig::count(LayerKind k) const {
  int64_t n = 0;
  for (auto l : layers) n += (l == k);
  return n;
}
std::string ModelConfig::pattern() const {
  std::string s;
  for (auto l : layers) s.push_back(layer_kind_char(l));
  return s;
}

namespace {

struct Reader {
  const json& j;
  const std::string& src;

  const json* find(std::initializer_list<const char*> keys) const {
    for (const char* k : keys) {
      auto it = j.find(k);
      if (it != j.end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }
  int64_t i64(std::initializer_list<const char*> keys, std::optional<int64_t> def) const {
    const json* v = find(keys);
    if (!v) {
      if (def) return *def;
      fail("{}: missing required field '{}'", src, *keys.begin());
    }
    if (!v->is_number_integer())
      fail("{}: field '{}' must be an integer, got {}", src, *keys.begin(), v->dump());
    return v->get<int64_t>();
  }
  int64_t pos(std::initializer_list<const char*> keys,
              std::optional<int64_t> def = std::nullopt) const {
    int64_t v = i64(keys, def);
    if (v <= 0) fail("{}: field '{}' must be positive, got {}", src, *keys.begin(), v);
    return v;
  }
  double num(std::initializer_list<const char*> keys, double def) const {
    const json* v = find(keys);
    if (!v) return def;
    if (!v->is_number())
      fail("{}: field '{}' must be a number, got {}", src, *keys.begin(), v->dump());
    return v->get<double>();
  }
  bool boolean(std::initializer_list<const char*> keys, bool def) const {
    const json* v = find(keys);
    if (!v) return def;
    if (!v->is_boolean())
      fail("{}: field '{}' must be a boolean, got {}", src, *keys.begin(), v->dump());
    return v->get<bool>();
  }
};

LayerKind kind_from_name(const std::string& s, const std::string& src, const char* field,
                         size_t i) {
  if (s == "mamba" || s == "linear_attention" || s == "M") return LayerKind::Mamba;
  if (s == "attention" || s == "full_attention" || s == "*") return LayerKind::Attention;
  if (s == "moe" || s == "E") return LayerKind::MoE;
  if (s == "mlp" || s == "-") return LayerKind::MLP;
  fail("{}: {}[{}]: unknown layer kind '{}' (expected mamba|attention|moe|mlp or M|*|E|-)", src,
       field, i, s);
}

std::vector<LayerKind> parse_kinds(const json& v, const std::string& src, const char* field) {
  std::vector<LayerKind> out;
  if (v.is_string()) {
    size_t i = 0;
    for (char c : v.get<std::string>()) {
      if (c == '|' || c == '/') {  // Megatron pipeline / MTP separators carry no layer
        ++i;
        continue;
      }
      out.push_back(kind_from_name(std::string(1, c), src, field, i++));
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) fail("{}: {}[{}] must be a string", src, field, i);
      out.push_back(kind_from_name(v[i].get<std::string>(), src, field, i));
    }
  } else {
    fail("{}: {} must be a list of layer kinds or a pattern string", src, field);
  }
  return out;
}

}  // namespace

ModelConfig parse_model_config(const json& j, const std::string& src) {
  if (!j.is_object()) fail("{}: config is not a JSON object", src);
  Reader r{j, src};
  ModelConfig c;
  if (const json* mt = r.find({"model_type"})) {
    if (!mt->is_string()) fail("{}: model_type must be a string", src);
    c.model_type = mt->get<std::string>();
    if (c.model_type != "nemotron_h")
      fail("{}: model_type '{}' is not supported (expected 'nemotron_h')", src, c.model_type);
  }

  // Layer schedule: list form preferred, legacy pattern accepted; both present must agree.
  const json* list = r.find({"layers_block_type", "layer_types"});
  const json* pat = r.find({"hybrid_override_pattern"});
  if (!list && !pat)
    fail("{}: missing 'layers_block_type' (or legacy 'hybrid_override_pattern')", src);
  if (list) c.layers = parse_kinds(*list, src, "layers_block_type");
  if (pat) {
    auto p = parse_kinds(*pat, src, "hybrid_override_pattern");
    if (list && p != c.layers)
      fail("{}: 'layers_block_type' and 'hybrid_override_pattern' disagree", src);
    c.layers = std::move(p);
  }
  if (c.layers.empty()) fail("{}: the layer schedule is empty", src);
  if (const json* nl = r.find({"num_hidden_layers"})) {
    if (!nl->is_number_integer() || nl->get<int64_t>() != int64_t(c.layers.size()))
      fail("{}: num_hidden_layers = {} but the layer schedule has {} entries", src, nl->dump(),
           c.layers.size());
  }

  c.hidden_size = r.pos({"hidden_size"});
  c.vocab_size = r.pos({"vocab_size"});
  c.tie_word_embeddings = r.boolean({"tie_word_embeddings"}, false);
  c.norm_eps = float(r.num({"layer_norm_epsilon", "rms_norm_eps", "norm_eps"}, 1e-5));
  if (!(c.norm_eps > 0)) fail("{}: layer_norm_epsilon must be positive", src);

  const bool has_mamba = c.count(LayerKind::Mamba) > 0;
  const bool has_attn = c.count(LayerKind::Attention) > 0;
  const bool has_moe = c.count(LayerKind::MoE) > 0;
  const bool has_mlp = c.count(LayerKind::MLP) > 0;

  c.num_nextn_predict_layers = int(r.i64({"num_nextn_predict_layers"}, 0));
  if (c.num_nextn_predict_layers < 0) fail("{}: num_nextn_predict_layers must be >= 0", src);
  if (c.num_nextn_predict_layers > 0) {
    const json* m = r.find({"mtp_layers_block_type", "mtp_hybrid_override_pattern"});
    c.mtp_layers = m ? parse_kinds(*m, src, "mtp_layers_block_type")
                     : std::vector<LayerKind>{LayerKind::Attention, LayerKind::MoE};
  }
  bool mtp_attn = false, mtp_moe = false;
  for (auto k : c.mtp_layers) {
    mtp_attn |= k == LayerKind::Attention;
    mtp_moe |= k == LayerKind::MoE;
  }

  if (has_mamba) {
    c.mamba_num_heads = r.pos({"mamba_num_heads"});
    c.mamba_head_dim = r.pos({"mamba_head_dim"});
    c.n_groups = r.pos({"n_groups", "mamba_n_groups"}, 1);
    c.ssm_state_size = r.pos({"ssm_state_size"});
    c.conv_kernel = r.pos({"conv_kernel", "mamba_d_conv"}, 4);
    c.chunk_size = r.pos({"chunk_size", "mamba_chunk_size"}, 128);
    c.use_conv_bias = r.boolean({"use_conv_bias", "mamba_conv_bias"}, true);
    c.mamba_proj_bias = r.boolean({"use_bias", "mamba_proj_bias"}, false);
    if (c.mamba_proj_bias)
      fail("{}: use_bias=true (biased Mamba projections) is not supported", src);
    if (c.mamba_num_heads % c.n_groups)
      fail("{}: mamba_num_heads ({}) is not a multiple of n_groups ({})", src, c.mamba_num_heads,
           c.n_groups);
    if (const json* act = r.find({"mamba_hidden_act"}))
      if (!act->is_string() ||
          (act->get<std::string>() != "silu" && act->get<std::string>() != "swish"))
        fail("{}: mamba_hidden_act {} is not supported (silu)", src, act->dump());
    if (const json* lim = r.find({"time_step_limit", "mamba_dt_limit"})) {
      if (!lim->is_array() || lim->size() != 2 || !(*lim)[0].is_number() ||
          !((*lim)[1].is_number() || (*lim)[1].is_null() || (*lim)[1].is_string()))
        fail("{}: time_step_limit must be [min, max]", src);
      // Past float's range a double -> float cast is undefined: such limits are rejected.
      const auto as_float = [&](const json& x) {
        const double d = x.get<double>();
        if (std::isfinite(d) && std::fabs(d) > double(FLT_MAX))
          fail("{}: time_step_limit {} is outside float range", src, x.dump());
        return float(d);
      };
      c.dt_limit_min = as_float((*lim)[0]);
      if ((*lim)[1].is_number())
        c.dt_limit_max = as_float((*lim)[1]);
      else if ((*lim)[1].is_string() && (*lim)[1].get<std::string>() != "Infinity" &&
               (*lim)[1].get<std::string>() != "inf")
        fail("{}: time_step_limit max {} is not a number", src, (*lim)[1].dump());
      else
        c.dt_limit_max = INFINITY;
      if (!(c.dt_limit_min <= c.dt_limit_max)) fail("{}: time_step_limit min > max", src);
    }
  }
  if (has_attn || mtp_attn) {
    c.num_attention_heads = r.pos({"num_attention_heads"});
    c.num_key_value_heads = r.pos({"num_key_value_heads"}, c.num_attention_heads);
    const json* hd = r.find({"head_dim", "attention_head_dim"});
    if (!hd)
      fail("{}: missing 'head_dim' (it must be read, not derived from hidden_size / heads)", src);
    c.head_dim = r.pos({"head_dim", "attention_head_dim"});
    if (c.num_attention_heads % c.num_key_value_heads)
      fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", src,
           c.num_attention_heads, c.num_key_value_heads);
    c.attention_bias = r.boolean({"attention_bias"}, false);
    if (c.attention_bias) fail("{}: attention_bias=true is not supported", src);
    if (const json* sw = r.find({"sliding_window"}))
      fail("{}: sliding_window = {} is not supported (Nemotron-H attention is global)", src,
           sw->dump());
  }
  if (has_moe || mtp_moe) {
    c.n_routed_experts = r.pos({"n_routed_experts"});
    c.num_experts_per_tok = r.pos({"num_experts_per_tok"});
    c.moe_intermediate_size = r.pos({"moe_intermediate_size"});
    c.n_shared_experts = r.i64({"n_shared_experts"}, 1);
    if (c.n_shared_experts < 0) fail("{}: n_shared_experts must be >= 0", src);
    if (c.n_shared_experts > 0)
      c.moe_shared_expert_intermediate_size = r.pos({"moe_shared_expert_intermediate_size"});
    c.n_group = r.pos({"n_group"}, 1);
    c.topk_group = r.pos({"topk_group"}, 1);
    c.norm_topk_prob = r.boolean({"norm_topk_prob"}, true);
    c.routed_scaling_factor = float(r.num({"routed_scaling_factor"}, 1.0));
    if (c.num_experts_per_tok > c.n_routed_experts)
      fail("{}: num_experts_per_tok ({}) > n_routed_experts ({})", src, c.num_experts_per_tok,
           c.n_routed_experts);
    // Grouped routing (§5.2): whole groups of consecutive experts, at least num_experts_per_tok
    // experts in the kept groups.
    if (c.n_routed_experts % c.n_group)
      fail("{}: n_routed_experts ({}) is not a multiple of n_group ({})", src, c.n_routed_experts,
           c.n_group);
    if (c.topk_group > c.n_group)
      fail("{}: topk_group ({}) > n_group ({})", src, c.topk_group, c.n_group);
    if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group))
      fail("{}: num_experts_per_tok ({}) > the {} experts of topk_group ({}) groups", src,
           c.num_experts_per_tok, c.topk_group * (c.n_routed_experts / c.n_group), c.topk_group);
    if (const json* lat = r.find({"moe_latent_size"}))
      fail("{}: moe_latent_size = {} (latent MoE) is not supported", src, lat->dump());
  }
  if (has_mlp) {
    const json* is = r.find({"intermediate_size"});
    if (!is) fail("{}: missing 'intermediate_size' (needed by '-' MLP layers)", src);
    c.intermediate_size = r.pos({"intermediate_size"});
  }
  for (const char* act_key : {"mlp_hidden_act"})
    if (const json* act = r.find({act_key}))
      if (!act->is_string() || act->get<std::string>() != "relu2")
        fail("{}: mlp_hidden_act {} is not supported (relu2)", src, act->dump());
  c.mlp_bias = r.boolean({"mlp_bias"}, false);
  if (c.mlp_bias) fail("{}: mlp_bias=true is not supported", src);

  if (const json* e = r.find({"eos_token_id"})) {
    if (e->is_number_integer())
      c.eos_token_ids.push_back(e->get<int64_t>());
    else if (e->is_array())
      for (const auto& x : *e) {
        if (!x.is_number_integer()) fail("{}: eos_token_id entries must be integers", src);
        c.eos_token_ids.push_back(x.get<int64_t>());
      }
    else
      fail("{}: eos_token_id must be an integer or a list", src);
  }
  if (const json* b = r.find({"bos_token_id"}); b && b->is_number_integer())
    c.bos_token_id = b->get<int64_t>();
  if (const json* p = r.find({"pad_token_id"}); p && p->is_number_integer())
    c.pad_token_id = p->get<int64_t>();
  // A special token outside the vocabulary could never be matched (EOS) or embedded (BOS/pad).
  for (auto e : c.eos_token_ids)
    if (e < 0 || e >= c.vocab_size)
      fail("{}: eos_token_id {} is outside the vocabulary [0, {})", src, e, c.vocab_size);
  for (const auto& [name, id] :
       {std::pair{"bos_token_id", c.bos_token_id}, {"pad_token_id", c.pad_token_id}})
    if (id && (*id < 0 || *id >= c.vocab_size))
      fail("{}: {} {} is outside the vocabulary [0, {})", src, name, *id, c.vocab_size);
  return c;
}

// Python's json writes float('inf') as a bare Infinity (HF configs carry "time_step_limit":
// [0.0, Infinity]); strict JSON parsers reject it, so rewrite bare non-finite literals as strings.
std::string quote_nonfinite_literals(const std::string& in) {
  std::string out;
  out.reserve(in.size() + 16);
  bool in_str = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const char ch = in[i];
    if (in_str) {
      out.push_back(ch);
      if (ch == '\\' && i + 1 < in.size())
        out.push_back(in[++i]);
      else if (ch == '"')
        in_str = false;
      continue;
    }
    if (ch == '"') {
      in_str = true;
      out.push_back(ch);
      continue;
    }
    bool matched = false;
    for (const char* lit : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(lit);
      if (in.compare(i, n, lit) == 0) {
        out += '"';
        out += lit;
        out += '"';
        i += n - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out.push_back(ch);
  }
  return out;
}

namespace {
template <typename Json>
Json parse_config_file(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream f(path);
  if (!f) fail("{}: cannot open (is '{}' a model directory?)", path, dir);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return Json::parse(quote_nonfinite_literals(ss.str()));
  } catch (const json::exception& e) {
    fail("{}: malformed JSON: {}", path, e.what());
  }
}
}  // namespace

json read_config_json(const std::string& dir) {
  return parse_config_file<json>(dir);
}
nlohmann::ordered_json read_config_json_ordered(const std::string& dir) {
  return parse_config_file<nlohmann::ordered_json>(dir);
}

ModelConfig load_model_config(const std::string& dir) {
  return parse_model_config(read_config_json(dir),
                            (std::filesystem::path(dir) / "config.json").string());
}

json model_config_to_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {"NemotronHForCausalLM"};
  j["model_type"] = "nemotron_h";
  std::vector<std::string> names;
  for (auto k : c.layers) names.push_back(layer_kind_name(k));
  j["layers_block_type"] = names;
  j["hybrid_override_pattern"] = c.pattern();
  j["num_hidden_layers"] = c.layers.size();
  j["hidden_size"] = c.hidden_size;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["layer_norm_epsilon"] = c.norm_eps;
  j["residual_in_fp32"] = false;
  j["torch_dtype"] = "bfloat16";
  if (c.mamba_num_heads) {
    j["mamba_num_heads"] = c.mamba_num_heads;
    j["mamba_head_dim"] = c.mamba_head_dim;
    j["n_groups"] = c.n_groups;
    j["ssm_state_size"] = c.ssm_state_size;
    j["conv_kernel"] = c.conv_kernel;
    j["chunk_size"] = c.chunk_size;
    j["use_conv_bias"] = c.use_conv_bias;
    j["use_bias"] = false;
    j["mamba_hidden_act"] = "silu";
    j["expand"] = 2;
    j["time_step_limit"] = {c.dt_limit_min,
                            std::isinf(c.dt_limit_max) ? json("Infinity") : json(c.dt_limit_max)};
    j["time_step_min"] = 0.001;
    j["time_step_max"] = 0.1;
    j["time_step_floor"] = 1e-4;
    j["mamba_ssm_cache_dtype"] = "float32";
  }
  if (c.num_attention_heads) {
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["head_dim"] = c.head_dim;
    j["attention_bias"] = false;
    j["sliding_window"] = nullptr;
    j["rope_theta"] = 10000;
    j["max_position_embeddings"] = 1048576;
  }
  j["mlp_hidden_act"] = "relu2";
  j["mlp_bias"] = false;
  if (c.intermediate_size) j["intermediate_size"] = c.intermediate_size;
  if (c.n_routed_experts) {
    j["n_routed_experts"] = c.n_routed_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_shared_experts"] = c.n_shared_experts;
    j["moe_shared_expert_intermediate_size"] = c.moe_shared_expert_intermediate_size;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["moe_latent_size"] = nullptr;
  }
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  if (!c.mtp_layers.empty()) {
    std::vector<std::string> m;
    for (auto k : c.mtp_layers) m.push_back(layer_kind_name(k));
    j["mtp_layers_block_type"] = m;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty())
    j["eos_token_id"] = c.eos_token_ids;
  return j;
}

}  // namespace nemo::io
