// `nemotron serve`: the HTTP layer over engine::Scheduler (cpp-httplib). The server listens before
// the model is loaded (/health answers 503 "loading"), serves once set_backend() is called, and
// shuts down in two steps: begin_drain() (new requests get 503, running ones finish), stop().
// Routes, limits and metrics: docs/SERVER.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "text/chat_template.h"
#include "text/text_session.h"

namespace nemo::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (start() returns it)
  std::vector<std::string> api_keys;  // empty: no auth
  size_t max_body = 4u << 20;         // request body bytes (413 beyond)
  int timeout_s = 600;                // socket read / write timeout
  int keep_alive_s = 5;               // idle keep-alive connections close after this
  double sse_ping_s = 5;              // ": ping" comment while a stream has nothing to send
  bool metrics = true;                // GET /metrics
  int64_t default_max_tokens = 1024;  // when a request gives none (capped by the context)
  int http_threads = 0;               // 0: max_active + max_queue + 4 (every waiting request
                                      // needs its own connection thread)
  std::string model_id = "nemotron";  // /v1/models and the default "model" of responses
};

// What the server serves once the model is ready. Owned by the caller; must outlive stop().
struct Backend {
  engine::Scheduler* scheduler = nullptr;
  const text::TextCodec* codec = nullptr;
  const text::ChatTemplate* chat_template = nullptr;  // null: /v1/chat/completions refuses
  std::string chat_template_source;
  std::vector<int32_t> stop_tokens;  // end of generation (EOS / end of turn)
  int64_t n_ctx = 0;                 // prompt + max_tokens limit; 0 = unlimited
  nlohmann::ordered_json props = nlohmann::ordered_json::object();  // extra /props fields
};

class Server {
 public:
  explicit Server(ServerOptions opt);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts listening on a background thread; returns the port. Throws nemo::Error
  // when the address cannot be bound.
  int start();
  void set_backend(const Backend* b);  // ready: generation routes open, /health 200
  // New requests get 503; returns once every running request has finished and been written.
  void drain();
  void stop();  // stops listening and joins the listener

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nemo::server
