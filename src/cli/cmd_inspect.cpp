// nemotron inspect: what a checkpoint directory holds and whether this engine can run it
// (architecture, schedule, parameter counts, formats, MTP, drafter pairing, memory). Reads headers
// and configs only; never binds or runs the model. JSON schema: docs/INSPECT.md.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "tools/inspect/inspect.h"

namespace nemo::cli {

std::vector<Command> make_inspect_command() {
  struct Opts {
    std::string dir, draft;
    bool require_mtp = false, json = false;
    int64_t context = 4096;
  };
  auto o = std::make_shared<Opts>();
  std::vector<Command> v(1);
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("inspect", "Describe a checkpoint and check that it can run");
    s->add_option(
        "dir", o->dir,
        "Model directory or name in models/ (target or DFlash/DSpark drafter; default: tiny-code)");
    s->add_option("--draft", o->draft,
                  "Drafter directory or name in models/ to pair with the target");
    s->add_flag("--require-mtp", o->require_mtp, "Fail unless the checkpoint has a complete MTP module");
    s->add_flag("--json", o->json, "Print the stable-schema JSON report (docs/INSPECT.md)");
    s->add_option("--context", o->context, "Context length for the memory estimate")->capture_default_str();
    *sub = s;
  };
  v[0].run = [o]() {
    if (o->context < 0) fail("--context {}: must be >= 0", o->context);
    const auto dir = resolve_model_dir(o->dir, "inspect");
    inspect::InspectReport r = inspect::inspect_dir(dir->path);
    if (!o->draft.empty())
      inspect::pair_drafter(r, inspect::inspect_dir(resolve_draft_dir(o->draft)));
    inspect::apply_requirements(r, {.mtp = o->require_mtp});
    if (o->json) std::printf("%s\n", inspect::to_json(r, o->context).dump(2).c_str());
    else std::fputs(inspect::to_text(r, o->context).c_str(), stdout);
    std::fflush(stdout);
    for (const auto& p : r.problems) std::fprintf(stderr, "error: %s\n", p.c_str());
    return r.runnable() ? 0 : 1;
  };
  return v;
}

}  // namespace nemo::cli
