#include "server/server.h"

#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "base/clock.h"
#include "base/error.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/sse.h"
#include "server/web_index.h"  // generated from server/web/index.html at build time

namespace nemo::server {

namespace {

constexpr const char* kJson = "application/json; charset=utf-8";

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), kJson);
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, e.body()); }

const char* status_message(int status) {
  switch (status) {
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 413:
      return "the request body is larger than the server's --max-body";
    case 414:
      return "the request URI is too long";
    default:
      return "request failed";
  }
}

// Routes counted under their own name in metrics; anything else is "other" (bounded labels).
const char* route_label(const std::string& path) {
  static constexpr const char* kRoutes[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/models", "/models",     "/health",
      "/metrics",             "/tokenize",       "/detokenize", "/apply-template", "/props", "/"};
  for (const char* r : kRoutes)
    if (path == r) return r;
  return "other";
}

std::string request_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}", prefix, rng());
}

}  // namespace

struct Server::Impl {
  ServerOptions opt;
  httplib::Server http;
  std::thread listener;
  std::atomic<const Backend*> backend{nullptr};
  std::atomic<bool> draining{false};
  Metrics metrics;

  // Requests in flight, for the access log (keyed by the Request's address, unique while live).
  struct Track {
    double start = 0;
    int64_t prompt_tokens = -1, completion_tokens = -1;
    std::string finish;
  };
  std::mutex track_mu;
  std::map<const httplib::Request*, Track> tracks;
  // Generation responses not yet fully written (drain waits for 0).
  std::mutex busy_mu;
  std::condition_variable busy_cv;
  int busy = 0;

  explicit Impl(ServerOptions o) : opt(std::move(o)) {}

  void set_track(const httplib::Request& req, int64_t prompt, int64_t completion, std::string finish) {
    std::lock_guard lk(track_mu);
    auto it = tracks.find(&req);
    if (it == tracks.end()) return;
    it->second.prompt_tokens = prompt;
    it->second.completion_tokens = completion;
    it->second.finish = std::move(finish);
  }
  void busy_add(int d) {
    std::lock_guard lk(busy_mu);
    busy += d;
    if (busy == 0) busy_cv.notify_all();
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_keys.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    if (!h.starts_with("Bearer ")) return false;
    const std::string key = h.substr(7);
    bool ok = false;
    for (const auto& k : opt.api_keys) {
      // Compare every byte of an equal-length key (no early exit on the first mismatch).
      if (k.size() != key.size()) continue;
      unsigned char diff = 0;
      for (size_t i = 0; i < k.size(); ++i) diff |= static_cast<unsigned char>(k[i] ^ key[i]);
      ok |= diff == 0;
    }
    return ok;
  }

  // Common gate of API routes: auth, then draining, then (if asked) readiness. False (with `res`
  // set) when the request is refused.
  bool admit(const httplib::Request& req, httplib::Response& res, bool need_backend = true) {
    if (!authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, {401, "invalid or missing API key (Authorization: Bearer KEY)", ""});
      return false;
    }
    if (draining) {
      send_error(res, {503, "the server is shutting down", ""});
      return false;
    }
    if (need_backend && !backend.load()) {
      res.set_header("Retry-After", "1");
      send_error(res, {503, "the model is still loading", ""});
      return false;
    }
    return true;
  }

  // Wraps a handler: ApiError and engine errors become OpenAI-style bodies, nothing escapes.
  template <typename F>
  auto guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::bad_alloc&) {
        send_error(res, {500, "out of memory", ""});
      } catch (const std::exception& e) {
        send_error(res, {400, e.what(), ""});
      }
    };
  }

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  json props(const Backend* b) const;
};

// ---- generation ------------------------------------------------------------------------------

namespace {

// One generation request: owns what the ResponseBuilder refers to.
struct Generation {
  GenerationRequest req;
  std::shared_ptr<engine::RequestStream> stream;
  std::optional<ResponseBuilder> builder;
  engine::SpecMode mode = engine::SpecMode::None;
  std::vector<double> itl;  // inter-token gaps as received
  double last_token_t = 0;
  bool done = false;

