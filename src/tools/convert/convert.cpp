#include "tools/convert/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "base/numeric.h"
#include "io/drafter_config.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace nemo::convert {

namespace fs = std::filesystem;
using io::DType;

namespace {

bool is_dense_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

// The storage dtypes of NVFP4, FP8 and MLX affine weights.
bool is_quantized_dtype(DType t) {
  switch (t) {
    case DType::U8:
    case DType::I8:
    case DType::U32:
    case DType::F8_E4M3:
    case DType::F8_E5M2:
    case DType::F8_E4M3FNUZ:
    case DType::F8_E5M2FNUZ:
    case DType::F8_E8M0:
      return true;
    default:
      return false;
  }
}

// Scale tensors ModelOpt (weight_scale[_2], input_scale, k/v_scale) and MLX (scales, biases) add.
bool is_quantization_scale(const std::string& name) {
  for (const char* s : {".weight_scale", ".weight_scale_2", ".input_scale", ".k_scale", ".v_scale",
                        ".scales", ".biases"})
    if (name.ends_with(s)) return true;
  return false;
}

// A quantized source holds rounded values, not the trained ones: refused outright.
void refuse_quantized(const std::string& src, const nlohmann::json& cfg) {
  for (const char* k : {"quantization_config", "quantization"})
    if (cfg.contains(k))
      fail("{}: a quantized checkpoint (\"{}\"); convert reads dense F32, BF16 or F16 checkpoints",
           (fs::path(src) / "config.json").string(), k);
  const fs::path hfq = fs::path(src) / "hf_quant_config.json";
  if (fs::exists(hfq))
    fail("{}: a quantized checkpoint; convert reads dense F32, BF16 or F16 checkpoints",
         hfq.string());
}

// The file a missing tensor would be in: the index of a sharded checkpoint, else the one file.
std::string tensor_source(const std::string& dir) {
  const fs::path idx = fs::path(dir) / "model.safetensors.index.json";
  return (fs::exists(idx) ? idx : fs::path(dir) / "model.safetensors").string();
}

// Every disagreement between the source's tensors and the layout, each naming file and tensor.
std::vector<std::string> check_tensors(const io::TensorStore& st,
                                       const std::vector<synth::SynthTensor>& layout,
                                       const std::string& src, bool drop_mtp) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  const std::string index = tensor_source(src);
  for (const auto& t : layout) {
    expected.insert(t.name);
    const io::TensorView* v = st.find(t.name);
    if (!v) {
      problems.push_back(
          fmt::format("{}: tensor '{}' is missing (config.json makes it {}){}", index, t.name,
                      io::shape_str(t.shape),
                      t.name.starts_with("mtp.") ? "; --no-mtp drops the MTP module" : ""));
    } else if (is_quantized_dtype(v->dtype)) {
      problems.push_back(
          fmt::format("{}: tensor '{}' is {}, a quantized dtype; convert reads dense F32, BF16 or "
                      "F16 tensors",
                      *v->file, t.name, io::dtype_name(v->dtype)));
    } else if (!is_dense_float(v->dtype)) {
      problems.push_back(fmt::format("{}: tensor '{}' is {}; expected F32, BF16 or F16", *v->file,
                                     t.name, io::dtype_name(v->dtype)));
    } else if (v->shape != t.shape) {
      problems.push_back(fmt::format("{}: tensor '{}' has shape {}, but config.json makes it {}",
                                     *v->file, t.name, v->shape_str(), io::shape_str(t.shape)));
    }
  }
  for (const auto& n : st.names()) {
    if (expected.count(n) || (drop_mtp && n.starts_with("mtp."))) continue;
    problems.push_back(
        fmt::format("{}: unexpected tensor '{}' ({})", *st.get(n).file, n,
                    is_quantization_scale(n)
                        ? "a quantization scale: convert reads dense F32, BF16 or F16 checkpoints"
                        : "not in the layout config.json describes"));
  }
  return problems;
}

