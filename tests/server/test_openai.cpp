// The OpenAI wire format without a network: request validation, the chunks and responses that
// ResponseBuilder makes from tokens (tool calls included, which the random tiny model never
// produces), SSE framing and the Prometheus text.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "server/metrics.h"
#include "server/openai.h"
#include "server/sse.h"

namespace nemo::server {
namespace {

// A byte-level codec: no tokenizer.json in an empty directory, one token per byte.
const text::TextCodec& byte_codec() {
  static const text::TextCodec codec(std::filesystem::temp_directory_path().string(), 512);
  return codec;
}

engine::TokenOut tok(int32_t id) {
  engine::TokenOut t;
  t.token = id;
  return t;
}

std::vector<engine::TokenOut> tokens(std::string_view s) {
  std::vector<engine::TokenOut> v;
  for (unsigned char c : s) v.push_back(tok(int32_t(c)));
  return v;
}

engine::RequestSummary summary(engine::FinishReason f, int64_t n) {
  engine::RequestSummary s;
  s.finish = f;
  s.prompt_tokens = 5;
  s.completion_tokens = n;
  return s;
}

struct Streamed {
  std::string content, reasoning;
  json calls = json::array();  // accumulated the way OpenAI clients do
  std::string finish;
  int role_chunks = 0;
};

Streamed accumulate(const std::vector<json>& chunks) {
  Streamed s;
  for (const auto& c : chunks) {
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    const json& d = ch["delta"];
    if (d.contains("role")) ++s.role_chunks;
    s.content += d.value("content", "");
    s.reasoning += d.value("reasoning_content", "");
    if (d.contains("tool_calls"))
      for (const auto& t : d["tool_calls"]) {
        const size_t i = t["index"].get<size_t>();
        if (s.calls.size() <= i) s.calls.push_back({{"id", ""}, {"name", ""}, {"arguments", ""}});
        if (t.contains("id")) s.calls[i]["id"] = t["id"];
        if (t["function"].contains("name")) s.calls[i]["name"] = t["function"]["name"];
        s.calls[i]["arguments"] = s.calls[i]["arguments"].get<std::string>() +
                                  t["function"].value("arguments", "");
      }
    if (!ch["finish_reason"].is_null()) s.finish = ch["finish_reason"];
  }
  return s;
}

GenerationRequest chat_request(json extra = json::object()) {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return parse_generation_request(body, true);
}

TEST(ResponseBuilder, ToolCallsStreamIncrementallyAndMatchTheResponse) {
  const GenerationRequest req = chat_request({{"stream", true}});
  ResponseBuilder b(req, byte_codec(), {}, "chatcmpl-1", 123, /*start_in_reasoning=*/true);
  const std::string out =
      "let me look</think>Checking. <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>";
  std::vector<json> chunks;
  const auto toks = tokens(out);
  for (size_t i = 0; i < toks.size(); i += 3)  // arbitrary token batches
    for (auto& c : b.push(std::span(toks).subspan(i, std::min<size_t>(3, toks.size() - i))))
      chunks.push_back(c);
  for (auto& c : b.finish(summary(engine::FinishReason::Stop, int64_t(toks.size())), engine::SpecMode::None))
    chunks.push_back(c);

  for (const auto& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], "chatcmpl-1");
    EXPECT_EQ(c["model"], "m");
    EXPECT_EQ(c["created"], 123);
  }
  const Streamed s = accumulate(chunks);
  EXPECT_EQ(s.role_chunks, 1);
  EXPECT_EQ(s.reasoning, "let me look");
  EXPECT_EQ(s.finish, "tool_calls");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(s.calls[0]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(s.calls[1]["name"], "get_time");
  EXPECT_NE(s.calls[0]["id"], s.calls[1]["id"]);

  // Each call: a first delta with index, id, type and name (empty arguments), then arguments.
  int identity = 0;
  for (const auto& c : chunks)
    if (c["choices"][0]["delta"].contains("tool_calls")) {
      const json& t = c["choices"][0]["delta"]["tool_calls"][0];
      if (t.contains("id")) {
        ++identity;
        EXPECT_EQ(t["type"], "function");
        EXPECT_EQ(t["function"]["arguments"], "");
      }
    }
  EXPECT_EQ(identity, 2);

  const json r = b.response();
  const json& msg = r["choices"][0]["message"];
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["reasoning_content"], s.reasoning);
  EXPECT_EQ(msg["content"], s.content);
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], s.calls[0]["arguments"]);
  EXPECT_EQ(msg["tool_calls"][0]["id"], s.calls[0]["id"]);
}

