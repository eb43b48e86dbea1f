// Checkpoint inspection (`nemotron inspect`): what a directory holds and whether this engine can
// run it, without binding or running the model. The counting core works on a plain tensor list
// (name, dtype, shape), so a layout can be inspected without writing it to disk; inspect_dir()
// only feeds it from the TensorStore. The JSON form is a stable, versioned schema: docs/INSPECT.md.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/drafter_config.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

namespace nemo::inspect {

inline constexpr int kInspectSchemaVersion = 1;

// One tensor of a checkpoint as the inspector sees it.
struct InspectTensor {
  std::string name;
  io::DType dtype = io::DType::F32;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;            // 0 = derived from dtype × shape
  std::string file;               // shard path, for messages (may be empty)
  const uint8_t* data = nullptr;  // optional: lets the quant cross-check read scalar scales
};

// Parameter counts. Packed weights count as logical weights (NVFP4 U8 [o, i/2] = o·i, MLX U32
// [o, i·b/32] = o·i); scales, biases of quantized modules and KV scales count as 0.
struct ParamCounts {
  int64_t total = 0;      // every tensor outside mtp.*
  int64_t embedding = 0, lm_head = 0, mamba = 0, attention = 0, mlp = 0;
  int64_t moe_routed = 0, moe_shared = 0, moe_router = 0, norms = 0, other = 0;
  int64_t active_per_token = 0;                 // one embedding row + everything a token touches
  int64_t active_per_token_full_embedding = 0;  // same, counting the whole embedding table
  int64_t mtp_total = 0, mtp_active_per_token = 0;
};

struct StateBytes {
  uint64_t mamba_conv = 0, mamba_ssm = 0;  // per sequence, fixed (f32)
  uint64_t kv_per_token = 0;               // backbone attention, f32 K+V
  uint64_t mtp_kv_per_token = 0;           // the MTP module's attention sub-layers
  uint64_t fixed() const { return mamba_conv + mamba_ssm; }
};

struct MtpInfo {
  int declared_modules = 0;   // config num_nextn_predict_layers
  std::string sublayers;      // pattern of one module, e.g. "*E"
  int64_t tensors = 0;        // mtp.* tensors present
  uint64_t bytes = 0;
  bool complete = false;      // every expected mtp tensor is present and well-formed
  std::vector<std::string> missing;  // first few problems with the MTP tensors
};

using DrafterInfo = io::DrafterConfig;

struct PairingCheck {
  std::string name;  // hidden_size | vocab_size | target_layer_ids | fc_input | num_target_layers
  bool ok = true;
  bool fatal = true;  // a failed non-fatal check is only a warning
  std::string detail;
};

struct InspectReport {
  std::string path;
  std::string kind;  // "target" | "drafter" | "unknown"
  std::optional<io::ModelConfig> config;  // target only
  std::optional<DrafterInfo> drafter;     // drafter only
  std::string tensor_prefix;              // "backbone." | "model." | "" (drafter)
  io::QuantConfig quant;

  int64_t tensor_count = 0;
  uint64_t tensor_bytes = 0;  // all tensor data
  uint64_t used_bytes = 0;    // tensors the runtime binds (backbone / drafter; no mtp.*)
  int64_t unused_tensors = 0;
  std::map<std::string, int64_t> modules_by_format;  // "bf16", "nvfp4", "fp8", "affine4", ...
  std::map<std::string, uint64_t> bytes_by_format;   // sums to tensor_bytes
  ParamCounts params;
  StateBytes state;
  MtpInfo mtp;

  std::vector<std::string> problems;  // why it cannot run (empty = runnable)
  std::vector<std::string> warnings;  // odd but harmless

  // Pairing, filled by pair_drafter() on the target's report.
  std::vector<PairingCheck> pairing;
  std::shared_ptr<InspectReport> draft;

  bool runnable() const { return problems.empty(); }
  // Resident memory estimate at `context` tokens: mapped bytes the runtime uses + state.
  uint64_t resident_bytes(int64_t context, bool with_mtp) const;
};

// The counting core: a target checkpoint given as a tensor list. `dir` only labels the report.
InspectReport inspect_target(const io::ModelConfig& cfg, const io::QuantConfig& qc,
                             const std::vector<InspectTensor>& tensors, const std::string& dir = "");
// A DFlash / DSpark drafter given its parsed config.json and tensor list.
InspectReport inspect_drafter(const nlohmann::json& config, const io::QuantConfig& qc,
                              const std::vector<InspectTensor>& tensors, const std::string& dir = "");
// Reads DIR (config.json, quant config, safetensors) and dispatches on the config. Never throws
// for a bad checkpoint: loading errors become problems.
InspectReport inspect_dir(const std::string& dir);
// Pairs a drafter with the target: hidden size, vocab, tap layer ids < target layers. Failed
// fatal checks are added to the target report's problems.
void pair_drafter(InspectReport& target, InspectReport drafter);

// Conditions from the command line.
struct InspectRequire {
  bool mtp = false;
};
// Adds a problem for every --require-* condition that does not hold.
void apply_requirements(InspectReport& r, const InspectRequire& req);

nlohmann::json to_json(const InspectReport& r, int64_t context = 4096);
std::string to_text(const InspectReport& r, int64_t context = 4096);

}  // namespace nemo::inspect
