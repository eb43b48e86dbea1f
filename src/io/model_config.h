// Typed Nemotron-H configuration parsed from a Hugging Face config.json.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nemo::io {

enum class LayerKind : uint8_t { Mamba, Attention, MoE, MLP };
char layer_kind_char(LayerKind k);       // M * E -
const char* layer_kind_name(LayerKind k);  // mamba attention moe mlp

struct ModelConfig {
  std::string model_type = "nemotron_h";
  std::vector<LayerKind> layers;      // one entry per backbone layer
  std::vector<LayerKind> mtp_layers;  // sub-layers of one MTP module (empty if none)
  int num_nextn_predict_layers = 0;

  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  float norm_eps = 1e-5f;

  // Mamba-2
  int64_t mamba_num_heads = 0, mamba_head_dim = 0, n_groups = 0, ssm_state_size = 0;
  int64_t conv_kernel = 4, chunk_size = 128;
  bool use_conv_bias = true, mamba_proj_bias = false;
  float dt_limit_min = 0.0f, dt_limit_max = INFINITY;  // time_step_limit; (0, inf) = no clamp

  // Attention
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  bool attention_bias = false;

  // MLP / MoE
  int64_t intermediate_size = 0;  // dense '-' layers
  int64_t n_routed_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  int64_t n_shared_experts = 0, moe_shared_expert_intermediate_size = 0;
  int64_t n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  bool mlp_bias = false;

  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;

  // Derived
  int64_t mamba_inner() const { return mamba_num_heads * mamba_head_dim; }
  int64_t conv_dim() const { return mamba_inner() + 2 * n_groups * ssm_state_size; }
  int64_t in_proj_dim() const { return mamba_inner() + conv_dim() + mamba_num_heads; }
  int64_t count(LayerKind k) const;
  std::string pattern() const;  // e.g. "MEM*E"
};

// Parses and validates; `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
std::string quote_nonfinite_literals(const std::string& json_text);
// DIR/config.json as JSON (bare Infinity accepted); errors name the file.
nlohmann::json read_config_json(const std::string& model_dir);
// The same in the file's key order (a converter that keeps a config as written).
nlohmann::ordered_json read_config_json_ordered(const std::string& model_dir);
ModelConfig load_model_config(const std::string& model_dir);  // reads DIR/config.json
// Writes the Hugging Face form (layers_block_type + the legacy pattern string).
nlohmann::json model_config_to_json(const ModelConfig& c);

}  // namespace nemo::io
