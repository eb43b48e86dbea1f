// Synthetic checkpoints in the exact Hugging Face layout of Nemotron 3.5 Lightning (config.json
// fields, `backbone.` tensor names, untied lm_head, `mtp.*`), deterministic from a seed, at any
// size: tiny presets for tests and the full-width `lightning` preset for benchmarks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"

namespace nemo::synth {

// Names: tiny-a, tiny-b, tiny-c (tests), lightning (full width). `layers` > 0 keeps the first
// `layers` entries of the schedule; a non-empty `pattern` (M,*,E,-) replaces the schedule.
io::ModelConfig preset_config(const std::string& name, int layers = 0, const std::string& pattern = "");
std::vector<std::string> preset_names();

struct SynthOptions {
  uint64_t seed = 0;
  io::DType dtype = io::DType::BF16;  // matrices and norm weights; router bias stays F32
  bool mtp = true;                    // write mtp.* when the config has num_nextn_predict_layers
  uint64_t shard_bytes = 4ull << 30;  // split into model-0000i-of-0000n shards above this
  int threads = 1;
  std::function<void(const std::string&, uint64_t done, uint64_t total)> progress;  // optional
};

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  io::DType dtype;
};

// The tensor list (names, shapes, dtypes) a checkpoint of this config has, in file order.
std::vector<SynthTensor> checkpoint_layout(const io::ModelConfig& c, const SynthOptions& opt);

// Writes config.json, generation_config.json and safetensors (sharded with an index when large).
// Each tensor's values depend only on (seed, tensor name), not on the layer count or order.
void write_checkpoint(const io::ModelConfig& c, const std::string& dir, const SynthOptions& opt);

}  // namespace nemo::synth
