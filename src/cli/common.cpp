#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>

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

namespace {

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// What messages say about the models directory: where it is and what it holds, or where it was
// sought.
std::string describe(const ModelsDir& m) {
  if (m.path.empty()) return fmt::format("no models directory (tried {})", join(m.tried));
  std::error_code ec;
  if (!fs::is_directory(m.path, ec))
    return fmt::format("models directory {} does not exist", m.path);
  const auto names = m.names();
  return fmt::format("models directory {} ({})", m.path,
                     names.empty() ? "empty" : "available: " + join(names));
}

// A value without '/' that is not an existing path names an entry of the models directory.
std::string resolve_named(const std::string& value, const char* option) {
  std::error_code ec;
  if (fs::exists(value, ec) || value.find('/') != std::string::npos) return value;
  const ModelsDir m = find_models_dir();
  if (!m.path.empty() && fs::is_directory(fs::path(m.path) / value, ec))
    return (fs::path(m.path) / value).string();
  fail("{} {}: no directory {}{}; {}", option, value, value,
       m.path.empty() ? "" : fmt::format(" nor {}", (fs::path(m.path) / value).string()),
       describe(m));
}

}  // namespace

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

CLI::Validator threads_range() {
  return in_range(0, 1024);
}

namespace {
// The items of a list separated by any of `seps` that are integers in [lo, hi] (empty items
// skipped); the first item that is not, in `bad` (left empty when every item is).
std::vector<int> parse_int_list(const std::string& s, int lo, int hi, const char* seps,
                                std::string& bad) {
  std::vector<int> out;
  for (size_t i = 0; i <= s.size();) {
    const size_t j = std::min(s.find_first_of(seps, i), s.size());
    const std::string_view tok(s.data() + i, j - i);
    i = j + 1;
    if (tok.empty()) continue;
    int v = 0;
    const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec == std::errc() && end == tok.data() + tok.size() && v >= lo && v <= hi)
      out.push_back(v);
    else if (bad.empty())
      bad = tok;
  }
  return out;
}
}  // namespace

CLI::Validator int_list_range(int lo, int hi) {
  return CLI::Validator(
      [lo, hi](std::string& in) {
        std::string bad;
        parse_int_list(in, lo, hi, ",", bad);
        return bad.empty() ? bad : fmt::format("'{}' is not an integer in [{}, {}]", bad, lo, hi);
      },
      fmt::format("comma list of [{} .. {}]", lo, hi));
}

std::vector<int> int_list(const std::string& s) {
  std::string unused;  // int_list_range has refused the list already if there was one
  return parse_int_list(s, INT_MIN, INT_MAX, ",", unused);
}

void GenerationFlags::add_to(CLI::App* s) {
  add_model_to(s);
  s->add_option("-n,--max-tokens", max_tokens, "Tokens to generate (per reply)")
      ->check(in_range(1, 1 << 30))
      ->capture_default_str();
  s->add_option("--temp", temp, "Temperature (0 = greedy)")
      ->check(in_range(0, 1e4))
      ->capture_default_str();
  s->add_option("--top-k", top_k, "Top-k (0 = off)")->check(in_range(0, 1 << 30));
  s->add_option("--top-p", top_p, "Top-p (1 = off)")->check(in_range(0, 1));
  s->add_option("--min-p", min_p, "Min-p (0 = off)")->check(in_range(0, 1));
  s->add_option("--seed", seed, "Sampling seed")->capture_default_str();
}

