#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace nemo::model {
class NemotronH;
class DFlashModel;
}  // namespace nemo::model

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
CLI::Validator threads_range();                  // 0 (all cores) .. 1024

// Options every generating command shares (run, chat): model, sampling, threads, speculation,
// KV cache. `add_to` registers them; the accessors turn them into engine/model settings.
struct GenerationFlags {
  std::string model;
  int64_t max_tokens = 64;
  float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0, threads = 0, draft_max = 0;  // 0: the drafter's default
  uint64_t seed = 0;
  std::string spec = "auto", kv_cache = "f32", draft;
  bool fp8_static = false, tap_last_post_norm = false;
  void add_to(CLI::App* s);
  // The --draft drafter paired with `target` (validated), or null.
  std::unique_ptr<model::DFlashModel> load_draft(const model::NemotronH& target) const;
};

// Shared helpers
std::vector<int32_t> parse_ids(const std::string& csv);  // "1,2,3"
// Resolves --model; when empty, writes the embedded default model (tiny-a, seed 0) to a
// temporary directory that lives as long as the returned handle.
struct ModelDir {
  std::string path;
  bool temporary = false;
  ~ModelDir();
};
std::unique_ptr<ModelDir> resolve_model_dir(const std::string& model);

// Text in and out for a model directory: its tokenizer.json when present, else a byte-level
// fallback (one token per byte; output kept valid UTF-8). Streams with stop strings.
class TextSession {
 public:
  TextSession(const std::string& model_dir, int64_t vocab, std::vector<std::string> stop = {});
  ~TextSession();
  bool has_tokenizer() const;
  std::vector<int32_t> encode(const std::string& text) const;  // raw text, special tokens parsed
  std::string push(int32_t token);  // text that became final
  std::string finish();             // flush at the end of a stream; resets for the next one
  bool stopped() const;
  std::vector<int32_t> stop_token_ids() const;  // the tokenizer's EOS (chat end-of-turn), if any
  const void* tokenizer() const;                // nemo::text::Tokenizer*, or null

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nemo::cli
