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
#include "spec/sampler.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/mtp.h"
#include "model/nemotron_h.h"

namespace nemo::cli {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Byte-level fallback until a tokenizer.json is present: one token per byte.
std::vector<int32_t> bytes_to_ids(const std::string& text, int64_t vocab) {
  if (vocab < 256) fail("the model's vocabulary ({}) is too small for the byte-level fallback", vocab);
  std::vector<int32_t> ids;
  for (unsigned char ch : text) ids.push_back(int32_t(ch));
  return ids;
}

void write_token_fallback(int32_t id) {
  if (id < 256) std::fputc(id, stdout);
  else std::printf("<%d>", id);
  std::fflush(stdout);
}

// Streams a 1 GiB buffer (larger than any cache) with the given threads; best of 3, GB/s.
double measure_read_bandwidth(const ThreadConfig& tc) {
  const size_t n = (size_t(1) << 30) / sizeof(float);
  Buffer<float> buf(n);
  for (size_t i = 0; i < n; i += 1024) buf[i] = float(i);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> part(size_t(tc.n_threads), 0.0);
    const double t0 = now_s();
    parallel_for(tc, int64_t(n / 4096), 1, [&](int64_t b, int64_t e) {
      double s = 0;
      for (int64_t blk = b; blk < e; ++blk) s += double(kernels::dot(buf.data() + blk * 4096, buf.data() + blk * 4096, 4096));
      part[size_t(b * tc.n_threads / std::max<int64_t>(1, int64_t(n / 4096)))] += s;
    });
    const double dt = now_s() - t0;
    best = std::max(best, double(n * sizeof(float)) / dt / 1e9);
    if (part[0] == -1.0) std::printf(" ");  // keep the reads alive
  }
  return best;
}

ThreadConfig threads_of(int n) { return ThreadConfig{n > 0 ? n : default_thread_count()}; }

}  // namespace