TEST(ResponseBuilder, ToolChoiceNoneLeavesCallsAsText) {
  const GenerationRequest req = chat_request({{"tool_choice", "none"}});
  ResponseBuilder b(req, byte_codec(), {}, "x", 0, false);
  const auto toks = tokens("<tool_call>\n<function=f>\n</function>\n</tool_call>");
  auto chunks = b.push(toks);
  for (auto& c : b.finish(summary(engine::FinishReason::Stop, 1), engine::SpecMode::None)) chunks.push_back(c);
  const Streamed s = accumulate(chunks);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.finish, "stop");
  EXPECT_NE(s.content.find("<function=f>"), std::string::npos);
}

TEST(ResponseBuilder, StopStringAcrossTokensIsNeverEmitted) {
  GenerationRequest req =
      parse_generation_request({{"prompt", "p"}, {"stop", json::array({"END", "zz"})}}, false);
  ResponseBuilder b(req, byte_codec(), {2}, "c", 0, false);
  std::string text;
  for (const auto& t : tokens("abcEN"))
    for (const auto& c : b.push(std::span(&t, 1))) text += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "abc");  // "EN" is held: it may start "END"
  EXPECT_FALSE(b.stopped());
  for (const auto& c : b.push(tokens("Dmore"))) text += c["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(b.stopped());
  const auto fin = b.finish(summary(engine::FinishReason::Cancelled, 6), engine::SpecMode::None);
  EXPECT_EQ(fin.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(b.response()["choices"][0]["text"], "abc");
}

TEST(ResponseBuilder, EndOfTurnTokenIsNotTextAndLengthFinish) {
  GenerationRequest req = parse_generation_request({{"prompt", "p"}, {"logprobs", 1}}, false);
  ResponseBuilder b(req, byte_codec(), {2}, "c", 0, false);
  auto toks = tokens("hi");
  toks.push_back(tok(2));
  for (auto& t : toks) t.logprob = -0.5f, t.top = {{t.token, -0.5f}};
  b.push(toks);
  b.finish(summary(engine::FinishReason::Length, 3), engine::SpecMode::None);
  const json r = b.response();
  EXPECT_EQ(r["choices"][0]["text"], "hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), 2u);
  EXPECT_EQ(r["usage"]["total_tokens"], 8);
}

TEST(ResponseBuilder, IncludeUsageAddsAFinalChunkWithoutChoices) {
  const GenerationRequest req = chat_request({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ResponseBuilder b(req, byte_codec(), {}, "x", 0, false);
  b.push(tokens("ok"));
  auto s = summary(engine::FinishReason::Stop, 2);
  s.spec.rounds = 2, s.spec.drafted = 6, s.spec.accepted = 3, s.spec.accepted_at = {2, 1, 0};
  const auto fin = b.finish(s, engine::SpecMode::Mtp);
  ASSERT_GE(fin.size(), 2u);
  EXPECT_TRUE(fin.back()["choices"].empty());
  EXPECT_EQ(fin.back()["usage"]["completion_tokens"], 2);
  const json& sp = fin[fin.size() - 2]["speculation"];
  EXPECT_EQ(sp["mode"], "mtp");
  EXPECT_EQ(sp["accepted_per_position"], json::array({2, 1, 0}));
  EXPECT_DOUBLE_EQ(sp["mean_accept_length"].get<double>(), 2.5);
}

// Every invalid field is a 400 that names the field.
TEST(ParseRequest, ErrorsNameTheField) {
  const json ok = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"temperature", "hot"}}, "temperature"},
      {{{"temperature", 2.5}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_k", 1.5}}, "top_k"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", -3}}, "max_tokens"},
      {{{"max_completion_tokens", "9"}}, "max_completion_tokens"},
      {{{"n", 2}}, "n"},
      {{{"stop", {1, 2}}}, "stop"},
      {{{"logprobs", 1}}, "logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},
      {{{"stream", "yes"}}, "stream"},
      {{{"tools", {{"type", "function"}}}}, "tools"},
      {{{"tools", {{{"type", 5}, {"function", {{"name", "f"}}}}}}}, "tools"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", 5}}}}}}}, "tools"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", 5}, {"text", "a"}}}}}}}}, "messages[0].content"},
      {{{"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"chat_template_kwargs", {{"enable_thinking", "no"}}}}, "chat_template_kwargs.enable_thinking"},
      {{{"speculation", "warp"}}, "speculation"},
      {{{"presence_penalty", 1}}, "presence_penalty"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content"},
  };
  for (const auto& [patch, param] : cases) {
    json body = ok;
    for (const auto& [k, v] : patch.items()) body[k] = v;
    try {
      parse_generation_request(body, true);
      ADD_FAILURE() << "accepted " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, param) << body.dump();
      const json eb = e.body();
      EXPECT_EQ(eb["error"]["param"], param);
      EXPECT_FALSE(eb["error"]["message"].get<std::string>().empty());
    }
  }
}

TEST(ParseRequest, AcceptsTheOpenAIShapes) {
  const GenerationRequest r = parse_generation_request(
      {{"messages",
        {{{"role", "developer"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
         {{"role", "assistant"},
          {"content", nullptr},
          {"tool_calls", {{{"id", "1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"x\":1}"}}}}}}}}},
       {"max_completion_tokens", 7},
       {"top_k", -1},
       {"seed", 3},
       {"stop", "x"},
       {"chat_template_kwargs", {{"enable_thinking", false}, {"custom", 1}}}},
      true);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"], json({{"x", 1}}));
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.enable_thinking, false);
  EXPECT_EQ(r.template_kwargs, json({{"custom", 1}}));
}

