#include "io/quant_config.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "io/model_config.h"

namespace nemo::io {

using nlohmann::json;

const char* quant_algo_name(QuantAlgo a) {
  switch (a) {
    case QuantAlgo::None:
      return "unquantized";
    case QuantAlgo::NVFP4:
      return "NVFP4";
    case QuantAlgo::W4A16_NVFP4:
      return "W4A16_NVFP4";
    case QuantAlgo::FP8:
      return "FP8";
    case QuantAlgo::MlxAffine:
      return "mlx-affine";
  }
  return "?";
}

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative matcher with single-star backtracking (fnmatch without FNM_PATHNAME).
  size_t pi = 0, si = 0, star_p = std::string_view::npos, star_s = 0;
  const auto class_match = [&](size_t& i, char c) {  // p[i] == '['; advances i past ']'
    size_t j = i + 1;
    bool neg = false, hit = false;
    if (j < p.size() && (p[j] == '!' || p[j] == '^')) neg = true, ++j;
    const size_t first = j;
    for (; j < p.size() && (p[j] != ']' || j == first); ++j) {
      if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
        hit |= p[j] <= c && c <= p[j + 2];
        j += 2;
      } else {
        hit |= p[j] == c;
      }
    }
    if (j >= p.size()) return std::optional<bool>{};  // unterminated: '[' is literal
    i = j + 1;
    return std::optional<bool>{hit != neg};
  };
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_s = si;
      continue;
    }
    if (pi < p.size()) {
      if (p[pi] == '?') {
        ++pi, ++si;
        continue;
      }
      if (p[pi] == '[') {
        size_t i = pi;
        const auto m = class_match(i, s[si]);
        if (m.has_value()) {
          if (*m) {
            pi = i, ++si;
            continue;
          }
        } else if (s[si] == '[') {
          ++pi, ++si;
          continue;
        }
      } else if (p[pi] == s[si]) {
        ++pi, ++si;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

namespace {

// An integer field of `v` (a JSON number with an integral value in int range), `dflt` when absent
// or null; anything else fails naming the field (a cast of 2e30 to int would be undefined).
int int_field(const json& v, const char* key, int dflt, const std::string& where,
              const std::string& file) {
  if (!v.is_object() || !v.contains(key) || v[key].is_null()) return dflt;
  const json& x = v[key];
  bool ok = x.is_number_integer() && x.get<int64_t>() >= INT32_MIN && x.get<int64_t>() <= INT32_MAX;
  if (!ok && x.is_number_float()) {
    const double d = x.get<double>();
    ok = d >= INT32_MIN && d <= INT32_MAX && d == std::floor(d);
  }
  NEMO_CHECK(ok, "{}: {}: {} must be an integer, got {}", file, where, key, x.dump());
  return x.is_number_integer() ? int(x.get<int64_t>()) : int(x.get<double>());
}

// A string field of `v`, empty when absent or null; any other type fails naming the field
// (nlohmann's value() throws a type_error that names neither file nor key).
std::string string_field(const json& v, const char* key, const std::string& where,
                         const std::string& file) {
  if (!v.is_object() || !v.contains(key) || v[key].is_null()) return {};
  const json& x = v[key];
  NEMO_CHECK(x.is_string(), "{}: {}: {} must be a string, got {}", file, where, key, x.dump());
  return x.get<std::string>();
}

// "name version" of a ModelOpt producer block; metadata only, so wrong types are left out.
std::string producer_of(const json& p) {
  std::string s;
  for (const char* k : {"name", "version"})
    if (p.is_object() && p.contains(k) && p[k].is_string())
      s += (s.empty() ? "" : " ") + p[k].get<std::string>();
  return s;
}

std::string upper(std::string s) {
  for (auto& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// ModelOpt algorithm name -> QuantAlgo; throws naming the module and file for anything else.
QuantAlgo modelopt_algo(const std::string& name, const std::string& module,
                        const std::string& file) {
  const std::string u = upper(name);
  if (u == "W4A16_NVFP4") return QuantAlgo::W4A16_NVFP4;
  if (u == "NVFP4") return QuantAlgo::NVFP4;
  if (u == "FP8") return QuantAlgo::FP8;
  fail("{}: {}: unsupported quant_algo \"{}\" (supported: W4A16_NVFP4, NVFP4, FP8{})", file,
       module.empty() ? std::string("quantization") : "module " + module, name,
       module.empty() ? ", MIXED_PRECISION" : "");
}

ModuleQuant modelopt_entry(const json& v, const std::string& module, const std::string& file) {
  NEMO_CHECK(v.is_object() && v.contains("quant_algo") && v["quant_algo"].is_string(),
             "{}: module {}: quantized_layers entry needs a string quant_algo", file, module);
  ModuleQuant q;
  q.algo = modelopt_algo(v["quant_algo"].get<std::string>(), module, file);
  q.declared = true;
  if (q.algo == QuantAlgo::NVFP4 || q.algo == QuantAlgo::W4A16_NVFP4) {
    q.group_size = int_field(v, "group_size", 16, "module " + module, file);
    NEMO_CHECK(q.group_size == 16, "{}: module {}: NVFP4 group_size {} (only 16 exists)", file,
               module, q.group_size);
    q.bits = 4;
  } else {
    q.bits = 8;
  }
  return q;
}

std::vector<std::string> string_list(const json& v, const char* key, const std::string& file) {
  std::vector<std::string> out;
  if (!v.contains(key) || v[key].is_null()) return out;
  NEMO_CHECK(v[key].is_array(), "{}: {} must be a list", file, key);
  for (const auto& e : v[key]) {
    NEMO_CHECK(e.is_string(), "{}: {} must hold strings", file, key);
    out.push_back(e.get<std::string>());
  }
  return out;
}

struct ModelOptPart {
  std::string global_algo;
  ModuleQuant global;
  std::optional<std::map<std::string, ModuleQuant>> layers;
  std::vector<std::string> exclude;
  std::string kv;
  std::string producer;
};

// The `quantization` block of hf_quant_config.json, or config.json's `quantization_config`.
ModelOptPart parse_modelopt(const json& q, const std::string& file, bool config_form) {
  ModelOptPart m;
  NEMO_CHECK(q.is_object(), "{}: quantization block is not an object", file);
  NEMO_CHECK(q.contains("quant_algo") && q["quant_algo"].is_string(), "{}: missing quant_algo",
             file);
  m.global_algo = upper(q["quant_algo"].get<std::string>());
  if (m.global_algo != "MIXED_PRECISION") {
    m.global = modelopt_entry(q, "", file);
    m.global.declared = false;
  }
  if (q.contains("quantized_layers") && !q["quantized_layers"].is_null()) {
    NEMO_CHECK(q["quantized_layers"].is_object(), "{}: quantized_layers must be an object", file);
    std::map<std::string, ModuleQuant> layers;
    for (const auto& [k, v] : q["quantized_layers"].items()) layers[k] = modelopt_entry(v, k, file);
    m.layers = std::move(layers);
  } else if (config_form && q.contains("config_groups") && q["config_groups"].is_object()) {
    // Converted form without the verbatim map: rebuild it from the groups' targets.
    std::map<std::string, ModuleQuant> layers;
    for (const auto& [g, grp] : q["config_groups"].items()) {
      NEMO_CHECK(grp.contains("weights") && grp.contains("targets"),
                 "{}: config_groups.{} needs weights and targets", file, g);
      const json& wq = grp["weights"];
      const int nb = int_field(wq, "num_bits", 0, "config_groups." + g, file);
      const std::string type = string_field(wq, "type", "config_groups." + g + ".weights", file);
      ModuleQuant mq;
      mq.declared = true;
      if (nb == 4 && type == "float") {
        const bool act4 =
            grp.contains("input_activations") && grp["input_activations"].is_object() &&
            int_field(grp["input_activations"], "num_bits", 0, "config_groups." + g, file) == 4;
        mq.algo = act4 ? QuantAlgo::NVFP4 : QuantAlgo::W4A16_NVFP4;
        mq.group_size = int_field(wq, "group_size", 16, "config_groups." + g, file);
        mq.bits = 4;
        NEMO_CHECK(mq.group_size == 16, "{}: config_groups.{}: 4-bit float group_size {}", file, g,
                   mq.group_size);
      } else if (nb == 8 && type == "float") {
        mq.algo = QuantAlgo::FP8;
        mq.bits = 8;
      } else {
        fail("{}: config_groups.{}: unsupported weights scheme num_bits={} type={}", file, g, nb,
             type);
      }
      for (const auto& t : string_list(grp, "targets", file)) layers[t] = mq;
    }
    m.layers = std::move(layers);
  }
  NEMO_CHECK(m.global_algo != "MIXED_PRECISION" || m.layers.has_value(),
             "{}: MIXED_PRECISION without quantized_layers", file);
  m.exclude = string_list(q, config_form ? "ignore" : "exclude_modules", file);
  if (!config_form && q.contains("ignore")) {
    const auto more = string_list(q, "ignore", file);
    m.exclude.insert(m.exclude.end(), more.begin(), more.end());
  }
  if (q.contains("kv_cache_quant_algo") && q["kv_cache_quant_algo"].is_string()) {
    m.kv = upper(q["kv_cache_quant_algo"].get<std::string>());
  } else if (q.contains("kv_cache_scheme") && q["kv_cache_scheme"].is_object()) {
    const json& kv = q["kv_cache_scheme"];
    NEMO_CHECK(string_field(kv, "type", "kv_cache_scheme", file) == "float" &&
                   int_field(kv, "num_bits", 0, "kv_cache_scheme", file) == 8,
               "{}: unsupported kv_cache_scheme {}", file, kv.dump());
    m.kv = "FP8";
  }
  NEMO_CHECK(m.kv.empty() || m.kv == "FP8", "{}: unsupported kv_cache_quant_algo {}", file, m.kv);
  if (q.contains("producer")) m.producer = producer_of(q["producer"]);
  return m;
}

ModuleQuant mlx_entry(const json& v, const ModuleQuant& dflt, const std::string& where,
                      const std::string& file) {
  ModuleQuant q = dflt;
  q.algo = QuantAlgo::MlxAffine;
  q.declared = true;
  q.group_size = int_field(v, "group_size", q.group_size, where, file);
  q.bits = int_field(v, "bits", q.bits, where, file);
  const std::string mode =
      v.contains("mode") && v["mode"].is_string() ? v["mode"].get<std::string>() : "affine";
  NEMO_CHECK(mode == "affine",
             "{}: {}: MLX quantization mode \"{}\" is not supported (affine only)", file, where,
             mode);
  NEMO_CHECK(q.bits == 4 || q.bits == 8, "{}: {}: MLX bits {} not supported (4, 8)", file, where,
             q.bits);
  NEMO_CHECK(q.group_size == 32 || q.group_size == 64 || q.group_size == 128,
             "{}: {}: MLX group_size {} not supported (32, 64, 128)", file, where, q.group_size);
  return q;
}

void parse_mlx(const json& q, const std::string& file, QuantConfig& qc) {
  NEMO_CHECK(q.is_object(), "{}: quantization is not an object", file);
  ModuleQuant dflt;
  dflt.group_size = 64;
  dflt.bits = 4;
  qc.global = mlx_entry(q, dflt, "quantization", file);
  qc.global.declared = false;
  for (const auto& [k, v] : q.items()) {
    if (k == "group_size" || k == "bits" || k == "mode" || k == "quant_method") continue;
    if (v.is_boolean()) {
      ModuleQuant m = v.get<bool>() ? qc.global : ModuleQuant{};
      m.declared = true;
      qc.layers[k] = m;
    } else if (v.is_object()) {
      qc.layers[k] = mlx_entry(v, qc.global, "module " + k, file);
    } else {
      fail("{}: quantization.{}: expected an object or a bool", file, k);
    }
  }
  qc.format = QuantFormat::Mlx;
  qc.global_algo = "MLX_AFFINE";
}

bool is_float_dtype(DType t) {
  return t == DType::BF16 || t == DType::F16 || t == DType::F32;
}

}  // namespace

const std::string* QuantConfig::excluded_by(const std::string& module) const {
  for (const auto& p : exclude)
    if (p == module || glob_match(p, module)) return &p;
  return nullptr;
}

ModuleQuant QuantConfig::resolve(const std::string& module) const {
  const std::string* ex = excluded_by(module);
  if (format == QuantFormat::None) return {};
  if (format == QuantFormat::Mlx) {
    if (auto it = layers.find(module); it != layers.end()) return it->second;
    return global;  // not declared: quantized only if MODULE.scales exists (check_module)
  }
  if (auto it = layers.find(module); it != layers.end()) {
    NEMO_CHECK(
        ex == nullptr,
        "{}: module {} is listed in quantized_layers ({}) but also matches exclude pattern \"{}\"",
        source, module, quant_algo_name(it->second.algo), *ex);
    return it->second;
  }
  ModuleQuant q;
  if (ex) {
    q.excluded = true;
    return q;
  }
  if (global_algo == "MIXED_PRECISION") return q;  // not listed -> unquantized, never a sibling's
  return global;
}

ModuleQuant QuantConfig::resolve_fused(std::span<const std::string> members) const {
  NEMO_CHECK(!members.empty(), "resolve_fused: no members");
  const ModuleQuant first = resolve(members[0]);
  for (const auto& m : members.subspan(1)) {
    const ModuleQuant q = resolve(m);
    NEMO_CHECK(q.algo == first.algo && q.group_size == first.group_size && q.bits == first.bits,
               "{}: fused modules disagree: {} is {} but {} is {}", source, members[0],
               quant_algo_name(first.algo), m, quant_algo_name(q.algo));
  }
  return first;
}

ModuleQuant QuantConfig::resolve_children(const std::string& prefix) const {
  const std::string pre = prefix + ".";
  const ModuleQuant* first = nullptr;
  std::string first_name;
  for (auto it = layers.lower_bound(pre);
       it != layers.end() && it->first.compare(0, pre.size(), pre) == 0; ++it) {
    const ModuleQuant q = resolve(it->first);  // applies the exclude consistency check too
    if (!first) {
      first = &it->second;
      first_name = it->first;
    } else {
      NEMO_CHECK(
          q.algo == first->algo && q.group_size == first->group_size && q.bits == first->bits,
          "{}: modules under {} disagree: {} is {} but {} is {}", source, prefix, first_name,
          quant_algo_name(first->algo), it->first, quant_algo_name(q.algo));
    }
  }
  return first ? *first : resolve(prefix);
}

QuantConfig parse_quant_config(const json* hfq, const std::string& hfq_file, const json* cfg,
                               const std::string& cfg_file) {
  QuantConfig qc;
  std::optional<ModelOptPart> a, b;
  if (hfq) {
    NEMO_CHECK(hfq->is_object() && hfq->contains("quantization"),
               "{}: expected {{\"quantization\": {{...}}}}", hfq_file);
    a = parse_modelopt((*hfq)["quantization"], hfq_file, false);
    if (hfq->contains("producer")) a->producer = producer_of((*hfq)["producer"]);
  }
  if (cfg && cfg->is_object()) {
    const json* mlx = nullptr;
    if (cfg->contains("quantization") && (*cfg)["quantization"].is_object())
      mlx = &(*cfg)["quantization"];
    const json* qcfg =
        cfg->contains("quantization_config") && (*cfg)["quantization_config"].is_object()
            ? &(*cfg)["quantization_config"]
            : nullptr;
    if (qcfg && qcfg->contains("quant_method")) {
      const std::string method =
          (*qcfg)["quant_method"].is_string() ? (*qcfg)["quant_method"].get<std::string>() : "";
      if (method == "modelopt") {
        b = parse_modelopt(*qcfg, cfg_file, true);
      } else if (!mlx) {
        fail(
            "{}: quantization_config.quant_method \"{}\" is not supported (modelopt, or MLX "
            "`quantization`)",
            cfg_file, method);
      }
    } else if (!mlx && qcfg && (qcfg->contains("bits") || qcfg->contains("group_size"))) {
      mlx = qcfg;  // mlx-lm's HF-compatible copy
    }
    if (mlx) {
      NEMO_CHECK(!a && !b, "{}: both an MLX `quantization` and a ModelOpt config are present",
                 cfg_file);
      parse_mlx(*mlx, cfg_file, qc);
      qc.source = cfg_file;
      return qc;
    }
  }
  if (!a && !b) return qc;
  qc.format = QuantFormat::ModelOpt;
  if (a && b) {
    qc.source = hfq_file + " + " + cfg_file;
    NEMO_CHECK(a->global_algo == b->global_algo, "{} says quant_algo {} but {} says {}", hfq_file,
               a->global_algo, cfg_file, b->global_algo);
    if (a->layers && b->layers) {
      for (const auto& [k, v] : *a->layers) {
        auto it = b->layers->find(k);
        NEMO_CHECK(it != b->layers->end(), "{} lists module {} in quantized_layers but {} does not",
                   hfq_file, k, cfg_file);
        NEMO_CHECK(it->second.algo == v.algo, "module {}: {} says {} but {} says {}", k, hfq_file,
                   quant_algo_name(v.algo), cfg_file, quant_algo_name(it->second.algo));
      }
      NEMO_CHECK(a->layers->size() == b->layers->size(), "{} has {} quantized_layers, {} has {}",
                 hfq_file, a->layers->size(), cfg_file, b->layers->size());
    }
  } else {
    qc.source = a ? hfq_file : cfg_file;
  }
  const ModelOptPart& p = a ? *a : *b;
  qc.global_algo = p.global_algo;
  qc.global = p.global;
  if (p.layers)
    qc.layers = *p.layers;
  else if (b && b->layers)
    qc.layers = *b->layers;
  std::set<std::string> seen;
  for (const auto* part : {a ? &*a : nullptr, b ? &*b : nullptr})
    if (part)
      for (const auto& e : part->exclude)
        if (seen.insert(e).second) qc.exclude.push_back(e);
  qc.kv_cache_algo = a && !a->kv.empty() ? a->kv : (b ? b->kv : std::string());
  qc.producer = a && !a->producer.empty() ? a->producer : (b ? b->producer : std::string());
  return qc;
}

QuantConfig load_quant_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const auto read = [](const fs::path& p) {
    std::ifstream f(p);
    NEMO_CHECK(f.good(), "cannot read {}", p.string());
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      // HF configs may carry bare Infinity (time_step_limit); see quote_nonfinite_literals.
      return json::parse(quote_nonfinite_literals(ss.str()));
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", p.string(), e.what());
    }
  };
  const fs::path hq = fs::path(dir) / "hf_quant_config.json", cj = fs::path(dir) / "config.json";
  std::optional<json> a, b;
  if (fs::exists(hq)) a = read(hq);
  if (fs::exists(cj)) b = read(cj);
  return parse_quant_config(a ? &*a : nullptr, hq.string(), b ? &*b : nullptr, cj.string());
}

// ------------------------------------------------------------------------------------ check

namespace {

struct Checker {
  const QuantConfig& qc;
  const std::string& module;
  const TensorLookup& lookup;

  std::optional<TensorInfo> get(const char* suffix) const { return lookup(module + "." + suffix); }

  [[noreturn]] void bad(const std::string& what, const std::optional<TensorInfo>& t) const {
    fail("module {} ({} per {}): {}{}", module, quant_algo_name(qc.resolve(module).algo),
         qc.source.empty() ? std::string("no quantization config") : qc.source, what,
         t && !t->file.empty() ? " [in " + t->file + "]" : "");
  }

  TensorInfo need(const char* suffix, const std::string& why) const {
    auto t = get(suffix);
    if (!t) bad("missing tensor " + module + "." + suffix + " (" + why + ")", t);
    return *t;
  }

  float scalar_f32(const char* suffix, const TensorInfo& t) const {
    const bool scalar = t.shape.empty() || (t.shape.size() == 1 && t.shape[0] == 1);
    if (t.dtype != DType::F32 || !scalar)
      bad(std::string(".") + suffix + " must be an F32 scalar, found " + dtype_name(t.dtype) + " " +
              shape_str(t.shape),
          t);
    if (!t.data) return NAN;
    float v;
    std::memcpy(&v, t.data, 4);
    if (!std::isfinite(v) || v <= 0.0f)
      bad(std::string(".") + suffix + " = " + std::to_string(v) + " (must be finite and > 0)", t);
    return v;
  }
};

// Index of the first NaN / Inf among a float tensor's values (exponent bits all ones), or -1.
int64_t first_nonfinite(const TensorInfo& t) {
  int64_t n = 1;
  for (auto d : t.shape) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == DType::F32) {
      uint32_t u;
      std::memcpy(&u, t.data + 4 * i, 4);
      if ((u & 0x7F800000u) == 0x7F800000u) return i;
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      const uint16_t exp = t.dtype == DType::BF16 ? 0x7F80 : 0x7C00;
      if ((h & exp) == exp) return i;
    }
  }
  return -1;
}

}  // namespace