std::vector<Command> make_generate_commands() {
  std::vector<Command> v(3);

  // ---- run -------------------------------------------------------------------------------------
  struct RunOpts {
    std::string model, prompt, ids;
    int64_t n = 64;
    float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
    int top_k = 0, threads = 0;
    uint64_t seed = 0;
    bool stats = false, ignore_eos = false, spec_stats = false;
    std::string spec = "auto";
    int draft_max = 3;
  };
  auto ro = std::make_shared<RunOpts>();
  v[0].attach_fn = [ro, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("run", "Generate from a prompt (text or token ids), streaming to stdout");
    s->add_option("-m,--model", ro->model, "Model directory (default: the embedded tiny model)");
    s->add_option("-p,--prompt", ro->prompt, "Prompt text");
    s->add_option("--ids", ro->ids, "Prompt as comma-separated token ids");
    s->add_option("-n,--max-tokens", ro->n, "Tokens to generate")->capture_default_str();
    s->add_option("--temp", ro->temp, "Temperature (0 = greedy)")->capture_default_str();
    s->add_option("--top-k", ro->top_k, "Top-k (0 = off)");
    s->add_option("--top-p", ro->top_p, "Top-p (1 = off)");
    s->add_option("--min-p", ro->min_p, "Min-p (0 = off)");
    s->add_option("--seed", ro->seed, "Sampling seed")->capture_default_str();
    s->add_option("-t,--threads", ro->threads, "Threads (default: all cores)");
    s->add_flag("--stats", ro->stats, "Print timing to stderr");
    s->add_flag("--ignore-eos", ro->ignore_eos, "Do not stop at EOS tokens");
    s->add_option("--spec", ro->spec, "Speculative decoding: auto (MTP if present) | mtp | ngram | none")
        ->capture_default_str();
    s->add_option("--draft-max", ro->draft_max, "Draft tokens per verify call (gamma, 1..15)")->capture_default_str();
    s->add_flag("--spec-stats", ro->spec_stats, "Print speculative-decoding telemetry to stderr");
    s->get_option("--prompt")->excludes("--ids");
    *sub = s;
  };
  v[0].run = [ro]() {
    auto dir = resolve_model_dir(ro->model);
    auto m = model::NemotronH::load(dir->path);
    engine::GenerateRequest req;
    if (!ro->ids.empty()) req.prompt = parse_ids(ro->ids);
    else req.prompt = bytes_to_ids(ro->prompt.empty() ? std::string("Hello") : ro->prompt, m->config().vocab_size);
    req.max_tokens = ro->n;
    req.sampling = {ro->temp, ro->top_k, ro->top_p, ro->min_p, ro->seed};
    if (!ro->ignore_eos)
      for (auto e : m->config().eos_token_ids) req.stop_tokens.push_back(int32_t(e));
    engine::Generator g(*m, threads_of(ro->threads), engine::parse_spec_mode(ro->spec), ro->draft_max);
    const bool as_ids = !ro->ids.empty();
    auto s = g.generate(req, [&](int32_t tok) {
      if (as_ids) {
        std::printf("%d ", tok);
        std::fflush(stdout);
      } else {
        write_token_fallback(tok);
      }
      return true;
    });
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
    bool mtp = false;
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
    *sub = s;
  };
  v[1].run = [dopt]() {
    auto m = model::NemotronH::load(dopt->model);
    const auto prompt = parse_ids(dopt->ids);
    if (prompt.empty()) fail("--ids: empty prompt");
    const int64_t V = m->config().vocab_size;
    const auto tc = threads_of(dopt->threads);
    auto st = m->new_state();
    model::ForwardOptions fo;
    fo.all_logits = true;
    fo.want_hidden = dopt->mtp;
    auto r = m->forward(st, prompt, fo, tc);
    if (dopt->mtp) {
      auto head = model::MtpHead::load(*m);
      auto ms = head->new_state();
      const int64_t T = int64_t(prompt.size()), H = m->config().hidden_size;
      std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
      next.push_back(spec::argmax({r.logits.data() + (T - 1) * V, size_t(V)}));
      Buffer<float> hout(size_t(T * H)), lg(size_t(T * V));
      head->forward(ms, r.hidden.data(), next, hout.data(), tc);
      m->logits_from_hidden(hout.data(), T, lg.data(), tc);
      std::ofstream mb(dopt->out + ".mtp.f32", std::ios::binary);
      mb.write(reinterpret_cast<const char*>(lg.data()), std::streamsize(lg.bytes()));
      if (!mb) fail("{}: write failed", dopt->out + ".mtp.f32");
    }
    std::ofstream bin(dopt->out + ".f32", std::ios::binary);
    if (!bin) fail("{}: cannot write", dopt->out + ".f32");
    bin.write(reinterpret_cast<const char*>(r.logits.data()), std::streamsize(r.logits.bytes()));
    std::vector<int32_t> toks;
    const float* last = r.logits.data() + (r.rows - 1) * V;
    for (int64_t i = 0; i < dopt->gen; ++i) {
      const int32_t t = spec::argmax({last, size_t(V)});
      toks.push_back(t);
      if (i + 1 == dopt->gen) break;
      const int32_t in[1] = {t};
      r = m->forward(st, in, {}, tc);
      bin.write(reinterpret_cast<const char*>(r.logits.data()), std::streamsize(r.logits.bytes()));
      last = r.logits.data();
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

  // ---- bench ------------------------------------------------------------------------------------
  struct BenchOpts {
    std::string model;
    int64_t prompt = 128, gen = 32;
    int threads = 0, reps = 1;
    bool json = false, membw = false;
  };
  auto bo = std::make_shared<BenchOpts>();
  v[2].attach_fn = [bo, sub = v[2].sub](CLI::App& app) {
    auto* s = app.add_subcommand("bench", "Measure prefill and decode speed and peak memory");
    s->add_option("-m,--model", bo->model, "Model directory (default: the embedded tiny model)");
    s->add_option("--prompt-tokens", bo->prompt, "Prefill length")->capture_default_str();
    s->add_option("--gen", bo->gen, "Decode steps")->capture_default_str();
    s->add_option("-t,--threads", bo->threads, "Threads (default: all cores)");
    s->add_option("--reps", bo->reps, "Repetitions (best is reported)")->capture_default_str();
    s->add_flag("--json", bo->json, "Machine-readable output");
    s->add_flag("--membw", bo->membw, "Also measure memory read bandwidth (roofline)");
    *sub = s;
  };
  v[2].run = [bo]() {
    auto dir = resolve_model_dir(bo->model);
    const double tl = now_s();
    auto m = model::NemotronH::load(dir->path);
    const double load_s = now_s() - tl;
    const auto& cfg = m->config();
    const auto tc = threads_of(bo->threads);
    spec::Rng rng(42);
    std::vector<int32_t> prompt(size_t(std::max<int64_t>(1, bo->prompt)));
    for (auto& t : prompt) t = int32_t(rng.next() % uint64_t(cfg.vocab_size));
    double best_pf = 1e30, best_dec = 1e30;
    size_t state_bytes = 0;
    for (int rep = 0; rep < std::max(1, bo->reps); ++rep) {
      auto st = m->new_state();
      double t0 = now_s();
      auto r = m->forward(st, prompt, {}, tc);
      best_pf = std::min(best_pf, now_s() - t0);
      t0 = now_s();
      for (int64_t i = 0; i < bo->gen; ++i) {
        const int32_t in[1] = {spec::argmax({r.logits.data(), size_t(cfg.vocab_size)})};
        r = m->forward(st, in, {}, tc);
      }
      if (bo->gen > 0) best_dec = std::min(best_dec, now_s() - t0);
      state_bytes = st.bytes();
    }
    const double pf_tps = double(prompt.size()) / best_pf;
    const double dec_gb = double(m->decode_bytes_per_token()) / 1e9;
    const double bw = bo->membw ? measure_read_bandwidth(tc) : 0.0;
    const double dec_tps = bo->gen > 0 ? double(bo->gen) / best_dec : 0.0;
    const double file_gb = double(m->store().file_bytes()) / 1e9;
    const double rss_gb = double(peak_rss_bytes()) / 1e9;
    if (bo->json) {
      nlohmann::json j = {{"model", dir->path},           {"layers", cfg.pattern()},
                          {"threads", tc.n_threads},      {"isa", kernels::isa_name(kernels::active_isa())},
                          {"prompt_tokens", prompt.size()}, {"prefill_tok_s", pf_tps},
                          {"decode_tokens", bo->gen},     {"decode_tok_s", dec_tps},
                          {"load_s", load_s},             {"file_gb", file_gb},
                          {"peak_rss_gb", rss_gb},        {"state_mb", double(state_bytes) / 1e6},
                          {"decode_gb_per_token", dec_gb}, {"decode_gb_s", dec_gb * dec_tps}};
      if (bo->membw) {
        j["read_bandwidth_gb_s"] = bw;
        j["roofline_tok_s"] = bw / dec_gb;
        j["roofline_fraction"] = dec_tps * dec_gb / bw;
      }
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("model      %s (%zu layers: %s)\n", dir->path.c_str(), cfg.layers.size(), cfg.pattern().c_str());
      std::printf("threads    %d (%s kernels)\n", tc.n_threads, kernels::isa_name(kernels::active_isa()));
      std::printf("prefill    %lld tokens: %.2f tok/s\n", (long long)prompt.size(), pf_tps);
      std::printf("decode     %lld tokens: %.2f tok/s (%.3f GB of weights per token -> %.1f GB/s)\n",
                  (long long)bo->gen, dec_tps, dec_gb, dec_gb * dec_tps);
      if (bo->membw)
        std::printf("roofline   read bandwidth %.1f GB/s -> %.2f tok/s; decode reaches %.0f%%\n", bw, bw / dec_gb,
                    100.0 * dec_tps * dec_gb / bw);
      std::printf("memory     peak RSS %.3f GB, checkpoint files %.3f GB, state %.1f MB\n", rss_gb, file_gb,
                  double(state_bytes) / 1e6);
      std::printf("load       %.2f s\n", load_s);
    }
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
