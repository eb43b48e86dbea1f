// nemotron convert: a dense F32/BF16/F16 checkpoint (a training run's output) in NVIDIA's or
// MLX's published layout, written by synth's writer with the source's values (docs/CONVERT.md).
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "cli/commands.h"
#include "tools/convert/convert.h"

namespace nemo::cli {

std::vector<Command> make_convert_command() {
  struct Opts {
    std::string from, out;
    WriterFlags w;
  };
  auto o = std::make_shared<Opts>();
  std::vector<Command> v(1);
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand(
        "convert",
        "Convert a dense F32/BF16/F16 checkpoint (target or DFlash/DSpark drafter) to "
        "NVIDIA's or MLX's published format");
    s->add_option("--from", o->from, "Source directory (config.json + dense safetensors)")
        ->required();
    s->add_option("--out", o->out, "Output directory")->required();
    o->w.add_to(s, "modelopt",
                "modelopt (NVFP4 experts + FP8 Mamba; drafters: W4A16 NVFP4) | dense | mlx4 | mlx8 "
                "(drafters: modelopt or dense)",
                "Drop the source's mtp.* tensors");
    *sub = s;
  };
  v[0].run = [o]() {
    WriteProgress progress("convert");
    const convert::ConvertResult r =
        convert::convert_checkpoint(o->from, o->out, o->w.options(progress));
    progress.finish();
    if (r.kind == "target" && !r.tokenizer)
      std::fprintf(stderr,
                   "note: %s has no tokenizer.json, so %s has none (run falls back to bytes)\n",
                   o->from.c_str(), o->out.c_str());
    std::printf("wrote %s: %s from %s (%zu tensors), format %s, dtype %s\n", o->out.c_str(),
                r.kind.c_str(), o->from.c_str(), r.tensors, o->w.format.c_str(),
                o->w.dtype.c_str());
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
