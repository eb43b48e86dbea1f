#include "server/openai.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "base/error.h"

namespace nemo::server {

namespace {

const char* error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// ---- field readers: each names the field in its error ---------------------------------------

const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& body, const char* key, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(key, fmt::format("'{}' must be a number", key));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad_request(key, fmt::format("'{}' must be within [{}, {}]", key, lo, hi));
  return d;
}

std::optional<int64_t> integer(const json& body, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad_request(key, fmt::format("'{}' must be an integer", key));
  const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX);
  if (too_big || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    bad_request(key, fmt::format("'{}' must be within [{}, {}]", key, lo, hi));
  return v->get<int64_t>();
}

std::optional<bool> boolean(const json& body, const char* key) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(key, fmt::format("'{}' must be a boolean", key));
  return v->get<bool>();
}

// Message content: a string, or an array of {"type":"text","text":...} parts (joined).
std::string content_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad_request(where, fmt::format("'{}' must be a string or an array of parts", where));
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad_request(where, fmt::format("'{}': only parts of type \"text\" with a string \"text\" "
                                     "are supported", where));
    out += part["text"].get<std::string>();
  }
  return out;
}

json validate_messages(const json& body) {
  const json* m = field(body, "messages");
  if (!m) bad_request("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) bad_request("messages", "'messages' must be a non-empty array");
  json out = json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object()) bad_request(where, fmt::format("'{}' must be an object", where));
    const json* role = field(msg, "role");
    static constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    if (!role || !role->is_string() ||
        std::find(std::begin(kRoles), std::end(kRoles), role->get<std::string>()) == std::end(kRoles))
      bad_request(where + ".role", fmt::format("'{}.role' must be one of system, developer, user, "
                                               "assistant, tool", where));
    json o = json::object();
    // The templates know "system"; OpenAI's newer "developer" role means the same.
    o["role"] = role->get<std::string>() == "developer" ? "system" : role->get<std::string>();
    const json* content = field(msg, "content");
    const json* calls = field(msg, "tool_calls");
    if (content) o["content"] = content_text(*content, where + ".content");
    else if (o["role"] == "assistant" && calls) o["content"] = "";
    else bad_request(where + ".content", fmt::format("'{}.content' is required", where));
    if (const json* r = field(msg, "reasoning_content")) {
      if (!r->is_string())
        bad_request(where + ".reasoning_content", "'reasoning_content' must be a string");
      o["reasoning_content"] = *r;
    }
    if (calls) {
      if (!calls->is_array()) bad_request(where + ".tool_calls", "'tool_calls' must be an array");
      json cs = json::array();
      for (const auto& c : *calls) {
        const json* fn = c.is_object() ? field(c, "function") : nullptr;
        if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
          bad_request(where + ".tool_calls", "each tool call needs function.name");
        json call = c;
        // Templates iterate the arguments as a mapping; clients send them as JSON text.
        if (const json* a = field(*fn, "arguments"); a && a->is_string()) {
          json parsed = json::parse(a->get<std::string>(), nullptr, false);
          if (parsed.is_object()) call["function"]["arguments"] = parsed;
        }
        cs.push_back(std::move(call));
      }
      o["tool_calls"] = std::move(cs);
    }
    if (const json* id = field(msg, "tool_call_id"); id && id->is_string()) o["tool_call_id"] = *id;
    if (const json* n = field(msg, "name"); n && n->is_string()) o["name"] = *n;
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<std::string> stop_strings(const json& body) {
  const json* s = field(body, "stop");
  if (!s) return {};
  if (s->is_string()) return {s->get<std::string>()};
  if (!s->is_array() || s->size() > 4)
    bad_request("stop", "'stop' must be a string or an array of at most 4 strings");
  std::vector<std::string> out;
  for (const auto& x : *s) {
    if (!x.is_string()) bad_request("stop", "'stop' must contain only strings");
    if (!x.get<std::string>().empty()) out.push_back(x.get<std::string>());
  }
  return out;
}

void read_prompt(const json& body, GenerationRequest& r) {
  const json* p = field(body, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return;
  }
  // A one-element batch ["text"] is the same request; more than one prompt is like n > 1.
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt_text = (*p)[0].get<std::string>();
    return;
  }
  if (!p->is_array() || p->empty())
    bad_request("prompt", "'prompt' must be a string or a non-empty array of token ids");
  for (const auto& t : *p) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      bad_request("prompt", "'prompt' must be a string or an array of token ids (one prompt only)");
    r.prompt_ids.push_back(int32_t(t.get<int64_t>()));
  }
}

}  // namespace

