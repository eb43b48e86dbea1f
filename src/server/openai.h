// The OpenAI wire format: request validation (→ engine::RequestOptions), error bodies, and the
// response / stream-chunk JSON built from a request's tokens (ResponseBuilder). No I/O here, so
// the whole format is unit-testable (tests/server/test_openai.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "text/output_parser.h"
#include "text/text_session.h"

namespace nemo::server {

using json = nlohmann::ordered_json;

// An HTTP error with an OpenAI-style body {"error": {message, type, param, code}}. Thrown only
// while a request is parsed (never from the token loop) and caught by the route.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault, "" = none
  json body() const;
};
[[noreturn]] void bad_request(std::string param, std::string message);

// JSON text that never throws on odd strings (ill-formed UTF-8 becomes U+FFFD).
std::string dump(const json& j);
// Parses a request body: ApiError 400 naming the problem when it is not a JSON object.
json parse_body(const std::string& body);

struct GenerationRequest {
  bool chat = false;
  std::string model;
  json messages;                     // chat: validated, content flattened to strings
  std::optional<std::string> prompt_text;  // completions: a string prompt ...
  std::vector<int32_t> prompt_ids;         // ... or token ids
  std::optional<int64_t> max_tokens;       // nullopt: the server default
  engine::SamplingParams sampling;
  bool seeded = false;
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1 off; else the engine's RequestOptions::top_logprobs
  bool stream = false, include_usage = false;
  json tools;                   // null: none
  bool parse_tool_calls = true;  // tool_choice "none" turns the parser off
  std::optional<bool> enable_thinking;
  json template_kwargs = json::object();  // other chat_template_kwargs
  std::optional<engine::SpecMode> spec;
  bool ignore_eos = false;  // llama-server's extension: generate through end-of-turn tokens
};

// Validates a /v1/chat/completions (chat) or /v1/completions body. Throws ApiError.
GenerationRequest parse_generation_request(const json& body, bool chat);
// Builds what a request returns from the tokens the scheduler streams. Stop strings apply to
// text (never emitted); chat output goes through the reasoning / tool-call parser. The streamed
// chunks and the whole response come from the same deltas, so streaming == non-streaming.
class ResponseBuilder {
 public:
  // `stop_tokens`: end-of-turn ids (counted as tokens, never shown as text).
  ResponseBuilder(const GenerationRequest& req, const text::TextCodec& codec,
                  std::vector<int32_t> stop_tokens, std::string id, int64_t created,
                  bool start_in_reasoning);
  // New tokens → stream chunks (possibly none). After a stop string matched, stopped() is true
  // and further tokens are ignored (the caller cancels the request).
  std::vector<json> push(std::span<const engine::TokenOut> toks);
  bool stopped() const { return stopped_; }
  // End of the request: the remaining chunks (flushed text, tool calls, the finish_reason chunk
  // and, with include_usage, the usage chunk). Call once. `mode`: the speculation that ran.
  std::vector<json> finish(const engine::RequestSummary& s, engine::SpecMode mode);
  // The non-streamed response; after finish().
  json response() const;

  // Pieces, public for tests.
  json chunk(json delta_or_text, const json& finish_reason = nullptr) const;
  static json tool_call_deltas(int index, const text::ToolCall& c);  // two OpenAI deltas

 private:
  void take(const text::OutputDelta& d, json& delta, std::vector<json>& out);
  json logprob_entries(std::span<const engine::TokenOut> toks) const;

  const GenerationRequest& req_;
  const text::TextCodec& codec_;
  std::vector<int32_t> stop_tokens_;
  std::string id_;
  int64_t created_;
  text::TextStream text_;
  std::optional<text::OutputParser> parser_;
  bool stopped_ = false, role_sent_ = false, finished_ = false;
  // Accumulated for the non-streamed response.
  std::string content_, reasoning_;
  std::vector<text::ToolCall> calls_;
  json logprobs_ = json::array();  // chat entries, or completions' parallel arrays
  json completion_lp_ = json::object();
  int64_t text_offset_ = 0;
  std::string finish_reason_ = "stop";
  engine::RequestSummary summary_;
  engine::SpecMode mode_ = engine::SpecMode::None;
};

// usage, timings (llama-server's names) and the per-request speculation object.
json usage_json(const engine::RequestSummary& s);
json timings_json(const engine::RequestSummary& s);
json speculation_json(const engine::RequestSummary& s, engine::SpecMode mode);

}  // namespace nemo::server