CheckedModule check_module(const QuantConfig& qc, const std::string& module,
                           const TensorLookup& lookup, const CheckOptions& opt) {
  const Checker c{qc, module, lookup};
  const ModuleQuant q = qc.resolve(module);
  const auto w = c.get("weight");
  if (!w) c.bad("missing tensor " + module + ".weight", w);
  CheckedModule r;
  r.weight_dtype = w->dtype;
  const auto ws = c.get("weight_scale"), ws2 = c.get("weight_scale_2"), is = c.get("input_scale");
  const auto sc = c.get("scales"), bi = c.get("biases");

  QuantAlgo algo = q.algo;
  if (qc.format == QuantFormat::Mlx && !q.declared && q.algo == QuantAlgo::MlxAffine && !sc)
    algo = QuantAlgo::None;
  // Single-algo ModelOpt: an unlisted module stored as plain float is just not a quantized Linear.
  if (qc.format == QuantFormat::ModelOpt && !q.declared && algo != QuantAlgo::None &&
      is_float_dtype(w->dtype) && !ws && !ws2)
    algo = QuantAlgo::None;
  r.quant = q;
  r.quant.algo = algo;

  switch (algo) {
    case QuantAlgo::None: {
      if (!is_float_dtype(w->dtype))
        c.bad(".weight is " + std::string(dtype_name(w->dtype)) + " " + shape_str(w->shape) +
                  " but the config declares the module unquantized (a sibling's format is never "
                  "inherited)",
              w);
      for (const auto& [t, n] :
           {std::pair{&ws, "weight_scale"}, {&ws2, "weight_scale_2"}, {&sc, "scales"}})
        if (*t) c.bad("unquantized module carries ." + std::string(n), *t);
      if (w->shape.size() < 1) c.bad(".weight has no dimensions", w);
      r.out = w->shape.size() >= 2 ? w->shape[w->shape.size() - 2] : w->shape[0];
      r.in = w->shape.size() >= 2 ? w->shape.back() : 1;
      if (w->shape.size() == 3) r.stacked = w->shape[0];
      return r;
    }
    case QuantAlgo::NVFP4:
    case QuantAlgo::W4A16_NVFP4: {
      if (w->dtype != DType::U8 || w->shape.size() != 2)
        c.bad(".weight must be U8 [out, in/2], found " + std::string(dtype_name(w->dtype)) + " " +
                  shape_str(w->shape),
              w);
      r.out = w->shape[0];
      r.in = 2 * w->shape[1];
      if (r.in % 16 != 0)
        c.bad("input dim " + std::to_string(r.in) + " is not a multiple of 16", w);
      const TensorInfo s = c.need("weight_scale", "NVFP4 block scales");
      if (s.dtype != DType::F8_E4M3 || s.shape != std::vector<int64_t>{r.out, r.in / 16})
        c.bad(".weight_scale must be F8_E4M3 " + shape_str({r.out, r.in / 16}) + ", found " +
                  dtype_name(s.dtype) + " " + shape_str(s.shape),
              s);
      if (opt.scan_block_scales && s.data) {
        const int64_t n = r.out * (r.in / 16);
        for (int64_t i = 0; i < n; ++i)
          if (uint8_t(s.data[i] | 0x80) == 0xFF)
            c.bad(".weight_scale has a NaN code (0x" + fmt::format("{:02X}", s.data[i]) +
                      ") at row " + std::to_string(i / (r.in / 16)) + ", block " +
                      std::to_string(i % (r.in / 16)),
                  s);
      }
      r.weight_scale =
          c.scalar_f32("weight_scale_2", c.need("weight_scale_2", "NVFP4 per-tensor scale"));
      if (is) r.input_scale = c.scalar_f32("input_scale", *is);
      if (sc) c.bad("NVFP4 module also carries MLX .scales", sc);
      return r;
    }
    case QuantAlgo::FP8: {
      if (w->dtype != DType::F8_E4M3 || w->shape.size() != 2)
        c.bad(".weight must be F8_E4M3 [out, in], found " + std::string(dtype_name(w->dtype)) +
                  " " + shape_str(w->shape),
              w);
      r.out = w->shape[0];
      r.in = w->shape[1];
      r.weight_scale = c.scalar_f32("weight_scale", c.need("weight_scale", "FP8 per-tensor scale"));
      if (is) r.input_scale = c.scalar_f32("input_scale", *is);
      if (ws2) c.bad("FP8 module carries .weight_scale_2 (NVFP4 tensor)", ws2);
      return r;
    }
    case QuantAlgo::MlxAffine: {
      if (w->dtype != DType::U32 || w->shape.size() < 2 || w->shape.size() > 3)
        c.bad(".weight must be U32 [(E,) out, in*bits/32], found " +
                  std::string(dtype_name(w->dtype)) + " " + shape_str(w->shape),
              w);
      const int b = q.bits, g = q.group_size;
      const size_t nd = w->shape.size();
      r.out = w->shape[nd - 2];
      r.in = w->shape[nd - 1] * 32 / b;
      if (nd == 3) r.stacked = w->shape[0];
      if (r.in % g != 0)
        c.bad("input dim " + std::to_string(r.in) + " not a multiple of group " + std::to_string(g),
              w);
      std::vector<int64_t> want(w->shape.begin(), w->shape.end());
      want.back() = r.in / g;
      const TensorInfo s = c.need("scales", "MLX affine scales");
      const TensorInfo bb = c.need("biases", "MLX affine biases");
      for (const TensorInfo* t : {&s, &bb})
        if (!is_float_dtype(t->dtype) || t->shape != want)
          c.bad("scales/biases must be float " + shape_str(want) +
                    " for bits=" + std::to_string(b) + " group=" + std::to_string(g) + ", found " +
                    dtype_name(t->dtype) + " " + shape_str(t->shape),
                *t);
      if (s.dtype != bb.dtype) c.bad("scales and biases have different dtypes", bb);
      if (opt.scan_block_scales)
        for (const auto& [t, n] : {std::pair{&s, "scales"}, {&bb, "biases"}})
          if (const int64_t i = t->data ? first_nonfinite(*t) : -1; i >= 0)
            c.bad("." + std::string(n) + " has a non-finite value at element " + std::to_string(i),
                  *t);
      r.scales_dtype = s.dtype;
      return r;
    }
  }
  return r;
}

}  // namespace nemo::io