  // Waits up to `timeout` for tokens; returns the chunks they make (the final ones once the
  // request has finished: then `done`).
  std::vector<json> poll(std::chrono::milliseconds timeout) {
    std::vector<engine::TokenOut> toks;
    stream->wait(toks, timeout);
    std::vector<json> out;
    if (!toks.empty()) {
      const double now = now_seconds();
      if (last_token_t > 0)
        for (size_t i = 0; i < toks.size(); ++i) itl.push_back((now - last_token_t) / double(toks.size()));
      last_token_t = now;
      out = builder->push(toks);
      if (builder->stopped()) stream->cancel();  // a stop string matched: no more tokens needed
    }
    if (stream->finished()) {
      done = true;
      for (auto& c : builder->finish(stream->summary(), mode)) out.push_back(std::move(c));
    }
    return out;
  }
};

}  // namespace

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!admit(req, res)) return;
  const Backend* b = backend.load();
  auto g = std::make_shared<Generation>();
  g->req = parse_generation_request(parse_body(req.body), chat);
  if (g->req.model.empty()) g->req.model = opt.model_id;

  // Prompt tokens.
  engine::RequestOptions ro;
  bool start_in_reasoning = false;
  if (chat) {
    if (!b->chat_template)
      throw ApiError{400, "this model has no chat template: use /v1/completions", "messages"};
    text::ChatOptions co;
    co.tools = g->req.tools;
    co.enable_thinking = g->req.enable_thinking;
    co.extra = g->req.template_kwargs;
    std::string prompt;
    try {
      prompt = b->chat_template->apply(g->req.messages, co);
    } catch (const Error& e) {
      throw ApiError{400, fmt::format("the chat template refused the messages: {}", e.what()), "messages"};
    }
    start_in_reasoning = prompt.ends_with("<think>\n") || prompt.ends_with("<think>");
    ro.prompt = b->codec->encode(prompt, /*add_special=*/false);
  } else if (g->req.prompt_text) {
    ro.prompt = b->codec->encode(*g->req.prompt_text, /*add_special=*/true);
  } else {
    ro.prompt = g->req.prompt_ids;
  }
  const int64_t n_prompt = int64_t(ro.prompt.size());
  if (n_prompt == 0) throw ApiError{400, "the prompt is empty", chat ? "messages" : "prompt"};
  if (b->n_ctx > 0 && n_prompt >= b->n_ctx)
    throw ApiError{400,
                   fmt::format("the prompt ({} tokens) does not fit the context ({} tokens)", n_prompt, b->n_ctx),
                   chat ? "messages" : "prompt"};
  int64_t room = b->n_ctx > 0 ? b->n_ctx - n_prompt : INT64_MAX;
  if (g->req.max_tokens && *g->req.max_tokens > room)
    throw ApiError{400,
                   fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context ({} tokens)", n_prompt,
                               *g->req.max_tokens, b->n_ctx),
                   "max_tokens"};
  ro.max_tokens = g->req.max_tokens.value_or(std::min(opt.default_max_tokens, room));
  ro.sampling = g->req.sampling;
  if (!g->req.ignore_eos) ro.stop_tokens = b->stop_tokens;
  ro.top_logprobs = g->req.top_logprobs;
  ro.spec = g->req.spec;
  g->mode = g->req.spec && *g->req.spec != engine::SpecMode::Auto ? *g->req.spec : b->scheduler->default_spec();

  const std::vector<int32_t> ro_stop_tokens = ro.stop_tokens;
  std::string why;
  engine::Scheduler::Refusal refusal = engine::Scheduler::Refusal::None;
  g->stream = b->scheduler->submit(std::move(ro), &why, &refusal);
  if (!g->stream) {
    const int status = refusal == engine::Scheduler::Refusal::QueueFull  ? 429
                       : refusal == engine::Scheduler::Refusal::Draining ? 503
                                                                          : 400;
    if (status == 429) res.set_header("Retry-After", "1");
    throw ApiError{status, why, ""};
  }
  g->builder.emplace(g->req, *b->codec, ro_stop_tokens, request_id(chat ? "chatcmpl" : "cmpl"),
                     int64_t(std::time(nullptr)), start_in_reasoning);

  auto finished = [this, g, &req] {
    const auto s = g->stream->summary();
    metrics.request_done(s, g->itl);
    set_track(req, s.prompt_tokens, s.completion_tokens, engine::finish_reason_name(s.finish));
  };
  if (!g->req.stream) {
    busy_add(1);
    struct Release {
      Impl* self;
      ~Release() { self->busy_add(-1); }
    } release{this};
    while (!g->done) g->poll(std::chrono::milliseconds(200));
    finished();
    const auto s = g->stream->summary();
    if (s.finish == engine::FinishReason::Error) throw ApiError{500, "generation failed: " + s.error, ""};
    send_json(res, 200, g->builder->response());
    return;
  }

  busy_add(1);
  const auto ping = std::chrono::milliseconds(int64_t(opt.sse_ping_s * 1e3));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, g, ping, finished](size_t, httplib::DataSink& sink) {
        auto last_write = std::chrono::steady_clock::now();
        while (!g->done) {
          const auto chunks = g->poll(std::chrono::milliseconds(100));
          bool ok = true;
          for (const auto& c : chunks) ok = ok && sse_write(sink, sse_data(dump(c)));
          const auto now = std::chrono::steady_clock::now();
          if (ok && chunks.empty() && now - last_write >= ping) ok = sse_write(sink, sse_comment("ping"));
          if (!chunks.empty() || now - last_write >= ping) last_write = now;
          if (!ok) {  // the client went away: stop the request (finish: cancelled)
            g->stream->cancel();
            metrics.disconnect();
            while (!g->stream->finished()) {
              std::vector<engine::TokenOut> drop;
              g->stream->wait(drop, std::chrono::milliseconds(100));
            }
            finished();
            return false;
          }
        }
        finished();
        const auto s = g->stream->summary();
        if (s.finish == engine::FinishReason::Error)
          sse_write(sink, sse_data(dump(ApiError{500, "generation failed: " + s.error, ""}.body())));
        sse_write(sink, sse_data("[DONE]"));
        sink.done();
        return true;
      },
      [this, g](bool) {
        // Also when the provider never ran (the client left before the headers went out).
        if (!g->done) g->stream->cancel();
        busy_add(-1);
      });
}

