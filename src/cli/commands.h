#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/weights.h"

namespace nemo::model {
class NemotronH;
class DFlashModel;
}  // namespace nemo::model
namespace nemo::synth {
struct SynthOptions;
}  // namespace nemo::synth

namespace nemo::cli {

// A subcommand: `attach` registers its options, `run` executes after parsing.
struct Command {
  std::function<void(CLI::App&)> attach_fn;
  std::function<int()> run;
  // Set by attach_fn; shared so the Command can be moved around freely.
  std::shared_ptr<CLI::App*> sub = std::make_shared<CLI::App*>(nullptr);
  void attach(CLI::App& app) { attach_fn(app); }
  bool parsed() const { return *sub && (*sub)->parsed(); }
};

std::vector<Command> all_commands();

// Validators for numeric options: the message names the option and its range. Finite() also
// refuses NaN and infinities (CLI::Range lets NaN through).
CLI::Validator in_range(double lo, double hi);  // lo <= v <= hi, finite
// A comma list of integers, each in [lo, hi] (empty items are skipped); parse it with int_list.
CLI::Validator int_list_range(int lo, int hi);
std::vector<int> int_list(const std::string& s);  // after int_list_range accepted it
// --arith f32|bf16 (model::LoadOptions::packed_arith), for every command that loads a model.
void add_arith_option(CLI::App* s, std::string& arith);
// Its value, with a note on stderr where bf16 has no fast kernel on this CPU.
kernels::Arith arith_of(const std::string& arith);
// "NVFP4/FP8/bf16 layers: f32 activations (<kernel> kernel)" or "... bf16 activations (...)", for
// banners.
std::string arith_summary(const std::string& arith);
// The kernel the packed products run under `--arith`: kernels::f32_kernel_name or
// kernels::bf16_kernel_name at the active ISA.
const char* arith_kernel_name(const std::string& arith);
CLI::Validator threads_range();  // 0 (all cores) .. 1024

// Named models (docs/CONVERT.md): the models directory is $NEMOTRON_MODELS when set, else
// <the executable's directory>/../models when it exists, else the source tree's models/.
struct ModelsDir {
  std::string path;                        // "" when none exists
  std::vector<std::string> tried;          // the candidates, for messages
  std::vector<std::string> names() const;  // its subdirectories holding a config.json, sorted
};
ModelsDir find_models_dir();
inline constexpr const char* kDefaultModel = "tiny-code";  // the trained family's ModelOpt target

// A resolved --model: the directory as given, a name in the models directory, the default
// <models>/tiny-code, or (when that does not exist) the embedded tiny-a written to a temporary
// directory that lives as long as this handle.
struct ModelDir {
  std::string path;
  std::string
      name;  // the models-directory name it resolved as ("" for a path or the embedded model)
  std::string label;  // how summaries name it
  bool temporary = false;
  ~ModelDir();
};
// `option` names the flag in errors. A value that is not an existing path and has no '/' is a
// name; an unknown name fails listing what was tried and the names available.
std::unique_ptr<ModelDir> resolve_model_dir(const std::string& model,
                                            const char* option = "--model");
bool default_model_is_embedded();  // no <models>/tiny-code: a run without --model writes tiny-a
// --draft: a path, else a name in the models directory ("" stays "").
std::string resolve_draft_dir(const std::string& draft, const char* option = "--draft");

// Options every generating command shares (run, chat): model, sampling, threads, speculation,
// KV cache. `add_to` registers them; the accessors turn them into engine/model settings.
struct GenerationFlags {
  std::string model;
  int64_t max_tokens = 64;
  float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0, threads = 0, draft_max = 0;  // 0: the drafter's default
  uint64_t seed = 0;
  std::string spec = "auto", kv_cache = "f32", draft, arith = "f32";
  bool fp8_static = false, tap_last_post_norm = false, no_mmap = false;
  void add_to(CLI::App* s);        // everything below
  void add_model_to(CLI::App* s);  // model, threads, speculation, KV cache (no sampling): serve
  model::LoadOptions load_options()
      const;  // --fp8-static-activations, --kv-cache, --no-mmap, --arith
  // The --draft drafter paired with `target` (validated), or null. Without --draft, --spec dflash
  // or dspark on a model named M in the models directory loads its sibling M-dflash / M-dspark.
  std::unique_ptr<model::DFlashModel> load_draft(const model::NemotronH& target,
                                                 const ModelDir& dir) const;
};

// Progress of a checkpoint writer on stderr ("LABEL:  42%  0.10 / 0.24 GB  tensor"): one updating
// line on a terminal, a line per 10% in logs. finish() ends the terminal line.
class WriteProgress {
 public:
  explicit WriteProgress(std::string label);
  std::function<void(const std::string&, uint64_t done, uint64_t total)> callback();
  void finish() const;

 private:
  std::string label_;
  bool tty_;
  std::shared_ptr<int> last_pct_ = std::make_shared<int>(-1);
};

// Output options of the checkpoint writers (synth, convert): --format, --dtype, --mlx-group,
// --no-mtp, --shard-gb, --threads, --quiet. `options` turns them into synth's writer options,
// with `progress` (labelled by the command) unless --quiet.
struct WriterFlags {
  std::string format, dtype = "bf16";
  int mlx_group = 64, threads = 0;
  bool no_mtp = false, quiet = false;
  double shard_gb = 4.0;
  CLI::Option* format_option = nullptr;  // its count() tells whether --format was given
  void add_to(CLI::App* s, const std::string& format_default, const std::string& format_help,
              const std::string& no_mtp_help);
  synth::SynthOptions options(WriteProgress& progress) const;
};

// Shared helpers
std::vector<int32_t> parse_ids(const std::string& csv);  // "1,2,3"
}  // namespace nemo::cli
