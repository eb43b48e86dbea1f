// nemotron run | dump | bench: generation on one sequence.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/memory.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "engine/generator.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"
#include "model/dflash.h"
#include "model/mtp.h"
#include "model/nemotron_h.h"
#include "speculative/dflash_drafter.h"
#include "speculative/mtp_drafter.h"
#include "text/text_session.h"

namespace nemo::cli {

namespace {

ThreadConfig threads_of(int n) {
  return ThreadConfig{n > 0 ? n : default_thread_count()};
}

// Decode speed: tokens after the first (which the prefill decides) over the decode time.
double decode_tok_s(const engine::GenerateStats& s) {
  return s.generated_tokens > 1 ? double(s.generated_tokens - 1) / s.decode_seconds : 0.0;
}

}  // namespace

// `run --vs-plain`: the same request decoded again without speculation, side by side. Greedy
// speculation promises the plain tokens bit for bit; sampled speculation promises the plain
// distribution, not the same draws, so only the speed is compared then.
int compare_with_plain(const model::NemotronH& m, ThreadConfig tc,
                       const engine::GenerateRequest& req, const engine::Generator& spec_gen,
                       const engine::GenerateStats& spec, const std::vector<int32_t>& spec_tokens) {
  const char* mode = engine::spec_mode_name(spec_gen.mode());
  if (spec_gen.mode() == engine::SpecMode::None) {
    std::fprintf(stderr,
                 "--vs-plain: no speculation was used (--spec none, or nothing to draft with)\n");
    return 0;
  }
  engine::Generator plain(m, tc, engine::SpecMode::None);
  std::vector<int32_t> plain_tokens;
  const auto p = plain.generate(req, [&](int32_t t) {
    plain_tokens.push_back(t);
    return true;
  });
  const double spec_tps = decode_tok_s(spec), plain_tps = decode_tok_s(p);
  const auto& st = spec.spec;
  // With --spec auto a greedy request drafts only in the rounds where drafting pays.
  const std::string how =
      spec_gen.draft_policy() && req.sampling.greedy()
          ? fmt::format("adaptive, up to {} drafts: {} of {} rounds drafted", spec_gen.draft_max(),
                        st.proposed_at.empty() ? 0 : st.proposed_at[0], st.rounds)
          : fmt::format("draft-max {}", spec_gen.draft_max());
  std::fprintf(stderr,
               "speculation %s (%s): accept length %.2f, %.0f%% of drafts accepted; %.1f tok/s vs "
               "%.1f tok/s plain: %.2fx\n",
               mode, how.c_str(), st.mean_accept_length(), 100.0 * st.acceptance_rate(), spec_tps,
               plain_tps, plain_tps > 0 ? spec_tps / plain_tps : 0.0);
  if (!req.sampling.greedy()) {
    std::fprintf(stderr,
                 "sampled: speculation keeps the target's distribution, not the same draws (not "
                 "compared)\n");
    return 0;
  }
  const bool same = plain_tokens == spec_tokens;
  std::fprintf(stderr, "greedy output identical to plain decoding: %s (%zu tokens)\n",
               same ? "yes, bitwise" : "NO", spec_tokens.size());
  return same ? 0 : 1;
}

std::vector<Command> make_generate_commands() {
  std::vector<Command> v(2);

  // ---- run -------------------------------------------------------------------------------------
  struct RunOpts {
    GenerationFlags g;
    std::string prompt, ids;
    std::vector<std::string> stop;
    bool stats = false, ignore_eos = false, spec_stats = false, vs_plain = false;
  };
  auto ro = std::make_shared<RunOpts>();
  v[0].attach_fn = [ro, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("run",
                                 "Generate from a prompt (text or token ids), streaming to stdout");
    ro->g.add_to(s);
    s->add_option("-p,--prompt", ro->prompt, "Prompt text");
    s->add_option("--ids", ro->ids,
                  "Prompt as token ids, separated by commas or spaces (output: ids)");
    s->add_option("--stop", ro->stop, "Stop string (repeatable); nothing after it is printed");
    s->add_flag("--stats", ro->stats, "Print timing to stderr");
    s->add_flag("--ignore-eos", ro->ignore_eos, "Do not stop at EOS tokens");
    s->add_flag("--spec-stats", ro->spec_stats, "Print speculative-decoding telemetry to stderr");
    s->add_flag(
        "--vs-plain", ro->vs_plain,
        "Then decode again without speculation: print the speedup and (greedy) check the output is "
        "bitwise the same; exit 1 if not");
    s->get_option("--prompt")->excludes("--ids");
    *sub = s;
  };
  v[0].run = [ro]() {
    const GenerationFlags& f = ro->g;
    auto dir = resolve_model_dir(f.model);
    auto m = model::NemotronH::load(dir->path, f.load_options());
    text::TextSession text(dir->path, m->config().vocab_size, ro->stop);
    engine::GenerateRequest req;
    if (!ro->ids.empty())
      req.prompt = parse_ids(ro->ids);
    else
      req.prompt = text.encode(ro->prompt.empty() ? std::string("Hello") : ro->prompt);
    req.max_tokens = f.max_tokens;
    req.sampling = {f.temp, f.top_k, f.top_p, f.min_p, f.seed};
    if (!ro->ignore_eos)
      for (auto e : m->config().eos_token_ids) req.stop_tokens.push_back(int32_t(e));
    const auto draft = f.load_draft(*m, *dir);
    engine::Generator g(*m, threads_of(f.threads), engine::parse_spec_mode(f.spec), f.draft_max,
                        draft.get());
    const bool as_ids = !ro->ids.empty();
    if (ro->vs_plain) {  // both sides timed warm: page in the weights and the drafter first
      auto w = req;
      // Room for a round at the full draft length (the first round of --spec auto): with fewer
      // tokens no round drafts, and the timed run paid the drafter's first use (its weights'
      // page faults, the verify rows' buffers) in its first drafting round.
      w.max_tokens = g.draft_max() + 2;
      g.generate(w, [](int32_t) { return true; });
      engine::Generator(*m, threads_of(f.threads)).generate(w, [](int32_t) { return true; });
    }
    std::vector<int32_t> out_tokens;
    auto s = g.generate(req, [&](int32_t tok) {
      out_tokens.push_back(tok);
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
      std::fprintf(
          stderr,
          "prompt %lld tok in %.3f s (%.1f tok/s); generated %lld tok in %.3f s (%.2f tok/s)\n",
          (long long)s.prompt_tokens, s.prefill_seconds,
          double(s.prompt_tokens) / s.prefill_seconds, (long long)s.generated_tokens,
          s.decode_seconds, decode_tok_s(s));
    if (ro->spec_stats) {
      std::fprintf(stderr, "spec: drafter %s, draft-max %d\n", engine::spec_mode_name(g.mode()),
                   g.draft_max());
      std::fputs(s.spec.summary().c_str(), stderr);
    }
    std::fflush(stdout);  // the text before the comparison's stderr lines
    if (ro->vs_plain) return compare_with_plain(*m, threads_of(f.threads), req, g, s, out_tokens);
    return 0;
  };

  // ---- dump (oracle contract: see tools/reference/nemotron_ref.py) ------------------------------
  struct DumpOpts {
    std::string model, ids, out, draft, spec = "none";
    int64_t gen = 64;
    int threads = 0, draft_max = 0;
    bool mtp = false, fp8_static = false;
    std::string kv_cache = "f32", arith = "f32";
  };
  auto dopt = std::make_shared<DumpOpts>();
  v[1].attach_fn = [dopt, sub = v[1].sub](CLI::App& app) {
    auto* s = app.add_subcommand("dump", "Write prefill + greedy decode logits (for oracle tests)");
    s->add_option("-m,--model", dopt->model, "Model directory or name in models/")->required();
    s->add_option("--ids", dopt->ids, "Prompt token ids, separated by commas or spaces")
        ->required();
    s->add_option("--gen", dopt->gen, "Greedy tokens to generate")
        ->check(in_range(0, 1 << 20))
        ->capture_default_str();
    s->add_option("--out", dopt->out, "Output prefix: PREFIX.json + PREFIX.f32")->required();
    s->add_option("-t,--threads", dopt->threads, "Threads")->check(threads_range());
    s->add_flag("--mtp-dump", dopt->mtp,
                "Also write PREFIX.mtp.f32: MTP logits per prompt slot i for (h_i, t_{i+1}), last "
                "slot with g0");
    s->add_option("--kv-cache", dopt->kv_cache, "KV-cache storage: f32 | bf16 | fp8")
        ->capture_default_str();
    s->add_flag(
        "--fp8-static-activations", dopt->fp8_static,
        "FP8 layers: emulate W8A8 static activation quantisation (GPU parity) instead of W8A16");
    add_arith_option(s, dopt->arith);
    s->add_option("--draft", dopt->draft,
                  "Decode greedily with this DFlash / DSpark drafter (directory or name) and also "
                  "write PREFIX.draft.json, "
                  "PREFIX.draft_base.f32 and PREFIX.draft_final.f32 (every drafting round)");
    s->add_option(
         "--spec", dopt->spec,
         "none | mtp: decode greedily with the checkpoint's MTP head drafting and also write "
         "PREFIX.draft.json and PREFIX.draft_mtp.f32 (every round's drafts and their logits)")
        ->check(CLI::IsMember({"none", "mtp"}))
        ->capture_default_str();
    s->add_option("--draft-max", dopt->draft_max,
                  "Drafts per round with --draft (default: the drafter's block - 1) or --spec mtp "
                  "(default 3)")
        ->check(in_range(0, 15));
    *sub = s;
  };
  v[1].run = [dopt]() {
    const auto dir = resolve_model_dir(dopt->model);
    auto m = model::NemotronH::load(dir->path, {.fp8_static_activations = dopt->fp8_static,
                                                .kv_dtype = model::parse_kv_dtype(dopt->kv_cache),
                                                .packed_arith = arith_of(dopt->arith)});
    const auto prompt = parse_ids(dopt->ids);
    if (prompt.empty()) fail("--ids: empty prompt");
    const int64_t V = m->config().vocab_size;
    const auto tc = threads_of(dopt->threads);
    // The engine's decode loop, greedy, no stop tokens: prompt rows' logits, then the row each
    // later token was decided from (with a drafter: the verify rows, bitwise the same).
    std::unique_ptr<model::DFlashModel> draft;
    if (!dopt->draft.empty()) draft = model::DFlashModel::load(resolve_draft_dir(dopt->draft), *m);
    if (draft && dopt->spec != "none")
      fail("dump: --draft and --spec {} exclude each other", dopt->spec);
    // The drafter's own mode, not Auto: every round drafts --draft-max (the dump records rounds).
    const auto mode =
        draft ? engine::auto_spec_mode(*m, draft.get()) : engine::parse_spec_mode(dopt->spec);
    engine::Generator g(*m, tc, mode, dopt->draft_max, draft.get());
    engine::GenerateRequest req;
    req.prompt = prompt;
    req.max_tokens = std::max<int64_t>(1, dopt->gen);
    req.prompt_logits = true;
    g.begin(req);
    AtomicFile bin_out(dopt->out + ".f32");
    std::ofstream& bin = bin_out.stream();
    auto write = [](std::ofstream& f, std::span<const float> v) {
      f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size_bytes()));
    };
    const auto* drafter = dynamic_cast<const speculative::DFlashDrafter*>(g.drafter());
    const auto* mtp = dynamic_cast<const speculative::MtpDrafter*>(g.drafter());
    std::optional<AtomicFile> base_out, final_out, mtp_out;
    nlohmann::json rounds = nlohmann::json::array();
    if (drafter) {
      base_out.emplace(dopt->out + ".draft_base.f32");
      final_out.emplace(dopt->out + ".draft_final.f32");
    }
    if (mtp) mtp_out.emplace(dopt->out + ".draft_mtp.f32");
    std::vector<int32_t> toks;
    int64_t proposals = 0;
    do {
      const bool prefill = toks.empty();
      const auto step = g.step();
      if (drafter && drafter->proposals() > proposals) {  // this step drafted
        proposals = drafter->proposals();
        const auto& rd = drafter->last_round();
        rounds.push_back(
            {{"p", rd.p}, {"anchor", rd.anchor}, {"q_rows", rd.q_rows}, {"drafts", rd.drafts}});
        write(base_out->stream(), rd.base);
        write(final_out->stream(), rd.final);
      }
      if (mtp && mtp->proposals() > proposals) {
        proposals = mtp->proposals();
        const auto& rd = mtp->last_round();
        rounds.push_back({{"p", rd.p}, {"drafts", rd.drafts}});
        write(mtp_out->stream(), rd.logits);
      }
      for (size_t i = 0; i < step.size() && int64_t(toks.size()) < dopt->gen; ++i) {
        write(bin, prefill ? g.prompt_logits() : step[i].logits);
        toks.push_back(step[i].token);
      }
      if (prefill && dopt->gen == 0) write(bin, g.prompt_logits());
    } while (!g.done() && int64_t(toks.size()) < dopt->gen);
    if (drafter) {
      base_out->commit();
      final_out->commit();
      const auto& dc = draft->config();
      const nlohmann::json dj = {{"kind", dc.kind},
                                 {"gamma", g.draft_max()},
                                 {"vocab", V},
                                 {"tap_layers", dc.target_layer_ids},
                                 {"rounds", rounds}};
      AtomicFile f(dopt->out + ".draft.json");
      f.stream() << dj.dump() << "\n";
      f.commit();
    }
    if (mtp) {
      mtp_out->commit();
      const nlohmann::json dj = {
          {"kind", "mtp"}, {"gamma", g.draft_max()}, {"vocab", V}, {"rounds", rounds}};
      AtomicFile f(dopt->out + ".draft.json");
      f.stream() << dj.dump() << "\n";
      f.commit();
    }
    if (dopt->mtp) {
      // MTP slot i pairs (h_i, t_{i+1}); the last prompt slot pairs with the first greedy token.
      auto st = m->new_state();
      model::ForwardOptions fo;
      fo.all_logits = true;
      fo.want_hidden = true;
      const auto r = m->forward(st, prompt, fo, tc);
      auto head = model::MtpHead::load(*m);
      auto ms = head->new_state();
      const int64_t T = int64_t(prompt.size()), H = m->config().hidden_size;
      std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
      next.push_back(kernels::argmax({r.logits.data() + (T - 1) * V, size_t(V)}));
      Buffer<float> hout(size_t(T * H)), lg(size_t(T * V));
      head->forward(ms, r.hidden.data(), next, hout.data(), tc);
      m->logits_from_hidden(hout.data(), T, lg.data(), tc);
      AtomicFile mb(dopt->out + ".mtp.f32");
      mb.stream().write(reinterpret_cast<const char*>(lg.data()), std::streamsize(lg.bytes()));
      mb.commit();
    }
    bin_out.commit();
    nlohmann::json j = {{"prompt", prompt},
                        {"tokens", toks},
                        {"vocab", V},
                        {"prefill_rows", prompt.size()},
                        {"decode_rows", std::max<int64_t>(0, int64_t(toks.size()) - 1)}};
    AtomicFile js(dopt->out + ".json");
    js.stream() << j.dump() << "\n";
    js.commit();
    return 0;
  };

  return v;
}

}  // namespace nemo::cli
