// Presentation of an InspectReport: the versioned JSON schema (docs/INSPECT.md) and the text
// summary `nemotron inspect` prints. The checks themselves are in inspect.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kernels/linear.h"
#include "tools/inspect/inspect.h"

namespace nemo::inspect {

using io::LayerKind;
using json = nlohmann::json;

namespace {

json opt_json(const std::optional<int64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

json report_json(const InspectReport& r, int64_t context, bool nested) {
  json j;
  j["schema_version"] = kInspectSchemaVersion;
  j["path"] = r.path;
  j["kind"] = r.kind;
  j["runnable"] = r.runnable();
  j["problems"] = r.problems;
  j["warnings"] = r.warnings;
  if (r.config) {
    const io::ModelConfig& c = *r.config;
    std::vector<std::string> names;
    for (auto k : c.layers) names.push_back(io::layer_kind_name(k));
    j["architecture"] = {
        {"model_type", c.model_type},
        {"num_layers", c.layers.size()},
        {"pattern", c.pattern()},
        {"layers", names},
        {"layer_counts",
         {{"mamba", c.count(LayerKind::Mamba)},
          {"attention", c.count(LayerKind::Attention)},
          {"moe", c.count(LayerKind::MoE)},
          {"mlp", c.count(LayerKind::MLP)}}},
        {"hidden_size", c.hidden_size},
        {"vocab_size", c.vocab_size},
        {"tie_word_embeddings", c.tie_word_embeddings},
        {"tensor_prefix", r.tensor_prefix},
        {"mamba",
         {{"num_heads", c.mamba_num_heads},
          {"head_dim", c.mamba_head_dim},
          {"n_groups", c.n_groups},
          {"ssm_state_size", c.ssm_state_size},
          {"conv_kernel", c.conv_kernel},
          {"conv_dim", c.conv_dim()},
          {"in_proj_dim", c.in_proj_dim()}}},
        {"attention",
         {{"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim}}},
        {"moe",
         {{"n_routed_experts", c.n_routed_experts},
          {"num_experts_per_tok", c.num_experts_per_tok},
          {"n_group", c.n_group},
          {"topk_group", c.topk_group},
          {"moe_intermediate_size", c.moe_intermediate_size},
          {"n_shared_experts", c.n_shared_experts},
          {"moe_shared_expert_intermediate_size", c.moe_shared_expert_intermediate_size},
          {"routed_scaling_factor", c.routed_scaling_factor}}},
        {"mlp", {{"intermediate_size", c.intermediate_size}}},
    };
  } else {
    j["architecture"] = nullptr;
  }
  if (r.drafter) {
    const DrafterInfo& d = *r.drafter;
    j["drafter"] = {
        {"kind", d.kind},
        {"architecture", d.architecture},
        {"model_type", d.model_type},
        {"num_layers", d.layers},
        {"hidden_size", d.hidden_size},
        {"vocab_size", d.vocab_size},
        {"num_attention_heads", d.num_attention_heads},
        {"num_key_value_heads", d.num_key_value_heads},
        {"head_dim", d.head_dim},
        {"intermediate_size", d.intermediate_size},
        {"target_hidden_size", opt_json(d.target_hidden_size)},
        {"num_target_layers", opt_json(d.num_target_layers)},
        {"target_layer_ids", d.target_layer_ids},
        {"target_layer_ids_source", d.target_layer_ids_source},
        {"block_size", opt_json(d.block_size)},
        {"mask_token_id", opt_json(d.mask_token_id)},
        {"sliding_window", opt_json(d.sliding_window)},
        {"use_swa", d.use_swa},
        {"causal", d.causal},
        {"attention_sink_bias", d.attention_sink_bias},
        {"markov_rank", opt_json(d.markov_rank)},
        {"has_embed_tokens", d.has_embed_tokens},
        {"has_lm_head", d.has_lm_head},
        {"tensor_prefix", r.tensor_prefix},
    };
  } else {
    j["drafter"] = nullptr;
  }
  const io::QuantConfig& q = r.quant;
  j["quantization"] = {
      {"format", q.format == io::QuantFormat::ModelOpt ? "modelopt"
                 : q.format == io::QuantFormat::Mlx    ? "mlx"
                                                       : "none"},
      {"algo", q.global_algo},
      {"source", q.source},
      {"kv_cache_algo", q.kv_cache_algo},
      {"producer", q.producer},
      {"listed_modules", q.layers.size()},
      {"exclude_patterns", q.exclude.size()},
  };
  j["tensors"] = {{"count", r.tensor_count},
                  {"bytes", r.tensor_bytes},
                  {"used_bytes", r.used_bytes},
                  {"unused_count", r.unused_tensors}};
  const ParamCounts& p = r.params;
  j["parameters"] = {
      {"total", p.total},
      {"active_per_token", p.active_per_token},
      {"active_per_token_full_embedding", p.active_per_token_full_embedding},
      {"by_group",
       {{"embedding", p.embedding},
        {"lm_head", p.lm_head},
        {"mamba", p.mamba},
        {"attention", p.attention},
        {"mlp", p.mlp},
        {"moe_routed", p.moe_routed},
        {"moe_shared", p.moe_shared},
        {"moe_router", p.moe_router},
        {"norms", p.norms},
        {"other", p.other}}},
      {"mtp_total", p.mtp_total},
      {"mtp_active_per_token", p.mtp_active_per_token},
  };
  j["formats"] = {{"modules", r.modules_by_format}, {"bytes", r.bytes_by_format}};
  j["mtp"] = {{"declared_modules", r.mtp.declared_modules},
              {"sublayers", r.mtp.sublayers},
              {"present", r.mtp.tensors > 0},
              {"complete", r.mtp.complete},
              {"tensors", r.mtp.tensors},
              {"bytes", r.mtp.bytes},
              {"params", p.mtp_total},
              {"active_params_per_token", p.mtp_active_per_token},
              {"problems", r.mtp.missing}};
  j["state"] = {{"mamba_conv_bytes", r.state.mamba_conv},
                {"mamba_ssm_bytes", r.state.mamba_ssm},
                {"fixed_bytes", r.state.fixed()},
                {"kv_bytes_per_token", r.state.kv_per_token},
                {"mtp_kv_bytes_per_token", r.state.mtp_kv_per_token}};
  const uint64_t ctx = uint64_t(std::max<int64_t>(0, context));
  j["memory"] = {{"context_tokens", ctx},
                 {"weights_bytes", r.used_bytes},
                 {"state_bytes", r.state.fixed() + r.state.kv_per_token * ctx},
                 {"resident_bytes", r.resident_bytes(context, false)},
                 {"resident_bytes_with_mtp", r.resident_bytes(context, true)}};
  if (!nested) {
    if (r.draft) {
      bool ok = true;
      json checks = json::array();
      for (const auto& c : r.pairing) {
        checks.push_back(
            {{"name", c.name}, {"ok", c.ok}, {"fatal", c.fatal}, {"detail", c.detail}});
        ok = ok && (c.ok || !c.fatal);
      }
      j["pairing"] = {{"ok", ok && r.draft->runnable()}, {"checks", checks}};
      j["draft"] = report_json(*r.draft, context, true);
    } else {
      j["pairing"] = nullptr;
      j["draft"] = nullptr;
    }
  }
  return j;
}

std::string gb(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", double(b) / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", double(b) / 1024.0);
  return fmt::format("{} B", b);
}
std::string params_str(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.3f} B", double(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f} M", double(n) / 1e6);
  return fmt::format("{}", n);
}

void text_body(std::string& o, const InspectReport& r, int64_t context) {
  const auto line = [&o](const std::string& s) { o += s + "\n"; };
  const bool loaded = r.config || r.drafter;  // otherwise there is nothing to count
  line(fmt::format("checkpoint   {} ({})", r.path, r.kind));
  if (r.config) {
    const io::ModelConfig& c = *r.config;
    line(fmt::format(
        "architecture {} | {} layers: {} mamba, {} attention, {} moe, {} mlp | hidden {} | vocab "
        "{}",
        c.model_type, c.layers.size(), c.count(LayerKind::Mamba), c.count(LayerKind::Attention),
        c.count(LayerKind::MoE), c.count(LayerKind::MLP), c.hidden_size, c.vocab_size));
    line(fmt::format("schedule     {}", c.pattern()));
    line(fmt::format("mamba        {} heads x {} | groups {} | state {} | conv {}",
                     c.mamba_num_heads, c.mamba_head_dim, c.n_groups, c.ssm_state_size,
                     c.conv_kernel));
    line(fmt::format("attention    {} q heads, {} kv heads, head_dim {} (NoPE)",
                     c.num_attention_heads, c.num_key_value_heads, c.head_dim));
    line(fmt::format(
        "moe          {} routed experts (top {}{}) x {} | {} shared x {} | scale {}",
        c.n_routed_experts, c.num_experts_per_tok,
        c.n_group > 1 ? fmt::format(" in the best {} of {} groups", c.topk_group, c.n_group) : "",
        c.moe_intermediate_size, c.n_shared_experts, c.moe_shared_expert_intermediate_size,
        c.routed_scaling_factor));
  }
  if (r.drafter) {
    const DrafterInfo& d = *r.drafter;
    line(fmt::format(
        "drafter      {} ({}, {}) | {} layers | hidden {} | vocab {} | heads {}/{} x {} | mlp {}",
        d.kind, d.architecture, d.model_type, d.layers, d.hidden_size, d.vocab_size,
        d.num_attention_heads, d.num_key_value_heads, d.head_dim, d.intermediate_size));
    line(fmt::format("taps         [{}] ({}) | block {} | mask {} | swa {} | markov rank {}",
                     fmt::join(d.target_layer_ids, ", "), d.target_layer_ids_source,
                     d.block_size ? std::to_string(*d.block_size) : "-",
                     d.mask_token_id ? std::to_string(*d.mask_token_id) : "-",
                     d.use_swa && d.sliding_window ? std::to_string(*d.sliding_window) : "off",
                     d.markov_rank ? std::to_string(*d.markov_rank) : "-"));
  }
  const io::QuantConfig& q = r.quant;
  if (loaded)
    line(fmt::format("quantization {}{}{}",
                     q.format == io::QuantFormat::None ? "none" : q.global_algo,
                     q.source.empty() ? "" : " (" + q.source + ")",
                     q.kv_cache_algo.empty() ? "" : ", kv cache " + q.kv_cache_algo));
  if (loaded) {
    std::string mods, bytes;
    for (const auto& [f, n] : r.modules_by_format)
      mods += fmt::format("{}{} {}", mods.empty() ? "" : ", ", f, n);
    for (const auto& [f, n] : r.bytes_by_format)
      bytes += fmt::format("{}{} {}", bytes.empty() ? "" : ", ", f, gb(n));
    line(fmt::format("tensors      {} ({}), runtime uses {}", r.tensor_count, gb(r.tensor_bytes),
                     gb(r.used_bytes)));
    line("modules      " + mods);
    line("bytes        " + bytes);
    const ParamCounts& p = r.params;
    line(fmt::format("parameters   total {} | active/token {} ({} counting the whole embedding)",
                     params_str(p.total), params_str(p.active_per_token),
                     params_str(p.active_per_token_full_embedding)));
    if (r.config)
      line(fmt::format(
          "  by group   embedding {} | lm_head {} | mamba {} | attention {} | mlp {} | routed {} | "
          "shared {} | router {} | norms {}{}",
          params_str(p.embedding), params_str(p.lm_head), params_str(p.mamba),
          params_str(p.attention), params_str(p.mlp), params_str(p.moe_routed),
          params_str(p.moe_shared), params_str(p.moe_router), params_str(p.norms),
          p.other ? " | other " + params_str(p.other) : ""));
  }
  if (r.config) {
    if (r.mtp.declared_modules == 0)
      line(fmt::format("mtp          none declared{}",
                       r.mtp.tensors ? " (but mtp.* tensors present)" : ""));
    else
      line(fmt::format(
          "mtp          {} module(s) \"{}\": {} | {} tensors, {}, {} params ({} active/token)",
          r.mtp.declared_modules, r.mtp.sublayers,
          r.mtp.complete  ? "complete"
          : r.mtp.tensors ? "INCOMPLETE"
                          : "absent",
          r.mtp.tensors, gb(r.mtp.bytes), params_str(r.params.mtp_total),
          params_str(r.params.mtp_active_per_token)));
    line(fmt::format(
        "state        fixed {} (mamba conv {} + ssm {}) | kv {}/token | mtp kv {}/token",
        gb(r.state.fixed()), gb(r.state.mamba_conv), gb(r.state.mamba_ssm),
        gb(r.state.kv_per_token), gb(r.state.mtp_kv_per_token)));
  } else if (r.drafter) {
    line(fmt::format("state        context kv {}/token", gb(r.state.kv_per_token)));
  }
  if (loaded)
    line(fmt::format(
        "memory       ~{} resident at {} tokens{}", gb(r.resident_bytes(context, false)), context,
        r.mtp.complete ? fmt::format(", ~{} with MTP", gb(r.resident_bytes(context, true))) : ""));
  for (const auto& w : r.warnings) line("warning      " + w);
}

}  // namespace

json to_json(const InspectReport& r, int64_t context) {
  return report_json(r, context, false);
}

std::string to_text(const InspectReport& r, int64_t context) {
  std::string o;
  text_body(o, r, context);
  if (r.draft) {
    o += "\n";
    text_body(o, *r.draft, context);
    o += "pairing     ";
    for (const auto& c : r.pairing)
      o +=
          fmt::format(" {} {}{};", c.name, c.ok ? "ok" : "FAIL", c.ok ? "" : " (" + c.detail + ")");
    o += "\n";
  }
  // What this machine would run it with (the report itself describes the checkpoint only).
  const auto has = [&](const char* f) {
    return r.modules_by_format.count(f) || (r.draft && r.draft->modules_by_format.count(f));
  };
  const bool packed = has("nvfp4") || has("fp8") || has("bf16");
  const kernels::Isa isa = kernels::active_isa();
  o += fmt::format("kernels      {} on this CPU{}\n", kernels::isa_name(isa),
                   packed ? fmt::format("; NVFP4/FP8/bf16 with --arith bf16: {} kernel",
                                        kernels::bf16_kernel_name(isa))
                          : "");
  o += r.runnable() ? "runnable     yes\n"
                    : fmt::format("runnable     NO ({} problem(s))\n", r.problems.size());
  for (const auto& p : r.problems) o += "problem      " + p + "\n";
  return o;
}

}  // namespace nemo::inspect
