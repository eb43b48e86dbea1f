// Synthetic checkpoints in the exact Hugging Face layout of Nemotron 3.5 Lightning (config.json
// fields, `backbone.` tensor names, untied lm_head, `mtp.*`), deterministic from a seed, at any
// size: tiny presets for tests and the full-width `lightning` preset for benchmarks.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "io/drafter_config.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace nemo::synth {

// Names: tiny-a, tiny-b, tiny-c (tests), lightning (full width). `layers` > 0 keeps the first
// `layers` entries of the schedule; a non-empty `pattern` (M,*,E,-) replaces the schedule.
io::ModelConfig preset_config(const std::string& name, int layers = 0, const std::string& pattern = "");
std::vector<std::string> preset_names();

// Storage format of the checkpoint. All formats of one (config, seed) hold the same model:
// quantized tensors are quantized from the same f32 values the dense writer rounds to dtype.
enum class SynthFormat : uint8_t {
  Dense,     // every tensor in `dtype` (the BF16 release layout)
  ModelOpt,  // the Lightning NVFP4 release: MIXED_PRECISION (experts, shared experts, lm_head
             // W4A16_NVFP4; Mamba in/out_proj FP8; the rest bf16; mtp* excluded), one shard per layer
  Mlx4,      // mlx-lm affine 4-bit (group `mlx_group`), stacked switch_mlp experts, unaligned file
  Mlx8,      // the same, 8-bit
};
SynthFormat parse_synth_format(const std::string& s);  // dense | modelopt | mlx4 | mlx8
const char* synth_format_name(SynthFormat f);
io::DType parse_dense_dtype(const std::string& s);  // bf16 | f16 | f32 (--dtype)

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  io::DType dtype;
};

struct SynthOptions {
  uint64_t seed = 0;
  io::DType dtype = io::DType::BF16;  // dense tensors; router bias, A_log, D, dt_bias stay F32
  SynthFormat format = SynthFormat::Dense;
  int mlx_group = 64;
  bool mtp = true;                    // write mtp.* when the config has num_nextn_predict_layers
  uint64_t shard_bytes = 4ull << 30;  // split into model-0000i-of-0000n shards above this
  int threads = 1;
  bool tokenizer = true;  // also write a trained byte-level BPE tokenizer + the Lightning chat template
  // Copy tokenizer.json (required), tokenizer_config.json and chat_template.jinja from this
  // directory instead of training a tokenizer (with `tokenizer`). A converter keeps the source's.
  std::string tokenizer_dir;
  // Drafters: every tensor dense in `dtype` (a training pipeline's output) instead of the
  // W4A16 NVFP4 release layout. Targets ignore it.
  bool dense_drafter = false;
  // The f32 values of each logical tensor; default logical_values(t, seed, threads). A converter
  // returns the source checkpoint's tensor widened to f32, so every format quantizes the same
  // values synth would have generated.
  std::function<std::vector<float>(const SynthTensor&)> values;
  std::function<void(const std::string&, uint64_t done, uint64_t total)> progress;  // optional
};

// The logical tensor list (dense names, shapes, dtypes) of this config, in file order. The
// stored tensors of a quantized format are derived from it (see write_checkpoint).
std::vector<SynthTensor> checkpoint_layout(const io::ModelConfig& c, const SynthOptions& opt);
// The f32 values of a logical tensor: a function of (seed, name, shape) only.
std::vector<float> logical_values(const SynthTensor& t, uint64_t seed, int threads = 1);

// The built-in text the synthetic tokenizer is trained on.
std::string_view training_corpus();

// Writes config.json, generation_config.json and safetensors (sharded with an index when large),
// and (opt.tokenizer) tokenizer.json, tokenizer_config.json and chat_template.jinja.
// Each tensor's values depend only on (seed, tensor name), not on the layer count or order.
void write_checkpoint(const io::ModelConfig& c, const std::string& dir, const SynthOptions& opt);

// A drafter's shape: the typed config its tensor layout is derived from, and the config.json
// written beside it (kept as given but for "dtype", in the given key order).
struct DrafterShape {
  io::DrafterConfig config;
  nlohmann::ordered_json config_json;
};
enum class DrafterKind : uint8_t { DFlash, DSpark };
DrafterKind parse_drafter_kind(const std::string& s);  // dflash | dspark
// The logical tensor list of a drafter (layout::drafter_tensors' names and shapes) in file order:
// BF16, or opt.dtype with opt.dense_drafter (the attention sinks stay F32).
std::vector<SynthTensor> drafter_layout(const io::DrafterConfig& d, const SynthOptions& opt);
// The drafter synth sizes to pair with `target` (same hidden size, vocab, heads; taps < its
// layers).
DrafterShape drafter_shape(DrafterKind kind, const io::ModelConfig& target);
// The drafter checkpoint of `shape`: in the layout of NVIDIA's Lightning DFlash / DSpark drafters
// (spec dflash_dspark.md §2) — config.json, hf_quant_config.json (W4A16_NVFP4, group 16) and
// safetensors — or, with opt.dense_drafter, every tensor in opt.dtype and no hf_quant_config.json.
void write_drafter(const DrafterShape& shape, const std::string& dir, const SynthOptions& opt);
// write_drafter(drafter_shape(kind, target), dir, opt).
void write_drafter_checkpoint(DrafterKind kind, const io::ModelConfig& target, const std::string& dir,
                              const SynthOptions& opt);

}  // namespace nemo::synth
