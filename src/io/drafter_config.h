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
};

// "dflash" | "dspark" | "" from a config.json.
std::string drafter_kind(const nlohmann::json& cfg);
// First entry of "architectures", or "".
std::string architecture_of(const nlohmann::json& cfg);
DrafterConfig parse_drafter_config(const nlohmann::json& cfg);

}  // namespace nemo::io