void fail_on(const std::vector<std::string>& problems) {
  if (problems.empty()) return;
  constexpr size_t kShown = 12;
  std::string msg = problems[0];
  for (size_t i = 1; i < std::min(problems.size(), kShown); ++i) msg += "\n  " + problems[i];
  if (problems.size() > kShown) msg += fmt::format("\n  ... and {} more", problems.size() - kShown);
  throw Error(msg);
}

// A source tensor widened to f32 (data may be unaligned: memcpy per element).
std::vector<float> widen(const io::TensorView& v) {
  std::vector<float> out(size_t(v.numel()));
  const uint8_t* p = v.data;
  if (v.dtype == DType::F32) {
    std::memcpy(out.data(), p, out.size() * 4);
  } else {
    const bool bf16 = v.dtype == DType::BF16;
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  // A diverged training run must not become a checkpoint that quantizes NaNs silently.
  const auto bad = std::find_if(out.begin(), out.end(), [](float x) { return !std::isfinite(x); });
  if (bad != out.end())
    fail("{}: tensor '{}' holds a non-finite value ({}) at element {}", *v.file, v.name, *bad,
         bad - out.begin());
  return out;
}

void check_drafter_config(const io::DrafterConfig& d, const std::string& src) {
  const std::string f = (fs::path(src) / "config.json").string();
  const std::pair<const char*, int64_t> need[] = {{"num_hidden_layers", d.layers},
                                                  {"hidden_size", d.hidden_size},
                                                  {"vocab_size", d.vocab_size},
                                                  {"num_attention_heads", d.num_attention_heads},
                                                  {"num_key_value_heads", d.num_key_value_heads},
                                                  {"head_dim", d.head_dim},
                                                  {"intermediate_size", d.intermediate_size}};
  for (const auto& [field, v] : need)
    if (v <= 0) fail("{}: {} drafter: \"{}\" is missing or not positive", f, d.kind, field);
  if (d.target_layer_ids.empty()) fail("{}: {} drafter: no target_layer_ids (the taps)", f, d.kind);
}

}  // namespace

ConvertResult convert_checkpoint(const std::string& src, const std::string& dst,
                                 synth::SynthOptions so) {
  std::error_code ec;
  if (fs::exists(dst) && fs::equivalent(src, dst, ec))
    fail("--out {}: is the source directory; convert writes a new directory", dst);
  const nlohmann::json cfg = io::read_config_json(src);
  refuse_quantized(src, cfg);
  const io::TensorStore st = io::TensorStore::open_dir(src);
  so.values = [&st](const synth::SynthTensor& t) { return widen(st.get(t.name)); };

  ConvertResult r;
  r.kind = io::drafter_kind(cfg);
  r.tensors = st.names().size();
  if (r.kind.empty()) {
    const io::ModelConfig c = io::parse_model_config(cfg, (fs::path(src) / "config.json").string());
    fail_on(check_tensors(st, synth::checkpoint_layout(c, so), src, !so.mtp));
    // The source's tokenizer travels with the weights; without one, none is made up.
    r.tokenizer = fs::exists(fs::path(src) / "tokenizer.json");
    so.tokenizer = r.tokenizer;
    so.tokenizer_dir = src;
    synth::write_checkpoint(c, dst, so);
    r.kind = "target";
    return r;
  }
  if (so.format != synth::SynthFormat::ModelOpt && so.format != synth::SynthFormat::Dense)
    fail("{}: a {} drafter converts to modelopt (W4A16 NVFP4) or dense, not {}", src, r.kind,
         synth::synth_format_name(so.format));
  so.dense_drafter = so.format == synth::SynthFormat::Dense;
  const synth::DrafterShape shape{io::parse_drafter_config(cfg), io::read_config_json_ordered(src)};
  check_drafter_config(shape.config, src);
  fail_on(check_tensors(st, synth::drafter_layout(shape.config, so), src, false));
  synth::write_drafter(shape, dst, so);
  return r;
}

}  // namespace nemo::convert
