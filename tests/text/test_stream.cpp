#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"
#include "text/unicode.h"

using namespace nemo::text;
using namespace nemo::text::testing;
using ojson = nlohmann::ordered_json;

TEST(StreamDecoder, MatchesDecodeAndNeverSplitsUtf8) {
  const Tokenizer& tok = trained_tokenizer();
  std::string text = "Hello 東京! 😀 naïve café — ok\n\t<|im_end|> done 天气很好";
  auto ids = tok.encode(text);
  StreamDecoder sd(tok);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = sd.push(id);
    EXPECT_TRUE(utf8_valid(piece));
    out += piece;
  }
  out += sd.finish();
  EXPECT_EQ(out, tok.decode(ids));
  EXPECT_EQ(out, text);
}

TEST(StreamDecoder, RandomIdsEqualDecode) {
  const Tokenizer& tok = trained_tokenizer();
  std::mt19937 rng(3);
  for (int it = 0; it < 200; ++it) {
    std::vector<int32_t> ids;
    for (int k = 0, n = rng() % 30; k < n; ++k) ids.push_back(int32_t(rng() % tok.vocab_size()));
    StreamDecoder sd(tok);
    std::string out;
    for (int32_t id : ids) {
      std::string p = sd.push(id);
      ASSERT_TRUE(utf8_valid(p));
      out += p;
    }
    out += sd.finish();
    EXPECT_EQ(out, tok.decode(ids));
  }
}

TEST(StreamDecoder, StopStringsAcrossTokenBoundaries) {
  const Tokenizer& tok = trained_tokenizer();
  std::string text = "The answer is 42.\nUser: more text that must not appear";
  auto ids = tok.encode(text);
  for (const std::string& stop : {std::string("\nUser:"), std::string("swer"), std::string("42.\nU")}) {
    StreamDecoder sd(tok, {"never-matches", stop});
    std::string out;
    for (int32_t id : ids) {
      std::string p = sd.push(id);
      out += p;
      if (sd.stopped()) break;
    }
    out += sd.finish();
    EXPECT_TRUE(sd.stopped());
    EXPECT_EQ(sd.stop_index(), 1);
    EXPECT_EQ(out, text.substr(0, text.find(stop))) << stop;
    EXPECT_EQ(sd.text(), out);
  }
  // A held prefix that never completes is released at the end.
  StreamDecoder sd(tok, {"42.X"});
  std::string out;
  for (int32_t id : ids) out += sd.push(id);
  out += sd.finish();
  EXPECT_FALSE(sd.stopped());
  EXPECT_EQ(out, text);
}

TEST(StreamDecoder, ByteFallbackPieces) {
  // Emulate byte tokens that split a 4-byte emoji over several pushes.
  const Tokenizer& tok = trained_tokenizer();
  std::string emoji = "\xF0\x9F\x98\x80";
  StreamDecoder sd(tok);
  std::string out;
  for (unsigned char c : emoji) {
    auto id = tok.token_to_id(std::string(1, char(0)));  // placeholder to get an id type
    (void)id;
    std::string bl;
    utf8_append(bl, byte_level_char(c));
    auto tid = tok.token_to_id(bl);
    ASSERT_TRUE(tid.has_value());
    std::string p = sd.push(*tid);
    if (out.size() + p.size() < 4) {
      EXPECT_TRUE(p.empty());
    }
    out += p;
  }
  EXPECT_EQ(out, emoji);
  // A truncated sequence at the end becomes U+FFFD.
  StreamDecoder sd2(tok);
  std::string bl;
  utf8_append(bl, byte_level_char(0xF0));
  EXPECT_EQ(sd2.push(*tok.token_to_id(bl)), "");
  EXPECT_EQ(sd2.finish(), "\xEF\xBF\xBD");
}

namespace {
// Feeds `text` in pieces of `step` bytes and concatenates all deltas.
ParsedOutput stream_parse(const std::string& text, size_t step, const OutputParserOptions& o = {}) {
  OutputParser p(o);
  ParsedOutput r;
  auto add = [&](OutputDelta d) {
    r.reasoning_content += d.reasoning;
    r.content += d.content;
    for (auto& t : d.tool_calls) r.tool_calls.push_back(t);
  };
  for (size_t i = 0; i < text.size(); i += step) add(p.push(std::string_view(text).substr(i, step)));
  add(p.finish());
  return r;
}
}  // namespace

TEST(OutputParser, ReasoningForcedOpen) {
  std::string gen = "Let me think.\nStep 2.\n</think>\n\nThe answer is 4.";
  for (size_t step : {1u, 2u, 3u, 7u, 100u}) {
    ParsedOutput r = stream_parse(gen, step);
    EXPECT_EQ(r.reasoning_content, "Let me think.\nStep 2.");
    EXPECT_EQ(r.content, "The answer is 4.");
    EXPECT_TRUE(r.tool_calls.empty());
  }
  ParsedOutput again = stream_parse("<think>\nre-opened\n</think>\nx", 2);
  EXPECT_EQ(again.reasoning_content, "re-opened");
  EXPECT_EQ(again.content, "x");
  OutputParserOptions off;
  off.start_in_reasoning = false;
  ParsedOutput r = stream_parse("<think>\nhmm\n</think>Hi", 1, off);
  EXPECT_EQ(r.reasoning_content, "hmm");
  EXPECT_EQ(r.content, "Hi");
  r = stream_parse("Plain answer with a <think> mention", 3, off);
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "Plain answer with a <think> mention");
}

TEST(OutputParser, ToolCalls) {
  std::string gen =
      "I should call the tool.\n</think>\nChecking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"C\", \"x\": [1, 2]}\n</parameter>\n"
      "<parameter=note>\nmulti\nline\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>";
  for (size_t step : {1u, 5u, 1000u}) {
    ParsedOutput r = stream_parse(gen, step);
    EXPECT_EQ(r.reasoning_content, "I should call the tool.");
    EXPECT_EQ(r.content, "Checking.");
    ASSERT_EQ(r.tool_calls.size(), 2u);
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.tool_calls[0].arguments, R"({"city":"Paris","days":3,"opts":{"unit":"C","x":[1,2]},"note":"multi\nline"})");
    EXPECT_EQ(r.tool_calls[1].name, "noop");
    EXPECT_EQ(r.tool_calls[1].arguments, "{}");
    EXPECT_EQ(r.tool_calls[0].to_openai()["type"], "function");
  }
}

TEST(OutputParser, KnownOmissions) {
  // Missing </think> before the tool call, and a missing final </parameter>.
  std::string gen = "reasoning here\n<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\ntext\n</function>\n</tool_call>";
  ParsedOutput r = stream_parse(gen, 2);
  EXPECT_EQ(r.reasoning_content, "reasoning here");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a":1,"b":"text"})");
  // Generation cut before </tool_call>: still parsed at finish().
  r = stream_parse("</think><tool_call>\n<function=g>\n<parameter=q>\nhello", 4);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"q":"hello"})");
}

TEST(OutputParser, SchemaKeepsStrings) {
  OutputParserOptions o;
  o.start_in_reasoning = false;
  o.tools = ojson::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"zip":{"type":"string"},"n":{"type":"integer"}}}}}])");
  ParsedOutput r = stream_parse("<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>", 3, o);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"zip":"01234","n":7})");
}
