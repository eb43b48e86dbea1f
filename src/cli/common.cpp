#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "model/dflash.h"
#include "tools/synth/synth.h"

namespace nemo::cli {

std::vector<Command> make_synth_command();
std::vector<Command> make_convert_command();
std::vector<Command> make_tokenizer_commands();
std::vector<Command> make_generate_commands();
std::vector<Command> make_bench_command();
std::vector<Command> make_inspect_command();
std::vector<Command> make_chat_command();
std::vector<Command> make_serve_command();

std::vector<Command> all_commands() {
  std::vector<Command> v;
  for (auto* mk : {&make_synth_command, &make_convert_command, &make_tokenizer_commands,
                   &make_generate_commands, &make_bench_command, &make_inspect_command,
                   &make_chat_command, &make_serve_command})
    for (auto& c : (*mk)()) v.push_back(std::move(c));
  return v;
}

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& in) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(in.c_str(), &end);
        if (in.empty() || !end || *end != '\0' || !std::isfinite(v))
          return fmt::format("'{}' is not a finite number", in);
        if (v < lo || v > hi) return fmt::format("{} is outside [{}, {}]", in, lo, hi);
        return "";
      },
      fmt::format("[{} .. {}]", lo, hi));
}

CLI::Validator threads_range() { return in_range(0, 1024); }

void GenerationFlags::add_to(CLI::App* s) {
  add_model_to(s);
  s->add_option("-n,--max-tokens", max_tokens, "Tokens to generate (per reply)")
      ->check(in_range(1, 1 << 30))
      ->capture_default_str();
  s->add_option("--temp", temp, "Temperature (0 = greedy)")->check(in_range(0, 1e4))->capture_default_str();
  s->add_option("--top-k", top_k, "Top-k (0 = off)")->check(in_range(0, 1 << 30));
  s->add_option("--top-p", top_p, "Top-p (1 = off)")->check(in_range(0, 1));
  s->add_option("--min-p", min_p, "Min-p (0 = off)")->check(in_range(0, 1));
  s->add_option("--seed", seed, "Sampling seed")->capture_default_str();
}

void GenerationFlags::add_model_to(CLI::App* s) {
  s->add_option("-m,--model", model, "Model directory (default: the embedded tiny model)");
  s->add_option("-t,--threads", threads, "Threads (default: all cores)")->check(threads_range());
  s->add_option("--spec", spec,
                "Speculative decoding: auto (the --draft drafter, else MTP if present) | mtp | dflash | dspark | "
                "ngram | none")
      ->capture_default_str();
  s->add_option("--draft", draft, "DFlash / DSpark drafter directory to pair with the model");
  s->add_flag("--tap-last-post-norm", tap_last_post_norm,
              "Feed the drafter the last target layer's tap after norm_f (default: before, as serving runtimes do)");
  s->add_option("--draft-max", draft_max,
                "Draft tokens per verify call (gamma, 1..15; default: 3, or the drafter's block size - 1)")
      ->check(in_range(0, 15));
  s->add_option("--kv-cache", kv_cache, "KV-cache storage: f32 | bf16 | fp8 (checkpoint k/v scales)")
      ->capture_default_str();
  s->add_flag("--fp8-static-activations", fp8_static,
              "FP8 layers: emulate W8A8 static activation quantisation (GPU parity) instead of W8A16");
}

std::unique_ptr<model::DFlashModel> GenerationFlags::load_draft(const model::NemotronH& target) const {
  if (draft.empty()) return nullptr;
  return model::DFlashModel::load(draft, target, {.tap_last_post_norm = tap_last_post_norm});
}

WriteProgress::WriteProgress(std::string label)
    : label_(std::move(label)), tty_(isatty(fileno(stderr))) {}

std::function<void(const std::string&, uint64_t, uint64_t)> WriteProgress::callback() {
  return [label = label_, tty = tty_, last = last_pct_](const std::string& name, uint64_t done,
                                                        uint64_t total) {
    const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
    if (tty ? pct == *last : pct / 10 == *last / 10) return;
    std::fprintf(stderr,
                 tty ? "\r%s: %3d%%  %.2f / %.2f GB  %-60.60s" : "%s: %3d%%  %.2f / %.2f GB  %s\n",
                 label.c_str(), pct, double(done) / 1e9, double(total) / 1e9, name.c_str());
    *last = pct;
  };
}

void WriteProgress::finish() const {
  if (tty_ && *last_pct_ >= 0) std::fprintf(stderr, "\n");
}

void WriterFlags::add_to(CLI::App* s, const std::string& format_default,
                         const std::string& format_help, const std::string& no_mtp_help) {
  format = format_default;
  format_option = s->add_option("--format", format, format_help)->capture_default_str();
  s->add_option("--dtype", dtype, "bf16 | f16 | f32 (dense tensors)")->capture_default_str();
  s->add_option("--mlx-group", mlx_group, "MLX affine group size (32, 64, 128)")
      ->capture_default_str();
  s->add_flag("--no-mtp", no_mtp, no_mtp_help);
  s->add_option("--shard-gb", shard_gb, "Shard size in GiB")->capture_default_str();
  s->add_option("--threads", threads, "Threads (default: all cores)")->check(threads_range());
  s->add_flag("--quiet", quiet, "No progress output");
}

synth::SynthOptions WriterFlags::options(WriteProgress& progress) const {
  synth::SynthOptions opt;
  opt.format = synth::parse_synth_format(format);
  opt.dtype = synth::parse_dense_dtype(dtype);
  opt.mlx_group = mlx_group;
  opt.mtp = !no_mtp;
  opt.shard_bytes = uint64_t(shard_gb * double(1ull << 30));
  opt.threads = threads > 0 ? threads : default_thread_count();
  if (!quiet) opt.progress = progress.callback();
  return opt;
}

std::vector<int32_t> parse_ids(const std::string& csv) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < csv.size()) {
    size_t j = csv.find_first_of(", ", i);
    if (j == std::string::npos) j = csv.size();
    if (j > i) {
      const std::string tok = csv.substr(i, j - i);
      char* end = nullptr;
      const long v = std::strtol(tok.c_str(), &end, 10);
      if (!end || *end != '\0' || v < 0 || v > INT32_MAX) fail("--ids: '{}' is not a token id", tok);
      out.push_back(int32_t(v));
    }
    i = j + 1;
  }
  return out;
}

ModelDir::~ModelDir() {
  if (temporary && !path.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
}

std::unique_ptr<ModelDir> resolve_model_dir(const std::string& model) {
  auto d = std::make_unique<ModelDir>();
  if (!model.empty()) {
    d->path = model;
    return d;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "nemotron-default-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) fail("cannot create a temporary directory for the embedded model");
  d->path = tmpl;
  d->temporary = true;
  synth::SynthOptions opt;
  opt.seed = 0;
  synth::write_checkpoint(synth::preset_config("tiny-a"), d->path, opt);
  return d;
}

}  // namespace nemo::cli
