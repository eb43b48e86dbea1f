// nemotron: command-line entry point. Subcommands live in their own files (cmd_*.cpp).
// Exit codes: 0 success, 1 error (bad model, bad input), 2 usage error (bad option or value).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "base/error.h"
#include "base/memory.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  nemo::tune_allocator();
  CLI::App app{"nemotron.cpp — native inference for NVIDIA Nemotron-H models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "nemotron.cpp 0.1.0");
  std::vector<nemo::cli::Command> cmds = nemo::cli::all_commands();
  for (auto& c : cmds) c.attach(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version exit 0; every usage error (unknown option, value out of range) exits 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (auto& c : cmds)
      if (c.parsed()) return c.run();
  } catch (const nemo::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