json ApiError::body() const {
  return {{"error",
           {{"message", message},
            {"type", error_type(status)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", status}}}};
}

void bad_request(std::string param, std::string message) {
  throw ApiError{400, std::move(message), std::move(param)};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json parse_body(const std::string& body) {
  // nlohmann's parser refuses ill-formed UTF-8 in strings: such input is a 400, never replaced.
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_request("", "the request body is not valid JSON (or not valid UTF-8)");
  if (!j.is_object()) bad_request("", "the request body must be a JSON object");
  return j;
}

GenerationRequest parse_generation_request(const json& body, bool chat) {
  GenerationRequest r;
  r.chat = chat;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad_request("model", "'model' must be a string");
    r.model = m->get<std::string>();
  }
  if (chat) r.messages = validate_messages(body);
  else read_prompt(body, r);

  const auto mt = integer(body, "max_tokens", 1, int64_t(1) << 40);
  const auto mct = integer(body, "max_completion_tokens", 1, int64_t(1) << 40);
  r.max_tokens = mct ? mct : mt;
  if (const auto n = integer(body, "n", 1, 1 << 20); n && *n != 1)
    bad_request("n", "only 'n': 1 is supported");
  r.sampling.temperature = float(number(body, "temperature", 0, 2).value_or(1.0));
  r.sampling.top_p = float(number(body, "top_p", 0, 1).value_or(1.0));
  if (r.sampling.top_p <= 0) bad_request("top_p", "'top_p' must be greater than 0");
  r.sampling.min_p = float(number(body, "min_p", 0, 1).value_or(0.0));
  // top_k: 0 and -1 (llama.cpp's "off") both disable it.
  r.sampling.top_k = int(std::max<int64_t>(0, integer(body, "top_k", -1, 1 << 30).value_or(0)));
  if (const auto seed = integer(body, "seed", INT64_MIN, INT64_MAX)) {
    r.sampling.seed = uint64_t(*seed);
    r.seeded = true;
  } else {
    r.sampling.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (number(body, k, -2, 2).value_or(0.0) != 0.0)
      bad_request(k, fmt::format("'{}' is not supported (only 0)", k));
  if (const json* rf = field(body, "response_format");
      rf && !(rf->is_object() && rf->value("type", "") == "text"))
    bad_request("response_format", "only 'response_format': {\"type\": \"text\"} is supported");
  r.stop = stop_strings(body);

  const int kMax = engine::Scheduler::kMaxTopLogprobs;
  if (chat) {
    const bool lp = boolean(body, "logprobs").value_or(false);
    const auto top = integer(body, "top_logprobs", 0, kMax);
    if (top && !lp) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.top_logprobs = lp ? int(top.value_or(0)) : -1;
  } else {
    r.top_logprobs = int(integer(body, "logprobs", 0, kMax).value_or(-1));
  }

  r.stream = boolean(body, "stream").value_or(false);
  r.ignore_eos = boolean(body, "ignore_eos").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    r.include_usage = boolean(*so, "include_usage").value_or(false);
  }

  if (chat) {
    if (const json* t = field(body, "tools")) {
      if (!t->is_array()) bad_request("tools", "'tools' must be an array");
      for (const auto& tool : *t)
        if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function" || !tool.contains("function") ||
            !tool["function"].is_object() || !tool["function"].contains("name") ||
            !tool["function"]["name"].is_string())
          bad_request("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
      if (!t->empty()) r.tools = *t;
    }
    if (const json* tc = field(body, "tool_choice")) {
      if (tc->is_string()) {
        const std::string s = tc->get<std::string>();
        if (s != "none" && s != "auto" && s != "required")
          bad_request("tool_choice", "'tool_choice' must be \"none\", \"auto\" or \"required\"");
        r.parse_tool_calls = s != "none";
      } else if (!tc->is_object()) {
        bad_request("tool_choice", "'tool_choice' must be a string or an object");
      }
    }
    if (const json* kw = field(body, "chat_template_kwargs")) {
      if (!kw->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      for (const auto& [k, v] : kw->items()) {
        if (k == "enable_thinking") {
          if (!v.is_boolean()) bad_request("chat_template_kwargs.enable_thinking", "'enable_thinking' must be a boolean");
          r.enable_thinking = v.get<bool>();
        } else if (k == "messages" || k == "tools" || k == "add_generation_prompt") {
          bad_request("chat_template_kwargs", fmt::format("'chat_template_kwargs' cannot set '{}'", k));
        } else {
          r.template_kwargs[k] = v;
        }
      }
    }
  }
  if (const json* sp = field(body, "speculation")) {
    if (!sp->is_string()) bad_request("speculation", "'speculation' must be a string");
    try {
      r.spec = engine::parse_spec_mode(sp->get<std::string>());
    } catch (const Error&) {
      bad_request("speculation", "'speculation' must be one of auto, none, mtp, ngram, dflash, dspark");
    }
  }
  return r;
}

// ---- responses -------------------------------------------------------------------------------

json usage_json(const engine::RequestSummary& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"total_tokens", s.prompt_tokens + s.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_tokens}}}};
}

json timings_json(const engine::RequestSummary& s) {
  const double prompt_ms = s.ttft_s > 0 ? (s.ttft_s - s.queue_s) * 1e3 : 0.0;
  const double predicted_ms = s.ttft_s > 0 ? (s.total_s - s.ttft_s) * 1e3 : 0.0;
  const int64_t decoded = std::max<int64_t>(0, s.completion_tokens - 1);
  return {{"prompt_n", s.prompt_tokens - s.cached_tokens},
          {"cache_n", s.cached_tokens},
          {"prompt_ms", prompt_ms},
          {"prompt_per_second", prompt_ms > 0 ? double(s.prompt_tokens - s.cached_tokens) * 1e3 / prompt_ms : 0.0},
          {"predicted_n", s.completion_tokens},
          {"predicted_ms", predicted_ms},
          {"predicted_per_second", predicted_ms > 0 ? double(decoded) * 1e3 / predicted_ms : 0.0},
          {"queue_ms", s.queue_s * 1e3},
          {"draft_n", s.spec.drafted},
          {"draft_n_accepted", s.spec.accepted}};
}

json speculation_json(const engine::RequestSummary& s, engine::SpecMode mode) {
  const auto& sp = s.spec;
  json per_pos = json::array();
  for (size_t i = 0; i < sp.accepted_at.size(); ++i) per_pos.push_back(sp.accepted_at[i]);
  return {{"mode", engine::spec_mode_name(mode)},
          {"drafted", sp.drafted},
          {"accepted", sp.accepted},
          {"verify_calls", sp.rounds},
          {"acceptance_rate", sp.acceptance_rate()},
          {"mean_accept_length", sp.mean_accept_length()},
          {"accepted_per_position", per_pos}};
}

ResponseBuilder::ResponseBuilder(const GenerationRequest& req, const text::TextCodec& codec,
                                 std::vector<int32_t> stop_tokens, std::string id, int64_t created,
                                 bool start_in_reasoning)
    : req_(req),
      codec_(codec),
      stop_tokens_(std::move(stop_tokens)),
      id_(std::move(id)),
      created_(created),
      text_(codec, req.stop, /*skip_special=*/req.chat) {
  if (req.chat) {
    text::OutputParserOptions po;
    po.start_in_reasoning = start_in_reasoning;
    po.parse_tool_calls = req.parse_tool_calls;
    po.tools = req.tools;
    parser_.emplace(po);
  }
  if (!req.chat && req.top_logprobs >= 0)
    completion_lp_ = {{"tokens", json::array()},
                      {"token_logprobs", json::array()},
                      {"top_logprobs", json::array()},
                      {"text_offset", json::array()}};
}

json ResponseBuilder::chunk(json delta_or_text, const json& finish_reason) const {
  json choice = {{"index", 0}};
  if (req_.chat) choice["delta"] = std::move(delta_or_text);
  else choice["text"] = std::move(delta_or_text);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  return {{"id", id_},
          {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", req_.model},
          {"choices", json::array({std::move(choice)})}};
}

json ResponseBuilder::tool_call_deltas(int index, const text::ToolCall& c) {
  // As OpenAI streams them: the call's identity with empty arguments, then the arguments.
  return json::array({{{"index", index},
                       {"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", ""}}}},
                      {{"index", index}, {"function", {{"arguments", c.arguments}}}}});
}

