// Typed DFlash / DSpark drafter configuration parsed from the drafter's config.json
// (dflash_dspark.md §2.1–2.3). Lenient: fields that are absent keep their defaults so `inspect`
// can report what is missing; validation is the caller's (inspect, the drafter loader).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace nemo::io {

struct DrafterConfig {
  std::string kind;  // "dflash" | "dspark" | "" (unrecognised)
  std::string architecture, model_type;
  int64_t layers = 0, hidden_size = 0, vocab_size = 0, num_attention_heads = 0,
          num_key_value_heads = 0;
  int64_t head_dim = 0, intermediate_size = 0;
  std::optional<int64_t> target_hidden_size, num_target_layers, block_size, mask_token_id,
      sliding_window;
  std::optional<int64_t> markov_rank;
  std::vector<int64_t> target_layer_ids;
  std::string target_layer_ids_source;  // which config field gave the taps
  bool causal = false, use_swa = false, attention_sink_bias = false;
  bool has_embed_tokens = true, has_lm_head = false;
  // Slot layout (dflash_dspark.md §3.3): false = slot 0 is the anchor and slots 1.. predict the
  // tokens at p+1..; true = slot 0 predicts p+1. Absent: false (the Lightning drafters' value).
  bool sample_from_anchor = false;
  double rms_norm_eps = 1e-6;
  // RoPE (dflash_dspark.md §1.5): plain (rope_parameters null) or YaRN.
  double rope_theta = 10000.0;
  bool rope_yarn = false;
  double yarn_factor = 1.0, yarn_original_max = 0.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
};

// "dflash" | "dspark" | "" from a config.json.
std::string drafter_kind(const nlohmann::json& cfg);
// First entry of "architectures", or "".
std::string architecture_of(const nlohmann::json& cfg);
DrafterConfig parse_drafter_config(const nlohmann::json& cfg);

}  // namespace nemo::io