// ---- other routes ----------------------------------------------------------------------------

json Server::Impl::props(const Backend* b) const {
  json p = json::object();
  p["model_id"] = opt.model_id;
  p["ready"] = b != nullptr;
  p["build_info"] = fmt::format("nemotron.cpp {}", "0.1.0");
  if (!b) return p;
  const auto& so = b->scheduler->options();
  p["n_ctx"] = b->n_ctx;
  p["total_slots"] = so.max_active;
  p["max_queue"] = so.max_queue;
  p["speculation"] = engine::spec_mode_name(b->scheduler->default_spec());
  p["draft_max"] = so.draft_max;
  p["prefix_cache_bytes"] = so.prefix_cache_bytes;
  p["chat_template"] = b->chat_template_source;
  p["default_generation_settings"] = {{"max_tokens", opt.default_max_tokens}};
  for (const auto& [k, v] : b->props.items()) p[k] = v;
  return p;
}

void Server::Impl::routes() {
  http.Post("/v1/chat/completions", guarded([this](const auto& q, auto& r) { generate(q, r, true); }));
  http.Post("/v1/completions", guarded([this](const auto& q, auto& r) { generate(q, r, false); }));
  auto models = guarded([this](const httplib::Request& q, httplib::Response& r) {
    if (!admit(q, r, /*need_backend=*/false)) return;
    send_json(r, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", opt.model_id},
                                      {"object", "model"},
                                      {"created", 0},
                                      {"owned_by", "nemotron.cpp"}}})}});
  });
  http.Get("/v1/models", models);
  http.Get("/models", models);
  http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    if (draining) send_json(r, 503, {{"status", "draining"}});
    else if (!backend.load()) send_json(r, 503, {{"status", "loading"}});
    else send_json(r, 200, {{"status", "ok"}});
  });
  if (opt.metrics)
    http.Get("/metrics", guarded([this](const httplib::Request& q, httplib::Response& r) {
      if (!admit(q, r, /*need_backend=*/false)) return;
      const Backend* b = backend.load();
      const auto sm = b ? std::optional(b->scheduler->metrics()) : std::nullopt;
      r.set_content(metrics.render(sm ? &*sm : nullptr, b != nullptr, draining),
                    "text/plain; version=0.0.4; charset=utf-8");
    }));
  http.Post("/tokenize", guarded([this](const httplib::Request& q, httplib::Response& r) {
    if (!admit(q, r)) return;
    const Backend* b = backend.load();
    const json body = parse_body(q.body);
    const json c = body.value("content", json());
    if (!c.is_string()) bad_request("content", "'content' must be a string");
    const json as = body.value("add_special", json(false)), wp = body.value("with_pieces", json(false));
    if (!as.is_boolean()) bad_request("add_special", "'add_special' must be a boolean");
    if (!wp.is_boolean()) bad_request("with_pieces", "'with_pieces' must be a boolean");
    const auto ids = b->codec->encode(c.get<std::string>(), as.get<bool>());
    json toks = json::array();
    for (int32_t id : ids)
      toks.push_back(wp.get<bool>() ? json{{"id", id}, {"piece", b->codec->piece(id)}} : json(id));
    send_json(r, 200, {{"tokens", toks}});
  }));
  http.Post("/detokenize", guarded([this](const httplib::Request& q, httplib::Response& r) {
    if (!admit(q, r)) return;
    const Backend* b = backend.load();
    const json body = parse_body(q.body);
    const json t = body.value("tokens", json());
    if (!t.is_array()) bad_request("tokens", "'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    for (const auto& x : t) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= b->codec->vocab())
        bad_request("tokens", fmt::format("'tokens' must hold ids within [0, {})", b->codec->vocab()));
      ids.push_back(int32_t(x.get<int64_t>()));
    }
    send_json(r, 200, {{"content", b->codec->decode(ids)}});
  }));
  http.Post("/apply-template", guarded([this](const httplib::Request& q, httplib::Response& r) {
    if (!admit(q, r)) return;
    const Backend* b = backend.load();
    if (!b->chat_template) throw ApiError{400, "this model has no chat template", ""};
    const GenerationRequest g = parse_generation_request(parse_body(q.body), true);
    text::ChatOptions co;
    co.tools = g.tools;
    co.enable_thinking = g.enable_thinking;
    co.extra = g.template_kwargs;
    try {
      send_json(r, 200, {{"prompt", b->chat_template->apply(g.messages, co)}});
    } catch (const Error& e) {
      throw ApiError{400, fmt::format("the chat template refused the messages: {}", e.what()), "messages"};
    }
  }));
  http.Get("/props", guarded([this](const httplib::Request& q, httplib::Response& r) {
    if (!admit(q, r, /*need_backend=*/false)) return;
    send_json(r, 200, props(backend.load()));
  }));
  http.Get("/", [](const httplib::Request&, httplib::Response& r) {
    r.set_content(reinterpret_cast<const char*>(kIndexHtml), sizeof(kIndexHtml), "text/html; charset=utf-8");
  });

  // 404 / 413 / ... from httplib itself get an OpenAI-style body too.
  http.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    ApiError e{r.status, status_message(r.status), ""};
    if (r.status == 404) e.message = fmt::format("no route {} {}", q.method, q.path);
    send_error(r, e);
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr) {
    send_error(r, {500, "internal error", ""});
  });
  http.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response&) {
    std::lock_guard lk(track_mu);
    tracks[&q].start = now_seconds();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Counted just before the response is written (httplib calls the logger only after the last
  // byte): a client that scrapes /metrics right after its response sees its own request counted.
  http.set_post_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
    metrics.http_request(route_label(q.path), r.status);
  });
  http.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
    Track t;
    {
      std::lock_guard lk(track_mu);
      if (auto it = tracks.find(&q); it != tracks.end()) {
        t = it->second;
        tracks.erase(it);
      }
    }
    std::string line = fmt::format("access method={} path=\"{}\" status={} ms={:.1f} remote={}", q.method,
                                   route_label(q.path), r.status, t.start > 0 ? (now_seconds() - t.start) * 1e3 : 0.0,
                                   q.remote_addr);
    if (t.prompt_tokens >= 0)
      line += fmt::format(" prompt_tokens={} completion_tokens={} finish={}", t.prompt_tokens,
                          t.completion_tokens, t.finish);
    std::fprintf(stderr, "%s\n", line.c_str());
  });
}