json ResponseBuilder::logprob_entries(std::span<const engine::TokenOut> toks) const {
  json entries = json::array();
  auto bytes = [&](int32_t id) {
    json b = json::array();
    for (unsigned char ch : codec_.piece_bytes(id)) b.push_back(int(ch));
    return b;
  };
  for (const auto& t : toks) {
    json top = json::array();
    for (const auto& [id, lp] : t.top)
      top.push_back({{"token", codec_.piece(id)}, {"logprob", lp}, {"bytes", bytes(id)}});
    entries.push_back({{"token", codec_.piece(t.token)},
                       {"logprob", t.logprob},
                       {"bytes", bytes(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return entries;
}

// Adds a parser delta to this step's chat delta; each completed tool call becomes its own chunks.
void ResponseBuilder::take(const text::OutputDelta& d, json& delta, std::vector<json>& out) {
  if (!d.reasoning.empty()) {
    reasoning_ += d.reasoning;
    delta["reasoning_content"] = delta.value("reasoning_content", "") + d.reasoning;
  }
  if (!d.content.empty()) {
    content_ += d.content;
    delta["content"] = delta.value("content", "") + d.content;
  }
  for (const auto& c : d.tool_calls) {
    if (!delta.empty()) out.push_back(chunk(std::exchange(delta, json::object())));
    for (auto& td : tool_call_deltas(int(calls_.size()), c))
      out.push_back(chunk({{"tool_calls", json::array({td})}}));
    calls_.push_back(c);
  }
}

std::vector<json> ResponseBuilder::push(std::span<const engine::TokenOut> toks) {
  std::vector<json> out;
  if (req_.chat && !role_sent_) {
    role_sent_ = true;
    out.push_back(chunk({{"role", "assistant"}, {"content", ""}}));
  }
  if (stopped_) return out;
  std::string text;
  size_t used = 0;
  for (; used < toks.size() && !stopped_; ++used) {
    const int32_t t = toks[used].token;
    if (std::find(stop_tokens_.begin(), stop_tokens_.end(), t) != stop_tokens_.end()) continue;
    text += text_.push(t);
    stopped_ = text_.stopped();
  }
  // Logprobs of the tokens consumed here (an end-of-turn token included, as OpenAI does not
  // show it: drop it).
  std::vector<engine::TokenOut> shown;
  if (req_.top_logprobs >= 0)
    for (size_t i = 0; i < used; ++i)
      if (std::find(stop_tokens_.begin(), stop_tokens_.end(), toks[i].token) == stop_tokens_.end())
        shown.push_back(toks[i]);
  json lp = shown.empty() ? json(nullptr) : logprob_entries(shown);

  if (!req_.chat) {
    content_ += text;
    if (!lp.is_null()) {
      for (const auto& e : lp) {
        completion_lp_["tokens"].push_back(e["token"]);
        completion_lp_["token_logprobs"].push_back(e["logprob"]);
        json top = json::object();
        for (const auto& x : e["top_logprobs"]) top[x["token"].get<std::string>()] = x["logprob"];
        completion_lp_["top_logprobs"].push_back(top);
        completion_lp_["text_offset"].push_back(text_offset_);
        text_offset_ += int64_t(e["token"].get<std::string>().size());
      }
    }
    if (!text.empty() || !lp.is_null()) {
      json c = chunk(text);
      if (!lp.is_null()) {
        json part = completion_lp_;  // this chunk's slice
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          json& a = part[k];
          a.erase(a.begin(), a.end() - ptrdiff_t(lp.size()));
        }
        c["choices"][0]["logprobs"] = std::move(part);
      }
      out.push_back(std::move(c));
    }
    return out;
  }
  json delta = json::object();
  if (!text.empty()) take(parser_->push(text), delta, out);
  if (!lp.is_null())
    for (const auto& e : lp) logprobs_.push_back(e);
  if (!delta.empty() || !lp.is_null()) {
    json c = chunk(std::move(delta));
    if (!lp.is_null()) c["choices"][0]["logprobs"] = {{"content", std::move(lp)}};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<json> ResponseBuilder::finish(const engine::RequestSummary& s, engine::SpecMode mode) {
  std::vector<json> out;
  if (finished_) return out;
  finished_ = true;
  summary_ = s;
  mode_ = mode;
  const std::string tail = stopped_ ? std::string() : text_.finish();
  if (req_.chat) {
    if (!role_sent_) {
      role_sent_ = true;
      out.push_back(chunk({{"role", "assistant"}, {"content", ""}}));
    }
    json delta = json::object();
    take(parser_->push(tail), delta, out);
    take(parser_->finish(), delta, out);
    if (!delta.empty()) out.push_back(chunk(std::move(delta)));
  } else if (!tail.empty()) {
    content_ += tail;
    out.push_back(chunk(tail));
  }
  // A stop string ends the request through cancellation: that is still "stop".
  finish_reason_ = stopped_ || s.finish == engine::FinishReason::Stop ? "stop"
                   : s.finish == engine::FinishReason::Length     ? "length"
                                                                  : engine::finish_reason_name(s.finish);
  if (!calls_.empty() && finish_reason_ == "stop") finish_reason_ = "tool_calls";
  json last = chunk(req_.chat ? json::object() : json(""), finish_reason_);
  last["timings"] = timings_json(s);
  last["speculation"] = speculation_json(s, mode);
  out.push_back(std::move(last));
  if (req_.include_usage) {
    json u = chunk(nullptr);
    u["choices"] = json::array();
    u["usage"] = usage_json(s);
    out.push_back(std::move(u));
  }
  return out;
}

json ResponseBuilder::response() const {
  json choice = {{"index", 0}};
  if (req_.chat) {
    json msg = {{"role", "assistant"},
                {"content", calls_.empty() || !content_.empty() ? json(content_) : json(nullptr)}};
    if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
    if (!calls_.empty()) {
      json cs = json::array();
      for (const auto& c : calls_) cs.push_back(c.to_openai());
      msg["tool_calls"] = std::move(cs);
    }
    choice["message"] = std::move(msg);
    choice["logprobs"] = req_.top_logprobs >= 0 ? json{{"content", logprobs_}} : json(nullptr);
  } else {
    choice["text"] = content_;
    choice["logprobs"] = req_.top_logprobs >= 0 ? completion_lp_ : json(nullptr);
  }
  choice["finish_reason"] = finish_reason_;
  return {{"id", id_},
          {"object", req_.chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", req_.model},
          {"choices", json::array({std::move(choice)})},
          {"usage", usage_json(summary_)},
          {"timings", timings_json(summary_)},
          {"speculation", speculation_json(summary_, mode_)}};
}

}  // namespace nemo::server
