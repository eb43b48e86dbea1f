// nemotron serve: the OpenAI-compatible HTTP server (src/server). Listens first (so /health can
// say "loading"), then maps the model, warms it with one request, prints a summary and serves
// until SIGTERM / SIGINT, which drains: new requests get 503, running ones finish, exit 0.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/memory.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "engine/scheduler.h"
#include "model/dflash.h"
#include "model/nemotron_h.h"
#include "server/server.h"
#include "text/chat_template.h"
#include "text/text_session.h"

namespace nemo::cli {

namespace {

// The one process-wide flag: a signal handler can only touch lock-free atomics, and it must
// reach the serve loop without any object to hang it on.
std::atomic<int> g_signals{0};

extern "C" void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) std::_Exit(130);  // a second signal: stop now
}

std::string mib(double bytes) {
  return fmt::format("{:.1f} MiB", bytes / (1 << 20));
}

// Startup phases: a redrawn bar on a terminal, one log line per phase otherwise.
class Progress {
 public:
  explicit Progress(int phases) : n_(phases), tty_(isatty(fileno(stderr))), t0_(now_seconds()) {
    if (tty_) drawer_ = std::thread([this] { draw_loop(); });
  }
  ~Progress() { finish(); }
  void phase(const std::string& what) {
    {
      std::lock_guard lk(mu_);
      ++i_;
      what_ = what;
      t_phase_ = now_seconds();
    }
    if (!tty_) std::fprintf(stderr, "serve: [%d/%d] %s ...\n", i_, n_, what.c_str());
  }
  void finish() {
    if (done_.exchange(true)) return;
    if (drawer_.joinable()) drawer_.join();
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }
  double elapsed() const { return now_seconds() - t0_; }