// ---- lifecycle -------------------------------------------------------------------------------

Server::Server(ServerOptions opt) : impl_(std::make_unique<Impl>(std::move(opt))) {}
Server::~Server() { stop(); }

int Server::start() {
  // A write to a closed socket must fail with EPIPE, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  const int threads = s.opt.http_threads > 0 ? s.opt.http_threads : 8;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.http.set_payload_max_length(s.opt.max_body);
  s.http.set_read_timeout(s.opt.timeout_s);
  s.http.set_write_timeout(s.opt.timeout_s);
  s.http.set_keep_alive_timeout(s.opt.keep_alive_s);
  s.routes();
  int port = s.opt.port;
  if (port == 0) port = s.http.bind_to_any_port(s.opt.host);
  else if (!s.http.bind_to_port(s.opt.host, port)) port = -1;
  if (port <= 0) fail("cannot listen on {}:{} (address in use or not available)", s.opt.host, s.opt.port);
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  return port;
}

void Server::set_backend(const Backend* b) { impl_->backend = b; }

void Server::drain() {
  Impl& s = *impl_;
  s.draining = true;
  if (const Backend* b = s.backend.load()) b->scheduler->drain();
  std::unique_lock lk(s.busy_mu);
  s.busy_cv.wait(lk, [&] { return s.busy == 0; });
}

void Server::stop() {
  Impl& s = *impl_;
  if (!s.listener.joinable()) return;
  s.http.stop();
  s.listener.join();
}

}  // namespace nemo::server
