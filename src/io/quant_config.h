// Quantization config of a checkpoint: ModelOpt (hf_quant_config.json and/or config.json
// `quantization_config`, incl. MIXED_PRECISION) and MLX (config.json `quantization`).
// Resolution follows spec/formats.md §4.5: the exact module name decides; a module that is not
// listed is unquantized (MIXED_PRECISION) — never inherit a sibling's or parent's format; then
// every module's tensors are cross-checked against what the config declares.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/safetensors.h"

namespace nemo::io {

enum class QuantAlgo : uint8_t {
  None,         // unquantized (stored as BF16/F16/F32)
  NVFP4,        // ModelOpt W4A4 NVFP4 (runs as W4A16 on CPU; input_scale kept)
  W4A16_NVFP4,  // ModelOpt weight-only NVFP4
  FP8,          // ModelOpt FP8 per-tensor weight + static input_scale
  MlxAffine,    // MLX affine, `bits` / `group_size`
};
const char* quant_algo_name(QuantAlgo a);

enum class QuantFormat : uint8_t { None, ModelOpt, Mlx };

struct ModuleQuant {
  QuantAlgo algo = QuantAlgo::None;
  int group_size = 0;     // NVFP4: 16; MLX: 32/64/128
  int bits = 0;           // MLX: 4/8
  bool declared = false;  // named explicitly (quantized_layers entry / MLX per-module override);
                          // false = implied by a single global algo (MLX: only if .scales exist)
  bool excluded = false;  // matched exclude_modules / ignore
  bool operator==(const ModuleQuant&) const = default;
};

struct QuantConfig {
  QuantFormat format = QuantFormat::None;
  std::string source;       // file(s) the config came from, for messages
  std::string global_algo;  // upper-cased: MIXED_PRECISION, W4A16_NVFP4, NVFP4, FP8, or ""
  ModuleQuant global;       // single-algo ModelOpt / MLX default
  std::map<std::string, ModuleQuant> layers;  // quantized_layers (ModelOpt) / overrides (MLX)
  std::vector<std::string> exclude;           // fnmatch globs over module prefixes
  std::string kv_cache_algo;                  // "FP8" or "" (none)
  std::string producer;                       // "modelopt 0.44.0rc5", informational

  bool quantized() const { return format != QuantFormat::None; }
  // The pattern in `exclude` that matches `module`, or nullptr.
  const std::string* excluded_by(const std::string& module) const;
  // Algorithm of one module (checkpoint name, e.g. "backbone.layers.1.mixer.experts.0.up_proj").
  // Throws if a module is both listed as quantized and excluded.
  ModuleQuant resolve(const std::string& module) const;
  // Modules the runtime fuses (q/k/v) or stacks (experts): all must resolve alike, else throws.
  ModuleQuant resolve_fused(std::span<const std::string> members) const;
  // formats.md §4.5 step 4, for a runtime module that stands for its children (a fused
  // "...mixer.experts"): the listed entries under PREFIX + "." must all agree; none listed ->
  // resolve(prefix). Only ever looks below the prefix, never at siblings.
  ModuleQuant resolve_children(const std::string& prefix) const;
};

// fnmatch-style glob: '*' (any run, dots included), '?', '[abc]', '[!abc]', '[a-z]'.
bool glob_match(std::string_view pattern, std::string_view s);

// Either document may be null. File names are used in error messages.
QuantConfig parse_quant_config(const nlohmann::json* hf_quant_config, const std::string& hf_quant_file,
                               const nlohmann::json* config_json, const std::string& config_file);
// Reads DIR/hf_quant_config.json and DIR/config.json where present.
QuantConfig load_quant_config(const std::string& dir);

// ---- Cross-check against the tensors present ----
struct TensorInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::string file;               // shard path, for messages
  const uint8_t* data = nullptr;  // optional: enables value checks (scalar scales, E4M3 NaN scan)
};
using TensorLookup = std::function<std::optional<TensorInfo>(const std::string& name)>;

struct CheckedModule {
  ModuleQuant quant;         // effective algorithm (None = unquantized)
  int64_t out = 0, in = 0;   // logical weight matrix [out, in] (last two dims)
  int64_t stacked = 0;       // leading expert dimension (MLX switch_mlp / stacked), else 0
  DType weight_dtype = DType::F32;
  DType scales_dtype = DType::F32;  // MLX scales/biases dtype
  float weight_scale = 1.0f;        // NVFP4: weight_scale_2; FP8: weight_scale (when data given)
  std::optional<float> input_scale;
};

struct CheckOptions {
  // Scan scale values (needs data): NVFP4 weight_scale E4M3 NaN codes, MLX scales/biases NaN/Inf.
  bool scan_block_scales = true;
};

// Verifies that MODULE's tensors (MODULE.weight, .weight_scale, ...) exist with the dtypes and
// shapes its declared algorithm needs, and that an unquantized module carries no quantized
// tensors. Throws nemo::Error naming the module, the tensor's file and the config file.
CheckedModule check_module(const QuantConfig& qc, const std::string& module, const TensorLookup& lookup,
                           const CheckOptions& opt = {});

}  // namespace nemo::io