 private:
  void draw_loop() {
    static const char* kSpin = "|/-\\";
    for (int tick = 0; !done_; ++tick) {
      {
        std::lock_guard lk(mu_);
        const int width = 24, filled = n_ ? width * std::max(0, i_ - 1) / n_ : 0;
        std::string bar(size_t(filled), '=');
        bar += kSpin[tick % 4];
        bar.resize(size_t(width), ' ');
        std::fprintf(stderr, "\r\033[K[%s] %d/%d %s  %.1fs", bar.c_str(), i_, n_, what_.c_str(),
                     now_seconds() - t_phase_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::mutex mu_;
  int n_, i_ = 0;
  bool tty_;
  double t0_, t_phase_ = 0;
  std::string what_;
  std::atomic<bool> done_{false};
  std::thread drawer_;
};

// "BF16 12.0 MiB, F32 0.3 MiB": the checkpoint's tensor formats by bytes.
std::string weight_formats(const model::NemotronH& m) {
  std::map<std::string, uint64_t> by;
  for (const auto& n : m.store().names()) {
    const auto& t = m.store().get(n);
    by[io::dtype_name(t.dtype)] += t.nbytes;
  }
  std::string s;
  for (const auto& [k, v] : by)
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", k, mib(double(v)));
  if (m.quant().quantized()) s += fmt::format(" (quantized: {})", m.quant().global_algo);
  return s;
}

}  // namespace

std::vector<Command> make_serve_command() {
  struct Opts {
    GenerationFlags g;
    server::ServerOptions srv;
    std::vector<std::string> api_keys;
    int max_active = 16, max_queue = 64;
    int64_t ctx_size = 4096, prefix_cache_mb = 256, warmup = 2;
    bool no_metrics = false;
  };
  auto o = std::make_shared<Opts>();
  std::vector<Command> v(1);
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/SERVER.md)");
    o->g.add_model_to(s);
    s->add_option("--host", o->srv.host, "Address to bind (loopback by default)")
        ->capture_default_str();
    s->add_option("--port", o->srv.port, "Port (0: any free port, printed)")
        ->check(in_range(0, 65535))
        ->capture_default_str();
    s->add_option("--api-key", o->api_keys,
                  "Require 'Authorization: Bearer KEY' (repeatable or comma list)")
        ->delimiter(',');
    s->add_option("--max-active", o->max_active, "Requests that decode together")
        ->check(in_range(1, 4096))
        ->capture_default_str();
    s->add_option("--max-queue", o->max_queue, "Waiting requests beyond which new ones get 429")
        ->check(in_range(0, 65536))
        ->capture_default_str();
    s->add_option("-c,--ctx-size", o->ctx_size,
                  "Max prompt + max_tokens per request (0: unlimited)")
        ->check(in_range(0, 1ll << 40))
        ->capture_default_str();
    s->add_option("--max-tokens", o->srv.default_max_tokens, "max_tokens when a request gives none")
        ->check(in_range(1, 1ll << 40))
        ->capture_default_str();
    s->add_option("--max-body", o->srv.max_body, "Largest request body in bytes (413 beyond)")
        ->check(in_range(1, 1ll << 34))
        ->capture_default_str();
    s->add_option("--timeout", o->srv.timeout_s, "Socket read / write timeout, seconds")
        ->check(in_range(1, 86400))
        ->capture_default_str();
    s->add_option("--keep-alive", o->srv.keep_alive_s,
                  "Idle keep-alive connections close after, seconds")
        ->check(in_range(1, 3600))
        ->capture_default_str();
    s->add_option("--sse-ping", o->srv.sse_ping_s,
                  "Seconds between ': ping' comments on a quiet stream")
        ->check(in_range(0.1, 3600))
        ->capture_default_str();
    s->add_option("--prefix-cache-mb", o->prefix_cache_mb, "Prefix cache size (0: off)")
        ->check(in_range(0, 1 << 24))
        ->capture_default_str();
    s->add_option("--model-id", o->srv.model_id, "Model name in /v1/models and responses")
        ->capture_default_str();
    s->add_option("--warmup", o->warmup,
                  "Tokens generated at startup before /health turns 200 (pages the weights in)")
        ->check(in_range(1, 1 << 30))
        ->capture_default_str();
    s->add_flag("--no-metrics", o->no_metrics, "Disable GET /metrics");
    *sub = s;
  };
  v[0].run = [o]() {
    const GenerationFlags& f = o->g;
    server::ServerOptions so = o->srv;
    for (auto& k : o->api_keys)
      if (!k.empty()) so.api_keys.push_back(k);
    so.metrics = !o->no_metrics;
    so.http_threads = o->max_active + o->max_queue + 4;

    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);

    server::Server srv(so);
    const int port = srv.start();
    std::fprintf(stderr, "listening on http://%s:%d\n", so.host.c_str(), port);
    std::fflush(stderr);

    const bool embedded = f.model.empty() && default_model_is_embedded();
    Progress progress(embedded ? 5 : 4);
    if (embedded) progress.phase("writing the embedded tiny model");
    auto dir = resolve_model_dir(f.model);
    progress.phase(f.no_mmap ? "reading weights (--no-mmap)" : "mapping weights");
    auto m = model::NemotronH::load(dir->path, f.load_options());
    progress.phase("loading tokenizer, template and drafter");
    const text::TextCodec codec(dir->path, m->config().vocab_size);
    const auto tmpl_src = text::load_chat_template(dir->path);
    std::optional<text::ChatTemplate> tmpl;
    if (tmpl_src) tmpl.emplace(*tmpl_src, "chat_template");
    const auto draft = f.load_draft(*m, *dir);
    engine::SchedulerOptions sched_opt;
    sched_opt.threads = ThreadConfig{f.threads > 0 ? f.threads : default_thread_count()};
    sched_opt.spec = engine::parse_spec_mode(f.spec);
    sched_opt.draft_max = f.draft_max;
    sched_opt.drafter = draft.get();
    sched_opt.max_active = o->max_active;
    sched_opt.max_queue = o->max_queue;
    sched_opt.max_context = o->ctx_size;
    sched_opt.prefix_cache_bytes = o->prefix_cache_mb << 20;
    engine::Scheduler sched(*m, sched_opt);

    progress.phase("warming up (one request)");
    {
      engine::RequestOptions warm;
      warm.prompt = {int32_t(m->config().bos_token_id.value_or(0))};
      warm.max_tokens = o->ctx_size > 1 ? std::min(o->warmup, o->ctx_size - 1) : o->warmup;
      warm.use_prefix_cache = false;
      if (auto s = sched.submit(warm))
        while (!s->finished()) {
          std::vector<engine::TokenOut> drop;
          s->wait(drop, std::chrono::milliseconds(50));
        }
    }
    progress.finish();

    server::Backend backend;
    backend.scheduler = &sched;
    backend.codec = &codec;
    backend.chat_template = tmpl ? &*tmpl : nullptr;
    backend.chat_template_source = tmpl_src.value_or("");
    for (auto e : m->config().eos_token_ids) backend.stop_tokens.push_back(int32_t(e));
    for (int32_t e : codec.stop_token_ids())
      if (std::find(backend.stop_tokens.begin(), backend.stop_tokens.end(), e) ==
          backend.stop_tokens.end())
        backend.stop_tokens.push_back(e);
    backend.n_ctx = o->ctx_size;
    backend.props = {
        {"model_path", dir->temporary ? "(embedded tiny model)" : dir->path},
        {"drafter", draft ? nlohmann::ordered_json(draft->dir()) : nlohmann::ordered_json(nullptr)},
        {"vocab_size", m->config().vocab_size},
        {"layers", m->config().pattern()}};

    const auto spec = sched.default_spec();
    std::fprintf(stderr,
                 "nemotron serve — ready in %.2f s\n"
                 "  model        %s\n"
                 "  layers       %s (vocab %lld, hidden %lld)\n"
                 "  weights      %s; %s mapped, RSS %s\n"
                 "  kv cache     %s\n"
                 "  arithmetic   %s\n"
                 "  tokenizer    %s; chat template %s\n"
                 "  drafter      %s\n"
                 "  speculation  %s%s\n"
                 "  threads      %d\n"
                 "  batching     %d active, queue %d, context %lld tokens, prefix cache %lld MiB\n"
                 "  auth         %s; body limit %zu bytes; metrics %s\n",
                 progress.elapsed(), dir->label.c_str(), m->config().pattern().c_str(),
                 (long long)m->config().vocab_size, (long long)m->config().hidden_size,
                 weight_formats(*m).c_str(), mib(double(m->weight_bytes())).c_str(),
                 mib(double(current_rss_bytes())).c_str(), f.kv_cache.c_str(),
                 arith_summary(f.arith).c_str(),
                 codec.has_tokenizer() ? "tokenizer.json" : "byte-level fallback",
                 tmpl ? "yes" : "none (chat completions refused)",
                 draft ? draft->dir().c_str() : "none", engine::spec_mode_name(spec),
                 spec == engine::SpecMode::None
                     ? ""
                     : (f.draft_max ? fmt::format(" (draft-max {})", f.draft_max)
                                    : std::string(" (draft-max: the drafter's default)"))
                           .c_str(),
                 sched_opt.threads.n_threads, o->max_active, o->max_queue, (long long)o->ctx_size,
                 (long long)o->prefix_cache_mb,
                 so.api_keys.empty() ? "none (no --api-key)"
                                     : fmt::format("{} API key(s)", so.api_keys.size()).c_str(),
                 so.max_body, so.metrics ? "on" : "off");
    if (g_signals == 0) srv.set_backend(&backend);
    std::fprintf(stderr, "serving on http://%s:%d\n", so.host.c_str(), port);
    std::fflush(stderr);

    while (g_signals == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::fprintf(stderr, "serve: draining (new requests get 503)\n");
    srv.drain();
    srv.stop();
    std::fprintf(stderr, "serve: stopped\n");
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
