// nemotron synth: write a synthetic checkpoint in the real Hugging Face layout.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "base/error.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "tools/synth/synth.h"

namespace nemo::cli {

std::vector<Command> make_synth_command() {
  struct Opts {
    std::string preset = "tiny-a", out, dtype = "bf16", pattern, format = "dense", drafter;
    int mlx_group = 64;
    uint64_t seed = 0;
    int layers = 0, threads = 0;
    bool no_mtp = false, quiet = false;
    double shard_gb = 4.0;
  };
  auto o = std::make_shared<Opts>();
  std::vector<Command> v(1);
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("synth", "Write a random-weight checkpoint in the exact HF layout");
    s->add_option("--preset", o->preset, "tiny-a | tiny-b | tiny-c | tiny-q | lightning")->capture_default_str();
    s->add_option("--out", o->out, "Output directory")->required();
    s->add_option("--seed", o->seed, "Random seed")->capture_default_str();
    s->add_option("--dtype", o->dtype, "bf16 | f16 | f32 (dense tensors)")->capture_default_str();
    s->add_option("--format", o->format,
                  "dense | modelopt (Lightning NVFP4 release: NVFP4 experts + FP8 Mamba) | mlx4 | mlx8")
        ->capture_default_str();
    s->add_option("--mlx-group", o->mlx_group, "MLX affine group size (32, 64, 128)")->capture_default_str();
    s->add_option("--drafter", o->drafter,
                  "Write a W4A16 NVFP4 drafter (dflash | dspark) sized for the preset instead of the target");
    s->add_option("--layers", o->layers, "Keep only the first N layers of the schedule");
    s->add_option("--pattern", o->pattern, "Replace the layer schedule (M=mamba *=attention E=moe -=mlp)");
    s->add_flag("--no-mtp", o->no_mtp, "Do not write the mtp.* tensors");
    s->add_option("--shard-gb", o->shard_gb, "Shard size in GiB")->capture_default_str();
    s->add_option("--threads", o->threads, "Threads (default: all cores)");
    s->add_flag("--quiet", o->quiet, "No progress output");
    *sub = s;
  };
  v[0].run = [o]() {
    io::DType dt;
    if (o->dtype == "bf16") dt = io::DType::BF16;
    else if (o->dtype == "f16") dt = io::DType::F16;
    else if (o->dtype == "f32") dt = io::DType::F32;
    else fail("--dtype '{}': expected bf16, f16 or f32", o->dtype);
    auto cfg = synth::preset_config(o->preset, o->layers, o->pattern);
    synth::SynthOptions opt;
    opt.seed = o->seed;
    opt.dtype = dt;
    opt.format = synth::parse_synth_format(o->format);
    opt.mlx_group = o->mlx_group;
    opt.mtp = !o->no_mtp;
    opt.shard_bytes = uint64_t(o->shard_gb * double(1ull << 30));
    opt.threads = o->threads > 0 ? o->threads : default_thread_count();
    int last_pct = -1;
    const bool tty = isatty(fileno(stderr));
    if (!o->quiet)
      opt.progress = [&last_pct, tty](const std::string& name, uint64_t done, uint64_t total) {
        const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
        // On a terminal: one updating line; in logs: a line per 10%.
        if (tty ? pct != last_pct : pct / 10 != last_pct / 10) {
          std::fprintf(stderr, tty ? "\rsynth: %3d%%  %.2f / %.2f GB  %-60.60s" : "synth: %3d%%  %.2f / %.2f GB  %s\n",
                       pct, double(done) / 1e9, double(total) / 1e9, name.c_str());
          last_pct = pct;
        }
      };
    if (!o->drafter.empty()) synth::write_drafter_checkpoint(synth::parse_drafter_kind(o->drafter), cfg, o->out, opt);
    else synth::write_checkpoint(cfg, o->out, opt);
    if (!o->quiet && tty) std::fprintf(stderr, "\n");
    if (!o->drafter.empty())
      std::printf("wrote %s: %s drafter for preset %s\n", o->out.c_str(), o->drafter.c_str(), o->preset.c_str());
    else
      std::printf("wrote %s: preset %s, %zu layers (%s), format %s, dtype %s\n", o->out.c_str(), o->preset.c_str(),
                  cfg.layers.size(), cfg.pattern().c_str(), o->format.c_str(), o->dtype.c_str());
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
