// Checkpoint inspection: a target or drafter checkpoint checked against the layout table
// (model/layout.h): formats, shapes, parameter counts, state sizes, pairing. Presentation: report.cpp.
#include "tools/inspect/inspect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/layout.h"

namespace nemo::inspect {

using io::DType;
using io::LayerKind;
using io::shape_str;
using json = nlohmann::json;
namespace layout = model::layout;

namespace {

constexpr size_t kMaxListed = 12;  // problems listed per category before "... and N more"

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

uint64_t nbytes_of(const InspectTensor& t) {
  if (t.nbytes) return t.nbytes;
  return uint64_t(numel_of(t.shape)) * uint64_t(io::dtype_bits(t.dtype)) / 8;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string dtype_bucket(DType d) { return lower(io::dtype_name(d)); }

bool is_float(DType d) { return d == DType::BF16 || d == DType::F16 || d == DType::F32; }

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// " [in FILE]" for a problem message, as io::check_module writes it; "" when the file is unknown.
std::string in_file(const InspectTensor& t) {
  return t.file.empty() ? "" : " [in " + t.file + "]";
}

// Tensors that describe a quantization, never parameters.
bool is_scale_suffix(const std::string& suffix) {
  return suffix == "weight_scale" || suffix == "weight_scale_2" || suffix == "input_scale" || suffix == "k_scale" ||
         suffix == "v_scale";
}

// What one module (a prefix P with P.weight) turned out to be.
struct Module {
  std::string format;        // bf16 / f16 / f32 / nvfp4 / fp8 / affine4 / affine8 / <dtype>
  bool quantized = false;
  int64_t out = 0, in = 0, stacked = 0;  // logical weight [stacked?, out, in]
  std::string error;                      // check_module failure, empty when fine
  std::set<std::string> suffixes;         // tensor suffixes that belong to the format
};

std::string format_of(const io::CheckedModule& m) {
  switch (m.quant.algo) {
    case io::QuantAlgo::NVFP4:
    case io::QuantAlgo::W4A16_NVFP4: return "nvfp4";
    case io::QuantAlgo::FP8: return "fp8";
    case io::QuantAlgo::MlxAffine: return "affine" + std::to_string(m.quant.bits);
    case io::QuantAlgo::None: break;
  }
  return dtype_bucket(m.weight_dtype);
}

std::set<std::string> suffixes_of(const std::string& format) {
  if (format == "nvfp4") return {"weight", "weight_scale", "weight_scale_2", "input_scale"};
  if (format == "fp8") return {"weight", "weight_scale", "input_scale"};
  if (starts_with(format, "affine")) return {"weight", "scales", "biases"};
  return {"weight"};
}

// The tensor list with lookups and the per-module verdicts.
class Catalog {
 public:
  Catalog(const io::QuantConfig& qc, const std::vector<InspectTensor>& tensors) : qc_(qc), tensors_(tensors) {
    for (const auto& t : tensors_) by_name_[t.name] = &t;
    lookup_ = [this](const std::string& n) -> std::optional<io::TensorInfo> {
      const InspectTensor* t = find(n);
      if (!t) return std::nullopt;
      return io::TensorInfo{t->dtype, t->shape, t->file, t->data};
    };
    for (const auto& t : tensors_) {
      const std::string suffix = ".weight";
      if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        modules_[t.name.substr(0, t.name.size() - suffix.size())] = classify(t.name.substr(0, t.name.size() - suffix.size()));
    }
  }

  const InspectTensor* find(const std::string& n) const {
    auto it = by_name_.find(n);
    return it == by_name_.end() ? nullptr : it->second;
  }
  const Module* module(const std::string& prefix) const {
    auto it = modules_.find(prefix);
    return it == modules_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Module>& modules() const { return modules_; }

  // Which module a tensor belongs to as part of its format (weight, scales, ...), or nullptr.
  const Module* owner(const std::string& name, std::string* suffix) const {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) return nullptr;
    const Module* m = module(name.substr(0, dot));
    *suffix = name.substr(dot + 1);
    if (!m || !m->suffixes.count(*suffix)) return nullptr;
    return m;
  }

  // Logical parameters of one tensor (packed weights unpacked; scales count 0).
  int64_t params(const InspectTensor& t) const {
    std::string suffix;
    const Module* m = owner(t.name, &suffix);
    if (m && m->quantized) return suffix == "weight" ? std::max<int64_t>(1, m->stacked) * m->out * m->in : 0;
    const size_t dot = t.name.rfind('.');
    if (dot != std::string::npos && is_scale_suffix(t.name.substr(dot + 1))) return 0;
    return numel_of(t.shape);
  }
  std::string bucket(const InspectTensor& t) const {
    std::string suffix;
    const Module* m = owner(t.name, &suffix);
    return m && m->quantized ? m->format : dtype_bucket(t.dtype);
  }

 private:
  Module classify(const std::string& prefix) const {
    Module m;
    io::CheckOptions opt;
    opt.scan_block_scales = false;  // inspect stays fast; the loader scans block scales
    try {
      const io::CheckedModule cm = io::check_module(qc_, prefix, lookup_, opt);
      m.format = format_of(cm);
      m.quantized = cm.quant.algo != io::QuantAlgo::None;
      m.out = cm.out, m.in = cm.in, m.stacked = cm.stacked;
      if (!m.quantized) {  // keep the true shape for dense tensors (1-D norms, 3-D conv)
        const auto& s = find(prefix + ".weight")->shape;
        m.out = s.empty() ? 1 : s.size() >= 2 ? s[s.size() - 2] : s[0];
      }
    } catch (const Error& e) {
      m.error = e.what();
      guess(prefix, m);
    }
    m.suffixes = suffixes_of(m.format);
    return m;
  }

  // After a failed cross-check: the format the tensors look like, so bytes/params still add up.
  void guess(const std::string& prefix, Module& m) const {
    const InspectTensor* w = find(prefix + ".weight");
    const auto& s = w->shape;
    const int64_t last = s.empty() ? 1 : s.back();
    m.out = s.size() >= 2 ? s[s.size() - 2] : (s.empty() ? 1 : s[0]);
    m.stacked = s.size() == 3 ? s[0] : 0;
    if (w->dtype == DType::U8 && find(prefix + ".weight_scale")) {
      m.format = "nvfp4", m.quantized = true, m.in = 2 * last;
    } else if (w->dtype == DType::F8_E4M3) {
      m.format = "fp8", m.quantized = true, m.in = last;
    } else if (w->dtype == DType::U32 && find(prefix + ".scales")) {
      const int bits = qc_.global.bits > 0 ? qc_.global.bits : 4;
      m.format = "affine" + std::to_string(bits), m.quantized = true, m.in = last * 32 / bits;
    } else {
      m.format = dtype_bucket(w->dtype), m.in = last;
    }
  }

  const io::QuantConfig& qc_;
  const std::vector<InspectTensor>& tensors_;
  std::map<std::string, const InspectTensor*> by_name_;
  std::map<std::string, Module> modules_;
  io::TensorLookup lookup_;
};

// Collects problems for one part of the checkpoint (backbone, MTP, drafter) and marks the
// tensors the runtime would bind.
class Expect {
 public:
  Expect(const Catalog& cat, std::set<std::string>& used, std::vector<std::string>& sink)
      : cat_(cat), used_(used), sink_(sink) {}

  size_t failures() const { return failures_; }

  void problem(std::string msg) {
    ++failures_;
    if (sink_.size() < kMaxListed) sink_.push_back(std::move(msg));
    else overflow_++;
  }
  void finish() {
    if (overflow_) sink_.push_back(fmt::format("... and {} more", overflow_));
    overflow_ = 0;
  }

  // A float tensor that is not a Linear (norm weights, biases, A_log, D, dt_bias, conv taps) in
  // one of the shapes the loader accepts (TensorSpec::accepted_shapes).
  void tensor(const layout::TensorSpec& spec) {
    const auto shapes = spec.accepted_shapes();
    const InspectTensor* t = cat_.find(spec.name);
    if (!t)
      return problem(
          fmt::format("missing tensor {} (expected {})", spec.name, shape_str(shapes[0])));
    used_.insert(spec.name);
    if (!is_float(t->dtype) || std::find(shapes.begin(), shapes.end(), t->shape) == shapes.end())
      problem(fmt::format("tensor {} is {} {}, expected float {}{}", spec.name,
                          io::dtype_name(t->dtype), shape_str(t->shape), shape_str(shapes[0]),
                          in_file(*t)));
  }

  // A linear module of logical shape [stacked?, out, in] in any accepted form (dense, NVFP4
  // triple, FP8 pair, MLX weight/scales/biases). in < 0: any input width (returned).
  int64_t linear(const std::string& prefix, int64_t out, int64_t in, int64_t stacked = 0) {
    const Module* m = cat_.module(prefix);
    if (!m) {
      problem(fmt::format("missing tensor {}.weight (expected {}{}[{}, {}])", prefix,
                          stacked ? std::to_string(stacked) : "", stacked ? " x " : "", out, in < 0 ? 0 : in));
      return -1;
    }
    for (const auto& s : m->suffixes)
      if (cat_.find(prefix + "." + s)) used_.insert(prefix + "." + s);
    // FP8 KV-cache scales ride on k/v_proj; harmless to an f32 cache, so not "unused".
    for (const char* s : {"k_scale", "v_scale"})
      if (cat_.find(prefix + "." + s)) used_.insert(prefix + "." + s);
    if (!m->error.empty()) {
      problem(m->error);
      return -1;
    }
    const InspectTensor* w = cat_.find(prefix + ".weight");
    const bool rank_ok = stacked ? (w->shape.size() == 3) : (w->shape.size() == 2);
    if (!rank_ok || m->out != out || (in >= 0 && m->in != in) || m->stacked != stacked) {
      problem(fmt::format(
          "module {} ({}): weight {} {} is logically {}[{}, {}], expected {}[{}, {}]{}", prefix,
          m->format, io::dtype_name(w->dtype), shape_str(w->shape),
          m->stacked ? std::to_string(m->stacked) + " x " : "", m->out, m->in,
          stacked ? std::to_string(stacked) + " x " : "", out, in < 0 ? m->in : in, in_file(*w)));
      return -1;
    }
    return m->in;
  }

 private:
  const Catalog& cat_;
  std::set<std::string>& used_;
  std::vector<std::string>& sink_;
  size_t failures_ = 0, overflow_ = 0;
};

// Checks every layout entry against the checkpoint: Linear modules in any accepted format (MLX
// stacked experts once per stacked module), Vector and Conv entries as float tensors. Optional
// entries are checked only when present.
void expect_layout(Expect& x, const Catalog& cat, const std::vector<layout::TensorSpec>& specs, int64_t n_experts) {
  std::set<std::string> stacked_seen;
  for (const auto& s : specs) {
    if (!s.required && !cat.find(s.tensor_name())) continue;
    switch (s.kind) {
      case layout::Kind::Linear:
        if (const auto a = layout::stacked_alias(s, n_experts)) {
          const std::string base = a->module.substr(0, a->module.rfind(".switch_mlp."));
          if (cat.module(base + ".switch_mlp.fc1") || cat.module(base + ".switch_mlp.fc2")) {  // MLX stacked experts
            if (stacked_seen.insert(a->module).second) x.linear(a->module, s.shape[0], s.shape[1], n_experts);
            break;
          }
        }
        x.linear(s.name, s.shape[0], s.shape[1]);
        break;
      case layout::Kind::Vector:
      case layout::Kind::Conv:
        x.tensor(s);
        break;
    }
  }
}

bool is_fusion_or_norm(layout::Role r) {
  using layout::Role;
  return r == Role::LayerNorm || r == Role::MtpENorm || r == Role::MtpHNorm || r == Role::MtpEhProj ||
         r == Role::MtpFinalNorm;
}

// Which parameter group a backbone tensor belongs to.
enum class Group { Embedding, LmHead, Mamba, Attention, Mlp, Routed, Shared, Router, Norms, Other, Mtp };

Group group_of(const std::string& name, const std::string& P, const io::ModelConfig& c) {
  if (starts_with(name, "mtp.")) return Group::Mtp;
  if (starts_with(name, P + "embeddings.")) return Group::Embedding;
  if (starts_with(name, "lm_head.")) return Group::LmHead;
  if (starts_with(name, P + "norm_f.")) return Group::Norms;
  const std::string lp = P + "layers.";
  if (!starts_with(name, lp)) return Group::Other;
  const size_t dot = name.find('.', lp.size());
  if (dot == std::string::npos) return Group::Other;
  size_t idx = 0;
  try {
    idx = std::stoul(name.substr(lp.size(), dot - lp.size()));
  } catch (...) {
    return Group::Other;
  }
  if (idx >= c.layers.size()) return Group::Other;
  const std::string rest = name.substr(dot + 1);
  if (starts_with(rest, "norm.")) return Group::Norms;
  switch (c.layers[idx]) {
    case LayerKind::Mamba: return Group::Mamba;
    case LayerKind::Attention: return Group::Attention;
    case LayerKind::MLP: return Group::Mlp;
    case LayerKind::MoE:
      if (starts_with(rest, "mixer.experts.") || starts_with(rest, "mixer.switch_mlp.")) return Group::Routed;
      if (starts_with(rest, "mixer.shared_experts.")) return Group::Shared;
      if (starts_with(rest, "mixer.gate.")) return Group::Router;
      return Group::Other;
  }
  return Group::Other;
}

bool is_routed_mtp(const std::string& name) {
  return name.find(".mixer.experts.") != std::string::npos || name.find(".mixer.switch_mlp.") != std::string::npos;
}

// Format counts and bytes over every tensor / module.
void account_formats(const Catalog& cat, const std::vector<InspectTensor>& tensors, InspectReport& r) {
  for (const auto& [prefix, m] : cat.modules()) r.modules_by_format[m.format]++;
  for (const auto& t : tensors) {
    const uint64_t b = nbytes_of(t);
    r.bytes_by_format[cat.bucket(t)] += b;
    r.tensor_bytes += b;
  }
  r.tensor_count = int64_t(tensors.size());
}

void note_unused(const std::vector<InspectTensor>& tensors, const std::set<std::string>& used, InspectReport& r,
                 const std::string& skip_prefix) {
  std::vector<std::string> names;
  for (const auto& t : tensors) {
    if (used.count(t.name)) {
      r.used_bytes += nbytes_of(t);
      continue;
    }
    if (!skip_prefix.empty() && starts_with(t.name, skip_prefix)) continue;
    ++r.unused_tensors;
    if (names.size() < 5) names.push_back(t.name);
  }
  if (r.unused_tensors)
    r.warnings.push_back(fmt::format("{} tensor(s) not used by the runtime (e.g. {}{})", r.unused_tensors,
                                     fmt::join(names, ", "), r.unused_tensors > 5 ? ", ..." : ""));
}

void check_quant_listing(const Catalog& cat, const io::QuantConfig& qc, InspectReport& r) {
  if (qc.format != io::QuantFormat::ModelOpt) return;
  int64_t missing = 0;
  std::string first;
  for (const auto& [k, v] : qc.layers)
    if (!cat.module(k)) {
      if (!missing++) first = k;
    }
  if (missing)
    r.warnings.push_back(fmt::format("{}: {} quantized_layers entr{} name no module in the checkpoint (e.g. {})",
                                     qc.source, missing, missing == 1 ? "y" : "ies", first));
}

bool is_target_config(const json& cfg) {
  if (!cfg.is_object()) return false;
  const std::string mt = cfg.value("model_type", std::string());
  return mt == "nemotron_h" || lower(io::architecture_of(cfg)).find("nemotronh") != std::string::npos;
}

}  // namespace

uint64_t InspectReport::resident_bytes(int64_t context, bool with_mtp) const {
  uint64_t b = used_bytes + state.fixed() + state.kv_per_token * uint64_t(std::max<int64_t>(0, context));
  if (with_mtp) b += mtp.bytes + state.mtp_kv_per_token * uint64_t(std::max<int64_t>(0, context));
  return b;
}

InspectReport inspect_target(const io::ModelConfig& c, const io::QuantConfig& qc,
                             const std::vector<InspectTensor>& tensors, const std::string& dir) {
  InspectReport r;
  r.path = dir;
  r.kind = "target";
  r.config = c;
  r.quant = qc;
  const Catalog cat(qc, tensors);
  // HF in-library re-saves use "model." instead of "backbone." (nemotron_h.md §7); same rule as the loader.
  r.tensor_prefix = layout::backbone_prefix([&](const std::string& n) { return cat.find(n) != nullptr; });
  const std::string& P = r.tensor_prefix;
  const int64_t V = c.vocab_size;

  const auto specs = layout::target_tensors(c, {.prefix = P, .mtp = true});
  std::vector<layout::TensorSpec> backbone, mtp;
  for (const auto& s : specs) (s.part == layout::Part::Mtp ? mtp : backbone).push_back(s);
  std::set<std::string> used;
  {
    Expect x(cat, used, r.problems);
    expect_layout(x, cat, backbone, c.n_routed_experts);
    x.finish();
  }

  // MTP: one module of sub-layers `mtp_layers`, flattened as mtp.layers.{s} (nemotron_h.md §6.1).
  r.mtp.declared_modules = c.num_nextn_predict_layers;
  for (auto k : c.mtp_layers) r.mtp.sublayers.push_back(io::layer_kind_char(k));
  for (const auto& t : tensors)
    if (starts_with(t.name, "mtp.")) ++r.mtp.tensors, r.mtp.bytes += nbytes_of(t);
  if (c.num_nextn_predict_layers > 0) {
    if (r.mtp.tensors == 0) {
      r.mtp.missing.push_back("no mtp.* tensors (dropped by the conversion?)");
    } else {
      std::set<std::string> mtp_used;
      Expect x(cat, mtp_used, r.mtp.missing);
      // Sub-layer kinds the MTP runtime has no mixer for: report, and check only their norms.
      std::vector<layout::TensorSpec> runnable;
      for (size_t s = 0; s < c.mtp_layers.size(); ++s)
        if (c.mtp_layers[s] != LayerKind::Attention && c.mtp_layers[s] != LayerKind::MoE)
          x.problem(fmt::format("MTP sub-layer {} is '{}': only attention and moe are supported", s,
                                io::layer_kind_name(c.mtp_layers[s])));
      for (const auto& s : mtp) {
        const LayerKind k = c.mtp_layers[size_t(s.layer)];
        if (k == LayerKind::Attention || k == LayerKind::MoE || is_fusion_or_norm(s.role)) runnable.push_back(s);
      }
      expect_layout(x, cat, runnable, c.n_routed_experts);
      if (c.mtp_layers.empty()) x.problem("mtp_layers_block_type is empty");
      x.finish();
      if (c.num_nextn_predict_layers > 1)
        r.warnings.push_back(fmt::format("num_nextn_predict_layers = {}: only one MTP module is used",
                                         c.num_nextn_predict_layers));
    }
    r.mtp.complete = r.mtp.missing.empty();
    if (!r.mtp.complete && r.mtp.tensors > 0)
      r.warnings.push_back("MTP module incomplete: " + r.mtp.missing.front());
  } else if (r.mtp.tensors > 0) {
    r.warnings.push_back(fmt::format("{} mtp.* tensors present but config.json declares no MTP module", r.mtp.tensors));
  }

  account_formats(cat, tensors, r);
  note_unused(tensors, used, r, "mtp.");
  check_quant_listing(cat, qc, r);

  // Parameters.
  ParamCounts& pc = r.params;
  int64_t mtp_routed = 0;
  for (const auto& t : tensors) {
    const int64_t n = cat.params(t);
    switch (group_of(t.name, P, c)) {
      case Group::Embedding: pc.embedding += n; break;
      case Group::LmHead: pc.lm_head += n; break;
      case Group::Mamba: pc.mamba += n; break;
      case Group::Attention: pc.attention += n; break;
      case Group::Mlp: pc.mlp += n; break;
      case Group::Routed: pc.moe_routed += n; break;
      case Group::Shared: pc.moe_shared += n; break;
      case Group::Router: pc.moe_router += n; break;
      case Group::Norms: pc.norms += n; break;
      case Group::Other: pc.other += n; break;
      case Group::Mtp:
        pc.mtp_total += n;
        if (is_routed_mtp(t.name)) mtp_routed += n;
        break;
    }
  }
  pc.total = pc.embedding + pc.lm_head + pc.mamba + pc.attention + pc.mlp + pc.moe_routed + pc.moe_shared +
             pc.moe_router + pc.norms + pc.other;
  const int64_t E = std::max<int64_t>(1, c.n_routed_experts), k = c.num_experts_per_tok;
  // A token reads k of E routed experts per MoE layer; everything else it reads whole. The
  // logits need the whole head (the embedding table itself when tied).
  const int64_t head = pc.lm_head > 0 ? pc.lm_head : (c.tie_word_embeddings ? pc.embedding : 0);
  const int64_t rest = pc.mamba + pc.attention + pc.mlp + pc.moe_shared + pc.moe_router + pc.norms + head +
                       pc.moe_routed / E * k;
  pc.active_per_token = rest + (V > 0 ? pc.embedding / V : 0);
  pc.active_per_token_full_embedding = rest + (pc.lm_head > 0 || !c.tie_word_embeddings ? pc.embedding : 0);
  pc.mtp_active_per_token = pc.mtp_total - mtp_routed + mtp_routed / E * k;

  // State per sequence (f32, as model::SequenceState holds it).
  const uint64_t nm = uint64_t(c.count(LayerKind::Mamba)), na = uint64_t(c.count(LayerKind::Attention));
  r.state.mamba_conv = nm * uint64_t(std::max<int64_t>(0, c.conv_kernel - 1) * c.conv_dim()) * 4;
  r.state.mamba_ssm = nm * uint64_t(c.mamba_num_heads * c.mamba_head_dim * c.ssm_state_size) * 4;
  const uint64_t kv_row = 2 * uint64_t(c.num_key_value_heads * c.head_dim) * 4;
  r.state.kv_per_token = na * kv_row;
  if (c.num_nextn_predict_layers > 0)
    r.state.mtp_kv_per_token =
        uint64_t(std::count(c.mtp_layers.begin(), c.mtp_layers.end(), LayerKind::Attention)) * kv_row;
  return r;
}

InspectReport inspect_drafter(const json& cfg, const io::QuantConfig& qc, const std::vector<InspectTensor>& tensors,
                              const std::string& dir) {
  InspectReport r;
  r.path = dir;
  r.kind = "drafter";
  r.quant = qc;
  const DrafterInfo d = io::parse_drafter_config(cfg);

  if (d.kind.empty())
    r.problems.push_back(fmt::format("unrecognised drafter: architectures \"{}\", model_type \"{}\" (expected "
                                     "DFlashDraftModel / Qwen3DSparkModel or a dflash_config)",
                                     d.architecture, d.model_type));
  for (const auto& [key, v] : {std::pair{"hidden_size", d.hidden_size}, {"num_hidden_layers", d.layers},
                               {"vocab_size", d.vocab_size}, {"num_attention_heads", d.num_attention_heads},
                               {"intermediate_size", d.intermediate_size}})
    if (v <= 0) r.problems.push_back(fmt::format("drafter config.json: missing or invalid '{}'", key));
  if (d.target_layer_ids.empty())
    r.problems.push_back("drafter config.json: no target layer ids (dflash_config.target_layer_ids)");

  const Catalog cat(qc, tensors);
  r.tensor_prefix = cat.find("model.layers.0.input_layernorm.weight") ? "model." : "";
  const std::string& P = r.tensor_prefix;
  std::set<std::string> used;
  if (r.problems.empty()) {
    Expect x(cat, used, r.problems);
    expect_layout(x, cat, layout::drafter_tensors(d, P), 0);
    x.finish();
  }
  account_formats(cat, tensors, r);
  note_unused(tensors, used, r, "");
  check_quant_listing(cat, qc, r);

  ParamCounts& pc = r.params;
  for (const auto& t : tensors) {
    const int64_t n = cat.params(t);
    const std::string rest = starts_with(t.name, P) ? t.name.substr(P.size()) : t.name;
    if (starts_with(rest, "embed_tokens.")) pc.embedding += n;
    else if (starts_with(t.name, "lm_head.")) pc.lm_head += n;
    else if (rest.find(".self_attn.") != std::string::npos && rest.find("_norm.") == std::string::npos) pc.attention += n;
    else if (rest.find(".mlp.") != std::string::npos) pc.mlp += n;
    else if (rest.find("norm.") != std::string::npos) pc.norms += n;
    else pc.other += n;  // fc, markov head
  }
  pc.total = pc.embedding + pc.lm_head + pc.attention + pc.mlp + pc.norms + pc.other;
  const int64_t row = d.vocab_size > 0 ? pc.embedding / d.vocab_size : 0;
  pc.active_per_token = pc.total - pc.embedding + row;
  pc.active_per_token_full_embedding = pc.total;
  r.state.kv_per_token = uint64_t(std::max<int64_t>(0, d.layers)) * 2 * uint64_t(std::max<int64_t>(0, d.num_key_value_heads * d.head_dim)) * 4;
  r.drafter = d;
  return r;
}

InspectReport inspect_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  InspectReport r;
  r.path = dir;
  r.kind = "unknown";
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  json cfg;
  try {
    cfg = io::read_config_json(dir);
  } catch (const Error& e) {
    r.problems.push_back(e.what());
    return r;
  }
  const bool target = is_target_config(cfg);
  const std::string dkind = target ? "" : io::drafter_kind(cfg);
  if (!target && dkind.empty()) {
    r.problems.push_back(fmt::format("{}: unrecognised checkpoint: model_type \"{}\", architectures \"{}\" is neither a "
                                     "Nemotron-H target nor a recognised (DFlash / DSpark) drafter",
                                     cfg_path, cfg.is_object() ? cfg.value("model_type", std::string()) : "",
                                     cfg.is_object() ? io::architecture_of(cfg) : ""));
    return r;
  }
  std::optional<io::ModelConfig> mc;
  io::QuantConfig qc;
  std::optional<io::TensorStore> store;
  try {
    if (target) mc = io::parse_model_config(cfg, cfg_path);
    // Quant config from the already-parsed config.json: io::load_quant_config re-reads it with a
    // strict parser that rejects the bare Infinity HF configs carry in time_step_limit.
    const fs::path hq = fs::path(dir) / "hf_quant_config.json";
    std::optional<json> hqj;
    if (fs::exists(hq)) {
      std::ifstream f(hq);
      try {
        hqj = json::parse(f);
      } catch (const json::exception& e) {
        fail("{}: malformed JSON: {}", hq.string(), e.what());
      }
    }
    qc = io::parse_quant_config(hqj ? &*hqj : nullptr, hq.string(), &cfg, cfg_path);
    store = io::TensorStore::open_dir(dir);
  } catch (const Error& e) {
    r.kind = target ? "target" : "drafter";
    r.problems.push_back(e.what());
    return r;
  }
  std::vector<InspectTensor> tensors;
  for (const auto& n : store->names()) {
    const io::TensorView& v = store->get(n);
    tensors.push_back({v.name, v.dtype, v.shape, v.nbytes, v.file ? *v.file : std::string(), v.data});
  }
  InspectReport out = target ? inspect_target(*mc, qc, tensors, dir) : inspect_drafter(cfg, qc, tensors, dir);
  return out;
}

void pair_drafter(InspectReport& t, InspectReport dr) {
  const auto add = [&t](std::string name, bool ok, std::string detail, bool fatal = true) {
    t.pairing.push_back({std::move(name), ok, fatal, std::move(detail)});
    if (!ok) (fatal ? t.problems : t.warnings).push_back("draft " + t.pairing.back().name + ": " + t.pairing.back().detail);
  };
  for (const auto& p : dr.problems) t.problems.push_back("draft " + dr.path + ": " + p);
  if (dr.kind != "drafter" || !dr.drafter) {
    if (dr.kind != "unknown" || dr.problems.empty())
      add("kind", false, fmt::format("{} is a {} checkpoint, not a recognised drafter (DFlash / DSpark)", dr.path,
                                     dr.kind));
  } else if (t.config) {
    const DrafterInfo& d = *dr.drafter;
    const io::ModelConfig& c = *t.config;
    const int64_t th = d.target_hidden_size.value_or(d.hidden_size);
    add("hidden_size", d.hidden_size == c.hidden_size && th == c.hidden_size,
        fmt::format("drafter hidden_size {}{} vs target hidden_size {}", d.hidden_size,
                    d.target_hidden_size ? fmt::format(" (target_hidden_size {})", th) : "", c.hidden_size));
    add("vocab_size", d.vocab_size == c.vocab_size,
        fmt::format("drafter vocab_size {} vs target vocab_size {}", d.vocab_size, c.vocab_size));
    std::vector<int64_t> bad;
    for (auto id : d.target_layer_ids)
      if (id < 0 || id >= int64_t(c.layers.size())) bad.push_back(id);
    add("target_layer_ids", !d.target_layer_ids.empty() && bad.empty(),
        d.target_layer_ids.empty()
            ? std::string("drafter declares no target layer ids")
            : fmt::format("tap layer ids [{}] must be in [0, {}){}", fmt::join(d.target_layer_ids, ", "),
                          c.layers.size(), bad.empty() ? "" : fmt::format("; out of range: [{}]", fmt::join(bad, ", "))));
    if (d.mask_token_id)
      add("mask_token_id", *d.mask_token_id >= 0 && *d.mask_token_id < c.vocab_size,
          fmt::format("mask token id {} vs target vocab_size {}", *d.mask_token_id, c.vocab_size));
    if (d.num_target_layers)
      add("num_target_layers", *d.num_target_layers == int64_t(c.layers.size()),
          fmt::format("drafter num_target_layers {} vs target layers {}", *d.num_target_layers, c.layers.size()),
          /*fatal=*/false);
    if (!d.has_lm_head)
      add("lm_head", t.params.lm_head > 0 || c.tie_word_embeddings,
          "the drafter has no lm_head and reuses the target's");
  }
  t.draft = std::make_shared<InspectReport>(std::move(dr));
}

void apply_requirements(InspectReport& r, const InspectRequire& req) {
  if (!req.mtp) return;
  if (r.kind != "target") {
    r.problems.push_back(fmt::format("--require-mtp: {} is not a Nemotron-H target checkpoint", r.path));
  } else if (r.mtp.declared_modules == 0) {
    r.problems.push_back("--require-mtp: config.json declares no MTP module (num_nextn_predict_layers = 0)");
  } else if (!r.mtp.complete) {
    r.problems.push_back("--require-mtp: the MTP module is incomplete: " +
                         (r.mtp.missing.empty() ? std::string("?") : r.mtp.missing.front()));
  }
}

}  // namespace nemo::inspect
