// nemotron run | dump | bench: generation on one sequence.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/memory.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "engine/generator.h"
#include "kernels/sampling.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/mtp.h"
#include "model/nemotron_h.h"

namespace nemo::cli {

namespace {

ThreadConfig threads_of(int n) { return ThreadConfig{n > 0 ? n : default_thread_count()}; }

}  // namespace

std::vector<Command> make_generate_commands() {
  std::vector<Command> v(2);

  // ---- run -------------------------------------------------------------------------------------
  struct RunOpts {
    GenerationFlags g;
    std::string prompt, ids;
    std::vector<std::string> stop;
    bool stats = false, ignore_eos = false, spec_stats = false;
  };
  auto ro = std::make_shared<RunOpts>();
  v[0].attach_fn = [ro, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("run", "Generate from a prompt (text or token ids), streaming to stdout");
    ro->g.add_to(s);
    s->add_option("-p,--prompt", ro->prompt, "Prompt text");
    s->add_option("--ids", ro->ids, "Prompt as comma-separated token ids (output: ids)");
    s->add_option("--stop", ro->stop, "Stop string (repeatable); nothing after it is printed");
    s->add_flag("--stats", ro->stats, "Print timing to stderr");
    s->add_flag("--ignore-eos", ro->ignore_eos, "Do not stop at EOS tokens");
    s->add_flag("--spec-stats", ro->spec_stats, "Print speculative-decoding telemetry to stderr");
    s->get_option("--prompt")->excludes("--ids");
    *sub = s;
  };
  v[0].run = [ro]() {
    const GenerationFlags& f = ro->g;
    auto dir = resolve_model_dir(f.model);
    auto m = model::NemotronH::load(dir->path, {.fp8_static_activations = f.fp8_static,
                                                .kv_dtype = model::parse_kv_dtype(f.kv_cache)});
    TextSession text(dir->path, m->config().vocab_size, ro->stop);
    engine::GenerateRequest req;
    if (!ro->ids.empty()) req.prompt = parse_ids(ro->ids);
    else req.prompt = text.encode(ro->prompt.empty() ? std::string("Hello") : ro->prompt);
    req.max_tokens = f.max_tokens;
    req.sampling = {f.temp, f.top_k, f.top_p, f.min_p, f.seed};
    if (!ro->ignore_eos)
      for (auto e : m->config().eos_token_ids) req.stop_tokens.push_back(int32_t(e));
    engine::Generator g(*m, threads_of(f.threads), engine::parse_spec_mode(f.spec), f.draft_max);
    const bool as_ids = !ro->ids.empty();
    auto s = g.generate(req, [&](int32_t tok) {
      if (as_ids) {
        std::printf("%d ", tok);
        std::fflush(stdout);
        return true;
      }
      std::fputs(text.push(tok).c_str(), stdout);
      std::fflush(stdout);
      return !text.stopped();
    });
    if (!as_ids) std::fputs(text.finish().c_str(), stdout);
    std::printf("\n");
    if (ro->stats)
      std::fprintf(stderr, "prompt %lld tok in %.3f s (%.1f tok/s); generated %lld tok in %.3f s (%.2f tok/s)\n",
                   (long long)s.prompt_tokens, s.prefill_seconds, double(s.prompt_tokens) / s.prefill_seconds,
                   (long long)s.generated_tokens, s.decode_seconds,
                   s.generated_tokens > 1 ? double(s.generated_tokens - 1) / s.decode_seconds : 0.0);
    if (ro->spec_stats) {
      std::fprintf(stderr, "spec: drafter %s, draft-max %d\n", engine::spec_mode_name(g.mode()), g.draft_max());
      std::fputs(s.spec.summary().c_str(), stderr);
    }
    return 0;
  };

  // ---- dump (oracle contract: see tools/reference/nemotron_ref.py) ------------------------------
  struct DumpOpts {
    std::string model, ids, out;
    int64_t gen = 64;
    int threads = 0;
    bool mtp = false, fp8_static = false;
    std::string kv_cache = "f32";
  };
  auto dopt = std::make_shared<DumpOpts>();
  v[1].attach_fn = [dopt, sub = v[1].sub](CLI::App& app) {
    auto* s = app.add_subcommand("dump", "Write prefill + greedy decode logits (for oracle tests)");
    s->add_option("-m,--model", dopt->model, "Model directory")->required();
    s->add_option("--ids", dopt->ids, "Prompt token ids, comma-separated")->required();
    s->add_option("--gen", dopt->gen, "Greedy tokens to generate")->capture_default_str();
    s->add_option("--out", dopt->out, "Output prefix: PREFIX.json + PREFIX.f32")->required();
    s->add_option("-t,--threads", dopt->threads, "Threads");
    s->add_flag("--mtp-dump", dopt->mtp,
                "Also write PREFIX.mtp.f32: MTP logits per prompt slot i for (h_i, t_{i+1}), last slot with g0");
    s->add_option("--kv-cache", dopt->kv_cache, "KV-cache storage: f32 | bf16 | fp8")->capture_default_str();
    s->add_flag("--fp8-static-activations", dopt->fp8_static,
                "FP8 layers: emulate W8A8 static activation quantisation (GPU parity) instead of W8A16");
    *sub = s;
  };
  v[1].run = [dopt]() {
    auto m = model::NemotronH::load(dopt->model, {.fp8_static_activations = dopt->fp8_static,
                                                  .kv_dtype = model::parse_kv_dtype(dopt->kv_cache)});
    const auto prompt = parse_ids(dopt->ids);
    if (prompt.empty()) fail("--ids: empty prompt");
    const int64_t V = m->config().vocab_size;
    const auto tc = threads_of(dopt->threads);
    // The engine's decode loop, greedy, no stop tokens: prompt rows' logits, then one row per token.
    engine::Generator g(*m, tc);
    g.begin({.prompt = prompt, .max_tokens = std::max<int64_t>(1, dopt->gen), .prompt_logits = true});
    std::ofstream bin(dopt->out + ".f32", std::ios::binary);
    if (!bin) fail("{}: cannot write", dopt->out + ".f32");
    std::vector<int32_t> toks;
    do {
      const auto step = g.step();
      const bool prefill = g.stats().rounds == 0;  // the first step prefills; later steps are decode rounds
      const std::span<const float> rows = prefill ? g.prompt_logits() : step[0].logits;
      bin.write(reinterpret_cast<const char*>(rows.data()), std::streamsize(rows.size_bytes()));
      if (int64_t(toks.size()) < dopt->gen) toks.push_back(step[0].token);
    } while (!g.done() && int64_t(toks.size()) < dopt->gen);
    if (dopt->mtp) {
      // MTP slot i pairs (h_i, t_{i+1}); the last prompt slot pairs with the first greedy token.
      auto st = m->new_state();
      const auto r = m->forward(st, prompt, {.all_logits = true, .want_hidden = true}, tc);
      auto head = model::MtpHead::load(*m);
      auto ms = head->new_state();
      const int64_t T = int64_t(prompt.size()), H = m->config().hidden_size;
      std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
      next.push_back(kernels::argmax({r.logits.data() + (T - 1) * V, size_t(V)}));
      Buffer<float> hout(size_t(T * H)), lg(size_t(T * V));
      head->forward(ms, r.hidden.data(), next, hout.data(), tc);
      m->logits_from_hidden(hout.data(), T, lg.data(), tc);
      std::ofstream mb(dopt->out + ".mtp.f32", std::ios::binary);
      mb.write(reinterpret_cast<const char*>(lg.data()), std::streamsize(lg.bytes()));
      if (!mb) fail("{}: write failed", dopt->out + ".mtp.f32");
    }
    if (!bin) fail("{}: write failed", dopt->out + ".f32");
    nlohmann::json j = {{"prompt", prompt},       {"tokens", toks},
                        {"vocab", V},             {"prefill_rows", prompt.size()},
                        {"decode_rows", std::max<int64_t>(0, int64_t(toks.size()) - 1)}};
    std::ofstream js(dopt->out + ".json");
    js << j.dump() << "\n";
    if (!js) fail("{}: write failed", dopt->out + ".json");
    return 0;
  };

  return v;
}

}  // namespace nemo::cli
