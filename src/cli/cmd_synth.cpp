// nemotron synth: write a synthetic checkpoint in the real Hugging Face layout.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "cli/commands.h"
#include "io/model_config.h"
#include "tools/synth/synth.h"

namespace nemo::cli {

std::vector<Command> make_synth_command() {
  struct Opts {
    std::string preset = "tiny-a", out, pattern, drafter, expert_groups;
    uint64_t seed = 0;
    int layers = 0;
    int64_t vocab = 0, experts = 0;
    WriterFlags w;
  };
  auto o = std::make_shared<Opts>();
  std::vector<Command> v(1);
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("synth", "Write a random-weight checkpoint in the exact HF layout");
    s->add_option("--preset", o->preset, "tiny-a | tiny-b | tiny-c | tiny-q | lightning")->capture_default_str();
    s->add_option("--out", o->out, "Output directory")->required();
    s->add_option("--seed", o->seed, "Random seed")->capture_default_str();
    o->w.add_to(
        s, "dense",
        "dense | modelopt (Lightning NVFP4 release: NVFP4 experts + FP8 Mamba) | mlx4 | mlx8; "
        "drafters: modelopt (W4A16 NVFP4, the default) | dense (--dtype)",
        "Do not write the mtp.* tensors");
    s->add_option("--drafter", o->drafter,
                  "Write a drafter (dflash | dspark) sized for the preset instead of the target");
    s->add_option("--layers", o->layers, "Keep only the first N layers of the schedule");
    s->add_option("--pattern", o->pattern,
                  "Replace the layer schedule (M=mamba *=attention E=moe -=mlp)");
    s->add_option("--vocab", o->vocab, "Replace the preset's vocabulary size")
        ->check(in_range(16, 1 << 24));
    s->add_option("--experts", o->experts,
                  "Replace the preset's routed expert count (experts keep their width)")
        ->check(in_range(1, 1 << 16));
    s->add_option("--expert-groups", o->expert_groups,
                  "N:K grouped expert routing: n_group N, topk_group K (default 1:1, no grouping)");
    *sub = s;
  };
  v[0].run = [o]() {
    auto cfg = synth::preset_config(o->preset, o->layers, o->pattern);
    if (o->vocab > 0) cfg.vocab_size = o->vocab;
    if (o->experts > 0) {
      if (cfg.n_routed_experts == 0) fail("--experts: preset '{}' has no MoE layer", o->preset);
      cfg.n_routed_experts = o->experts;
      cfg.num_experts_per_tok = std::min(cfg.num_experts_per_tok, o->experts);
    }
    if (!o->expert_groups.empty()) {
      const auto colon = o->expert_groups.find(':');
      int64_t n = 0, k = 0;
      if (colon == std::string::npos ||
          std::sscanf(o->expert_groups.c_str(), "%" SCNd64 ":%" SCNd64, &n, &k) != 2 || n < 1 ||
          k < 1)
        fail("--expert-groups '{}': expected N:K with N, K >= 1", o->expert_groups);
      cfg.n_group = n, cfg.topk_group = k;
    }
    io::parse_model_config(io::model_config_to_json(cfg),
                           "synth");  // the loader's checks, before writing
    WriteProgress progress("synth");
    synth::SynthOptions opt = o->w.options(progress);
    opt.seed = o->seed;
    if (!o->drafter.empty() && o->w.format_option->count() > 0) {
      // A drafter is the W4A16 NVFP4 release unless --format dense asks for a training output.
      if (opt.format == synth::SynthFormat::Dense)
        opt.dense_drafter = true;
      else if (opt.format != synth::SynthFormat::ModelOpt)
        fail("--drafter with --format {}: drafters are written as modelopt (W4A16 NVFP4) or dense",
             o->w.format);
    }
    if (!o->drafter.empty())
      synth::write_drafter_checkpoint(synth::parse_drafter_kind(o->drafter), cfg, o->out, opt);
    else
      synth::write_checkpoint(cfg, o->out, opt);
    progress.finish();
    if (!o->drafter.empty())
      std::printf("wrote %s: %s drafter for preset %s, %s\n", o->out.c_str(), o->drafter.c_str(),
                  o->preset.c_str(),
                  opt.dense_drafter ? ("dense " + o->w.dtype).c_str() : "W4A16 NVFP4");
    else
      std::printf("wrote %s: preset %s, %zu layers (%s), format %s, dtype %s\n", o->out.c_str(),
                  o->preset.c_str(), cfg.layers.size(), cfg.pattern().c_str(), o->w.format.c_str(),
                  o->w.dtype.c_str());
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
