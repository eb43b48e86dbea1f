// The checkpoint layout as data: every tensor of a Nemotron-H target (backbone + MTP module) and
// of a DFlash / DSpark drafter, with its Hugging Face name, logical shape and role. This table is
// the one place that spells tensor names: the model binds its weights from it, `inspect` checks a
// checkpoint against it and `synth` writes checkpoints from it. Facts: nemotron_h.md §2–§6 (target,
// MTP), dflash_dspark.md §2 (drafters), formats.md §2 (what the quantized formats store per
// module).
//
// A Linear entry names a module (prefix P with P.weight and, when quantized, its scale tensors);
// its shape is the logical [out, in] whatever the storage format. MLX conversions stack the
// routed experts of a layer as P.switch_mlp.fc1/fc2 [E, out, in]: stacked_alias() maps the
// per-expert entries onto those.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/drafter_config.h"
#include "io/model_config.h"

namespace nemo::model::layout {

enum class Part : uint8_t { Backbone, Mtp, Drafter };
enum class Kind : uint8_t {
  Linear,  // a module: name is the prefix of name.weight (+ format-specific scale tensors)
  Vector,  // a small float parameter read whole (norm weights, biases, A_log, D, dt_bias, sinks)
  Conv,    // Mamba depthwise conv taps: [C, 1, K] (HF), also [C, K, 1] (MLX) or [C, K]
};

// One line per block kind (clang-format would put one role per line).
// clang-format off
enum class Role : uint8_t {
  // backbone
  Embedding, FinalNorm, LmHead, LayerNorm,
  // Mamba-2 mixer (nemotron_h.md §3.1)
  MambaInProj, MambaConv, MambaConvBias, MambaDtBias, MambaALog, MambaD, MambaNorm, MambaOutProj,
  // attention mixer (nemotron_h.md §4)
  AttnQ, AttnK, AttnV, AttnO,
  // MoE mixer (nemotron_h.md §5): router, its correction bias, routed experts (index = expert id), shared expert
  Router, RouterBias, ExpertUp, ExpertDown, SharedUp, SharedDown,
  // dense relu² MLP mixer
  MlpUp, MlpDown,
  // MTP module (nemotron_h.md §6.1): on sub-layer 0 the fusion, on the last the final norm
  MtpENorm, MtpHNorm, MtpEhProj, MtpFinalNorm,
  // DFlash / DSpark drafter (dflash_dspark.md §2)
  DraftEmbed, DraftFc, DraftHiddenNorm, DraftNorm, DraftLmHead, DraftInputNorm, DraftPostAttnNorm, DraftQ, DraftK,
  DraftV, DraftO, DraftQNorm, DraftKNorm, DraftSink, DraftGate, DraftUp, DraftDown, MarkovW1, MarkovW2,
};
// clang-format on
const char* role_name(Role r);

struct TensorSpec {
  std::string name;  // Linear: module prefix; otherwise the tensor name
  Role role;
  Kind kind;
  Part part;
  std::vector<int64_t> shape;  // logical: Linear [out, in]; Vector [n]; Conv [C, 1, K]
  int layer = -1;              // backbone layer, MTP sub-layer or drafter layer; -1 outside layers
  int index = -1;              // routed expert id (ExpertUp / ExpertDown)
  bool required = true;        // absent optional tensors take a default (e.g. a zero router bias)
  bool f32_storage =
      false;  // released in F32 whatever the checkpoint dtype (A_log, D, dt_bias, ...)

  std::string tensor_name() const { return kind == Kind::Linear ? name + ".weight" : name; }
  // Accepted stored shapes of a non-Linear tensor (the first is what the HF release writes).
  std::vector<std::vector<int64_t>> accepted_shapes() const;
};

// The tensors of one block, with lookups by role.
class Block {
 public:
  Block() = default;
  explicit Block(std::vector<TensorSpec> specs) : specs_(std::move(specs)) {}
  const TensorSpec& at(Role r, int index = -1) const;  // throws if absent
  const TensorSpec* find(Role r, int index = -1) const;
  std::span<const TensorSpec> specs() const { return specs_; }

 private:
  std::vector<TensorSpec> specs_;
};

struct TargetOptions {
  std::string prefix = "backbone.";  // HF in-library re-saves use "model."
  bool mtp = true;                   // include the MTP module when the config declares one
};

// Tensors of one backbone layer (its pre-norm and mixer) or one MTP sub-layer (`part` = Mtp,
// prefix "mtp.layers.{s}", including the module's fusion/final norm entries on the first/last).
Block layer_block(const io::ModelConfig& c, io::LayerKind kind, const std::string& layer_prefix,
                  Part part, int layer);
// The whole target in file order: embeddings, layers, norm_f, lm_head, then the MTP module.
std::vector<TensorSpec> target_tensors(const io::ModelConfig& c, const TargetOptions& opt = {});
// Backbone prefix of a checkpoint given a name test: "backbone." unless only "model." names exist.
template <typename HasFn>
std::string backbone_prefix(const HasFn& has) {
  return has("backbone.embeddings.weight") || !has("model.embeddings.weight") ? "backbone."
                                                                              : "model.";
}
std::string layer_prefix(const std::string& backbone_prefix, size_t i);  // "backbone.layers.i"
std::string mtp_prefix(size_t sublayer);                                 // "mtp.layers.s"

// A drafter checkpoint in file order. `prefix` is "" or "model." (both occur in the wild).
std::vector<TensorSpec> drafter_tensors(const io::DrafterConfig& d, const std::string& prefix = "");

// MLX stacked experts: ExpertUp / ExpertDown of expert e → module P.switch_mlp.fc1 / fc2.
struct StackedAlias {
  std::string module;
  int64_t index, count;
};
std::optional<StackedAlias> stacked_alias(const TensorSpec& s, int64_t n_experts);

}  // namespace nemo::model::layout