void GenerationFlags::add_model_to(CLI::App* s) {
  s->add_option("-m,--model", model, "Model directory or name in models/ (default: tiny-code)");
  s->add_option("-t,--threads", threads, "Threads (default: all cores)")->check(threads_range());
  s->add_option("--spec", spec,
                "Speculative decoding: auto (the --draft drafter, else MTP if present; greedy "
                "run/chat requests draft 0..--draft-max tokens per round, whatever the measured "
                "rounds say pays) | mtp | dflash | dspark | ngram (--draft-max every round) | none")
      ->capture_default_str();
  s->add_option("--draft", draft,
                "DFlash / DSpark drafter directory or name in models/ (default with --spec "
                "dflash|dspark and a "
                "named model M: M-dflash|M-dspark)");
  s->add_flag("--tap-last-post-norm", tap_last_post_norm,
              "Feed the drafter the last target layer's tap after norm_f (default: before, as "
              "serving runtimes do)");
  s->add_option(
       "--draft-max", draft_max,
       "Draft tokens per verify call (gamma, 1..15; default: 3, or the drafter's block size - 1)")
      ->check(in_range(0, 15));
  s->add_option("--kv-cache", kv_cache,
                "KV-cache storage: f32 | bf16 | fp8 (checkpoint k/v scales)")
      ->capture_default_str();
  s->add_flag("--no-mmap", no_mmap,
              "Read the checkpoint into memory at load instead of mapping it (slower start, faster "
              "MoE decode on machines where file mappings are slow; reads unrouted experts too)");
  s->add_flag(
      "--fp8-static-activations", fp8_static,
      "FP8 layers: emulate W8A8 static activation quantisation (GPU parity) instead of W8A16");
  add_arith_option(s, arith);
}

model::LoadOptions GenerationFlags::load_options() const {
  return {.fp8_static_activations = fp8_static,
          .kv_dtype = model::parse_kv_dtype(kv_cache),
          .no_mmap = no_mmap,
          .packed_arith = arith_of(arith)};
}

kernels::Arith arith_of(const std::string& arith) {
  const kernels::Arith a = kernels::parse_arith(arith);
  if (a != kernels::Arith::Bf16) return a;
  // What runs is what the kernel selection says (bf16_kernel_name); the notes only explain why.
  const kernels::Isa isa = kernels::active_isa();
  const std::string kernel = kernels::bf16_kernel_name(isa);
  if (!kernel.starts_with("avx512_bf16") && isa == kernels::Isa::Avx512 &&
      kernels::cpu_has_avx512_bf16())
    std::fprintf(stderr,
                 "warning: --arith bf16: this CPU's VDPBF16PS does not give the defined sums (the "
                 "self-check failed; please report the CPU), so NVFP4, FP8 and bf16 layers run the "
                 "AVX2 kernel (same results, slower)\n");
  else if (kernel.ends_with("(bf16 weights: avx2)"))
    std::fprintf(stderr,
                 "warning: --arith bf16: this CPU's VDPBF16PS does not treat tiny bf16 weights and "
                 "sums as the defined order says (the self-check failed; please report the CPU), "
                 "so bf16 layers run the AVX2 kernel (same results, slower); NVFP4 and FP8 layers "
                 "keep VDPBF16PS\n");
  else if (kernel == "reference")
    std::fprintf(
        stderr,
        "note: --arith bf16: this CPU has no AVX2, so NVFP4, FP8 and bf16 layers run the scalar "
        "reference kernel (same results, many times slower)\n");
  return a;
}

const char* arith_kernel_name(const std::string& arith) {
  return kernels::parse_arith(arith) == kernels::Arith::F32
             ? kernels::f32_kernel_name(kernels::active_isa())
             : kernels::bf16_kernel_name(kernels::active_isa());
}

std::string arith_summary(const std::string& arith) {
  return fmt::format("NVFP4/FP8/bf16 layers: {} activations ({} kernel)",
                     kernels::parse_arith(arith) == kernels::Arith::F32 ? "f32" : "bf16",
                     arith_kernel_name(arith));
}