TEST(ParseBody, RefusesInvalidUtf8AndNonObjects) {
  EXPECT_THROW(parse_body("{\"a\": \"\xff\"}"), ApiError);
  EXPECT_THROW(parse_body("[1]"), ApiError);
  EXPECT_THROW(parse_body("{"), ApiError);
  EXPECT_NO_THROW(parse_body("{\"a\": \"\xc3\xa9\"}"));
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_comment("ping"), ": ping\n\n");
  // dump() escapes newlines, so a chunk is always one line.
  EXPECT_EQ(dump(json{{"t", "a\nb"}}).find('\n'), std::string::npos);
}

TEST(Metrics, PrometheusText) {
  Metrics m;
  m.http_request("/v1/completions", 200);
  engine::RequestSummary s = summary(engine::FinishReason::Length, 4);
  s.ttft_s = 0.003;
  s.total_s = 0.01;
  m.request_done(s, {0.001, 0.002, 0.5});
  engine::SchedulerMetrics sm;
  sm.spec.rounds = 3;
  sm.spec.accepted_at = {5, 2};
  const std::string t = m.render(&sm, true, false);
  EXPECT_NE(t.find("# TYPE nemotron:time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(t.find("nemotron:time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("nemotron:time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("nemotron:inter_token_latency_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("nemotron:inter_token_latency_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(t.find("vllm:spec_decode_num_drafts_total 3\n"), std::string::npos);
  EXPECT_NE(t.find("vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("nemotron:request_success_total{finished_reason=\"length\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("nemotron:http_requests_total{route=\"/v1/completions\",code=\"200\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace nemo::server
