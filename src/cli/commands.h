#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

}  // namespace nemo::cli