void add_arith_option(CLI::App* s, std::string& arith) {
  s->add_option(
       "--arith", arith,
       "NVFP4, FP8 and bf16 layers' activations (not a MoE router's): f32 (as computed) | bf16 "
       "(rounded to bf16 first, as GPU W4A16/W8A16 kernels and bf16 GEMMs take them; the "
       "AVX512_BF16 kernels where the CPU has them)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
}

std::unique_ptr<model::DFlashModel> GenerationFlags::load_draft(const model::NemotronH& target,
                                                                const ModelDir& dir) const {
  std::string path = resolve_draft_dir(draft);
  if (path.empty() && (spec == "dflash" || spec == "dspark") && !dir.name.empty()) {
    // A named model's drafters sit beside it: tiny-code-dflash, tiny-code-dspark.
    const std::string sibling =
        (fs::path(dir.path).parent_path() / (dir.name + "-" + spec)).string();
    std::error_code ec;
    if (!fs::is_directory(sibling, ec))
      fail("--spec {} needs a drafter: --draft DIR|NAME, or {} beside the model (not found); {}",
           spec, sibling, describe(find_models_dir()));
    std::fprintf(stderr, "note: --spec %s: using the drafter %s\n", spec.c_str(), sibling.c_str());
    path = sibling;
  }
  if (path.empty()) return nullptr;
  return model::DFlashModel::load(path, target, {.tap_last_post_norm = tap_last_post_norm});
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
  std::string bad;
  const std::vector<int> ids = parse_int_list(csv, 0, INT32_MAX, ", ", bad);
  if (!bad.empty()) fail("--ids: '{}' is not a token id", bad);
  return {ids.begin(), ids.end()};
}

ModelDir::~ModelDir() {
  if (temporary && !path.empty()) {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
}

std::vector<std::string> ModelsDir::names() const {
  std::vector<std::string> v;
  std::error_code ec;
  if (path.empty() || !fs::is_directory(path, ec)) return v;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (fs::exists(e.path() / "config.json", ec)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

ModelsDir find_models_dir() {
  ModelsDir m;
  if (const char* env = std::getenv("NEMOTRON_MODELS"); env && *env) {
    m.path = env;  // used even when absent: an empty or missing directory means "no named models"
    m.tried.push_back(fmt::format("$NEMOTRON_MODELS={}", env));
    return m;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "models");
  candidates.push_back(fs::path(NEMOTRON_SOURCE_DIR) / "models");
  for (const auto& c : candidates) {
    const std::string p = c.lexically_normal().string();
    if (fs::is_directory(p, ec)) {
      m.path = p;
      return m;
    }
    if (std::find(m.tried.begin(), m.tried.end(), p) == m.tried.end()) m.tried.push_back(p);
  }
  return m;
}

bool default_model_is_embedded() {
  const ModelsDir m = find_models_dir();
  std::error_code ec;
  return m.path.empty() || !fs::is_directory(fs::path(m.path) / kDefaultModel, ec);
}

std::unique_ptr<ModelDir> resolve_model_dir(const std::string& model, const char* option) {
  auto d = std::make_unique<ModelDir>();
  if (!model.empty()) {
    d->path = d->label = resolve_named(model, option);
    if (d->path != model) d->name = model;
    return d;
  }
  const ModelsDir m = find_models_dir();
  if (!default_model_is_embedded()) {
    d->path = d->label = (fs::path(m.path) / kDefaultModel).string();
    d->name = kDefaultModel;
    std::fprintf(stderr, "note: using the default model %s\n", d->path.c_str());
    return d;
  }
  std::fprintf(stderr, "note: using the embedded tiny model (tiny-a, seed 0): no %s\n",
               m.path.empty() ? fmt::format("models directory (tried {})", join(m.tried)).c_str()
                              : (fs::path(m.path) / kDefaultModel).string().c_str());
  std::string tmpl = (fs::temp_directory_path() / "nemotron-default-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) fail("cannot create a temporary directory for the embedded model");
  d->path = tmpl;
  d->label = "embedded tiny model (tiny-a, seed 0)";
  d->temporary = true;
  synth::SynthOptions opt;
  opt.seed = 0;
  synth::write_checkpoint(synth::preset_config("tiny-a"), d->path, opt);
  return d;
}

std::string resolve_draft_dir(const std::string& draft, const char* option) {
  return draft.empty() ? draft : resolve_named(draft, option);
}

}  // namespace nemo::cli
